// GPU records on their way out: what CUPTI's buffer callbacks converted
// (gpu_activity.cc) waits here, bounded by buffers.max_mb (overflow counted
// as dropped), until the flush thread ships it. At a window's close, a flush
// barrier and exit the flush thread first asks CUPTI to hand over what it
// buffered (the flush hook gpu_tracing.cc sets), so those records ship with
// that flush.
//
// Threads: Add on CUPTI's callback threads; the rest on the flush thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "collector/context.h"
#include "collector/transport.h"
#include "native/gpu_record.h"

namespace rlscope {

class GpuQueue {
 public:
  explicit GpuQueue(const CollectorContext& ctx) : ctx_(ctx) {}

  void Add(std::vector<GpuRecord>&& records);
  void SetFlushHook(void (*hook)()) { flush_hook_.store(hook, std::memory_order_release); }
  // Flush thread, each flush: CUPTI's buffered records first when `due` (a
  // window just closed, a barrier, or exit).
  void Flush(bool due);
  // Flush thread: the queued records into this flush (their names are
  // interned already).
  void Take(Outgoing* out);
  // Records lost: the queue was full, or the message carrying them could not
  // be queued.
  void CountLost(uint64_t n) { dropped_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  const CollectorContext& ctx_;
  std::mutex mu_;  // guards records_
  std::vector<GpuRecord> records_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<void (*)()> flush_hook_{nullptr};
};

}  // namespace rlscope
