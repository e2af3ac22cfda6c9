#include "aggregator/occurrences.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace rlscope {

bool NameIn(const ProcessView& p, uint32_t name, const std::vector<std::string>& names) {
  const char* s = p.String(name);
  return std::find(names.begin(), names.end(), s) != names.end();
}

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
    const ProcessView& p = *slice.process;
    auto add = [&](const Span& s) { out.push_back({p.String(s.name), "", s.begin_ns, s.end_ns, s.end_tid}); };
    if (names.empty()) {
      for (const Span* s : StepChildren(slice, step.step)) add(*s);
      continue;
    }
    for (const Span& s : slice.spans) {
      if (s.step < 0 && NameIn(p, s.name, names)) add(s);
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

}  // namespace rlscope
