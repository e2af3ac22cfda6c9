#include "aggregator/ray_calls.h"

#include <algorithm>
#include <string_view>

#include "native/names.h"

namespace rlscope {

std::map<uint64_t, std::pair<int64_t, int64_t>> RaySubmits(const ProcessSlice& controller) {
  std::map<uint64_t, std::pair<int64_t, int64_t>> submitted;
  std::map<int64_t, int64_t> last_submit;  // tid -> ts
  for (const Instant& i : controller.instants) {
    const std::string_view name = controller.process->String(i.name);
    if (name == names::kRaySubmit) {
      last_submit[i.tid] = i.ts_ns;
    } else if (name == names::kRayTask && i.has_payload && last_submit.count(i.tid) != 0) {
      submitted.emplace(i.payload, std::make_pair(last_submit[i.tid], i.tid));
    }
  }
  return submitted;
}

namespace {

// Marks named `name` with a payload: payload -> the first one's time.
std::map<uint64_t, int64_t> MarksByPayload(const ProcessSlice& controller, std::string_view name) {
  std::map<uint64_t, int64_t> out;
  for (const Instant& i : controller.instants) {
    if (i.has_payload && std::string_view(controller.process->String(i.name)) == name) out.emplace(i.payload, i.ts_ns);
  }
  return out;
}

}  // namespace

std::map<uint64_t, int64_t> RayGot(const ProcessSlice& controller) {
  return MarksByPayload(controller, names::kRayGot);
}

std::map<uint64_t, int64_t> Waited(const ProcessSlice& controller) {
  return MarksByPayload(controller, names::kWaited);
}

std::map<uint64_t, std::vector<OffsetBound>> CausalOffsetBounds(const StepProfile& step) {
  std::map<uint64_t, int64_t> submitted, got;
  int64_t controller_bound = 0;
  for (const ProcessSlice& slice : step.processes) {
    if (!slice.process->is_controller()) continue;
    // Its marks are on the aggregator's clock only as far as its own estimate
    // holds: none (times as recorded) proves nothing.
    const ClockEstimate& own = slice.process->clock();
    if (!own.valid() || own.bound_ns < 0) return {};
    controller_bound = own.bound_ns;
    for (const auto& [key, at] : RaySubmits(slice)) submitted.emplace(key, at.first);
    got.merge(RayGot(slice));
  }
  std::map<uint64_t, std::vector<OffsetBound>> out;
  for (const ProcessSlice& slice : step.processes) {
    const ClockEstimate& clock = slice.process->clock();
    if (slice.process->is_controller() || clock.basis != ClockBasis::kProbes) continue;
    for (const Span& s : slice.spans) {
      if (!s.has_payload || s.clipped_begin || s.clipped_end) continue;
      auto sub = submitted.find(s.payload);
      if (sub == submitted.end()) continue;
      const int64_t begin = clock.FromAggregator(s.raw_begin_ns), end = clock.FromAggregator(s.raw_end_ns);
      OffsetBound b;
      b.x_ns = begin + (end - begin) / 2;
      b.lo_ns = sub->second - begin - controller_bound;
      if (auto g = got.find(s.payload); g != got.end()) b.hi_ns = g->second - end + controller_bound;
      out[slice.process->hello().session].push_back(b);
    }
  }
  return out;
}

void CheckCausality(StepProfile* step) {
  std::map<uint64_t, int64_t> submitted, got;
  for (const ProcessSlice& slice : step->processes) {
    if (!slice.process->is_controller()) continue;
    for (const auto& [key, at] : RaySubmits(slice)) submitted.emplace(key, at.first);
    got.merge(RayGot(slice));
  }
  StepProfile::Causality& c = step->causality;
  for (const ProcessSlice& slice : step->processes) {
    if (slice.process->is_controller()) continue;
    for (const Span& s : slice.spans) {
      if (!s.has_payload || s.clipped_begin || s.clipped_end) continue;
      auto sub = submitted.find(s.payload);
      if (sub == submitted.end()) continue;
      ++c.checked;
      int64_t violation = std::max<int64_t>(0, sub->second - s.begin_ns);
      if (auto g = got.find(s.payload); g != got.end()) violation = std::max(violation, s.end_ns - g->second);
      if (violation > 0) {
        ++c.violations;
        c.max_violation_ns = std::max(c.max_violation_ns, violation);
      }
    }
  }
}

}  // namespace rlscope
