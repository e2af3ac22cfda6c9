// The aggregator's data model: what a cut step and the run hand to the
// analyses (correction, causality, sub-tasks, breakdown) and to exporters.
// Plain values (the per-event records are records.h's); times on the
// aggregator's clock. The analyses fill them and read them; this header and
// what it includes depend on no analysis.
#pragma once

#include <algorithm>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/records.h"
#include "aggregator/sorting.h"
#include "aggregator/process_view.h"
#include "native/event.h"
#include "native/gpu_record.h"

namespace rlscope {

struct StepAnalysis;  // breakdown.h, which fills it

// What one thread paid the profiler in a step, as the overhead correction
// charged it (correction.h): its marks' times (raw, aggregator clock,
// sorted) and the cost summed up to each, picoseconds.
struct ThreadCosts {
  std::vector<int64_t> ts;
  std::vector<int64_t> cum_ps;  // cost of marks [0, i]
  // Paid at or before `t` (strictly before, with `before`).
  int64_t PaidPs(int64_t t, bool before = false) const {
    const auto end = before ? std::lower_bound(ts.begin(), ts.end(), t) : std::upper_bound(ts.begin(), ts.end(), t);
    const size_t n = static_cast<size_t>(end - ts.begin());
    return n == 0 ? 0 : cum_ps[n - 1];
  }
  // PaidPs(t), searched outward from `*hint` (where the last search ended,
  // updated): cheap for a time near the one before.
  int64_t PaidPsNear(int64_t t, size_t* hint) const {
    const size_t n = UpperNear(t, hint);
    return n == 0 ? 0 : cum_ps[n - 1];
  }
  // The index upper_bound(ts, t) gives, searched outward from `*hint` (set
  // to it); lower_bound(ts, t) is UpperNear(t - 1).
  size_t UpperNear(int64_t t, size_t* hint) const {
    const size_t n = UpperBoundNear(ts.size(), t, *hint, [this](size_t i) { return ts[i]; });
    *hint = n;
    return n;
  }
};

// The samples behind a cost measured in place ("step" or "run").
struct MeasuredCost {
  double mean_ns = 0, sd_ns = 0;
  uint64_t samples = 0;
};

// The costs a process's correction used (correction.h CostModel), by cost
// key ("push", ..., "py_nvtx_push").
struct UsedCosts {
  std::map<std::string, double> ns;              // per event, scaled
  std::map<std::string, std::string> sources;    // "step", "run", "calibration", "scaled calibration" or "calibration at step speed"
  std::map<std::string, MeasuredCost> measured;  // behind a "step" or "run" cost
  // The in-place costs over their start-up figures (CostModel::in_place_ratio); 0 none.
  double in_place_ratio = 0;
  // The step's speed against the run's usual one (CostModel::speed_ratio); 0 none.
  double speed_ratio = 0;
};

// Where a cost used came from (UsedCosts::sources spells it).
enum class CostSource : uint8_t { kNone, kCalibration, kScaledCalibration, kStep, kRun, kStepSpeedCalibration };

// The same costs by event kind (EventKind values 1..7) and entry point
// (Caller): a process's correction keeps them every step, so they are
// arrays, copied whole; Spelled() (correction.cc) gives UsedCosts, for
// summary.json, where a step is written in full.
struct CostTable {
  static constexpr int kKinds = 8;
  double own_ns[kKinds] = {};  // the collector's recording, per event, scaled
  CostSource own_source[kKinds] = {};
  MeasuredCost measured[kKinds] = {};       // behind a kStep or kRun own cost
  double caller_ns[kCallers][kKinds] = {};  // the caller side, per event, scaled
  CostSource caller_source[kCallers][kKinds] = {};
  double in_place_ratio = 0;
  double speed_ratio = 0;   // CostModel: the step's speed ratio, 0 none
  double speed_rel_se = 0;  // its standard error over it
  UsedCosts Spelled() const;
};

// The parts of a correction's uncertainty, each one standard deviation (ns):
// `sampling`, the in-place means' sampling error; `calibration`, the
// spread of the start-up calibration's caller-side figures (their rounds'
// median's standard error and what such a figure is off by in the
// program's own loop, calibration.py), over the events charged one; `model`, half the spread
// between the caller side scaled by the in-place ratio and not (the two
// readings taken as one standard deviation either side); `capped`, what
// capping did not remove (the model against the gaps that bound it);
// `threads`, half the CPU the collector's flush thread used in the step
// (ProcessSlice::profiler_cpu_ns), never removed: none of it came out of
// the job where a core was spare, all of it where none was, and the two
// readings are taken as one standard deviation either side. Where every
// process of the step runs on its recording threads
// (ProcessSlice::runs_on_recording_threads: its recent CPU samples on them
// and them on a CPU or waiting for one; the step itself alike), a step is
// their CPU and their run-queue waits, and the flush threads took from it
// through the scheduler at most those waits: per host, each process's part
// is then half its flush thread's CPU times min(1, the host's waits / the
// host's flush CPU). What a flush thread takes through shared caches, a
// sibling hyperthread or the clock's frequency is not stated either way
// (StepCorrection::Totals; Overhead::threads_bounded_by_waits). Otherwise
// the recording threads' run-queue waits (run_queue_wait_ns) do not bound it: measured
// inside one run (bench section accuracy, the Ray workload: an actor's 40k
// events a step, 14-18 ms steps), the selected steps whose corrected time
// came out over 1 ms above their untooled neighbours had waits below that
// excess in 20 of 22 (two runs): a Ray call's delay also runs through
// threads that record nothing, likely its I/O threads'. Where the job is its
// one recording thread (the dense workloads, a core spare), those waits read
// over 10 us in 2-7 of 59 steps (start/end: 31), while half the flush
// thread's CPU was 3-5 % of the step: the bound above.
struct UncertaintyParts {
  int64_t sampling_ns = 0, calibration_ns = 0, model_ns = 0, capped_ns = 0, threads_ns = 0;
  // sqrt of the sum of squares.
  int64_t TotalNs() const;
  // The largest part's name ("sampling", "calibration", "model", "capped", "threads"); "" when all are 0.
  const char* Largest() const;
  // Another process's, part by part: sampling, calibration and capped in
  // quadrature (each process measured its own); model linearly (one choice,
  // made alike in every process, errs alike), and threads linearly too
  // (whether a core was spare is one condition of a node's processes).
  void Add(const UncertaintyParts& other);
};

// What the overhead correction removed from one process in one step
// (correction.h fills it; see there for the model). Times summed over its
// threads.
struct Overhead {
  int64_t total_ns = 0;      // removed in the whole step
  int64_t waits_ns = 0;      // of which waiting on other processes' overhead (wait marks)
  uint64_t events = 0;       // recorded events (not wait marks, not cost or CPU samples)
  uint64_t capped = 0;       // marks charged only the time since the thread's previous one
  int64_t capped_ns = 0;     // what the model would have charged them beyond that (not removed)
  uint64_t cpu_samples = 0;  // CPU samples, charged the sampler's own cost
  int64_t cpu_samples_ns = 0;
  // One standard deviation of the correction: of total_ns (waits not
  // included) and of the flush thread's CPU not removed; its parts in
  // quadrature (UncertaintyParts): what the sampling, the calibration, the
  // caller side's model and capping leave open, and the flush thread's CPU
  // that was not removed (ApplyCorrection, step_correction.cc, adds it).
  int64_t uncertainty_ns = 0;
  UncertaintyParts uncertainty_parts;
  uint64_t calibrated_events = 0;  // events whose kind's cost is the start-up calibration's
  int64_t caller_ns = 0;           // the caller-side (py_*) cost removed
  // Of systematic_ns: the start-up calibration's own spread of the caller
  // sides charged (CostModel::CallerSpreadPs, summed over the events).
  int64_t calibration_spread_ns = 0;
  // Rests on a model, not a measurement: what scaling the caller side
  // changed, plus calibration_spread_ns, plus capped_ns (the model against
  // the gaps that bound it).
  int64_t systematic_ns = 0;
  CostTable costs;
  std::string cost_note;                   // why it may be off ("" none): costs that drifted in the step
  // uncertainty_parts.threads_ns is bounded by its host's run-queue waits
  // (half its flush thread's CPU times min(1, the host's waits / flush CPU)),
  // not half its flush thread's CPU alone (UncertaintyParts, `threads`).
  bool threads_bounded_by_waits = false;
  std::map<int64_t, ThreadCosts> threads;  // by tid

