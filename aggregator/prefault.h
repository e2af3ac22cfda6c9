// Fresh memory for a step's large arrays, mapped in bulk before it is filled.
//
// The first touch of each 4 KiB page of fresh memory is a page fault. On a
// VM they are dear: here, filling a new 52 MB array of spans (a cut of 500k
// spans) took 34 ms, 30 of them in faults. MADV_POPULATE_WRITE (Linux 5.14)
// maps a range's pages in one call without a fault per page (22 ms for the
// same 52 MB), and with a second core two threads each map half (12 ms).
// The contents are unchanged and pages already mapped are left as they are,
// so calling it is never wrong; on an older kernel it does nothing and the
// pages fault in as they are touched.
#pragma once

#include <cstddef>
#include <vector>

namespace rlscope {

// Below this a range is left to fault in page by page (a thread, a system
// call and page rounding cost more than they save).
inline constexpr size_t kPrefaultFromBytes = size_t{4} << 20;

// Maps the whole pages inside [begin, begin + bytes) for writing; with
// `second_core`, a range of 16 MB or more is split between this thread and
// another. Returns whether the kernel did (false: too small, or unsupported).
bool PrefaultForWrite(void* begin, size_t bytes, bool second_core);

// The same for what `v` can still take without reallocating:
// [data() + size(), data() + capacity()). Call it after reserve().
template <typename T>
bool PrefaultCapacity(std::vector<T>* v, bool second_core) {
  return PrefaultForWrite(v->data() + v->size(), (v->capacity() - v->size()) * sizeof(T), second_core);
}

}  // namespace rlscope
