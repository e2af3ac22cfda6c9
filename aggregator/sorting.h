// Sorts that skip the work when the input is in order already (most of a
// step's records arrive in time order), with the same result as the sort
// they stand for, so outputs do not depend on which path was taken; and a
// search that starts where the last one ended.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

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

// std::stable_sort(v, less), by merging the runs already in order (stable:
// of equivalent elements, the earlier run's first), the same result; with
// many short runs, std::stable_sort itself.
template <class T, class Less>
void StableSortRuns(std::vector<T>* v, Less less) {
  std::vector<size_t> runs{0};
  for (size_t i = 1; i < v->size(); ++i) {
    if (less((*v)[i], (*v)[i - 1])) runs.push_back(i);
  }
  if (runs.size() == 1) return;
  if (runs.size() > v->size() / 64 + 1) return std::stable_sort(v->begin(), v->end(), less);
  runs.push_back(v->size());
  while (runs.size() > 2) {  // neighbouring runs merged pairwise, left to right, then again
    std::vector<size_t> next{0};
    for (size_t r = 0; r + 1 < runs.size(); r += 2) {
      const size_t mid = runs[r + 1], end = r + 2 < runs.size() ? runs[r + 2] : mid;
      std::inplace_merge(v->begin() + runs[r], v->begin() + mid, v->begin() + end, less);
      next.push_back(end);
    }
    runs.swap(next);
  }
}

namespace internal {

// The order SortRuns puts `v` in, from `order` (a permutation of v's
// positions): its runs in order merged. Empty when that is not the order
// std::sort gives (equivalent elements) or there are too many runs: then
// std::sort decides.
template <class T, class Less>
std::vector<uint32_t> MergedOrder(const std::vector<T>& v, std::vector<uint32_t> order, Less less) {
  const size_t n = v.size();
  auto by = [&](uint32_t a, uint32_t b) { return less(v[a], v[b]); };
  std::vector<size_t> runs{0};  // where each run begins
  for (size_t i = 1; i < n; ++i) {
    if (by(order[i], order[i - 1])) runs.push_back(i);
  }
  if (runs.size() > n / 64 + 1) return {};
  runs.push_back(n);
  std::vector<uint32_t> merged(runs.size() > 2 ? n : 0);
  while (runs.size() > 2) {  // merge neighbouring runs pairwise, then again
    std::vector<size_t> next{0};
    for (size_t r = 0; r + 1 < runs.size(); r += 2) {
      const size_t mid = runs[r + 1], end = r + 2 < runs.size() ? runs[r + 2] : mid;
      std::merge(order.begin() + runs[r], order.begin() + mid, order.begin() + mid, order.begin() + end,
                 merged.begin() + runs[r], by);
      next.push_back(end);
    }
    order.swap(merged);
    runs.swap(next);
  }
  for (size_t i = 1; i < n; ++i) {
    if (!by(order[i - 1], order[i])) return {};  // equivalent elements
  }
  return order;
}

// SortRuns from `order` (a permutation of v's positions): v put in
// MergedOrder, else std::sort-ed.
template <class T, class Less>
void SortFromOrder(std::vector<T>* v, std::vector<uint32_t> order, Less less) {
  const size_t n = v->size();
  if (n < 2) return;
  order = MergedOrder(*v, std::move(order), less);
  if (order.empty()) return std::sort(v->begin(), v->end(), less);
  bool identity = true;
  for (size_t i = 0; i < n && identity; ++i) identity = order[i] == i;
  if (identity) return;
  std::vector<T> sorted;
  sorted.reserve(n);
  for (uint32_t i : order) sorted.push_back(std::move((*v)[i]));
  v->swap(sorted);
}

}  // namespace internal

// std::sort(v, less) for inputs made of a few runs already in order (a
// step's ranges: each batch's, thread by thread): the runs' positions are
// merged (stable), and when no two elements are equivalent that order is
// the only one `less` allows, the same as std::sort's, and v is put in it.
// With equivalent elements, or many short runs, v is std::sort-ed as before.
template <class T, class Less>
void SortRuns(std::vector<T>* v, Less less) {
  const size_t n = v->size();
  if (n > UINT32_MAX) return std::sort(v->begin(), v->end(), less);
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  internal::SortFromOrder(v, std::move(order), less);
}

