// run.json, the run's record in its output directory
// (docs/summary_format.md): written after every change to the run (RunJson,
// from RunInfo) and read back by an aggregator started again on the
// directory, to take the run up where it stopped (ReadResumePoint). The one
// owner of its format, both ways.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/step_profile.h"

namespace rlscope {

// Its name in the output directory.
inline constexpr char kRunJsonFile[] = "run.json";

// What a restarted aggregator takes from the run directory's run.json
// (Aggregator::Resume); written there by every run.json (RunInfo).
struct ResumePoint {
  std::vector<int64_t> steps_written;
  std::vector<int64_t> steps_triggered;  // always on: of steps_written, those a trigger picked
  uint64_t steps_figures_only = 0;
  uint64_t steps_seen = 0;
  int64_t last_step = -1;           // highest step written or skipped
  uint64_t controller_session = 0;  // the run's controller then
  int64_t controller_ns = 0;        // that step's end on the controller's clock
  int resumes = 0;
  RecoveredCounts recovered;  // carried over (run.json `recovered`)
  std::string run_key;        // whose run it is (Aggregator::RunKey)
  std::string run_id;         // run.json run_id ("" from a version before it)
  // Sessions of the selected processes that had neither said goodbye nor
  // been lost: steps wait for them to say hello again (or the grace time).
  std::vector<uint64_t> awaited;
  // The last release point each process was sent (its clock): what its
  // replay holds from before is in written steps.
  std::map<uint64_t, int64_t> released;
};

// run.json's text: the run's processes, steps written and losses so far.
std::string RunJson(const RunInfo& run);

// The resume point in `out_dir`/run.json when an aggregator of the run
// stopped before its end (run.json not final); nullopt when there is none,
// it is final (unless `even_final`: rlscope-ray recover adds to a finished
// run), or it cannot be read (then `*error` says why, else it is left empty).
std::optional<ResumePoint> ReadResumePoint(const std::string& out_dir, std::string* error, bool even_final = false);

}  // namespace rlscope
