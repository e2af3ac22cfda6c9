// Time intervals: the one union, length and difference every analysis
// uses (the breakdown's busy time, sub-task selection's kept windows).
// Pure; depends on nothing of the aggregator's but sorting.h.
#pragma once

#include <cstdint>
#include <vector>

namespace rlscope {

struct Interval {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive; end <= begin is empty
};

// The sorted, disjoint union of `v`: intervals that overlap or touch are
// one. An empty interval is kept where nothing covers it (a zero-length
// sub-task still selects what lies at its instant).
std::vector<Interval> Union(std::vector<Interval> v);
// The union of `v` clipped to [lo, hi), empty intervals left out.
std::vector<Interval> UnionClipped(std::vector<Interval> v, int64_t lo, int64_t hi);
int64_t TotalLength(const std::vector<Interval>& disjoint);
// a minus b; both sorted and disjoint (UnionClipped output).
std::vector<Interval> Subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace rlscope
