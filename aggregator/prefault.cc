#include "aggregator/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <thread>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace rlscope {
namespace {

constexpr size_t kSplitFromBytes = size_t{16} << 20;

bool Populate(uintptr_t begin, uintptr_t end) {
  return begin >= end || madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

}  // namespace

bool PrefaultForWrite(void* begin, size_t bytes, bool second_core) {
  if (begin == nullptr || bytes < kPrefaultFromBytes) return false;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Whole pages only: the partial ones at either end may hold others' data
  // (populating would not change it, but the range must be page-aligned).
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) & ~(page - 1);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes) & ~(page - 1);
  if (first >= last) return false;
  if (!second_core || last - first < kSplitFromBytes) return Populate(first, last);
  const uintptr_t mid = first + (((last - first) / 2) & ~(page - 1));
  bool other = false;
  std::thread half([&] { other = Populate(mid, last); });
  const bool mine = Populate(first, mid);
  half.join();
  return mine && other;
}

}  // namespace rlscope
