#include "aggregator/intervals.h"

#include <algorithm>

#include "aggregator/sorting.h"

namespace rlscope {

std::vector<Interval> Union(std::vector<Interval> v) {
  // The union does not depend on the order of intervals that begin together.
  StableSortRuns(&v, [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

std::vector<Interval> UnionClipped(std::vector<Interval> v, int64_t lo, int64_t hi) {
  for (Interval& i : v) i.begin = std::max(i.begin, lo), i.end = std::min(i.end, hi);
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.end <= i.begin; }), v.end());
  return Union(std::move(v));
}

int64_t TotalLength(const std::vector<Interval>& disjoint) {
  int64_t n = 0;
  for (const Interval& i : disjoint) n += i.end - i.begin;
  return n;
}

std::vector<Interval> Subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (Interval cur : a) {
    while (j < b.size() && b[j].end <= cur.begin) ++j;
    size_t k = j;
    while (k < b.size() && b[k].begin < cur.end) {
      if (b[k].begin > cur.begin) out.push_back({cur.begin, b[k].begin});
      cur.begin = std::max(cur.begin, b[k].end);
      if (cur.begin >= cur.end) break;
      ++k;
    }
    if (cur.begin < cur.end) out.push_back(cur);
  }
  return out;
}

}  // namespace rlscope
