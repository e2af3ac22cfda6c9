#include "aggregator/step_scheduler.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/clocks.h"
#include "native/steps.h"

namespace rlscope {

StepScheduler::StepScheduler(AggregatorContext* context, const RunConfig* run)
    : context_(context), run_(run), window_open_(steps::WorkersArmedBefore(steps::RecordedSteps(run->config()), 1)) {}

void StepScheduler::Resume(int resumes, const std::vector<uint64_t>& awaited) {
  barrier_token_ = static_cast<uint64_t>(resumes) << 40;
  awaited_.insert(awaited.begin(), awaited.end());
}

void StepScheduler::Where(wire::Control* control) const {
  control->window = window_open_ ? wire::Control::Window::kOpen : wire::Control::Window::kClosed;
  control->step = window_step_;
  control->run_config = run_->yaml();
}

void StepScheduler::SetWindow(bool open, int64_t step) {
  window_step_ = step;
  // Always on, a window stays open from step to step: it is told again when
  // the steps it is for change between chosen and not (the collectors'
  // CPU sampling rate, steps.h ChosenUpFront).
  const bool chosen = steps::ChosenUpFront(run_->config(), step) || steps::ChosenUpFront(run_->config(), step + 1);
  if (open == window_open_ && (!open || chosen == window_chosen_)) return;
  window_open_ = open;
  window_chosen_ = chosen;
  wire::Control c;
  c.window = open ? wire::Control::Window::kOpen : wire::Control::Window::kClosed;
  c.step = step;
  c.run_config = run_->yaml();  // again: a collector that missed it (a full queue) adopts it now
  context_->Send(0, c);
}

void StepScheduler::RunConfigDecided() {
  if (!step_begun_) SetWindow(steps::WorkersArmedBefore(steps::RecordedSteps(run_->config()), 1), 1);
}

void StepScheduler::OnEdges(StepEdges edges, const ClockEstimate& clock, int64_t now_ns) {
  const IntSelection& selected = steps::RecordedSteps(run_->config());
  // Steps live on the aggregator's clock from here on (the controller's own
  // end of each is kept: a resumed run skips by it, exactly).
  std::vector<StepSpan> raw;
  for (const StepSpan& s : edges.closed) raw.push_back(s);
  for (std::vector<StepSpan>* list : {&edges.begun, &edges.closed}) {
    for (StepSpan& s : *list) {
      s.begin_ns = clock.ToAggregator(s.begin_ns);
      if (s.end_ns != 0) s.end_ns = clock.ToAggregator(s.end_ns);
    }
  }
  FollowEdges(edges, now_ns);  // first: a step begun and closed in this batch has its lateness
  for (size_t i = 0; i < edges.closed.size(); ++i) {
    const StepSpan& s = edges.closed[i];
    ++context_->stats.steps_seen;
    if (seen_.size() < kSeenKept) seen_.push_back(s);
    PendingStep step{s, now_ns, 0, raw[i].end_ns, raw[i].begin_ns};
    if (auto late = late_.find(s.number); late != late_.end()) {
      step.window_late_ns = late->second;
      late_.erase(late);
    }
    if (selected.Contains(s.number) && steps::ChosenUpFront(run_->config(), s.number)) {
      // Flush barrier: every collector flushes now and acknowledges. Always
      // on, a step not chosen up front has none: its records come with the
      // collectors' own flushes (within kHeartbeatNs, collector.h), whose
      // watermarks pass its end; a trigger picks it from what they keep. A
      // barrier is a flush and an ack from each process, each step.
      step.barrier = ++barrier_token_;
      wire::Control flush;
      flush.step = s.number;
      flush.flush = step.barrier;
      flush.run_config = run_->yaml();  // again, as with windows
      context_->Send(0, flush);
    }
    pending_.push_back(step);
  }
}

void StepScheduler::FollowEdges(const StepEdges& edges, int64_t now_ns) {
  // Workers are armed a step ahead: from the beginning of the step before a
  // selected one. The broadcast takes a millisecond or more to reach them,
  // and a controller often starts the next step's first call at once.
  // One batch often carries a step's end and the next one's beginning: the
  // edges are followed in the order they happened, so the window ends as
  // the last says (step n's end, then step n+1's beginning).
  struct Edge {
    int64_t ts_ns;
    int64_t order;  // at one time: step n's beginning (2n), its end (2n+1), step n+1's beginning (2n+2)
    bool begins;    // a step's beginning (else an end)
    bool open;
    int64_t step;
  };
  const IntSelection& selected = steps::RecordedSteps(run_->config());
  std::vector<Edge> order;
  for (const StepSpan& s : edges.begun) {
    order.push_back({s.begin_ns, 2 * s.number, true, steps::WorkersArmedDuring(selected, s.number), s.number});
  }
  for (const StepSpan& s : edges.closed) {
    order.push_back(
        {s.end_ns, 2 * s.number + 1, false, steps::WorkersArmedBefore(selected, s.number + 1), s.number + 1});
  }
  std::sort(order.begin(), order.end(),
            [](const Edge& a, const Edge& b) { return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.order < b.order; });
  if (!edges.begun.empty()) step_begun_ = true;
  for (const Edge& e : order) {
    const bool was_open = window_open_;
    SetWindow(e.open, e.step);
    if (!was_open && window_open_) window_opened_ns_ = now_ns;
    // A selected step's beginning: was its window sent before it? (A
    // controller flush that came late, or a step before it shorter than the
    // broadcast takes.)
    if (e.begins && selected.Contains(e.step) && window_open_) {
      late_[e.step] = std::max<int64_t>(0, window_opened_ns_ - e.ts_ns);
    }
  }
}

bool StepScheduler::CaughtUp(const ProcessTimeline& p, const PendingStep& step) {
  const bool acked = step.barrier != 0 && p.last_ack() >= step.barrier;
  const bool flushed_past = p.watermark_ns() != 0 && p.clock().ToAggregator(p.watermark_ns()) >= step.span.end_ns;
  return p.said_bye() || acked || flushed_past;
}

bool StepScheduler::Ready(const PendingStep& step, int64_t now_ns, const ProcessMap& processes, bool starting,
                          bool* clocks_only) const {
  *clocks_only = false;
  if (now_ns - step.closed_at_ns >= run_->config().flush.step_grace_ms * 1000000) return true;
  if (!awaited_.empty()) return false;  // a resumed run's processes, not back yet
  const bool written = steps::RecordedSteps(run_->config()).Contains(step.span.number);
  if (starting && written) return false;  // a step to write waits for them
  for (const auto& [session, p] : processes) {
    if (!run_->Selected(*p)) continue;
    if (now_ns - p->last_seen_ns() > AggregatorStats::kSilentAfterNs) continue;  // gone without a bye
    if (!CaughtUp(*p, step)) return false;
  }
  if (!written || ClockHolders(step, processes, now_ns).empty()) return true;
  *clocks_only = true;
  return false;
}

std::vector<uint64_t> StepScheduler::ClockHolders(const PendingStep& step, const ProcessMap& processes,
                                                  int64_t now_ns) const {
  std::vector<uint64_t> holders;
  const int64_t allowed = AllowedClockBoundNs(run_->config(), step.span.end_ns - step.span.begin_ns);
  for (const auto& [session, p] : processes) {
    if (!run_->Selected(*p) || p->said_bye() || p->lost() || p->clock_waived()) continue;  // nothing more will come
    if (now_ns - p->last_seen_ns() > AggregatorStats::kSilentAfterNs) continue;
    if (HoldsStep(FitnessOf(p->clock(), allowed))) holders.push_back(session);
  }
  return holders;
}

const PendingStep* StepScheduler::NextReady(int64_t now_ns, const ProcessMap& processes, bool starting) {
  if (pending_.empty()) return nullptr;
  bool clocks_only = false;
  if (!Ready(pending_.front(), now_ns, processes, starting, &clocks_only)) {
    if (clocks_only) pending_.front().clock_held = true;  // all else is in: it waits for a clock
    return nullptr;
  }
  if (!awaited_.empty()) {  // ready only by the grace time: they are not coming back
    context_->notes.Record(std::to_string(awaited_.size()) +
                           " processes of this run did not say hello again after the aggregator restarted; steps no "
                           "longer wait for them");
    awaited_.clear();
  }
  return &pending_.front();
}

}  // namespace rlscope
