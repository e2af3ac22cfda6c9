// Sorts that skip the work when the input is in order already (most of a
// step's records arrive in time order), with the same result as the sort
// they stand for, so outputs do not depend on which path was taken.
#pragma once

#include <algorithm>

namespace rlscope {

// std::sort(first, last, less), skipped when every element is less than the
// next: then the input is the only order `less` allows, whatever the sort
// would do with equivalent elements (an input with any is sorted as before).
template <class It, class Less>
void SortUnlessStrictlySorted(It first, It last, Less less) {
  if (first == last) return;
  for (It a = first, b = std::next(first); b != last; ++a, ++b) {
    if (!less(*a, *b)) {
      std::sort(first, last, less);
      return;
    }
  }
}

// std::stable_sort(first, last, less), skipped when already sorted: a stable
// sort leaves a sorted input as it is.
template <class It, class Less>
void StableSortUnlessSorted(It first, It last, Less less) {
  if (!std::is_sorted(first, last, less)) std::stable_sort(first, last, less);
}

}  // namespace rlscope
