// A closed step cut out of a process, and the analyses run over a cut step
// before it is exported (in this order): overhead correction
// (correction.h), event order, CPU sample attribution (attribution.h) and
// the breakdown (breakdown.h); clock causality (ray_calls.h) for a step
// written in full only (summary.json's; AnalyzeFullStep). Sub-task
// selection (subtasks.h) comes after, on the analysed step. Pure (the
// breakdown may run on a thread of its own: AnalyzeStepInto).
#pragma once

#include <vector>

#include "aggregator/records.h"
#include "aggregator/step_profile.h"
#include "aggregator/timeline.h"
#include "native/config.h"

namespace rlscope {

// One process's part of step `s`: cut on the process's own clock, then
// what was cut moved onto the aggregator's (clock_fit.h), where the step's
// bounds are, and clipped to them. Under the run's `config`: with
// correction on, overhead correction's inputs too (ProcessSlice::cost_marks,
// and runs_on_recording_threads where every thread is sampled and the
// recording threads' waits are read). `second_core`: ProcessTimeline::Cut's.
ProcessSlice CutProcess(const ProcessTimeline& p, const StepSpan& s, const Config& config, bool second_core = false);
// The parts of a slice that are levels and states over [begin, end]
// (aggregator clock) rather than events: its unrecorded time and memory
// levels (a discrete capture recuts them to its own interval).
void CutLevelsAndArming(const ProcessTimeline& p, int64_t begin_ns, int64_t end_ns, ProcessSlice* slice);

// The analyses above but the breakdown, under the run's `config`;
// `not_profiled`: the expected processes missing now (expected.h);
// `second_core`: the correction may use one (CorrectStep).
void AnalyzeCutStep(StepProfile* profile, const Config& config, std::vector<ExpectedProcess> not_profiled,
                    bool second_core = false);
// What only a step written in full shows (its summary.json): the clock
// causality check (ray_calls.h). After AnalyzeCutStep, before sub-task
// selection (the captures carry it). A figures-only step skips it: 2 % of
// the aggregator's CPU always on, for a figure no output of it holds.
void AnalyzeFullStep(StepProfile* profile);
// The breakdown of the analysed step (breakdown.h), into profile->analysis,
// on the whole step: before sub-task selection drops what lies outside.
// With `beside`, on a thread of its own: it only reads the profile, so the
// trace may be exported meanwhile, but nothing may change, move or destroy
// the profile before profile->analysis.Wait() returns. Otherwise now. A
// figures-only step's analysis has no lanes (only summary.json draws them).
void AnalyzeStepInto(StepProfile* profile, const Config& config, bool beside);

// The cores this process may run on (its CPU affinity).
int AvailableCores();

}  // namespace rlscope
