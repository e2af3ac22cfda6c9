#include "aggregator/summary_json.h"

#include <algorithm>
#include <cstdio>

#include "aggregator/breakdown.h"
#include "aggregator/lanes.h"
#include "aggregator/json_writer.h"
#include "aggregator/process_json.h"

namespace rlscope {
namespace {

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Who a process index of the step is, as the summary's rows name it.
void WhoKeys(JsonWriter& w, const StepProfile& step, int index, const char* rank_key, const char* process_key) {
  if (index < 0 || index >= static_cast<int>(step.processes.size())) {
    w.Key(rank_key).Null().Key(process_key).Null();
    return;
  }
  const ProcessView& p = *step.processes[index].process;
  w.Key(rank_key).IntOrNull(p.identity().rank);
  w.Key(process_key).String(ProcessLabel(p));
}

// A breakdown row's attribution (attribution.h), null without samples.
void WriteAttribution(JsonWriter& w, const Attribution& a) {
  w.Key("attribution");
  if (a.samples == 0 && a.off_samples == 0) {
    w.Null();
    return;
  }
  w.BeginObject();
  w.Key("cpu_ms").Double(Ms(a.cpu_ns())).Key("samples").Int(a.samples);
  for (size_t c = 0; c < kCpuCategories; ++c) {
    w.Key(std::string(CpuCategoryName(static_cast<CpuCategory>(c))) + "_ms").Double(Ms(a.ns[c]));
  }
  w.Key("gpu_ms").Double(Ms(a.gpu_ns)).Key("idle_ms").Double(Ms(a.idle_ns));
  w.Key("cuda_api_wall_ms").DoubleOrNull(a.cuda_api_wall_ns >= 0, Ms(a.cuda_api_wall_ns));
  w.Key("shares").BeginObject();  // of the job's CPU time (the profiler's left out)
  for (size_t c = 0; c < kCpuCategories; ++c) {
    if (static_cast<CpuCategory>(c) == CpuCategory::kProfiler) continue;
    w.Key(CpuCategoryName(static_cast<CpuCategory>(c))).Double(a.Share(static_cast<CpuCategory>(c)));
  }
  w.EndObject();
  w.Key("error_ms").BeginObject();  // one standard deviation, from sampling
  for (size_t c = 0; c < kCpuCategories; ++c) {
    w.Key(CpuCategoryName(static_cast<CpuCategory>(c))).Double(a.ErrorNs(static_cast<CpuCategory>(c)) / 1e6);
  }
  w.EndObject();
  w.Key("max_sample_ms").Double(Ms(a.max_weight_ns));
  w.Key("threads").Int(a.threads);
  // The sampled CPU time over the process's own (every thread's) CPU time.
  w.Key("process_cpu_ms").DoubleOrNull(a.process_cpu_ns >= 0, Ms(a.process_cpu_ns));
  w.Key("coverage").DoubleOrNull(a.Coverage() >= 0, a.Coverage());
  // The recording threads' time off CPU, by why (summed over threads).
  w.Key("off_cpu_ms").BeginObject();
  for (int r = 0; r < kOffCpuReasons; ++r) w.Key(OffCpuReasonName(r)).Double(Ms(a.off_ns[r]));
  w.EndObject();
  w.Key("off_cpu_looks").Int(a.off_samples);
  w.EndObject();
}

// docs/summary_format.md: breakdown, gpu_utilization, critical_path, stragglers.
void WriteAnalysis(JsonWriter& w, const StepProfile& step, const StepAnalysis& a) {
  w.Key("breakdown").BeginArray();
  for (const BreakdownRow& r : a.rows) {
    const ProcessView& p = *step.processes[r.process].process;
    w.Newline().BeginObject();
    w.Key("subtask").String(r.subtask).Key("occurrences").Int(r.occurrences);
    WhoKeys(w, step, r.process, "rank", "process");
    w.Key("session").String(HexSession(p.hello().session)).Key("role").String(p.identity().role);
    w.Key("window_ms").Double(Ms(r.window_ns));
    w.Key("cpu_only_ms").Double(Ms(r.overlap.cpu_only));
    w.Key("gpu_only_ms").Double(Ms(r.overlap.gpu_only));
    w.Key("cpu_gpu_ms").Double(Ms(r.overlap.cpu_gpu));
    w.Key("idle_ms").Double(Ms(r.overlap.idle));
    w.Key("overhead_ms").Double(Ms(r.overhead_ns));
    WriteAttribution(w, r.attribution);
    w.EndObject();
  }
  w.EndArray();
  w.Key("gpu_utilization").BeginArray();
  for (const GpuUtilization& u : a.gpu) {
    w.Newline().BeginObject();
    WhoKeys(w, step, u.process, "rank", "process");
    w.Key("session").String(HexSession(step.processes[u.process].process->hello().session));
    w.Key("gpu_busy_ms").Double(Ms(u.busy_ns));
    w.Key("gpu_busy_pct").Double(100.0 * u.busy_fraction);
    w.Key("naive_util_pct").Double(100.0 * u.naive_fraction);
    w.Key("sample_ms").Double(Ms(kNaiveSampleNs));
    w.EndObject();
  }
  w.EndArray();
  w.Key("critical_path").BeginObject();
  w.Key("step_ms").Double(Ms(a.step_ns));
  w.Key("controller_ms").Double(Ms(a.controller_ns));
  w.Key("segments_omitted").Int(a.segments_omitted);
  w.Key("segments").BeginArray();
  for (const CriticalSegment& c : a.critical_path) {
    w.Newline().BeginObject();
    w.Key("subtask").String(c.subtask).Key("occurrence").Int(c.occurrence);
    w.Key("begin_ms").Double(Ms(c.begin_ns)).Key("duration_ms").Double(Ms(c.duration_ns));
    WhoKeys(w, step, c.critical, "critical_rank", "critical_process");
    w.Key("critical_ms").Double(Ms(c.critical_ns)).Key("median_ms").Double(Ms(c.median_ns));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Key("stragglers").BeginArray();
  for (const Straggler& s : a.stragglers) {
    w.Newline().BeginObject();
    w.Key("subtask").String(s.subtask).Key("ranks").Int(s.ranks);
    WhoKeys(w, step, s.slowest, "slowest_rank", "slowest_process");
    w.Key("slowest_ms").Double(Ms(s.slowest_ns)).Key("median_ms").Double(Ms(s.median_ns));
    w.Key("fastest_ms").Double(Ms(s.fastest_ns));
    w.Key("ratio").Double(s.median_ns > 0 ? static_cast<double>(s.slowest_ns) / s.median_ns : 0.0);
    w.EndObject();
  }
  w.EndArray();
}

// docs/summary_format.md `timeline`: the lanes of the report's picture
// (lanes.h); each box [begin_ms, duration_ms, name, sub-task index, critical].
void WriteLanes(JsonWriter& w, const StepProfile& step, const StepLanes& lanes) {
  w.Key("timeline").BeginObject();
  w.Key("subtasks").BeginArray();
  for (const std::string& name : lanes.subtasks) w.String(name);
  w.EndArray();
  w.Key("max_boxes_per_lane").Uint(kMaxLaneBoxes);
  w.Key("lanes").BeginArray();
  for (const Lane& lane : lanes.lanes) {
    const ProcessView& p = *step.processes[static_cast<size_t>(lane.process)].process;
    w.Newline().BeginObject();
    WhoKeys(w, step, lane.process, "rank", "process");
    w.Key("role").String(p.identity().role);
    w.Key("node").String(NodeOf(p));
    w.Key("gpu").Bool(lane.gpu).Key("omitted").Uint(lane.omitted);
    w.Key("boxes").BeginArray();
    for (const LaneBox& b : lane.boxes) {
      w.BeginArray().Double(Ms(b.begin_ns)).Double(Ms(b.duration_ns)).String(b.name).Int(b.subtask);
      w.Int(b.critical ? 1 : 0).EndArray();
    }
    w.EndArray().EndObject();
  }
  w.EndArray().EndObject();
}

// An uncertainty's parts (UncertaintyParts) and the largest one's name.
void WriteUncertaintyParts(JsonWriter& w, const UncertaintyParts& parts) {
  w.Key("uncertainty_parts_ms").BeginObject();
  w.Key("sampling").Double(Ms(parts.sampling_ns));
  w.Key("calibration").Double(Ms(parts.calibration_ns));
  w.Key("model").Double(Ms(parts.model_ns));
  w.Key("capped").Double(Ms(parts.capped_ns));
  w.Key("threads").Double(Ms(parts.threads_ns));
  w.EndObject();
  w.Key("uncertainty_dominated_by").String(parts.Largest());
}

// What the overhead correction removed from the process and the costs it
// used (correction.h).
void WriteOverhead(JsonWriter& w, const ProcessSlice& slice) {
  const Overhead& o = *slice.overhead;
  w.Key("overhead").BeginObject();
  w.Key("events").Uint(o.events);
  w.Key("capped_events").Uint(o.capped);
  w.Key("capped_ms").Double(Ms(o.capped_ns));
  w.Key("subtracted_ms").Double(Ms(o.total_ns));
  w.Key("waits_ms").Double(Ms(o.waits_ns));
  w.Key("cpu_samples").Uint(o.cpu_samples);
  w.Key("cpu_samples_ms").Double(Ms(o.cpu_samples_ns));
  const UsedCosts costs = o.costs.Spelled();
  w.Key("costs_ns").BeginObject();
  for (const auto& [k, ns] : costs.ns) w.Key(k).Double(ns);
  w.EndObject();
  w.Key("cost_sources").BeginObject();  // "step", "run" or "calibration"
  for (const auto& [k, source] : costs.sources) w.Key(k).String(source);
  w.EndObject();
  w.Key("measured_costs").BeginObject();  // the samples behind a "step" or "run" cost
  for (const auto& [k, m] : costs.measured) {
    w.Key(k).BeginObject();
    w.Key("mean_ns").Double(m.mean_ns);
    w.Key("sd_ns").Double(m.sd_ns);
    w.Key("samples").Uint(m.samples);
    w.EndObject();
  }
  w.EndObject();
  w.Key("uncertainty_ms").Double(Ms(o.uncertainty_ns));
  WriteUncertaintyParts(w, o.uncertainty_parts);
  w.Key("calibrated_events").Uint(o.calibrated_events);
  w.Key("caller_side_ms").Double(Ms(o.caller_ns));
  w.Key("in_place_ratio").DoubleOrNull(o.costs.in_place_ratio > 0, o.costs.in_place_ratio);
  w.Key("speed_ratio").DoubleOrNull(o.costs.speed_ratio > 0, o.costs.speed_ratio);
  w.Key("calibration_spread_ms").Double(Ms(o.calibration_spread_ns));
  w.Key("systematic_ms").Double(Ms(o.systematic_ns));
  w.Key("note").String(o.cost_note);
  if (slice.profiler_cpu_ns >= 0) {
    w.Key("profiler_thread_ms").Double(Ms(slice.profiler_cpu_ns));
    w.Key("run_queue_wait_ms").Double(Ms(slice.run_queue_wait_ns));
    // What bounds the `threads` part: the flush thread's CPU, or also the
    // host's run-queue waits where the step runs on its recording threads.
    w.Key("threads_part_of").String(o.threads_bounded_by_waits ? "run_queue_wait" : "profiler_thread");
  }
  w.EndObject();
}

// A level series' figures in MiB: peak, at the step's begin and end, change.
void WriteLevels(JsonWriter& w, const std::vector<MemoryPoint>& points, const char* prefix) {
  auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  int64_t peak = 0;
  for (const MemoryPoint& m : points) peak = std::max(peak, m.bytes);
  const std::string p(prefix);
  w.Key(p + "peak_mb").Double(mb(peak));
  w.Key(p + "begin_mb").Double(mb(points.front().bytes));
  w.Key(p + "end_mb").Double(mb(points.back().bytes));
  w.Key(p + "change_mb").Double(mb(points.back().bytes - points.front().bytes));
}

// processes[].memory: resident memory from its collector's samples and, where
// CUPTI traced allocations, the GPU memory allocated per device; null when
// its collector sent no sample.
void WriteMemory(JsonWriter& w, const ProcessSlice& slice) {
  w.Key("memory");
  if (slice.rss.empty()) {
    w.Null();
    return;
  }
  w.BeginObject();
  WriteLevels(w, slice.rss, "rss_");
  w.Key("samples").Uint(slice.rss.size());
  w.Key("gpu").BeginArray();
  for (const auto& [device, points] : slice.gpu_allocated) {
    if (points.empty()) continue;
    w.BeginObject().Key("device").Uint(device);
    WriteLevels(w, points, "allocated_");
    w.EndObject();
  }
  w.EndArray().EndObject();
}

// One of the step's processes: who, what it had in the step, its clock and overhead.
void WriteProcess(JsonWriter& w, const ProcessSlice& slice) {
  const ProcessView& p = *slice.process;
  w.Newline().BeginObject();
  WriteIdentity(w, p, true);  // a step holds only selected processes
  w.Key("spans").Uint(slice.spans.size());
  w.Key("instants").Uint(slice.instants.size());
  w.Key("gpu_records").Uint(slice.gpu.size());
  w.Key("events_received_total").Uint(p.events_received());
  w.Key("dropped_total").Uint(p.dropped());
  w.Key("unmatched_total").Uint(p.unmatched());
  w.Key("late").Bool(slice.late);
  w.Key("clock_fitness").String(ClockFitnessName(slice.clock_fitness));
  if (slice.unarmed_ns >= 0) {
    w.Key("unarmed_ms").Double(static_cast<double>(slice.unarmed_ns) / 1e6);
  } else {
    w.Key("unarmed_ms").Null();
  }
  w.Key("cpu_samples").Uint(slice.cpu_samples.size());
  w.Key("cpu_frames_unread")
      .Uint(std::count_if(slice.cpu_samples.begin(), slice.cpu_samples.end(),
                          [](const CpuSample& c) { return c.frame_unread; }));
  const auto& labels = p.identity().labels;
  auto it = labels.find("cpu_sampling");
  w.Key("cpu_sampling").String(it != labels.end() ? it->second : "absent: its collector did not say (no CPU sampler)");
  WriteMemory(w, slice);
  WriteClock(w, p);
  if (slice.overhead) WriteOverhead(w, slice);
  w.EndObject();
}

// Labels of the processes that were late, and of those lost (late, and gone
// without a goodbye).
void WriteLateAndLost(JsonWriter& w, const StepProfile& step) {
  w.Key("late_processes").BeginArray();
  for (const ProcessSlice& slice : step.processes) {
    if (slice.late) w.String(ProcessLabel(*slice.process));
  }
  w.EndArray();
  w.Key("lost_processes").BeginArray();
  for (const ProcessSlice& slice : step.processes) {
    if (slice.lost) w.String(ProcessLabel(*slice.process));
  }
  w.EndArray();
}

// A process's unrecorded time below this is not warned of (its arming
// edges and the step's bounds are each a conversion of the clock off).
constexpr int64_t kUnarmedWarnNs = 100000;  // 0.1 ms

// What the capture may have missed: the workers' window sent after the step
// began (they arm when it reaches them; the cut is exact, so what they did
// before is missing, not misplaced).
void WriteCaptureWarnings(JsonWriter& w, const StepProfile& step) {
  w.Key("capture_warnings").BeginArray();
  if (step.window_late_ns > 0) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "the workers' capture window was sent %.3f ms after the step began (the controller's step edge "
                  "reached the aggregator late, or the step before was shorter than the broadcast takes): what "
                  "workers did in that time, or a little more, may be missing",
                  static_cast<double>(step.window_late_ns) / 1e6);
    w.String(text);
  }
  // Each process that did not record 0.1 ms or more of the step (its arming
  // edges): window_late_ns is the aggregator's view; this is the process's own.
  const double step_ns = static_cast<double>(std::max<int64_t>(1, step.end_ns - step.begin_ns));
  for (const ProcessSlice& slice : step.processes) {
    if (slice.unarmed_ns < kUnarmedWarnNs) continue;  // below it: the clocks' rounding, not a gap
    char text[256];
    std::snprintf(text, sizeof(text),
                  "did not record %.3f ms of this step (%.0f %%): its capture window reached it after the step "
                  "began (the step before was shorter than the broadcast took to reach it) or closed early; what "
                  "it ran then is missing",
                  static_cast<double>(slice.unarmed_ns) / 1e6, 100.0 * static_cast<double>(slice.unarmed_ns) / step_ns);
    w.String(ProcessLabel(*slice.process) + ": " + text);
  }
  w.EndArray();
}

// Clock causality (ray_calls.h), and processes whose clock could not place
// them in the step (clocks.h): none yet, or a bound above the step's.
void WriteClockChecks(JsonWriter& w, const StepProfile& step) {
  w.Key("causality").BeginObject();
  w.Key("checked").Int(step.causality.checked);
  w.Key("violations").Int(step.causality.violations);
  w.Key("max_violation_ns").Int(step.causality.max_violation_ns);
  w.EndObject();
  w.Key("clock_allowed_bound_ns").Int(step.clock_allowed_bound_ns);
  w.Key("clock_held").Bool(step.clock_held);
  w.Key("clock_warnings").BeginArray();
  for (const ProcessSlice& slice : step.processes) {
    const ClockEstimate& e = slice.process->clock();
    const std::string who = ProcessLabel(*slice.process) + ": ";
    if (slice.clock_fitness == ClockFitness::kNone) {
      w.String(who + "no clock estimate (no probe burst came back in time, " + std::to_string(e.probes) +
               " probes): its events are placed as it recorded them, unaligned, and may be missing from this step");
    } else if (slice.clock_fitness == ClockFitness::kTooWide) {
      w.String(who + "clock error bound " + std::to_string(e.bound_ns / 1000) + " us exceeds the " +
               std::to_string(step.clock_allowed_bound_ns / 1000) +
               " us this step allows (clock.max_bound_us, clock.max_bound_fraction): its events may be off by up to "
               "that much");
    }
  }
  w.EndArray();
}

// Why one process's correction may be less sure than its uncertainty says.
void WriteCorrectionNotes(JsonWriter& w, const StepProfile& step, const ProcessSlice& slice) {
  const Overhead& o = *slice.overhead;
  if (!o.cost_note.empty()) w.String(ProcessLabel(*slice.process) + ": " + o.cost_note);
  const int64_t step_ns = step.end_ns - step.begin_ns;
  // The flush thread's CPU is not removed (half of it, or of the run-queue
  // waits where those bound it, is the uncertainty's `threads` part): say
  // when it was a real share, and the waits too where they bound it.
  if (step_ns > 0 && slice.profiler_cpu_ns * 20 > step_ns &&
      (!o.threads_bounded_by_waits || slice.run_queue_wait_ns * 20 > step_ns)) {
    char text[400];
    std::snprintf(text, sizeof(text),
                  ": its collector's flush thread used %.1f ms of CPU in the step (%.0f %%), not removed: %s (its "
                  "recording threads waited %.2f ms on a run queue in the step)",
                  slice.profiler_cpu_ns / 1e6, 100.0 * static_cast<double>(slice.profiler_cpu_ns) / step_ns,
                  o.threads_bounded_by_waits ? "up to those waits came out of the job's time, which is those threads"
                                             : "it came out of the job's time where no core was spare",
                  std::max<int64_t>(slice.run_queue_wait_ns, 0) / 1e6);
    w.String(ProcessLabel(*slice.process) + text);
  }
  // The caller side is a model (its start-up figures scaled): say when
  // what rests on it exceeds the sampling error and 1 % of the step.
  if (const int64_t sys = o.systematic_ns;
      sys > o.uncertainty_parts.sampling_ns && step_ns > 0 && sys * 100 > step_ns) {
    char text[400];
    std::snprintf(text, sizeof(text),
                  ": recording cost %.2fx its start-up calibration in this step; the `nvtx` package's "
                  "caller-side costs, never measured in place (%.1f ms removed), would differ by %.1f ms had "
                  "they moved alike or not, by %.1f ms across their start-up calibration's rounds, and capped "
                  "events by %.1f ms: that much of the correction rests on a model",
                  o.costs.in_place_ratio, o.caller_ns / 1e6, (sys - o.calibration_spread_ns - o.capped_ns) / 1e6,
                  o.calibration_spread_ns / 1e6, o.capped_ns / 1e6);
    w.String(ProcessLabel(*slice.process) + text);
  }
  if (const uint64_t n = o.calibrated_events; n > 0) {
    w.String(ProcessLabel(*slice.process) + ": " + std::to_string(n) +
             " events costed by the start-up calibration (too few cost samples of their kind)");
  }
}

// Which of the controller's waits on other processes were linked to the
// work they waited for (correction.h, waits).
void WriteWaits(JsonWriter& w, const StepProfile& step) {
  w.Key("waits").BeginArray();
  for (const StepProfile::WaitLinks& l : step.waits) {
    w.Newline().BeginObject();
    w.Key("subtask");
    if (l.capture.empty())
      w.Null();
    else
      w.String(l.capture);
    w.Key("linked").BeginObject().Key("ray").Int(l.linked_ray).Key("key").Int(l.linked_key).EndObject();
    w.Key("unlinked").BeginObject().Key("ray").Int(l.unlinked_ray).Key("key").Int(l.unlinked_key).EndObject();
    w.Key("removed_ms").Double(Ms(l.removed_ns));
    w.EndObject();
  }
  w.EndArray();
}

// The step's overhead correction: on or off, and when on what it removed,
// how sure it is and why not surer, and the controller's waits.
void WriteCorrection(JsonWriter& w, const StepProfile& step) {
  w.Key("correction").BeginObject();
  w.Key("enabled").Bool(step.corrected);
  w.Key("scale").Double(step.correction_scale);
  if (step.corrected) {
    w.Key("duration_ms").Double(Ms(step.corrected_end_ns - step.begin_ns));
    w.Key("subtracted_ms").Double(Ms(step.end_ns - step.corrected_end_ns));
    w.Key("uncertainty_ms").Double(Ms(step.correction_uncertainty_ns));
    WriteUncertaintyParts(w, step.correction_uncertainty_parts);
    w.Key("systematic_ms").Double(Ms(step.correction_systematic_ns));
    w.Key("notes").BeginArray();
    for (const ProcessSlice& slice : step.processes) {
      if (slice.overhead) WriteCorrectionNotes(w, step, slice);
    }
    for (const StepProfile::WaitLinks& l : step.waits) {
      const int unlinked = l.unlinked_ray + l.unlinked_key;
      if (unlinked == 0) continue;
      const std::string what = std::to_string(unlinked) + (unlinked == 1 ? " result" : " results");
      w.String(l.capture.empty() ? what + " got outside every sub-task: those waits keep the other processes' overhead"
                                 : l.capture + ": " + what +
                                       " waited for with no profiled range of the same key: those waits "
                                       "keep the other processes' overhead");
    }
    w.EndArray();
    WriteWaits(w, step);
  }
  w.EndObject();
}

void WriteTotals(JsonWriter& w, const StepProfile& step) {
  uint64_t spans = 0, instants = 0, dropped = 0;
  for (const ProcessSlice& slice : step.processes) {
    spans += slice.spans.size();
    instants += slice.instants.size();
    dropped += slice.process->dropped();
  }
  w.Key("totals").BeginObject();
  w.Key("processes").Uint(step.processes.size());
  w.Key("spans").Uint(spans);
  w.Key("instants").Uint(instants);
  w.Key("dropped").Uint(dropped);
  w.EndObject();
}

}  // namespace

