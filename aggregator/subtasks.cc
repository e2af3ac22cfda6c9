#include "aggregator/subtasks.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "aggregator/occurrences.h"

namespace rlscope {

void RestrictToIntervals(ProcessSlice* slice, const std::vector<Interval>& merged) {
  std::vector<Span> spans;
  for (Span s : slice->spans) {
    // Overlap with [b, e); a zero-length span counts when it lies inside.
    auto overlaps = [&](const Interval& iv) {
      return s.begin_ns < iv.end && (s.end_ns > iv.begin || (s.end_ns == s.begin_ns && s.begin_ns >= iv.begin));
    };
    const auto first = std::find_if(merged.begin(), merged.end(), overlaps);
    if (first == merged.end()) continue;
    const auto last = std::find_if(merged.rbegin(), merged.rend(), overlaps);
    if (s.begin_ns < first->begin) s.begin_ns = first->begin, s.clipped_begin = true;
    if (s.end_ns > last->end) s.end_ns = last->end, s.clipped_end = true;
    spans.push_back(s);
  }
  slice->spans = std::move(spans);
  // Instants and CPU samples: those at a time inside one of the intervals.
  auto keep_inside = [&](auto& points) {
    auto outside = [&](const auto& p) {
      return std::none_of(merged.begin(), merged.end(),
                          [&](const Interval& iv) { return p.ts_ns >= iv.begin && p.ts_ns < iv.end; });
    };
    points.erase(std::remove_if(points.begin(), points.end(), outside), points.end());
  };
  keep_inside(slice->instants);
  keep_inside(slice->cpu_samples);
  keep_inside(slice->off_cpu);
  // GPU records: device-side ones by their launch (the API call with the same
  // correlation id) when it is here, the rest by their own time.
  std::map<uint32_t, int64_t> launch;
  for (const GpuRecord& g : slice->gpu) {
    const auto kind = static_cast<GpuKind>(g.kind);
    if ((kind == GpuKind::kRuntimeApi || kind == GpuKind::kDriverApi) && g.correlation != 0) {
      launch.emplace(g.correlation, g.start_ns);
    }
  }
  std::vector<GpuRecord> gpu;
  for (const GpuRecord& g : slice->gpu) {
    int64_t b = g.start_ns, e = g.end_ns;
    if (auto it = launch.find(g.correlation); g.correlation != 0 && it != launch.end()) b = e = it->second;
    for (const Interval& iv : merged) {
      if (b < iv.end && (e > iv.begin || (e == b && b >= iv.begin))) {
        gpu.push_back(g);
        break;
      }
    }
  }
  slice->gpu = std::move(gpu);
}

std::vector<Interval> OwnSubtaskIntervals(const ProcessSlice& slice, const std::vector<std::string>& names) {
  std::vector<Interval> out;
  for (const Span& s : slice.spans) {
    if (NameIn(*slice.process, s.name, names)) out.push_back({s.begin_ns, s.end_ns});
  }
  return out;
}

std::vector<StepProfile> ApplySubtasks(StepProfile* step, const std::vector<std::string>& subtasks, bool discrete,
                                       const LevelCutter& recut) {
  std::vector<StepProfile> captures;
  if (!discrete && subtasks.empty()) return captures;
  const std::vector<Occurrence> occurrences = SubtaskOccurrences(*step, subtasks);
  if (discrete) {
    for (const Occurrence& o : occurrences) {
      StepProfile capture = *step;
      capture.capture = o.capture;
      capture.begin_ns = o.begin_ns;
      capture.end_ns = o.end_ns;
      for (ProcessSlice& slice : capture.processes) {
        RestrictToIntervals(&slice, {{o.begin_ns, o.end_ns}});
        recut(o.begin_ns, o.end_ns, &slice);
      }
      captures.push_back(std::move(capture));
      step->captures.push_back(o.capture);
    }
    step->summary_only = true;
    return captures;
  }
  std::vector<Interval> controller;
  for (const Occurrence& o : occurrences) controller.push_back({o.begin_ns, o.end_ns});
  for (ProcessSlice& slice : step->processes) {
    std::vector<Interval> keep = controller;
    for (const Interval& iv : OwnSubtaskIntervals(slice, subtasks)) keep.push_back(iv);
    RestrictToIntervals(&slice, Union(std::move(keep)));
  }
  return captures;
}

}  // namespace rlscope
