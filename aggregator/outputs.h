// The one factory of the run's files, and the only reader of
// output.formats: one Output per format the aggregator writes, in the order
// a step's files are written (each step's trace files before its
// summary.json; run.json per run):
//   json     trace.json      TraceJsonOutput (chrome_trace.h)
//   pftrace  trace.pftrace   PerfettoOutput (perfetto_trace.h)
//   always   summary.json    SummaryOutput (summary_json.h)
//   always   run.json        RunJsonOutput (run_json.h), whose output_formats
//                            lists the formats as resolved here
//   db       run.duckdb      not the aggregator's: the run database follower
//                            (rlscope_ray/rundb_follow.py) writes it when run.json
//                            lists it
// A new format: its Output, and one line in MakeStepFiles.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aggregator/step_files.h"

namespace rlscope {

// `formats`: output.formats (names checked by the config already);
// `trace_workers`: TraceJsonOutput's.
std::unique_ptr<StepFiles> MakeStepFiles(const std::string& out_dir, const std::vector<std::string>& formats,
                                         int trace_workers);

}  // namespace rlscope