  // What thread `tid` paid in raw [from, to] (its own events and wait marks).
  int64_t RemovedNs(int64_t tid, int64_t from, int64_t to) const {
    auto it = threads.find(tid);
    if (it == threads.end()) return 0;
    return it->second.PaidPs(to) / 1000 - it->second.PaidPs(from - 1) / 1000;
  }
  // The same, all threads.
  int64_t RemovedNs(int64_t from, int64_t to) const {
    int64_t n = 0;
    for (const auto& [tid, costs] : threads) n += RemovedNs(tid, from, to);
    return n;
  }
};

// One process's part of a step.
struct ProcessSlice {
  // Who it is, its names and clock, when the step was cut (a value shared by
  // the step's copies, process_view.h).
  std::shared_ptr<const ProcessView> process;
  std::vector<Span> spans;             // clipped to the step, sorted (tid, begin, -end)
  std::vector<Instant> instants;       // inside the step, sorted by time
  std::vector<GpuRecord> gpu;          // GPU activity of the step (timeline.h CutGpu), by start
  std::vector<CpuSample> cpu_samples;  // CPU samples in the step, by time; categories set by ClassifyStepSamples
  std::vector<OffCpuSample> off_cpu;   // off-CPU samples in the step, by time (cuda_sync set by ClassifyStepSamples)
  std::vector<ProcessCpuPoint> process_cpu;  // the process's CPU time, by time, one point either side of the step
  // Memory levels (ProcessTimeline::CutMemory; aggregator clock): resident
  // bytes, and GPU memory allocated per device; each begins with the level
  // at the step's begin when one was known.
  std::vector<MemoryPoint> rss;
  std::map<uint32_t, std::vector<MemoryPoint>> gpu_allocated;
  bool late = false;  // had not flushed past the step end in time
  // Whether its clock could place its events in the step (clocks.h):
  // kNone or kTooWide when the grace ran out first (reason clock_unaligned).
  ClockFitness clock_fitness = ClockFitness::kGood;
  bool lost = false;  // late and gone without a goodbye (ProcessTimeline::lost)
  // How much of the step it did not record (ProcessTimeline::UnarmedNs; -1
  // unknown): a worker whose window reached it after the step began.
  int64_t unarmed_ns = -1;
  // Overhead correction's inputs (step_correction.h), cut with the step
  // when correction is on and consumed by it: every event each thread
  // recorded in the step (aggregator clock, held to the step), the cost
  // samples measured in it (the process's clock, a nanosecond wider either
  // side), and those of the run so far.
  std::map<int64_t, std::vector<CostMark>> cost_marks;
  std::vector<CostSample> cost_samples;
  KindSamples run_cost_samples;
  KindCosts run_usual_costs{};   // the run's usual in-place costs so far (RecordStores::UsualCosts)
  HandlerStats run_cpu_handler;  // the CPU sampler's handler in the run so far
  // Overhead correction (correction.h); none when off. Times above are corrected.
  std::optional<Overhead> overhead;
  // CPU its collector's flush thread used in the step (-1 unknown): not
  // removed; on a node with no spare core it was taken from the job.
  int64_t profiler_cpu_ns = -1;
  // Time its recording threads waited on a run queue in the step (schedstat,
  // off-CPU samples cpu_wait, RecordStores::RunQueueWaitNs; -1 when
  // profiler_cpu_ns is unknown): evidence that the job lacked CPU, a bound
  // on what the profiler's threads took from it only where the step runs
  // on its recording threads (the `threads` part of the uncertainty,
  // UncertaintyParts).
  int64_t run_queue_wait_ns = -1;
  // Of late its work is its recording threads running
  // (RecordStores::RunsOnRecordingThreads): the evidence that bounds the
  // `threads` part by run_queue_wait_ns (UncertaintyParts).
  bool runs_on_recording_threads = false;
};

// A process that should have connected but did not (identity strings as the
// controller reported them: actor_id, class_name, name, node_id, pid).
using ExpectedProcess = std::map<std::string, std::string>;

struct StepProfile {
  int64_t step = 0;
  int64_t begin_ns = 0;  // of the step, or of the capture
  int64_t end_ns = 0;
  std::string capture;                // discrete mode: the sub-task capture ("gen", "gen_2"); "" = the step
  std::vector<std::string> captures;  // on the step's own profile: its discrete captures
  bool summary_only = false;          // the step's profile in discrete mode: no trace of its own
  // Always on (triggers.h): decided after the step ended. figures_only: its
  // figures go to figures.jsonl and nothing to a step directory; trigger:
  // why a step `steps` did not choose is written in full ("" none).
  bool figures_only = false;
  std::string trigger;
  // "complete"; "grace_timeout" or "final" (a process had not caught up:
  // the grace ran out, or the run ended); "clock_unaligned" (all caught up,
  // but a process's clock could not place it: ProcessSlice::clock_fitness).
  std::string reason;
  std::vector<ProcessSlice> processes;
  std::vector<ExpectedProcess> not_profiled;
  // The largest clock error bound the step allows (clocks.h AllowedClockBoundNs).
  int64_t clock_allowed_bound_ns = 100000;
  // It waited for a process's clock before it was cut, with all else in.
  bool clock_held = false;
  // How long after the step began the workers' capture window for it was
  // broadcast (PendingStep::window_late_ns); 0 on time.
  int64_t window_late_ns = 0;
  // Overhead correction: end_ns stays the raw step end; corrected_end_ns is
  // the controller's step end after correction (0 = not corrected).
  bool corrected = false;
  double correction_scale = 1.0;
  int64_t corrected_end_ns = 0;
  // One standard deviation of what was removed: every process's
  // uncertainty (correction.h), combined part by part
  // (UncertaintyParts::Add), its parts in quadrature.
  int64_t correction_uncertainty_ns = 0;
  UncertaintyParts correction_uncertainty_parts;  // every process's, UncertaintyParts::Add
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
  // The breakdown (breakdown.h), computed once the step is cut, maybe on
  // a thread of its own while the trace is exported (AnalyzeStepInto,
  // step_cut.h): Get waits for it. Empty: none.
  class AnalysisSlot {
   public:
    void Set(std::shared_future<std::shared_ptr<const StepAnalysis>> f) { f_ = std::move(f); }
    // The analysis (nullptr: none); rethrows what computing it threw.
    const StepAnalysis* Get() const { return f_.valid() ? f_.get().get() : nullptr; }
    // Returns once nothing computes it any more (whether it succeeded or not).
    void Wait() const noexcept {
      if (f_.valid()) f_.wait();
    }

