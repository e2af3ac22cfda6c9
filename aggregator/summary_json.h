// summary.json (one per step or capture), as JSON text;
// docs/summary_format.md says what each key means. No I/O: the exporter
// (outputs.h) writes it beside the trace. run.json is run_json.h's.
#pragma once

#include <string>

#include "aggregator/step_profile.h"

namespace rlscope {

// The step's summary.json content.
std::string StepSummaryJson(const StepProfile& step);

}  // namespace rlscope
