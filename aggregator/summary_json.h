// summary.json (one per step or capture) and run.json (the run), as JSON
// text; docs/summary_format.md says what each key means. No I/O: the
// exporter (chrome_trace.h) writes them beside the trace.
#pragma once

#include <string>

#include "aggregator/step_profile.h"

namespace rlscope {

// The step's summary.json content.
std::string StepSummaryJson(const StepProfile& step);
// run.json: the run's processes, steps written and losses so far.
std::string RunJson(const RunInfo& run);

}  // namespace rlscope
