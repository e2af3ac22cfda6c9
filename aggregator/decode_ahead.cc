#include "aggregator/decode_ahead.h"

#include <exception>
#include <string>
#include <utility>

namespace rlscope {

DecodeAhead::DecodeAhead(std::vector<std::string_view> frames)
    : frames_(std::move(frames)), slots_(kAhead), thread_([this] { Run(); }) {}

DecodeAhead::~DecodeAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void DecodeAhead::Run() {
  for (size_t i = 0; i < frames_.size(); ++i) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return stop_ || i - taken_ < kAhead; });
      if (stop_) return;
    }
    wire::DecodeResult r;
    try {
      r = wire::Decode(frames_[i].data(), frames_[i].size());
    } catch (const std::exception& e) {  // out of memory: the frame is a bad one, counted as such
      r = wire::DecodeResult{};
      r.error = std::string("frame: not decoded (") + e.what() + ")";
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_[i % kAhead] = std::move(r);
      decoded_ = i + 1;
    }
    changed_.notify_all();
  }
}

wire::DecodeResult DecodeAhead::Take(size_t i) {
  wire::DecodeResult r;
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return decoded_ > i; });
    r = std::move(slots_[i % kAhead]);
    taken_ = i + 1;
  }
  changed_.notify_all();
  return r;
}

}  // namespace rlscope
