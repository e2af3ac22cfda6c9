// Chrome Trace Event JSON exporter (loads in Perfetto UI and chrome://tracing).
//
// Writes <out>/step_<N>/trace.json and summary.json per step, and
// <out>/run.json for the run (summary_json.h); each file is written to a
// temporary name and renamed, so a reader never sees half a file.
//
// Tracks: one process per collector, labelled "host / name (role, rank R) /
// pid P", controller first then by rank; one thread track per recording
// thread; push/pop ranges as "X" slices; start/end ranges as async "b"/"e"
// pairs (id = range id) since they may end on another thread; marks as "i".
// Directories are made 0700 and files 0600: a profile (names, timings, the
// run's identities) is its user's only. A write that fails leaves no
// temporary file and says why (last_error).
#pragma once

#include <map>
#include <string>

#include "aggregator/exporter.h"

namespace rlscope {

class ChromeTraceExporter : public StepExporter {
 public:
  explicit ChromeTraceExporter(std::string out_dir);
  bool ExportStep(const StepProfile& step) noexcept override;
  bool ExportRun(const RunInfo& run) noexcept override;

  const std::string& last_error() const { return last_error_; }

 private:
  int64_t TracePid(uint64_t session, int64_t pid);
  bool WriteFile(const std::string& path, const std::string& content) noexcept;

  std::string out_dir_;
  std::map<uint64_t, int64_t> trace_pids_;  // session -> pid in the trace (unique)
  std::string last_error_;
};

// Serialises a step as Chrome trace JSON (exposed for tests and benchmarks).
std::string StepTraceJson(const StepProfile& step,
                          const std::map<uint64_t, int64_t>& trace_pids);

}  // namespace rlscope
