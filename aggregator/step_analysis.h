// What the breakdown found in a step (breakdown.h computes it; the
// summary, the report's lanes and the database read it): values only.
// docs/summary_format.md says what each number means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/attribution.h"

namespace rlscope {

struct StepLanes;  // lanes.h

struct Overlap {
  int64_t cpu_only = 0, gpu_only = 0, cpu_gpu = 0, idle = 0;  // add up to hi - lo
};

struct BreakdownRow {
  std::string subtask;  // "step" for the whole step
  int occurrences = 0;
  int process = -1;  // index into StepProfile::processes
  int64_t window_ns = 0;
  Overlap overlap;
  int64_t overhead_ns = 0;  // profiler time removed from this process in the window
  // Where its CPU time went (attribution.h), from its CPU samples in the
  // window; samples 0 when it had none.
  Attribution attribution;
};

struct CriticalSegment {
  std::string subtask;
  int occurrence = 0;    // 1-based, per sub-task name
  int64_t begin_ns = 0;  // from the step's begin (corrected)
  int64_t duration_ns = 0;
  int critical = -1;  // process index whose busy time in it ended last; -1: no worker was busy in it
  int64_t critical_ns = 0;
  int64_t median_ns = 0;
};

struct Straggler {
  std::string subtask;
  int ranks = 0;
  int slowest = -1;  // process index
  int64_t slowest_ns = 0, median_ns = 0, fastest_ns = 0;
};

struct GpuUtilization {
  int process = -1;
  int64_t busy_ns = 0;
  double busy_fraction = 0;
  double naive_fraction = 0;
};

// A step with more sub-task occurrences than this keeps its longest ones on
// the critical path (the rows and stragglers still count every occurrence).
inline constexpr size_t kMaxCriticalSegments = 256;

struct StepAnalysis {
  int64_t step_ns = 0;  // corrected
  std::vector<BreakdownRow> rows;
  std::vector<CriticalSegment> critical_path;  // time order, at most kMaxCriticalSegments
  int64_t segments_omitted = 0;                // the shorter occurrences left out
  int64_t controller_ns = 0;                   // step time outside every segment
  std::vector<Straggler> stragglers;
  std::vector<GpuUtilization> gpu;
  std::shared_ptr<const StepLanes> lanes;  // the timeline picture's lanes (lanes.h)
};

}  // namespace rlscope
