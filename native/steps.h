// Steps: how a controller's "step" ranges are numbered and when a capture
// window is open. One rule for both sides: the controller's collector arms
// itself with it (collector.cc), the aggregator numbers the steps it cuts
// (timeline.cc) and opens workers' windows (aggregator.cc) with it.
#pragma once

#include <cstdint>

#include "native/config.h"

namespace rlscope::steps {

// The number of a step range that opens now: the payload of a push/pop range
// when it carries a non-negative one (rlscope_ray.step(n), nvtx payloads),
// else one more than the step before (`next_auto`: 1 for the first). A
// start/end range's value is its id, never a number: pass has_payload=false.
inline int64_t Number(bool has_payload, uint64_t payload, int64_t next_auto) {
  const int64_t n = static_cast<int64_t>(payload);
  return has_payload && n >= 0 ? n : next_auto;
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
