// Steps: how a controller's "step" ranges are numbered and when a capture
// window is open. One rule for both sides: the controller's collector arms
// itself with it (collector/arming.cc), the aggregator numbers the steps it cuts
// (timeline.cc) and opens workers' windows (aggregator.cc) with it.
#pragma once

#include <cstdint>

#include "native/config.h"

namespace rlscope::steps {

// The number of a step range that opens now: its payload when it carries a
// non-negative one, else `next`. The controller's collector passes the number
// set for the next step (Collector::SetNextStep: verl's global_steps) or one
// more than the step before (1 for the first). The aggregator sees neither
// that setting nor a start/end range's payload (its value is the range id):
// it applies the same rule with has_payload=false for start/end ranges and
// `next` = one more than the step before, and the collector announces the
// number (a names::kStepNumber mark just before the range) whenever the two
// differ.
inline int64_t Number(bool has_payload, uint64_t payload, int64_t next) {
  const int64_t n = static_cast<int64_t>(payload);
  return has_payload && n >= 0 ? n : next;
}

// The steps whose events are recorded: every step when always_on is on
// (each gets its figures; `steps` are written in full, and those a trigger
// picks after they ended), else those `steps` selects. Every arming rule
// below takes this selection.
inline const IntSelection& RecordedSteps(const Config& config) {
  static const IntSelection kAll{};
  return config.always_on.enabled ? kAll : config.steps;
}

// Whether a recorded step is chosen up front: written in full whatever the
// triggers say, at the CPU sampler's full rate (cpu.sampling_hz, not
// always_on.sampling_hz). Always on, `steps` lists them, and its default,
// all, chooses none (every step in full is what always_on is not). For a
// worker told of a window for `step`, the one the window opens for and the
// step after it (WorkersArmedDuring).
inline bool ChosenUpFront(const Config& config, int64_t step) {
  return !config.always_on.enabled || (!config.steps.all && config.steps.Contains(step));
}

// The controller records a step's events when the step is selected: from the
// end of the step before it (before step 1: from the start) to its own end.
inline bool ControllerArmedBefore(const IntSelection& steps, int64_t next_step) { return steps.Contains(next_step); }
inline bool ControllerArmedDuring(const IntSelection& steps, int64_t step) { return steps.Contains(step); }

// Workers are told by broadcast, which takes a millisecond or more, and a
// controller often starts the next step's first call at once: their window is
// open a step ahead, while a selected step or the one before it runs, and
// from the end of the step before a selected one. The cut is exact anyway.
inline bool WorkersArmedDuring(const IntSelection& steps, int64_t step) {
  return steps.Contains(step) || steps.Contains(step + 1);
}
inline bool WorkersArmedBefore(const IntSelection& steps, int64_t next_step) { return steps.Contains(next_step); }

}  // namespace rlscope::steps
