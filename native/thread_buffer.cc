#include "native/thread_buffer.h"

#include <algorithm>
#include <cstring>

namespace rlscope {
namespace {
uint64_t RoundUpPow2(size_t n) {
  uint64_t c = 16;
  while (c < n) c <<= 1;
  return c;
}
}  // namespace

ThreadBuffer::ThreadBuffer(int64_t tid, size_t capacity)
    : tid_(tid),
      mask_(RoundUpPow2(capacity) - 1),
      reserve_(std::min<uint64_t>((mask_ + 1) / 8, 256)),
      slots_(static_cast<EventRecord*>(
          ::operator new[]((mask_ + 1) * sizeof(EventRecord), std::align_val_t{64}))) {
  std::memset(static_cast<void*>(slots_.get()), 0, (mask_ + 1) * sizeof(EventRecord));
}

}  // namespace rlscope
