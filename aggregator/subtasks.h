// Sub-task selection (config `subtasks`) and discrete captures (`discrete`),
// as pure functions over a cut step.
//
// A sub-task occurrence is a controller range whose name is in `subtasks`
// (verl's marked_timer names: gen, update_actor, ...); with no list, every
// range directly inside the controller's "step" range (StepChildren). Ranges
// of either kind count: push/pop and start/end (verl's marked_timer uses the
// latter, for its "step" too). With a filter, each
// process keeps what overlaps the controller's occurrences or its own ranges
// of those names; in discrete mode each occurrence is its own capture.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
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

using Intervals = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end)

// The ranges directly inside the controller's range of step `step` (push/pop
// or start/end): the controller's non-step ranges within it, push/pop ones on
// the step's thread and start/end ones on any, that no other of them
// contains. In time order; empty when the step has no range in `controller`.
std::vector<const Span*> StepChildren(const ProcessSlice& controller, int64_t step);

// The controller's occurrences in `step`, in time order.
std::vector<Occurrence> SubtaskOccurrences(const StepProfile& step, const std::vector<std::string>& names);

// Sorted, merged copy of `intervals`.
Intervals MergeIntervals(Intervals intervals);

// Keeps the spans and instants of `slice` that overlap `merged` (sorted,
// disjoint), clipping each span to the first and last interval it overlaps.
void RestrictToIntervals(ProcessSlice* slice, const Intervals& merged);

// The intervals of this process's own ranges named in `names`.
Intervals OwnSubtaskIntervals(const ProcessSlice& slice, const std::vector<std::string>& names);

// Applies `subtasks` / `discrete` (above) to a cut step; with neither,
// leaves it whole. Discrete: returns the captures, in time order, for the
// caller to export before the step, and leaves the step a summary of them
// (`captures`, `summary_only`).
std::vector<StepProfile> ApplySubtasks(StepProfile* step, const std::vector<std::string>& subtasks, bool discrete);

}  // namespace rlscope