std::string StepSummaryJson(const StepProfile& step) {
  std::string out;
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("step").Int(step.step);
  w.Key("begin_ns").Int(step.begin_ns);
  w.Key("end_ns").Int(step.end_ns);
  w.Key("duration_ms").Double(Ms(step.end_ns - step.begin_ns));
  w.Key("reason").String(step.reason);
  // Always on: why a step `steps` did not choose was written in full.
  if (!step.trigger.empty()) w.Key("trigger").String(step.trigger);
  if (!step.capture.empty()) w.Key("capture").String(step.capture);
  if (step.summary_only) {
    w.Key("captures").BeginArray();
    for (const auto& c : step.captures) w.String(c);
    w.EndArray();
  }
  w.Key("processes").BeginArray();
  for (const ProcessSlice& slice : step.processes) WriteProcess(w, slice);
  w.EndArray();
  WriteLateAndLost(w, step);
  WriteCaptureWarnings(w, step);
  WriteClockChecks(w, step);
  // Asked to be profiled (by the controller) but never connected, e.g. a Ray
  // node started without the rlscope plugin registered.
  w.Key("not_profiled");
  WriteExpected(w, step.not_profiled);
  WriteCorrection(w, step);
  if (const StepAnalysis* analysis = step.analysis.Get()) {
    WriteAnalysis(w, step, *analysis);
    if (analysis->lanes) WriteLanes(w, step, *analysis->lanes);
  }
  WriteTotals(w, step);
  w.EndObject();
  out.push_back('\n');
  return out;
}

}  // namespace rlscope
