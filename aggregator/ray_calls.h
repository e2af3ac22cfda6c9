// Ray calls across processes, as the controller's marks record them
// (session.py _install_call_marks): "ray.submit" just before a call,
// "ray.task" naming its task right after (same thread), "ray.got" once its
// result is in. A worker's method range carries the same key as payload
// (ray_worker.py). Pure functions over a cut step.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "aggregator/step_profile.h"

namespace rlscope {

// The controller's "ray.submit" marks, each named by the "ray.task" mark
// that follows it on its thread: a call's key -> when and on which thread
// the controller submitted it.
std::map<uint64_t, std::pair<int64_t, int64_t>> RaySubmits(const ProcessSlice& controller);

// The controller's "ray.got" marks: a call's key -> when the controller got
// its result.
std::map<uint64_t, int64_t> RayGot(const ProcessSlice& controller);

// The controller's "rlscope.waited" marks (rlscope_ray.waited): a user's
// key -> when the controller's wait on it was over.
std::map<uint64_t, int64_t> Waited(const ProcessSlice& controller);

// Counts worker executions that the aligned clocks put outside the
// controller's call (StepProfile::Causality): starting before the submit or
// ending after the result was got. Clipped spans are not checked.
void CheckCausality(StepProfile* step);

// What the step's Ray calls prove of each worker's clock, per session: a
// worker's execution of a call began after the controller submitted it and
// ended before the controller got its result, so its offset (aggregator
// minus worker) is at least submit - begin and at most got - end (times as
// recorded, before correction: call it on a step as cut; widened by the
// controller's own bound; none while the controller's clock has no
// estimate). Only workers whose clock is fitted from probes.
// Fed to the clocks after the step is cut (clocks.h), so a step's own calls
// never tighten the estimate its causality check reads.
std::map<uint64_t, std::vector<OffsetBound>> CausalOffsetBounds(const StepProfile& step);

}  // namespace rlscope
