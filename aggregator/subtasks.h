// Sub-task selection (config `subtasks`) and discrete captures (`discrete`),
// as pure functions over a cut step: with a filter, each process keeps what
// overlaps the controller's occurrences (occurrences.h) or its own ranges
// of those names; in discrete mode each occurrence is its own capture.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aggregator/intervals.h"
#include "aggregator/occurrences.h"
#include "aggregator/step_profile.h"

namespace rlscope {

// Keeps the spans and instants of `slice` that overlap `merged` (sorted,
// disjoint), clipping each span to the first and last interval it overlaps.
void RestrictToIntervals(ProcessSlice* slice, const std::vector<Interval>& merged);

// The intervals of this process's own ranges named in `names`.
std::vector<Interval> OwnSubtaskIntervals(const ProcessSlice& slice, const std::vector<std::string>& names);

// Cuts a slice's levels and states (memory, unarmed time) again to [begin,
// end] (aggregator clock), from the timeline it was cut from
// (step_cut.h CutLevelsAndArming): the caller's, which has the timelines.
using LevelCutter = std::function<void(int64_t begin_ns, int64_t end_ns, ProcessSlice* slice)>;

// Applies `subtasks` / `discrete` (above) to a cut step; with neither,
// leaves it whole. Discrete: returns the captures, in time order, for the
// caller to export before the step, each slice's levels cut to its capture
// by `recut`, and leaves the step a summary of them (`captures`, `summary_only`).
std::vector<StepProfile> ApplySubtasks(StepProfile* step, const std::vector<std::string>& subtasks, bool discrete,
                                       const LevelCutter& recut);

}  // namespace rlscope
