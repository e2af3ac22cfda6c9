#include "aggregator/subtasks.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "aggregator/step_cut.h"

namespace rlscope {
namespace {

bool Named(const ProcessTimeline& p, uint32_t name, const std::vector<std::string>& names) {
  const char* s = p.String(name);
  return std::find(names.begin(), names.end(), s) != names.end();
}

}  // namespace

std::vector<const Span*> StepChildren(const ProcessSlice& controller, int64_t step) {
  const Span* step_span = nullptr;
  for (const Span& s : controller.spans) {
    if (s.step == step) step_span = &s;
  }
  if (step_span == nullptr) return {};
  std::vector<const Span*> candidates;
  for (const Span& s : controller.spans) {
    if (s.step >= 0 || (!s.async && s.tid != step_span->tid)) continue;
    if (s.begin_ns >= step_span->begin_ns && s.end_ns <= step_span->end_ns) candidates.push_back(&s);
  }
  // By begin, the longer first (a push/pop parent before its same-time
  // child): one not ending past every earlier one is inside one of them.
  std::sort(candidates.begin(), candidates.end(), [](const Span* a, const Span* b) {
    if (a->begin_ns != b->begin_ns) return a->begin_ns < b->begin_ns;
    if (a->end_ns != b->end_ns) return a->end_ns > b->end_ns;
    return a->depth < b->depth;
  });
  std::vector<const Span*> children;
  int64_t reach = INT64_MIN;  // the latest end of a range taken or passed
  for (const Span* s : candidates) {
    if (s->end_ns > reach) children.push_back(s);
    reach = std::max(reach, s->end_ns);
  }
  return children;
}

std::vector<Occurrence> SubtaskOccurrences(const StepProfile& step, const std::vector<std::string>& names) {
  std::vector<Occurrence> out;
  for (const ProcessSlice& slice : step.processes) {
    if (!slice.process->is_controller()) continue;
    const ProcessTimeline& p = *slice.process;
    auto add = [&](const Span& s) { out.push_back({p.String(s.name), "", s.begin_ns, s.end_ns, s.end_tid}); };
    if (names.empty()) {
      for (const Span* s : StepChildren(slice, step.step)) add(*s);
      continue;
    }
    for (const Span& s : slice.spans) {
      if (s.step < 0 && Named(p, s.name, names)) add(s);
    }
  }
  std::sort(out.begin(), out.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
  // Capture names become directory names: safe characters only, and unique
  // within the step (gen, gen_2, ...; an unnamed range is "unnamed").
  std::map<std::string, int> seen;
  std::set<std::string> taken;
  for (Occurrence& o : out) {
    std::string base;
    for (char ch : o.name) base += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ? ch : '_';
    if (base.empty()) base = "unnamed";
    std::string capture = base;
    for (int k = ++seen[base]; k > 1 || taken.count(capture) != 0; k = ++seen[base]) {
      capture = base + "_" + std::to_string(k);
      if (taken.count(capture) == 0) break;
    }
    taken.insert(capture);
    o.capture = capture;
  }
  return out;
}

Intervals MergeIntervals(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  Intervals merged;
  for (const auto& iv : intervals) {
    if (!merged.empty() && iv.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, iv.second);
    } else {
      merged.push_back(iv);
    }
  }
  return merged;
}

void RestrictToIntervals(ProcessSlice* slice, const Intervals& merged) {
  std::vector<Span> spans;
  for (Span s : slice->spans) {
    // Overlap with [b, e); a zero-length span counts when it lies inside.
    auto overlaps = [&](const std::pair<int64_t, int64_t>& iv) {
      return s.begin_ns < iv.second && (s.end_ns > iv.first || (s.end_ns == s.begin_ns && s.begin_ns >= iv.first));
    };
    const auto first = std::find_if(merged.begin(), merged.end(), overlaps);
    if (first == merged.end()) continue;
    const auto last = std::find_if(merged.rbegin(), merged.rend(), overlaps);
    if (s.begin_ns < first->first) s.begin_ns = first->first, s.clipped_begin = true;
    if (s.end_ns > last->second) s.end_ns = last->second, s.clipped_end = true;
    spans.push_back(s);
  }
  slice->spans = std::move(spans);
  // Instants and CPU samples: those at a time inside one of the intervals.
  auto keep_inside = [&](auto& points) {
    auto outside = [&](const auto& p) {
      return std::none_of(merged.begin(), merged.end(),
                          [&](const auto& iv) { return p.ts_ns >= iv.first && p.ts_ns < iv.second; });
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
    for (const auto& iv : merged) {
      if (b < iv.second && (e > iv.first || (e == b && b >= iv.first))) {
        gpu.push_back(g);
        break;
      }
    }
  }
  slice->gpu = std::move(gpu);
}

Intervals OwnSubtaskIntervals(const ProcessSlice& slice, const std::vector<std::string>& names) {
  Intervals out;
  for (const Span& s : slice.spans) {
    if (Named(*slice.process, s.name, names)) out.emplace_back(s.begin_ns, s.end_ns);
  }
  return out;
}

std::vector<StepProfile> ApplySubtasks(StepProfile* step, const std::vector<std::string>& subtasks, bool discrete) {
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
        CutLevelsAndArming(*slice.process, o.begin_ns, o.end_ns, &slice);
      }
      captures.push_back(std::move(capture));
      step->captures.push_back(o.capture);
    }
    step->summary_only = true;
    return captures;
  }
  Intervals controller;
  for (const Occurrence& o : occurrences) controller.emplace_back(o.begin_ns, o.end_ns);
  for (ProcessSlice& slice : step->processes) {
    Intervals keep = controller;
    for (const auto& iv : OwnSubtaskIntervals(slice, subtasks)) keep.push_back(iv);
    RestrictToIntervals(&slice, MergeIntervals(std::move(keep)));
  }
  return captures;
}

}  // namespace rlscope
