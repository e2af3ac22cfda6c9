// The aggregator's core: collectors' messages in, one profile per step out.
//
// Pure and single-threaded: the daemon (daemon_main.cc) owns the sockets and
// calls OnMessage/Tick/Finish from one thread; tests drive it directly with
// decoded messages and a fake clock (`now_ns` arguments).
//
// Steps: a controller's spans named "step" (NVTX push/pop or start/end, or
// rlscope_ray.step(n) which carries n) delimit them, numbered by payload or
// 1, 2, 3 in order. A step is cut and exported once every connected collector
// has flushed past its end (watermark) or said bye, or once
// flush.step_grace_ms has passed since the step closed; the latter lists the
// late processes in the profile. Steps not selected by `steps:` are skipped.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/exporter.h"
#include "aggregator/timeline.h"
#include "native/config.h"
#include "native/wire.h"

namespace rlscope {

// A message the daemon must send: to one collector, or to all (session 0);
// or, `peer` set, to that connection (ROUTER routing id), known or not.
struct Outgoing {
  uint64_t session = 0;
  std::string bytes;
  std::string peer;
};

// What a restarted aggregator takes from the run directory's run.json
// (Aggregator::Resume); written there by every run.json (RunInfo).
struct ResumePoint {
  std::vector<int64_t> steps_written;
  uint64_t steps_seen = 0;
  int64_t last_step = -1;           // highest step written or skipped
  uint64_t controller_session = 0;  // the run's controller then
  int64_t controller_ns = 0;        // that step's end on the controller's clock
  int resumes = 0;
  std::string run_key;              // whose run it is (Aggregator::RunKey)
  // Sessions of the selected processes that had neither said goodbye nor
  // been lost: steps wait for them to say hello again (or the grace time).
  std::vector<uint64_t> awaited;
  // The last release point each process was sent (its clock): what its
  // replay holds from before is in written steps.
  std::map<uint64_t, int64_t> released;
};

struct AggregatorStats {
  uint64_t messages = 0;
  uint64_t decode_errors = 0;
  uint64_t events = 0;
  uint64_t steps_seen = 0;
  uint64_t steps_written = 0;
  uint64_t steps_skipped = 0;   // closed but not selected by `steps:`
  uint64_t late_batches = 0;    // thread blocks that arrived for an already-written step
  uint64_t late_events = 0;     // their events older than the last written step's end
  // A collector silent this long (no heartbeat: they come every
  // flush.interval_ms) is taken as gone and holds no step back.
  static constexpr int64_t kSilentAfterNs = 2000000000;
  std::string last_decode_error;
  // Frames not taken: from a connection that had not said hello (with the
  // run's secret, when the aggregator has one) for that session. A collector
  // whose aggregator restarted sends some before it is asked to say hello
  // again; it replays them after.
  uint64_t refused_frames = 0;
  uint64_t refused_hellos = 0;  // of which hellos without the run's secret
  std::string last_refused;
  uint64_t duplicate_frames = 0;  // replayed batches already applied (seq)
  uint64_t write_errors = 0;      // a step or run.json the exporter could not write; the run stops there
};

class Aggregator {
 public:
  // `config`: the aggregator's own (--config, else defaults); `config_file`
  // names the file and `config_keys` the keys it set. The run's config
  // (config.h) takes the run keys the controller's own config sets over it.
  Aggregator(Config config, StepExporter* exporter, std::string config_file = "", KeySet config_keys = {});

  // Every hello must carry `secret` (Hello.secret), compared in constant
  // time; "" (the default) takes any hello. Call before the first frame.
  void SetSecret(std::string secret);
  // Identifies the run in run.json (resume.run_key): a 64-bit digest of the
  // secret, hex; "" for no secret. An identifier, not a credential (the
  // secret itself is checked in every hello).
  static std::string RunKey(const std::string& secret);
  const std::string& run_key() const { return run_key_; }
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
  void OnMessage(const wire::Message& message, int64_t now_ns);
  // Exports every step that is ready at `now_ns`.
  void Tick(int64_t now_ns);
  // Control messages for collectors (capture windows, flush barriers) since
  // the last call, in order.
  std::vector<Outgoing> TakeOutgoing();
  // Exports every closed step (waiting no longer), then finalises the run:
  // run.json says final, unless a write failed (then it stays resumable).
  void Finish(int64_t now_ns);

  const AggregatorStats& stats() const { return stats_; }
  const std::map<uint64_t, std::unique_ptr<ProcessTimeline>>& processes() const { return processes_; }
  // True once the controller said bye and every step it closed was exported:
  // nothing more can be written (workers may still be running).
  bool RunComplete() const;
  // Expected processes (from the controller) with no connected collector.
  std::vector<ExpectedProcess> NotProfiled() const;
  // True once the controller said bye (its steps are all known).
  bool ControllerDone() const;
  std::vector<int64_t> steps_written() const { return steps_written_; }
  // The run's config as it stands (its run keys are the run's once the
  // controller said hello), and one line per decision about it since the
  // last call (a disagreement between sources), for the daemon's log.
  const Config& config() const { return config_; }
  std::vector<std::string> TakeNotes();
  // run.json as it stands (not final).
  RunInfo RunInfoNow() const { return MakeRunInfo(false); }

