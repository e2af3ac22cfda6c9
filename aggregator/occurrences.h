// The sub-task rule every analysis follows (the correction's waits, the
// breakdown's windows, sub-task selection): which of the controller's
// ranges are a step's sub-task occurrences. Pure, over a cut step.
//
// A sub-task occurrence is a controller range whose name is in `subtasks`
// (verl's marked_timer names: gen, update_actor, ...); with no list, every
// range directly inside the controller's "step" range (StepChildren). Ranges
// of either kind count: push/pop and start/end (verl's marked_timer uses the
// latter, for its "step" too).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/step_profile.h"

namespace rlscope {

struct Occurrence {
  std::string name;     // the sub-task
  std::string capture;  // its capture name: name, then name_2, name_3... within a step
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t end_tid = 0;  // the controller thread that closed it
};

// The ranges directly inside the controller's range of step `step` (push/pop
// or start/end): the controller's non-step ranges within it, push/pop ones on
// the step's thread and start/end ones on any, that no other of them
// contains. In time order; empty when the step has no range in `controller`.
std::vector<const Span*> StepChildren(const ProcessSlice& controller, int64_t step);

// The controller's occurrences in `step`, in time order, each with its
// capture name.
std::vector<Occurrence> SubtaskOccurrences(const StepProfile& step, const std::vector<std::string>& names);

// Whether the string `name` of `p` is one of `names`.
bool NameIn(const ProcessView& p, uint32_t name, const std::vector<std::string>& names);

}  // namespace rlscope
