// Scheduling the run's steps: which step is when, and when one may be cut.
//
// Steps are the controller's spans named "step" (NVTX push/pop or
// start/end, or rlscope_ray.step(n) which carries n), numbered by payload or
// 1, 2, 3 in order (native/steps.h; the timeline finds them). Workers'
// capture windows open while a selected step runs and while the step before
// it runs (before step 1 if selected), so neither the broadcast's latency
// nor a range opened just before the step loses anything (the cut is exact
// anyway); sent on change and to each collector that says hello. At a
// selected step's end every collector is sent a flush barrier (always on,
// only at a step's chosen up front: the others wait for the collectors' own
// flushes, within a second, collector.h kHeartbeatNs). A closed step
// is ready once every selected, connected collector has caught up with it
// (CaughtUp) or once flush.step_grace_ms has passed since it closed (the
// profile then lists the late processes); a resumed run's steps wait, within
// that time, for its processes to say hello again, and any step for a
// process the controller expects that is still starting (expected.h). A step
// `steps` selects also waits, within that time, for every selected process's
// clock to be good enough to place its events in it (clocks.h).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "aggregator/context.h"
#include "aggregator/records.h"
#include "aggregator/run_config.h"
#include "native/wire.h"

namespace rlscope {

// A step the controller closed, not yet written or skipped.
struct PendingStep {
  StepSpan span;                    // on the aggregator's clock
  int64_t closed_at_ns;             // aggregator time when the step's end arrived
  uint64_t barrier = 0;             // flush barrier token sent at its end (selected steps)
  int64_t controller_end_ns = 0;    // span.end_ns on the controller's own clock, as recorded
  int64_t controller_begin_ns = 0;  // span.begin_ns on the controller's own clock, as recorded
  // A selected step: how long after it began the workers' capture window
  // for it was broadcast (their first moments in it may be missing; they
  // got it later still); 0 when the window was open before it began.
  int64_t window_late_ns = 0;
  // It waited for a process's clock (clocks.h) with all else in.
  bool clock_held = false;
};

class StepScheduler {
 public:
  // `run`: whose `steps`, `flush.step_grace_ms` and selection it follows.
  StepScheduler(AggregatorContext* context, const RunConfig* run);

  // A resumed run (Aggregator::Resume): flush-barrier tokens in a range of
  // this aggregator's own (an ack a collector replays from before the
  // restart answers none of this one's), and steps wait for `awaited`.
  void Resume(int resumes, const std::vector<uint64_t>& awaited);
  // A process said hello: a resumed run's is back.
  void Back(uint64_t session) { awaited_.erase(session); }
  // Where a newcomer's window stands (Control.window, step, run_config).
  void Where(wire::Control* control) const;
  // The run's config was decided: before the first step the window follows
  // its steps (a step under way keeps its own: the next edge follows them).
  void RunConfigDecided();
  // The controller's step edges found in one of its batches (its own clock,
  // `clock` to the aggregator's), arrived at `now_ns`: windows follow them,
  // closed steps wait to be cut (counted seen; selected ones get a barrier).
  void OnEdges(StepEdges edges, const ClockEstimate& clock, int64_t now_ns);
  // The first closed step if it is ready at `now_ns`, else nullptr. Ready
  // by the grace time while a resumed run's processes are not back: they
  // are not coming back (said once; steps no longer wait for them).
  // `starting`: a process the controller expects has not connected yet and
  // is still given time (ExpectedList::Awaiting): no step `steps` selects
  // is ready before the grace time.
  const PendingStep* NextReady(int64_t now_ns, const ProcessMap& processes, bool starting);
  // The selected, live processes whose clock holds `step` (clocks.h:
  // no estimate, or one too wide for it), by session.
  std::vector<uint64_t> ClockHolders(const PendingStep& step, const ProcessMap& processes, int64_t now_ns) const;
  // The first closed step, ready or not; nullptr when none.
  const PendingStep* Next() const { return pending_.empty() ? nullptr : &pending_.front(); }
  // The first closed step was written or skipped.
  void Done() { pending_.pop_front(); }
  bool idle() const { return pending_.empty(); }
  // The controller's steps closed so far (aggregator clock), in the order
  // they closed: the first kSeenKept (run.json armed_steps).
  static constexpr size_t kSeenKept = 100000;
  const std::vector<StepSpan>& seen() const { return seen_; }
  // The process has sent everything of the step: said bye, answered its
  // flush barrier, or flushed past its end.
  static bool CaughtUp(const ProcessTimeline& p, const PendingStep& step);

 private:
  void SetWindow(bool open, int64_t step);
  // The workers' window after one batch's step edges (arrived at `now_ns`),
  // followed in the order they happened; notes how late the window for a
  // selected step was (window_late_ns).
  void FollowEdges(const StepEdges& edges, int64_t now_ns);
  // `*clocks_only`: not ready, and only processes' clocks hold it.
  bool Ready(const PendingStep& step, int64_t now_ns, const ProcessMap& processes, bool starting,
             bool* clocks_only) const;

  AggregatorContext* context_;
  const RunConfig* run_;
  std::deque<PendingStep> pending_;  // in the order they closed
  std::vector<StepSpan> seen_;       // seen(): the first kSeenKept closed
  bool window_open_ = false;
  bool window_chosen_ = true;        // the open window's steps chosen up front (SetWindow)
  int64_t window_opened_ns_ = 0;     // when the window last opened (aggregator clock; 0: before any step)
  std::map<int64_t, int64_t> late_;  // selected steps begun, not closed: their window_late_ns
  bool step_begun_ = false;          // the controller began a step
  int64_t window_step_ = 1;
  uint64_t barrier_token_ = 0;
  std::set<uint64_t> awaited_;  // a resumed run's processes not back yet
};

}  // namespace rlscope
