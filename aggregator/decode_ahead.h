// Frames decoded ahead, in order, on a thread of their own while the
// aggregator takes the ones before (Aggregator::OnFrames): decoding (msgpack
// into messages) is about half of what a batch of events costs on arrival,
// and needs nothing of the aggregator's state.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "native/wire.h"

namespace rlscope {

class DecodeAhead {
 public:
  // At most this many frames decoded and not yet taken (their messages
  // held: a batch of 64k events is about 2 MB).
  static constexpr size_t kAhead = 4;
  // Starts decoding `frames` (which must outlive this); throws
  // std::system_error when no thread can be had.
  explicit DecodeAhead(std::vector<std::string_view> frames);
  // Stops the thread (frames not taken are not decoded) and joins it.
  ~DecodeAhead();
  DecodeAhead(const DecodeAhead&) = delete;
  DecodeAhead& operator=(const DecodeAhead&) = delete;
  // Frame i's decoding, once it is done: i = 0, 1, ... in order, each once.
  wire::DecodeResult Take(size_t i);

 private:
  void Run();
  const std::vector<std::string_view> frames_;
  std::vector<wire::DecodeResult> slots_;  // frame i in slot i % kAhead
  std::mutex mu_;
  std::condition_variable changed_;
  size_t decoded_ = 0;  // frames decoded so far (guarded by mu_)
  size_t taken_ = 0;    // frames taken so far (guarded by mu_)
  bool stop_ = false;   // guarded by mu_
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace rlscope
