// The breakdown engine: where a step's time went, per process and sub-task.
//
// A sweep over interval sets (RL-Scope's resource overlap): CPU busy time
// (annotated ranges and Ray methods on any thread, minus CUDA
// synchronisation waits) against GPU busy time (kernels, copies, sets on any
// stream), each split into CPU only, GPU only, both, and idle; and, from the
// CPU samples, where the CPU time went (attribution.h). Pure
// functions on intervals plus AnalyzeStep, which applies them to a corrected
// step profile; no I/O. docs/summary_format.md says what each number means.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/attribution.h"

namespace rlscope {

struct StepProfile;
struct ProcessSlice;
struct StepLanes;  // lanes.h

struct Interval {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive; end <= begin is empty
};

// The sorted, disjoint union of `v` clipped to [lo, hi).
std::vector<Interval> UnionClipped(std::vector<Interval> v, int64_t lo, int64_t hi);
int64_t TotalLength(const std::vector<Interval>& disjoint);
// a minus b; both sorted and disjoint (UnionClipped output).
std::vector<Interval> Subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);

struct Overlap {
  int64_t cpu_only = 0, gpu_only = 0, cpu_gpu = 0, idle = 0;  // add up to hi - lo
};
// Sweeps CPU and GPU busy intervals (any order, may overlap) over [lo, hi).
Overlap ResourceOverlap(const std::vector<Interval>& cpu, const std::vector<Interval>& gpu, int64_t lo,
                        int64_t hi);
// nvidia-smi's "utilization": the share of `sample_ns` bins of [lo, hi) in
// which any GPU interval ran (a partial last bin counts as a bin).
double NaiveUtilization(const std::vector<Interval>& gpu, int64_t lo, int64_t hi, int64_t sample_ns);

// nvidia-smi samples over 1/6 s at its shortest.
inline constexpr int64_t kNaiveSampleNs = 166666667;

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
  int occurrence = 0;  // 1-based, per sub-task name
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
  int64_t controller_ns = 0;  // step time outside every segment
  std::vector<Straggler> stragglers;
  std::vector<GpuUtilization> gpu;
  std::shared_ptr<const StepLanes> lanes;  // the timeline picture's lanes (lanes.h)
};

// The thread CPU time `samples` (sorted by time) stand for, placed on the
// wall clock: each sample's weight just before it, after its thread's
// previous sample. Sorted, disjoint, over all threads.
std::vector<Interval> SampledCpuIntervals(const std::vector<CpuSample>& samples);

// `subtasks`: the config's sub-task names; empty = the controller's ranges
// directly inside its step range. The slices' CPU samples are classified
// already (ClassifyStepSamples).
StepAnalysis AnalyzeStep(const StepProfile& profile, const std::vector<std::string>& subtasks);

}  // namespace rlscope
