#include "aggregator/step_cut.h"

#include <sched.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "aggregator/attribution.h"
#include "aggregator/breakdown.h"
#include "aggregator/step_correction.h"
#include "aggregator/ray_calls.h"
#include "aggregator/sorting.h"

namespace rlscope {

namespace {

// CutLevelsAndArming's, over [begin, end] on the process's own clock.
void CutLevels(const ProcessTimeline& p, int64_t begin, int64_t end, ProcessSlice* slice) {
  const ClockEstimate& clock = p.clock();
  slice->unarmed_ns = p.UnarmedNs(begin, end);
  slice->rss.clear();
  slice->gpu_allocated.clear();
  p.CutMemory(begin, end, &slice->rss, &slice->gpu_allocated);
  for (MemoryPoint& m : slice->rss) m.ts_ns = clock.ToAggregator(m.ts_ns);
  for (auto& [device, points] : slice->gpu_allocated) {
    for (MemoryPoint& m : points) m.ts_ns = clock.ToAggregator(m.ts_ns);
  }
}

// Overhead correction's inputs (ProcessSlice::cost_marks), the step `s`
// being [begin, end] on the process's clock. Marks are cut on the process's
// clock like the spans (a nanosecond wider: the clock fit's rounding), moved
// onto the aggregator's, where the step begins, and held to [begin, end]
// there, as the spans are.
void CutCosts(const ProcessTimeline& p, const StepSpan& s, int64_t begin, int64_t end, ProcessSlice* slice) {
  const ClockEstimate& clock = p.clock();
  p.CutCosts(begin - 1, end + 1, &slice->cost_marks);
  for (auto& [tid, list] : slice->cost_marks) {
    for (CostMark& m : list) m.ts_ns = clock.ToAggregator(m.ts_ns);
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const CostMark& m) { return m.ts_ns < s.begin_ns || m.ts_ns > s.end_ns; }),
               list.end());
  }
  p.CutSamples(begin - 1, end + 1, &slice->cost_samples);
  slice->run_cost_samples = p.sample_totals();
  slice->run_usual_costs = p.usual_costs();
  slice->run_cpu_handler = p.cpu_handler();
}

}  // namespace

void CutLevelsAndArming(const ProcessTimeline& p, int64_t begin_ns, int64_t end_ns, ProcessSlice* slice) {
  CutLevels(p, p.clock().FromAggregator(begin_ns), p.clock().FromAggregator(end_ns), slice);
}

ProcessSlice CutProcess(const ProcessTimeline& p, const StepSpan& s, const Config& config, bool second_core) {
  const bool costs = config.correction.enabled;
  ProcessSlice slice;
  slice.process = std::make_shared<const ProcessView>(p.View());
  const ClockEstimate& clock = p.clock();
  const int64_t begin = clock.FromAggregator(s.begin_ns), end = clock.FromAggregator(s.end_ns);
  p.Cut(begin, end, &slice.spans, &slice.instants, second_core);
  p.CutGpu(begin, end, &slice.gpu);
  p.CutCpuSamples(begin, end, &slice.cpu_samples);
  p.CutOffCpu(begin, end, &slice.off_cpu);
  p.CutProcessCpu(begin, end, &slice.process_cpu);
  CutLevels(p, begin, end, &slice);
  if (costs) CutCosts(p, s, begin, end, &slice);
  slice.profiler_cpu_ns = p.ProfilerCpuNs(begin, end);
  // Its recording threads' run-queue waits in the step: the evidence of CPU
  // the job lacked, by the profiler or not.
  if (slice.profiler_cpu_ns >= 0) slice.run_queue_wait_ns = p.RunQueueWaitNs(begin, end);
  // Its evidence: CPU samples of every thread (not of the recording ones
  // alone) and the recording threads' waits read (off-CPU looks on).
  slice.runs_on_recording_threads =
      config.cpu.threads == "all" && config.cpu.off_cpu_hz > 0 && p.RunsOnRecordingThreads();
  for (Span& span : slice.spans) {
    span.begin_ns = clock.ToAggregator(span.begin_ns);
    span.end_ns = clock.ToAggregator(span.end_ns);
  }
  for (Instant& i : slice.instants) i.ts_ns = clock.ToAggregator(i.ts_ns);
  for (CpuSample& c : slice.cpu_samples) c.ts_ns = clock.ToAggregator(c.ts_ns);
  for (OffCpuSample& o : slice.off_cpu) o.ts_ns = clock.ToAggregator(o.ts_ns);
  for (ProcessCpuPoint& q : slice.process_cpu) q.ts_ns = clock.ToAggregator(q.ts_ns);
  for (GpuRecord& g : slice.gpu) {
    g.start_ns = clock.ToAggregator(g.start_ns);
    g.end_ns = clock.ToAggregator(g.end_ns);
  }
  for (Span& span : slice.spans) {
    if (span.begin_ns < s.begin_ns) span.begin_ns = s.begin_ns, span.clipped_begin = true;
    if (span.end_ns > s.end_ns || span.open) span.end_ns = s.end_ns, span.clipped_end = true;
    span.raw_begin_ns = span.begin_ns;
    span.raw_end_ns = span.end_ns;
  }
  return slice;
}

