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

#include "aggregator/intervals.h"
#include "aggregator/step_analysis.h"

namespace rlscope {

struct StepProfile;
struct ProcessSlice;

// Sweeps CPU and GPU busy intervals (any order, may overlap) over [lo, hi).
Overlap ResourceOverlap(const std::vector<Interval>& cpu, const std::vector<Interval>& gpu, int64_t lo, int64_t hi);
// nvidia-smi's "utilization": the share of `sample_ns` bins of [lo, hi) in
// which any GPU interval ran (a partial last bin counts as a bin).
double NaiveUtilization(const std::vector<Interval>& gpu, int64_t lo, int64_t hi, int64_t sample_ns);

// nvidia-smi samples over 1/6 s at its shortest.
inline constexpr int64_t kNaiveSampleNs = 166666667;

// The thread CPU time `samples` (sorted by time) stand for, placed on the
// wall clock: each sample's weight just before it, after its thread's
// previous sample. Sorted, disjoint, over all threads.
std::vector<Interval> SampledCpuIntervals(const std::vector<CpuSample>& samples);

// Where each of `samples` (sorted by time) begins on the wall clock, as
// SampledCpuIntervals places it: its weight before it, not before its
// thread's previous sample. Index for index.
std::vector<int64_t> SampleStarts(const std::vector<CpuSample>& samples);

// The part of sample `c`'s weight, placed from `from_ns` (SampleStarts), that
// a window [lo, hi) counts. One timer period (`period_ns`) counts where the
// sample landed, whole: a signal that came in time (what every sample
// counted before). The rest is thread CPU time its timer's signal came late
// for (the overrun: the kernel notices a CPU timer's expiry only at a tick
// that finds its thread running, and a thread that runs in bursts between
// ticks can carry tens of periods into its next sample): spread evenly over
// [from_ns, ts - period_ns], so that it counts in the windows the thread
// ran in before the sample, not all in the one it landed in.
int64_t SampleNsIn(const CpuSample& c, int64_t from_ns, int64_t period_ns, int64_t lo, int64_t hi);

// `subtasks`: the config's sub-task names; empty = the controller's ranges
// directly inside its step range. The slices' CPU samples are classified
// already (ClassifyStepSamples). `lanes`: the timeline picture's lanes too
// (summary.json's alone: a figures-only step has none).
StepAnalysis AnalyzeStep(const StepProfile& profile, const std::vector<std::string>& subtasks, bool lanes = true);

}  // namespace rlscope
