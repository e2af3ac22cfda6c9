// The aggregator's data model: what a cut step and the run hand to the
// analyses (correction, causality, sub-tasks, breakdown) and to exporters.
// Plain data; times on the aggregator's clock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/correction.h"
#include "aggregator/timeline.h"

namespace rlscope {

struct StepAnalysis;  // breakdown.h

// One process's part of a step.
struct ProcessSlice {
  const ProcessTimeline* process = nullptr;
  std::vector<Span> spans;        // clipped to the step, sorted (tid, begin, -end)
  std::vector<Instant> instants;  // inside the step, sorted by time
  std::vector<GpuRecord> gpu;     // GPU activity of the step (timeline.h CutGpu), by start
  std::vector<CpuSample> cpu_samples;  // CPU samples in the step (attribution.h), by time; categories set by AnalyzeStep
  bool late = false;              // had not flushed past the step end in time
  bool lost = false;              // late and gone without a goodbye (ProcessTimeline::lost)
  // Overhead correction (correction.h); null when off. Times above are corrected.
  std::shared_ptr<const Corrector> corrector;
  CostModel costs;
  // Why its correction may be off ("" none): costs that drifted in the step.
  std::string cost_note;
  // CPU its collector's flush thread used in the step (-1 unknown): not
  // removed; on a node with no spare core it was taken from the job.
  int64_t profiler_cpu_ns = -1;
};

// A process that should have connected but did not (identity strings as the
// controller reported them: actor_id, class_name, name, node_id, pid).
using ExpectedProcess = std::map<std::string, std::string>;

struct StepProfile {
  int64_t step = 0;
  int64_t begin_ns = 0;           // of the step, or of the capture
  int64_t end_ns = 0;
  std::string capture;            // discrete mode: the sub-task capture ("gen", "gen_2"); "" = the step
  std::vector<std::string> captures;  // on the step's own profile: its discrete captures
  bool summary_only = false;      // the step's profile in discrete mode: no trace of its own
  std::string reason;  // "complete" or "grace_timeout" or "final"
  std::vector<ProcessSlice> processes;
  std::vector<ExpectedProcess> not_profiled;
  int64_t clock_warn_bound_ns = 100000;  // config clock.warn_bound_us
  // Overhead correction: end_ns stays the raw step end; corrected_end_ns is
  // the controller's step end after correction (0 = not corrected).
  bool corrected = false;
  double correction_scale = 1.0;
  int64_t corrected_end_ns = 0;
  // One standard deviation of what was removed, from the sampling error of
  // the measured costs of every process (correction.h), combined.
  int64_t correction_uncertainty_ns = 0;
  // Corrector::systematic_ns of every process, summed (they err alike).
  int64_t correction_systematic_ns = 0;
  // The controller's waits on other processes, per sub-task window that had
  // any (correction.h, waits): results it got, by how they were linked (a
  // Ray call's key, "ray"; a user's rlscope_ray.waited key, "key"), linked
  // when a profiled process's range in the step carries the key, and the
  // wait removed from the window.
  struct WaitLinks {
    std::string capture;  // the sub-task occurrence; "" outside every sub-task (not corrected)
    int linked_ray = 0, linked_key = 0;
    int unlinked_ray = 0, unlinked_key = 0;
    int64_t removed_ns = 0;
  };
  std::vector<WaitLinks> waits;
  std::shared_ptr<const StepAnalysis> analysis;  // breakdown.h; null = none
  // Clock causality (Ray): worker executions of the controller's calls that
  // start before the call was submitted or end after its result was got.
  struct Causality {
    int64_t checked = 0;
    int64_t violations = 0;
    int64_t max_violation_ns = 0;
  } causality;
};

struct ProcessInfo {
  uint64_t session = 0;
  const ProcessTimeline* process = nullptr;
  bool selected = true;  // profiled under the run's config
  // The last Control.release_ns it was sent (its clock; 0 none): a restarted
  // aggregator leaves out what its replay holds from before (SkipBefore).
  int64_t released_ns = 0;
  // Its hello came through a node's relay (aggregator/relay.h), not straight.
  bool via_relay = false;
};

// The run as a whole, for run.json.
struct RunInfo {
  std::string config_yaml;     // the run's config (config.h "One config per run")
  std::string config_source;   // where its run keys came from: controller, aggregator, defaults
  std::vector<std::string> config_notes;  // disagreements between sources, as logged
  std::vector<ProcessInfo> processes;
  std::vector<int64_t> steps_written;
  std::vector<ExpectedProcess> expected;
  std::vector<ExpectedProcess> not_profiled;
  uint64_t steps_seen = 0;
  uint64_t decode_errors = 0;
  uint64_t late_events = 0;  // arrived after the step they belong to was written
  std::string last_decode_error;
  // Frames not taken (Aggregator::OnFrame): from a connection that had not
  // said hello with the run's secret; hellos among them that lacked it.
  uint64_t refused_frames = 0;
  uint64_t refused_hellos = 0;
  std::string last_refused;
  // Replayed frames already applied (a collector's spool after a reconnect).
  uint64_t duplicate_frames = 0;
  // Where a restarted aggregator takes the run up (Aggregator::Resume): the
  // highest step written or skipped, and the controller's session and clock
  // at that step's end. last_step -1: none yet.
  int64_t last_step = -1;
  uint64_t controller_session = 0;
  int64_t controller_resume_ns = 0;
  int resumes = 0;  // times this run directory was taken up again
  // Which run this is: a digest of the run's secret (RunKey), "" without
  // one. An aggregator takes a directory up only for the same run.
  std::string run_key;
  bool final = false;
};

}  // namespace rlscope