namespace {

// The orders ProcessSlice promises (step_profile.h).
void SortSlice(ProcessSlice* slice) {
  SortRunsGrouped(
      &slice->spans, [](const Span& s) { return s.tid; },
      [](const Span& a, const Span& b) {
        if (a.tid != b.tid) return a.tid < b.tid;
        if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
        return a.end_ns > b.end_ns;  // enclosing first
      });
  SortUnlessStrictlySorted(slice->instants.begin(), slice->instants.end(),
                           [](const Instant& a, const Instant& b) { return a.ts_ns < b.ts_ns; });
  SortUnlessStrictlySorted(slice->gpu.begin(), slice->gpu.end(),
                           [](const GpuRecord& a, const GpuRecord& b) { return a.start_ns < b.start_ns; });
  StableSortUnlessSorted(slice->cpu_samples.begin(), slice->cpu_samples.end(),
                         [](const CpuSample& a, const CpuSample& b) { return a.ts_ns < b.ts_ns; });
  StableSortUnlessSorted(slice->off_cpu.begin(), slice->off_cpu.end(),
                         [](const OffCpuSample& a, const OffCpuSample& b) { return a.ts_ns < b.ts_ns; });
}

}  // namespace

void AnalyzeCutStep(StepProfile* profile, const Config& config, std::vector<ExpectedProcess> not_profiled,
                    bool second_core) {
  if (config.correction.enabled) CorrectStep(profile, config.subtasks, config.correction.scale, second_core);
  for (ProcessSlice& slice : profile->processes) SortSlice(&slice);
  profile->not_profiled = std::move(not_profiled);
  ClassifyStepSamples(profile, AttributionRules(config.attribution));
}

void AnalyzeFullStep(StepProfile* profile) { CheckCausality(profile); }

void AnalyzeStepInto(StepProfile* profile, const Config& config, bool beside) {
  const StepProfile& step = *profile;
  auto analyze = [&step, subtasks = config.subtasks] {
    return std::make_shared<const StepAnalysis>(AnalyzeStep(step, subtasks, /*lanes=*/!step.figures_only));
  };
  if (beside) {
    try {
      profile->analysis.Set(std::async(std::launch::async, analyze).share());
      return;
    } catch (const std::system_error&) {
      // No thread to be had: here, as with one core.
    }
  }
  std::promise<std::shared_ptr<const StepAnalysis>> now;
  try {
    now.set_value(analyze());
  } catch (...) {
    now.set_exception(std::current_exception());  // said where the summary is written
  }
  profile->analysis.Set(now.get_future().share());
}

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

}  // namespace rlscope
