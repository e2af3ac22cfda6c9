#include "collector/gpu_queue.h"

namespace rlscope {

void GpuQueue::Add(std::vector<GpuRecord>&& records) {
  const size_t cap = (static_cast<size_t>(ctx_.own.config.buffers.max_mb) << 20) / sizeof(GpuRecord);
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.size() + records.size() > cap) {
    CountLost(records.size());
    return;
  }
  if (records_.empty()) {
    records_ = std::move(records);
  } else {
    records_.insert(records_.end(), records.begin(), records.end());
  }
}

void GpuQueue::Flush(bool due) {
  if (void (*hook)() = flush_hook_.load(std::memory_order_acquire); hook != nullptr && due) hook();
}

void GpuQueue::Take(Outgoing* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->gpu.swap(records_);
}

}  // namespace rlscope
