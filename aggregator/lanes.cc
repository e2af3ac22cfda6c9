#include "aggregator/lanes.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "aggregator/sorting.h"
#include "aggregator/step_profile.h"
#include "aggregator/process_view.h"

namespace rlscope {

std::string NodeOf(const ProcessView& p) {
  const auto& labels = p.identity().labels;
  const auto ip = labels.find("node_ip"), id = labels.find("node_id");
  const std::string short_id = id != labels.end() ? id->second.substr(0, 8) : "";
  if (ip != labels.end() && !short_id.empty()) return ip->second + " [" + short_id + "]";
  return !short_id.empty() ? short_id : p.identity().host;
}

namespace {

// The controller first, then node by node (the controller's first, then by
// the lowest rank on each), each by rank (unknown last) and pid.
std::vector<int> LaneOrder(const StepProfile& profile) {
  constexpr int64_t kNoRank = INT64_MAX;
  std::map<std::string, int64_t> node_first;  // node -> its lowest rank (the controller's: -1)
  for (const ProcessSlice& s : profile.processes) {
    const ProcessView& p = *s.process;
    const int64_t rank = p.is_controller() ? -1 : p.identity().rank >= 0 ? p.identity().rank : kNoRank;
    auto [it, added] = node_first.emplace(NodeOf(p), rank);
    if (!added) it->second = std::min(it->second, rank);
  }
  auto key = [&](int i) {
    const ProcessView& p = *profile.processes[static_cast<size_t>(i)].process;
    const std::string node = NodeOf(p);
    const int64_t rank = p.identity().rank >= 0 ? p.identity().rank : kNoRank;
    return std::make_tuple(!p.is_controller(), node_first[node], node, rank, p.identity().pid);
  };
  std::vector<int> order;
  for (size_t i = 0; i < profile.processes.size(); ++i) order.push_back(static_cast<int>(i));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return order;
}

// The window a time falls in (the last one beginning at or before it that
// has not ended), -1 none. `windows` are in time order; `max_end[i]` is the
// latest end of windows 0..i (the walk back stops where none reaches `t`).
int WindowAt(const std::vector<LaneWindow>& windows, const std::vector<int64_t>& max_end, int64_t t) {
  auto it = std::upper_bound(windows.begin(), windows.end(), t,
                             [](int64_t v, const LaneWindow& w) { return v < w.begin_ns; });
  for (size_t i = static_cast<size_t>(it - windows.begin()); i > 0 && max_end[i - 1] > t; --i) {
    if (t < windows[i - 1].end_ns) return static_cast<int>(i - 1);
  }
  return -1;
}

// Keeps the longest kMaxLaneBoxes, in time order (the controller's windows).
void BoundNamed(Lane* lane) {
  auto& boxes = lane->boxes;
  if (boxes.size() > kMaxLaneBoxes) {
    std::stable_sort(boxes.begin(), boxes.end(),
                     [](const LaneBox& a, const LaneBox& b) { return a.duration_ns > b.duration_ns; });
    lane->omitted = boxes.size() - kMaxLaneBoxes;
    boxes.resize(kMaxLaneBoxes);
  }
  std::stable_sort(boxes.begin(), boxes.end(),
                   [](const LaneBox& a, const LaneBox& b) { return a.begin_ns < b.begin_ns; });
}

// A box before it is kept: its name is made only for the boxes kept.
struct Candidate {
  int64_t begin_ns = 0, duration_ns = 0;
  const Span* span = nullptr;  // a worker's range (its name), or none: `name` below
  int subtask = -1;
  bool critical = false;
  size_t index = 0;  // its place in the lane before Bound
};

// Keeps the longest kMaxLaneBoxes (of equal ones the first), in time order
// (of boxes beginning together, the longer first, then the first): as a
// stable sort by duration, cut to the longest, then a stable sort by begin.
// `name` names the boxes without a span.
void Bound(const ProcessView& p, std::vector<Candidate> boxes, const std::string& name, Lane* lane) {
  if (boxes.size() > kMaxLaneBoxes) {
    auto longer = [](const Candidate& a, const Candidate& b) {
      return a.duration_ns != b.duration_ns ? a.duration_ns > b.duration_ns : a.index < b.index;
    };
    std::nth_element(boxes.begin(), boxes.begin() + kMaxLaneBoxes, boxes.end(), longer);
    lane->omitted = boxes.size() - kMaxLaneBoxes;
    boxes.resize(kMaxLaneBoxes);
    std::sort(boxes.begin(), boxes.end(), [&](const Candidate& a, const Candidate& b) {
      return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : longer(a, b);
    });
  } else {
    StableSortUnlessSorted(boxes.begin(), boxes.end(),
                           [](const Candidate& a, const Candidate& b) { return a.begin_ns < b.begin_ns; });
  }
  lane->boxes.reserve(boxes.size());
  for (const Candidate& c : boxes) {
    lane->boxes.push_back(
        {c.begin_ns, c.duration_ns, c.span != nullptr ? p.String(c.span->name) : name, c.subtask, c.critical});
  }
}

}  // namespace

StepLanes BuildLanes(const StepProfile& profile, const std::vector<LaneWindow>& windows,
                     const std::vector<std::vector<Interval>>& gpu_busy, const std::vector<CriticalSegment>& critical) {
  StepLanes out;
  std::map<std::string, int> index;
  std::vector<int> window_subtask;
  for (const LaneWindow& w : windows) {
    auto [it, added] = index.emplace(w.name, static_cast<int>(out.subtasks.size()));
    if (added) out.subtasks.push_back(w.name);
    window_subtask.push_back(it->second);
  }
  // Per window, the process critical in it (the segments are the windows,
  // numbered per name; a step with more keeps only its longest).
  std::map<std::pair<std::string, int>, int> critical_in;
  for (const CriticalSegment& c : critical) critical_in[{c.subtask, c.occurrence}] = c.critical;
  std::vector<int> window_critical;
  std::map<std::string, int> seen;
  for (const LaneWindow& w : windows) {
    auto it = critical_in.find({w.name, ++seen[w.name]});
    window_critical.push_back(it != critical_in.end() ? it->second : -1);
  }
  std::vector<int64_t> max_end;
  for (const LaneWindow& w : windows)
    max_end.push_back(std::max(w.end_ns, max_end.empty() ? w.end_ns : max_end.back()));
  const int64_t begin = profile.begin_ns;
  for (int p : LaneOrder(profile)) {
    const ProcessSlice& slice = profile.processes[static_cast<size_t>(p)];
    Lane lane;
    lane.process = p;
    if (slice.process->is_controller()) {
      for (size_t w = 0; w < windows.size(); ++w) {
        lane.boxes.push_back({windows[w].begin_ns - begin, windows[w].end_ns - windows[w].begin_ns, windows[w].name,
                              window_subtask[w], false});
      }
      BoundNamed(&lane);
    } else {
      std::vector<Candidate> boxes;
      for (const Span& s : slice.spans) {
        if (s.depth != 0 || s.step >= 0) continue;  // outermost ranges; a step range is the controller's
        const int w = WindowAt(windows, max_end, s.begin_ns);
        boxes.push_back({s.begin_ns - begin, std::max<int64_t>(0, s.end_ns - s.begin_ns), &s,
                         w >= 0 ? window_subtask[static_cast<size_t>(w)] : -1,
                         w >= 0 && window_critical[static_cast<size_t>(w)] == p, boxes.size()});
      }
      Bound(*slice.process, std::move(boxes), std::string(), &lane);
    }
    out.lanes.push_back(std::move(lane));
    if (static_cast<size_t>(p) < gpu_busy.size() && !gpu_busy[static_cast<size_t>(p)].empty()) {
      Lane gpu;
      gpu.process = p;
      gpu.gpu = true;
      std::vector<Candidate> boxes;
      for (const Interval& i : gpu_busy[static_cast<size_t>(p)]) {
        const int w = WindowAt(windows, max_end, i.begin);
        boxes.push_back({i.begin - begin, i.end - i.begin, nullptr,
                         w >= 0 ? window_subtask[static_cast<size_t>(w)] : -1, false, boxes.size()});
      }
      Bound(*slice.process, std::move(boxes), "GPU busy", &gpu);
      out.lanes.push_back(std::move(gpu));
    }
  }
  return out;
}

}  // namespace rlscope