// The positions of `v` in the order SortRuns would put it in (the same
// permutation, ties included), leaving v as it is: for elements too large
// to move about.
template <class T, class Less>
std::vector<uint32_t> SortRunsOrder(const std::vector<T>& v, Less less) {
  const size_t n = v.size();
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  if (n < 2) return order;
  std::vector<uint32_t> merged = n > UINT32_MAX ? std::vector<uint32_t>{} : internal::MergedOrder(v, order, less);
  if (!merged.empty()) return merged;
  // std::sort's permutation depends only on its comparisons' outcomes: the
  // positions sorted by their elements are the one it applies to v.
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return less(v[a], v[b]); });
  return order;
}

// SortRuns for a `less` that orders by `group(e)` (an int64_t, e.g. a
// thread) first, where the elements of each of a few groups come in runs
// interleaved with the others' (each batch's ranges, thread by thread):
// the positions are first grouped (stably, in group order), so a group
// whose runs follow each other in order needs no merge. The same result
// as SortRuns; SortRuns itself for more than kMaxGroups groups.
template <class T, class Group, class Less>
void SortRunsGrouped(std::vector<T>* v, Group group, Less less) {
  constexpr size_t kMaxGroups = 256;
  const size_t n = v->size();
  if (n > UINT32_MAX) return std::sort(v->begin(), v->end(), less);
  std::vector<std::pair<int64_t, size_t>> counts;  // (group, elements), groups in order of first sight
  size_t last = 0;                                 // counts' entry of the element before
  for (size_t i = 0; i < n; ++i) {
    const int64_t g = group((*v)[i]);
    if (counts.empty() || counts[last].first != g) {
      last = 0;
      while (last < counts.size() && counts[last].first != g) ++last;
      if (last == counts.size()) {
        if (counts.size() == kMaxGroups) return SortRuns(v, less);
        counts.emplace_back(g, 0);
      }
    }
    ++counts[last].second;
  }
  std::vector<std::pair<int64_t, size_t>> starts = counts;  // each group's first position, groups in order
  std::sort(starts.begin(), starts.end());
  size_t at = 0;
  for (auto& [g, start] : starts) {
    const size_t count = start;
    start = at;
    at += count;
  }
  std::vector<uint32_t> order(n);
  auto s = starts.begin();
  for (size_t i = 0; i < n; ++i) {
    const int64_t g = group((*v)[i]);
    if (s->first != g) {
      s = std::lower_bound(starts.begin(), starts.end(), std::make_pair(g, size_t{0}),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    order[s->second++] = static_cast<uint32_t>(i);
  }
  internal::SortFromOrder(v, std::move(order), less);
}

// upper_bound over `size` times in order (`at(i)`, i < size) for `t`,
// galloping outward from `hint` before the binary search: O(log distance),
// so a run of nearby queries costs little each.
template <class At>
size_t UpperBoundNear(size_t size, int64_t t, size_t hint, At at) {
  size_t lo = std::min(hint, size), hi = lo, step = 1;
  if (lo > 0 && at(lo - 1) > t) {  // before the hint: the answer is at most lo - 1
    hi = lo - 1;
    lo = hi;
    while (lo > 0 && at(lo - 1) > t) {
      hi = lo - 1;
      lo = hi >= step ? hi - step : 0;
      step *= 2;
    }
  } else {  // at or after it: every time before lo is at most t
    while (hi < size && at(hi) <= t) {
      lo = hi + 1;
      hi = lo + step;
      step *= 2;
    }
    hi = std::min(hi, size);
  }
  while (lo < hi) {  // the first in [lo, hi) after t
    const size_t mid = lo + (hi - lo) / 2;
    if (at(mid) <= t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace rlscope