   private:
    std::shared_future<std::shared_ptr<const StepAnalysis>> f_;
  };
  AnalysisSlot analysis;
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
  std::shared_ptr<const ProcessView> process;  // as it is when the run's record is made
  bool selected = true;                        // profiled under the run's config
  // The last Control.release_ns it was sent (its clock; 0 none): a restarted
  // aggregator leaves out what its replay holds from before (SkipBefore).
  int64_t released_ns = 0;
  // Its hello came through a node's relay (aggregator/relay.h), not straight.
  bool via_relay = false;
  // In the final run.json: the controller's steps (of the first
  // StepScheduler::kSeenKept) during which it recorded for any time, by its
  // arming edges, as a selection ("4, 7-8"; "" none); nullopt where its edges
  // do not tell (a trigger other than the controller's, a resumed run).
  std::optional<std::string> armed_steps;
};

// The run as a whole, for run.json.
// What the aggregator took up from collectors' spool files left on disk at
// their exit (aggregator/spool_takeup.h), over every resume of the run.
struct RecoveredCounts {
  uint64_t files = 0;
  uint64_t processes = 0;         // files with a process's data taken
  uint64_t events = 0;            // events applied from them (duplicates not counted)
  uint64_t unreadable_files = 0;  // left in place, said
  std::string last_error;
};

// A step written with a process's clock estimate that a later one proves
// was off by more than the bound the step stated (clocks.h).
struct ClockRevision {
  int64_t step = 0;
  std::string process;          // its label (process_view.h ProcessLabel)
  int64_t off_by_ns = 0;        // at least this far off, in the step's middle
  int64_t stated_bound_ns = 0;  // the bound the step stated
};

struct RunInfo {
  std::string config_yaml;                // the run's config (config.h "One config per run")
  std::string config_source;              // where its run keys came from: controller, aggregator, defaults
  std::vector<std::string> config_notes;  // disagreements between sources, as logged
  std::vector<ProcessInfo> processes;
  std::vector<int64_t> steps_written;
  // Always on: of steps_written, those a trigger picked; and how many steps
  // were written as figures only (figures.jsonl).
  std::vector<int64_t> steps_triggered;
  uint64_t steps_figures_only = 0;
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
  // Clocks (clocks.h): probe bursts asked for while a step waited for a
  // process's clock; steps written clock_unaligned; revisions (the first
  // Clocks::kRevisionsKept, and how many in all).
  uint64_t probe_requests = 0;
  uint64_t steps_clock_unaligned = 0;
  std::vector<ClockRevision> clock_revisions;
  uint64_t clock_revisions_total = 0;
  // Where a restarted aggregator takes the run up (Aggregator::Resume): the
  // highest step written or skipped, and the controller's session and clock
  // at that step's end. last_step -1: none yet.
  int64_t last_step = -1;
  uint64_t controller_session = 0;
  int64_t controller_resume_ns = 0;
  int resumes = 0;  // times this run directory was taken up again
  RecoveredCounts recovered;
  // Which run this is: a digest of the run's secret (RunKey), "" without
  // one. An aggregator takes a directory up only for the same run.
  std::string run_key;
  // The run's identity, with or without a secret: made when the run
  // starts, kept by an aggregator that takes it up. What else the run's
  // directory holds (run.duckdb, rlscope_ray.rundb) belongs to this id.
  std::string run_id;
  // The output formats this run's files are written in (output.formats as
  // the aggregator resolved it; "db" is the follower's to write).
  std::vector<std::string> output_formats;
  bool final = false;
};

}  // namespace rlscope
