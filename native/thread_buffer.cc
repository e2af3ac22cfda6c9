#include "native/thread_buffer.h"

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
      slots_(new EventRecord[mask_ + 1]) {}

}  // namespace rlscope