 private:
  struct PendingStep {
    StepSpan span;
    int64_t closed_at_ns;  // aggregator time when the step's end arrived
    uint64_t barrier = 0;  // flush barrier token sent at its end (selected steps)
    int64_t controller_end_ns = 0;  // span.end_ns on the controller's own clock, as recorded
  };
  // One handler per collector message type (OnMessage dispatches).
  void OnHello(const wire::Hello& hello, int64_t now_ns);
  void OnBatch(const wire::Batch& batch, int64_t now_ns);
  void OnProbe(const wire::Probe& probe, int64_t now_ns);
  void OnExpected(const wire::Expected& expected);
  void OnBye(const wire::Bye& bye);
  // The controller's first Hello decides the run's config: this aggregator's
  // with the run keys the controller's own config set over it; then every
  // collector is told.
  void DecideRunConfig(const wire::Hello& controller);
  // Whether a process is profiled: by the run's config once it is decided,
  // by the process's own word (Hello.selected) before.
  bool Selected(const ProcessTimeline& p) const;
  // The batch's process; one filed under a placeholder identity when its
  // hello has not arrived (ProcessTimeline::Identify replaces it).
  ProcessTimeline& SenderOf(const wire::Batch& batch);
  // Counts the batch's events, and those older than the last written step's end.
  void CountEvents(const wire::Batch& batch, const ClockFit& clock);
  // Capture windows for workers (native/steps.h): open while a selected step
  // runs and while the step before it runs (before step 1 if selected), so
  // neither the broadcast's latency nor a range opened just before the step
  // loses anything (the cut is exact anyway); sent on change and to each
  // collector that says hello.
  void SetWindow(bool open, int64_t step);
  void Send(uint64_t session, const wire::Control& control);
  bool Ready(const PendingStep& step, int64_t now_ns) const;
  // The process has sent everything of the step: said bye, answered its
  // flush barrier, or flushed past its end.
  static bool CaughtUp(const ProcessTimeline& p, const PendingStep& step);
  // Cuts, analyses and exports the step if `steps:` selects it (else counts
  // it skipped), then forgets what no later step can hold. False when it
  // could not be written (write_errors): nothing is released, and no later
  // step may be written or released either (the run stops there, resumable).
  bool Emit(const PendingStep& step, bool forced, int64_t now_ns);
  // A cut step's overhead correction (config `correction`), event order,
  // clock and causality checks and breakdown, before sub-task selection.
  void Analyze(StepProfile* profile) const;
  RunInfo MakeRunInfo(bool final) const;
  // At the run's end: a run that wrote no step says why in a note (no
  // controller connected; the controller began no step). Never silent.
  void NoteEmptyRun();
  // Whether OnFrame takes this message from `peer` (see there).
  bool Admit(const wire::Message& message, const std::string& peer, int64_t now_ns);
  void Refuse(const std::string& why, const std::string& peer, bool ask_hello, int64_t now_ns);
  // After step `s` was written or skipped: every collector may forget what
  // it spooled before the step's end (Control.release_ns), but no later than
  // the begin of a range that ends at or after it, or is still open (a
  // replay holds its open), unless that began before the previous step's
  // end; none for a collector whose clock is not fitted yet (the time would
  // be wrong). The controller keeps a step until the next one is written.
  // Returns the Control messages (to send once run.json holds the points).
  std::vector<Outgoing> Release(const StepSpan& s);

  Config config_;                    // the run's config (run keys decided at the controller's Hello)
  const std::string config_file_;    // --config FILE, "" when none was given
  const KeySet config_keys_;         // the keys --config set
  std::string config_source_;        // run.json config_source (DecideRunConfig)
  std::string run_config_yaml_;      // sent to collectors; "" until decided
  std::vector<std::string> notes_, all_notes_;  // TakeNotes(); run.json config_notes
  StepExporter* exporter_;
  std::map<uint64_t, std::unique_ptr<ProcessTimeline>> processes_;  // by session
  uint64_t controller_session_ = 0;  // the first controller to connect
  std::set<uint64_t> demoted_;       // later claimants, told they are workers (Control.role)
  std::vector<PendingStep> pending_;
  std::vector<ExpectedProcess> expected_;
  std::vector<Outgoing> outgoing_;
  bool window_open_ = false;
  bool step_begun_ = false;  // the controller began a step
  int64_t window_step_ = 1;
  uint64_t barrier_token_ = 0;
  std::vector<int64_t> steps_written_;
  int64_t last_cut_end_ns_ = INT64_MIN;
  AggregatorStats stats_;
  std::string secret_;                          // SetSecret; "" = none required
  std::string run_key_;                         // RunKey(secret_)
  std::map<uint64_t, std::string> peers_;       // session -> the connection its hello came on
  std::map<std::string, int64_t> asked_hello_;  // peer -> when it was last asked (bounded)
  std::set<std::string> refused_peers_;         // peers whose hello lacked the secret (bounded)
  std::map<uint64_t, uint64_t> next_seq_;       // session -> seq after the last batch applied
  ResumePoint resumed_;                         // what Resume took up (last_step -1: none)
  std::set<uint64_t> awaited_;                  // resumed_.awaited not back yet
  int64_t last_step_ = -1;                      // highest step written or skipped
  int64_t controller_resume_ns_ = 0;            // its end on the controller's clock
  int64_t released_end_ns_ = INT64_MIN;          // the last step released (its end, aggregator clock)
  std::map<uint64_t, int64_t> released_ns_;     // session -> the last release_ns sent (its clock)
};

}  // namespace rlscope
