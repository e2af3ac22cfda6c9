// The aggregator's core: collectors' messages in, one profile per step out.
//
// Pure and single-threaded: the daemon (daemon_main.cc) owns the sockets and
// calls OnFrame/Tick/Finish from one thread; tests drive it directly with
// decoded messages and a fake clock (`now_ns` arguments).
//
// A thin root over units that each own one concern, sharing one context
// (context.h): admission (admission.h: the secret, connections, refused and
// replayed frames), the run's config (run_config.h), scheduling
// (step_scheduler.h: steps, windows, barriers, when a step is ready), release
// and resume (release.h). It keeps the processes, dispatches each message
// to one handler, cuts every ready step (step_cut.h), hands it to the
// exporter and keeps run.json (run_json.h) up to date. Steps not selected by
// `steps:` are skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/admission.h"
#include "aggregator/clocks.h"
#include "aggregator/context.h"
#include "aggregator/expected.h"
#include "aggregator/exporter.h"
#include "aggregator/release.h"
#include "aggregator/run_config.h"
#include "aggregator/run_json.h"
#include "aggregator/step_scheduler.h"
#include "aggregator/timeline.h"
#include "aggregator/triggers.h"
#include "native/config.h"
#include "native/wire.h"

namespace rlscope {

class Aggregator {
 public:
  // `config`: the aggregator's own (--config, else defaults); `config_file`
  // names the file and `config_keys` the keys it set. The run's config
  // (config.h) takes the run keys the controller's own config sets over it.
  Aggregator(Config config, StepExporter* exporter, std::string config_file = "", KeySet config_keys = {});

  // Every hello must carry `secret` (Hello.secret), compared in constant
  // time; "" (the default) takes any hello. Call before the first frame.
  void SetSecret(std::string secret) { admission_.SetSecret(std::move(secret)); }
  // Identifies the run in run.json (resume.run_key): RunKey(secret)
  // (native/spool_file.h). The secret itself is checked in every hello.
  const std::string& run_key() const { return admission_.run_key(); }
  // The run's id (run.json run_id): new for each run, a resumed run's own.
  const std::string& run_id() const { return run_id_; }
  // Keeps a resumed run's key without its secret (rlscope-ray recover).
  void KeepRunKey(const std::string& key) { admission_.KeepRunKey(key); }
  // Takes the run up where run.json says a previous aggregator left it: the
  // steps it wrote stay listed, and the controller's steps up to its last
  // are not numbered or written again when its collector replays them.
  void Resume(const ResumePoint& point);
  // Decodes and applies one frame from connection `peer` (the ROUTER
  // routing id); a bad frame is counted, not fatal. A hello is taken with
  // the run's secret (SetSecret), and binds its session to `peer`; any
  // other frame only from the peer its session's hello came on (refused and
  // counted otherwise: a stranger cannot write as, or end, a collector it
  // learnt the session of). A refused frame from a collector that this
  // aggregator does not know yet (it restarted) gets Control.hello back.
  // Returns the sender's session (0: a bad or refused frame), so the daemon
  // can route Outgoing messages back to it.
  uint64_t OnFrame(const char* data, size_t size, int64_t now_ns, const std::string& peer = "");
  // A frame as received, from connection `peer`.
  struct Received {
    std::string_view bytes;
    std::string peer;
  };
  // The order in which to take frames received together (a permutation of
  // their indices): the messages of `controller_peer`, and of each peer
  // whose first message among them is a hello, first; then the others;
  // each peer's messages in the order read. `bytes[i]`, `peers[i]`: frame
  // i's; `ends[i]`: frame i is its message's last. On a host past its CPU,
  // with hundreds of collectors queued, the controller's step edges and a
  // newcomer's registration do not wait behind everyone's batches.
  static std::vector<size_t> PriorityOrder(const std::vector<std::string>& bytes, const std::vector<std::string>& peers,
                                           const std::vector<bool>& ends, const std::string& controller_peer);
  // Frames received together, in order, each taken as OnFrame is at
  // now() (read as it is taken), then `after(i, session)` called (the
  // daemon routes and answers there, as after each OnFrame). With a second
  // core and at least kDecodeAheadFrom bytes, frame i + 1 on is decoded on
  // a thread of its own while frame i is taken (decode_ahead.h): the same
  // outcome, sooner.
  static constexpr size_t kDecodeAheadFrom = 1 << 20;
  void OnFrames(const std::vector<Received>& frames, const std::function<int64_t()>& now,
                const std::function<void(size_t, uint64_t)>& after);
  void OnMessage(const wire::Message& message, int64_t now_ns);
  // Exports every step that is ready at `now_ns`.
  void Tick(int64_t now_ns);
  // When Tick must run again, unless a message comes first (the daemon's
  // loop sleeps until then): the next figures-only release or run.json
  // rewrite, the pending step's grace, sooner while it waits for clocks
  // (bursts asked every Clocks::kProbeRequestEveryNs), and at most
  // kLongestSleepNs from `now_ns`: a process's silence
  // (AggregatorStats::kSilentAfterNs) and an expected process's grace are
  // seen within that. Never before `now_ns`.
  int64_t TickDueNs(int64_t now_ns) const;
  static constexpr int64_t kLongestSleepNs = 250'000'000;
  static constexpr int64_t kClockWaitSleepNs = 50'000'000;
  // Whether a second core may be used: a step's breakdown computed beside
  // its trace's export, frames decoded ahead (OnFrames). Default: when this
  // process may run on more than one core. The same outcome either way
  // (golden_test).
  void set_second_core(bool use) { second_core_ = use; }
  // Control messages for collectors (capture windows, flush barriers) since
  // the last call, in order.
  std::vector<Outgoing> TakeOutgoing();
  // Exports every closed step (waiting no longer), then finalises the run:
  // run.json says final, unless a write failed (then it stays resumable),
  // and tells every collector the run is over (wire::kRunOver). Frames
  // after it are only answered: a goodbye is acknowledged.
  void Finish(int64_t now_ns);

