#include "aggregator/triggers.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "aggregator/process_view.h"

namespace rlscope {
namespace {

int64_t StepTimeNs(const StepProfile& step) {
  return (step.corrected && step.corrected_end_ns > 0 ? step.corrected_end_ns : step.end_ns) - step.begin_ns;
}

std::string Ms(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(ns) / 1e6);
  return buf;
}

// The largest rise over its first point in a level series (bytes).
int64_t Rise(const std::vector<MemoryPoint>& points) {
  int64_t rise = 0;
  for (const MemoryPoint& m : points) rise = std::max(rise, m.bytes - points.front().bytes);
  return rise;
}

std::string MemoryJump(const StepProfile& step, int64_t jump_mb) {
  const int64_t jump = jump_mb << 20;
  for (const ProcessSlice& slice : step.processes) {
    // Named only when it jumped (a label per process and step was most of this).
    auto who = [&slice] { return ProcessLabel(*slice.process); };
    if (!slice.rss.empty() && Rise(slice.rss) >= jump) {
      return "memory: " + who() + ": resident memory rose " + std::to_string(Rise(slice.rss) >> 20) +
             " MiB within the step (always_on.memory_jump_mb " + std::to_string(jump_mb) + ")";
    }
    for (const auto& [device, points] : slice.gpu_allocated) {
      if (!points.empty() && Rise(points) >= jump) {
        return "memory: " + who() + ": GPU " + std::to_string(device) + " memory allocated rose " +
               std::to_string(Rise(points) >> 20) + " MiB within the step (always_on.memory_jump_mb " +
               std::to_string(jump_mb) + ")";
      }
    }
  }
  return "";
}

}  // namespace

std::string StepTriggers::Decide(const StepProfile& step, bool chosen, const Config::AlwaysOn& config) {
  ++seen_;
  if (chosen || seen_ <= config.warmup_steps) return "";
  int64_t overlap = 0;
  for (const auto& [b, e] : writes_)
    overlap += std::max<int64_t>(0, std::min(e, step.end_ns) - std::max(b, step.begin_ns));
  const int64_t ns = std::max<int64_t>(0, StepTimeNs(step) - overlap);
  std::string why;
  if (config.slower_than > 0 && recent_.size() >= kMinBaseline) {
    std::vector<int64_t> sorted(recent_.begin(), recent_.end());
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const int64_t median = sorted[sorted.size() / 2];
    if (static_cast<double>(ns) > config.slower_than * static_cast<double>(median) &&
        ns - median >= config.min_slower_ms * 1000000) {
      char ratio[32], limit[32];
      std::snprintf(ratio, sizeof(ratio), "%.2f", median > 0 ? static_cast<double>(ns) / median : 0.0);
      std::snprintf(limit, sizeof(limit), "%g", config.slower_than);
      why = "slow: " + Ms(ns) + " ms, " + ratio + " x the median of the " + std::to_string(recent_.size()) +
            " steps before (" + Ms(median) + " ms; always_on.slower_than " + limit + ")";
    }
  }
  if (why.empty() && config.memory_jump_mb > 0) why = MemoryJump(step, config.memory_jump_mb);
  recent_.push_back(ns);
  while (recent_.size() > static_cast<size_t>(std::max<int64_t>(1, config.recent_steps))) recent_.pop_front();
  return why;
}

void StepTriggers::WroteFull(int64_t begin_ns, int64_t end_ns) {
  writes_.emplace_back(begin_ns, end_ns);
  if (writes_.size() > kWritesKept) writes_.pop_front();
}

}  // namespace rlscope
