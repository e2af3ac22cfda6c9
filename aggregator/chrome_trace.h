// The step files exporter: per written step <out>/step_<N>/summary.json
// (summary_json.h) and the trace in the formats the config's
// output.formats names: trace.json (Chrome Trace Event JSON, which the
// Perfetto UI and chrome://tracing load) for "json", trace.pftrace
// (perfetto_trace.h) for "pftrace"; and <out>/run.json for the run
// (run_json.h). What the trace holds is step_trace.h's; here it is only
// encoded and written. Each file is written to a temporary name and
// renamed, so a reader never sees half a file.
//
// Directories are made 0700 and files 0600: a profile (names, timings, the
// run's identities) is its user's only. A write that fails leaves no
// temporary file and says why (last_error).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "aggregator/exporter.h"

namespace rlscope {

// Threads that encode a step's trace.json: one by default (on two cores a
// second one gained nothing measurable in bench/aggregator_bench, and the
// profiled job wants its cores); the daemon's --trace-workers N asks for up
// to kMaxTraceWorkers.
inline constexpr int kMaxTraceWorkers = 4;
inline constexpr int kDefaultTraceWorkers = 1;

class ChromeTraceExporter : public StepExporter {
 public:
  // `formats`: Config::Output::formats ("db" is not the exporter's).
  // `workers`: threads that encode trace.json, the calling one included
  // (1: all of it on the calling thread); the file is the same either way.
  explicit ChromeTraceExporter(std::string out_dir, std::vector<std::string> formats = {"json"},
                               int workers = kDefaultTraceWorkers);
  bool ExportStep(const StepProfile& step) noexcept override;
  bool ExportRun(const RunInfo& run) noexcept override;

  const std::string& last_error() const { return last_error_; }

 private:
  int64_t TracePid(uint64_t session, int64_t pid);
  bool WriteFile(const std::string& path, const std::string& content) noexcept;
  // trace.json, encoded and written a chunk at a time.
  bool WriteTraceJson(const std::string& path, const StepProfile& step);

  std::string out_dir_;
  bool json_ = true, pftrace_ = false;
  int workers_ = 1;
  std::map<uint64_t, int64_t> trace_pids_;  // session -> pid in the trace (unique)
  std::string last_error_;
};

// Serialises a step as Chrome trace JSON (exposed for tests and benchmarks),
// on `workers` threads (ChromeTraceExporter).
std::string StepTraceJson(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids, int workers = 1);

}  // namespace rlscope