  const AggregatorStats& stats() const { return context_.stats; }
  // A spool file taken up (spool_takeup.h): its counts, into run.json's
  // `recovered`, and a line for the log.
  void CountRecovered(const RecoveredCounts& counts, const std::string& path);
  // A spool file that cannot be read: counted and said the first time;
  // true when it was new.
  bool NoteUnreadableSpool(const std::string& path, const std::string& error);
  const ProcessMap& processes() const { return processes_; }
  // The run's controller's session, 0 before one connected.
  uint64_t controller_session() const { return controller_session_; }
  // True once the controller said bye and every step it closed was exported:
  // nothing more can be written (workers may still be running).
  bool RunComplete() const { return ControllerDone() && scheduler_.idle(); }
  // Expected processes (from the controller) with no connected collector.
  std::vector<ExpectedProcess> NotProfiled() const;
  // True once the controller said bye (its steps are all known).
  bool ControllerDone() const;
  std::vector<int64_t> steps_written() const { return steps_written_; }
  // The run's config as it stands (its run keys are the run's once the
  // controller said hello), and one line per decision about it since the
  // last call (a disagreement between sources), for the daemon's log.
  const Config& config() const { return run_config_.config(); }
  std::vector<std::string> TakeNotes() { return context_.notes.Take(); }
  // Where collectors send clock probes besides their connection
  // (probe_server.h; Control.probe_port, probe_host, probe_key): told to
  // each in the answer to its hello. Port 0: nowhere else.
  void SetProbePath(std::string host, uint16_t port, uint64_t key) {
    probe_host_ = std::move(host), probe_port_ = port, probe_key_ = key;
  }
  // run.json as it stands (not final).
  RunInfo RunInfoNow() const { return MakeRunInfo(false); }

