// Processes the controller expected (wire::Expected: Ray actors whose
// runtime_env asks for profiling) that never connected, each with why, as
// far as the aggregator can tell. Pure.
#pragma once

#include <vector>

#include "aggregator/context.h"
#include "aggregator/step_profile.h"

namespace rlscope {

// Those of `expected` no process in `processes` is (by actor id, else by
// pid and node), each with a "reason" unless the reporter gave one.
std::vector<ExpectedProcess> NotProfiled(const std::vector<ExpectedProcess>& expected, const ProcessMap& processes);

}  // namespace rlscope