 private:
  // 16 hex digits from std::random_device.
  static std::string NewRunId();
  // One handler per collector message type (OnMessage dispatches).
  void OnHello(const wire::Hello& hello, int64_t now_ns);
  void OnBatch(const wire::Batch& batch, int64_t now_ns);
  void OnProbe(const wire::Probe& probe, int64_t now_ns);
  void OnExpected(const wire::Expected& expected, int64_t now_ns);
  void OnBye(const wire::Bye& bye);
  void AckBye(uint64_t session);
  // One controller per run: the first to claim the role takes it (a
  // resumed run's: the session that held it), and the run's config is
  // decided then; a later claimant (a Ray actor created by the controller
  // actor inherits its runtime_env, role included) is told it is a worker
  // (`where`.role).
  void ClaimController(const wire::Hello& hello, ProcessTimeline* p, wire::Control* where);
  // The batch's process; one filed under a placeholder identity when its
  // hello has not arrived (ProcessTimeline::Identify replaces it).
  ProcessTimeline& SenderOf(const wire::Batch& batch);
  // Whether the run turned clock probes off (clock.probe_interval_ms 0).
  bool probes_off() const { return run_config_.config().clock.probe_interval_ms <= 0; }
  // Counts the batch's events, and those older than the last written step's end.
  void CountEvents(const wire::Batch& batch, const ClockEstimate& clock);
  // OnFrame's, on a frame decoded already.
  uint64_t OnDecoded(const wire::DecodeResult& r, int64_t now_ns, const std::string& peer);
  // The step placed on the aggregator's clock with the controller's clock
  // estimate of now (not of when its edges arrived), after the last one written.
  PendingStep OnControllerClockNow(const PendingStep& pending) const;
  // Cuts, analyses and exports the step if `steps:` selects it (else counts
  // it skipped), then forgets what no later step can hold. False when it
  // could not be written (write_errors): nothing is released, and no later
  // step may be written or released either (the run stops there, resumable).
  // Its figures.jsonl line goes out at the next Release (StepFiles): a
  // failure to write it shows there.
  bool Emit(const PendingStep& step, bool forced, int64_t now_ns);
  // Every selected process cut to the step (late ones marked, those silent
  // too long marked lost, once), analysed.
  StepProfile CutStep(const PendingStep& step, bool forced, int64_t now_ns);
  // A step written: its processes whose clock could not place them in it
  // (it waited the grace out for them, or they are gone) hold no later step
  // until their bound halves (clocks.h).
  void WaiveClocks(const StepProfile& step);
  // After a step was written or skipped: nothing before its end is kept;
  // its release points go into run.json before any collector hears of
  // them. A step written in full releases at once; a skipped or
  // figures-only one (most steps of a run) at most every kRunInfoEveryNs,
  // the latest such step's points covering those before it (its run.json
  // rewrite and each collector's wake-up on a release were most of a short
  // step's fixed cost). False when run.json could not be written.
  bool StepDone(const PendingStep& step, bool written_in_full, int64_t now_ns);
  // What StepDone held back, now: the steps' figures.jsonl lines and
  // run.json (ExportRun), then the Controls. False when either could not be
  // written.
  bool Release(int64_t now_ns);
  bool release_due_ = false;                   // a step done since the last Release
  std::map<uint64_t, Outgoing> releases_due_;  // session -> its latest release point, not yet sent
  int64_t released_at_ns_ = 0;                 // when Release last ran
  RunInfo MakeRunInfo(bool final) const;
  // ProcessInfo::armed_steps of `p`, from the steps seen so far.
  std::optional<std::string> ArmedSteps(const ProcessTimeline& p) const;
  // run.json after a hello or the expected list: at once when the last
  // write is kRunInfoEveryNs old, else from Tick once it is (hundreds of
  // collectors saying hello together would each rewrite a file listing
  // them all). Steps written and the run's end write it at once.
  void RunInfoChanged(int64_t now_ns);
  static constexpr int64_t kRunInfoEveryNs = 1'000'000'000;
  bool run_info_due_ = false;        // a change not yet in run.json
  int64_t run_info_written_ns_ = 0;  // when RunInfoChanged last wrote it
  // At the run's end: a run that wrote no step says why in a note (no
  // controller connected; the controller began no step). Never silent.
  void NoteEmptyRun();

  AggregatorContext context_;
  RunConfig run_config_;
  Admission admission_;
  StepScheduler scheduler_;
  ReleaseTracker releases_;
  StepExporter* exporter_;
  ProcessMap processes_;
  Clocks clocks_;  // each process's clock (clocks.h)
  uint64_t steps_clock_unaligned_ = 0;
  uint64_t controller_session_ = 0;  // the first controller to connect
  std::set<uint64_t> demoted_;       // later claimants, told they are workers (Control.role)
  ExpectedList expected_;            // the controller's (wire::Expected)
  std::vector<int64_t> steps_written_;
  std::vector<int64_t> steps_triggered_;  // of them, those always_on's triggers picked (triggers.h)
  StepTriggers triggers_;
  int64_t last_cut_end_ns_ = INT64_MIN;
  RecoveredCounts recovered_;                // spool files taken up (run.json `recovered`)
  bool finished_ = false;                    // Finish ran: frames are only answered (OnFrame)
  std::set<std::string> unreadable_spools_;  // said once each
  bool second_core_ = false;                 // set_second_core
  std::string run_id_;                       // run_id(): NewRunId, or the resumed run's
  std::string probe_host_;                   // SetProbePath
  uint16_t probe_port_ = 0;
  uint64_t probe_key_ = 0;
};

}  // namespace rlscope
