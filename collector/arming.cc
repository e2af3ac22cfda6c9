#include "collector/arming.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "native/names.h"
#include "native/steps.h"

namespace rlscope {

std::atomic<uint8_t> Arming::hot_{Arming::kHotOff};

namespace {

Trigger ParseTrigger(const std::string& capture_range) {
  if (capture_range == "api") return Trigger::kApi;
  if (capture_range == "cudaProfilerApi") return Trigger::kCudaProfilerApi;
  if (capture_range.rfind("nvtx:", 0) == 0) return Trigger::kNvtxRange;
  return Trigger::kController;
}

}  // namespace

Arming::Arming(CollectorContext& ctx, Recording& recording, bool controller, int64_t rank, bool child)
    : ctx_(ctx),
      recording_(recording),
      rank_(rank),
      trigger_(ParseTrigger(ctx.own.config.capture_range)),
      step_name_id_(ctx.strings.Intern(names::kStep)),
      step_number_name_id_(ctx.strings.Intern(names::kStepNumber)),
      trigger_name_id_(trigger_ == Trigger::kNvtxRange ? ctx.strings.Intern(ctx.own.config.capture_range.substr(5))
                                                       : 0),
      selected_(SelectsProcess(ctx.own.config, controller, rank)),
      is_controller_(controller),
      steps_(steps::RecordedSteps(ctx.own.config)),
      chosen_config_(ctx.own.config) {
  // A controller always records its "step" ranges: they number the steps,
  // whatever opens its captures. Off until the collector is the instance.
  hot_.store(
      static_cast<uint8_t>(kHotOff | (controller || trigger_ == Trigger::kNvtxRange ? kHotWatching : 0) |
                           (ctx.clock_source != ClockSource::kTsc || ctx.test_clock != nullptr ? kHotSlowClock : 0)),
      std::memory_order_relaxed);
  if (!ctx.own.config.ranks.all && rank < 0 && !controller) {
    std::fprintf(stderr,
                 "rlscope: config selects ranks %s but this process has no rank "
                 "(set RLSCOPE_RANK or RANK); treating it as rank 0\n",
                 ctx.own.config.ranks.ToString().c_str());
  }
  // Controller trigger: the window is open during a selected step and from
  // the end of the step before it (here: before step 1, if selected). A
  // controller follows its own steps, a worker the aggregator's broadcasts.
  // The other triggers start closed. A child of a profiled process
  // (children.h) starts open: it often does its work at once, before the
  // aggregator's first answer (which says whether a window is open, and
  // closes this one if not); what it records outside a selected step is
  // cut away by the aggregator, as any worker's.
  window_open_.store(trigger_ == Trigger::kController && (child || steps::ControllerArmedBefore(steps_, 1)),
                     std::memory_order_relaxed);
  SetChosen(1, !controller);  // until its first step or window says
  UpdateArmed();
}

void Arming::UpdateArmed() {
  std::lock_guard<std::mutex> lock(arm_mu_);
  const bool open = trigger_ == Trigger::kController ? window_open_.load(std::memory_order_relaxed)
                                                     : capture_active_.load(std::memory_order_relaxed);
  const bool armed = selected() && open && !stopped_.load(std::memory_order_relaxed);
  const bool was = this->armed();
  if (armed) {
    hot_.fetch_or(kHotArmed, std::memory_order_relaxed);
  } else {
    hot_.fetch_and(static_cast<uint8_t>(~kHotArmed), std::memory_order_relaxed);
  }
  if (armed == was) return;
  // The flush thread follows now (CPU timers, a flush), not at its next
  // beat, which may be a second away in an idle process (flush_thread.cc).
  ctx_.Wake();
  // Remember the armed periods for GPU records, which arrive later.
  const int64_t now = MonotonicNs();
  // Kept for the aggregator (TakeEdges) only where it steers the arming;
  // raw ticks, converted on the flush thread as events are (a test clock
  // stamps events ahead: so are these).
  if (reports_arming() && edges_.size() < 1024) {
    edges_.push_back({ReadTicks(ctx_.clock_source), std::max<int64_t>(0, ctx_.TestClockNs()), armed});
  }
  if (armed) {
    if (armed_intervals_.size() >= 1024) armed_intervals_.erase(armed_intervals_.begin());
    armed_intervals_.emplace_back(now, INT64_MAX);
  } else if (!armed_intervals_.empty()) {
    armed_intervals_.back().second = now;
  }
}

bool Arming::WasArmedDuring(int64_t begin_ns, int64_t end_ns) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  for (auto it = armed_intervals_.rbegin(); it != armed_intervals_.rend(); ++it) {
    if (it->first <= end_ns && begin_ns <= it->second) return true;
    if (it->second < begin_ns) break;  // older periods end earlier still
  }
  return false;
}

std::vector<wire::ArmEdge> Arming::TakeEdges() {
  std::vector<RawEdge> raw;
  {
    std::lock_guard<std::mutex> lock(arm_mu_);
    raw.swap(edges_);
  }
  std::vector<wire::ArmEdge> out;
  for (const RawEdge& e : raw) out.push_back({ctx_.converter.ToNs(e.ticks) + e.test_clock_ns, e.armed});
  return out;
}

void Arming::SetCaptureActive(bool active) {
  capture_active_.store(active, std::memory_order_relaxed);
  UpdateArmed();
}

void Arming::Stop() {
  stopped_.store(true, std::memory_order_relaxed);
  UpdateArmed();
}

int Arming::OnStepOpen(ThreadState* ts, uint8_t flags, uint64_t payload, bool async, uint64_t range_id) {
  // Numbered by steps.h; announced when the aggregator, which sees a
  // start/end range's id and not its payload, would number it otherwise.
  const bool has_payload = (flags & kFlagHasPayload) != 0;
  const int64_t n = steps::Number(has_payload, payload, next_step_.load(std::memory_order_relaxed));
  if (n != steps::Number(has_payload && !async, payload, derived_next_step_.load(std::memory_order_relaxed))) {
    recording_.Record(ts, EventKind::kMark, step_number_name_id_, 0, 0, static_cast<uint64_t>(n), kFlagHasPayload,
                      /*privileged=*/true);
  }
  next_step_.store(n + 1, std::memory_order_relaxed);
  derived_next_step_.store(n + 1, std::memory_order_relaxed);
  in_step_.store(true, std::memory_order_relaxed);
  if (async) {
    step_range_id_.store(range_id, std::memory_order_relaxed);
  } else {
    ts->step_depth = ts->depth;
  }
  if (trigger_ == Trigger::kController) {
    window_open_.store(StepArmedDuring(n), std::memory_order_relaxed);
    SetChosen(n, false);
    UpdateArmed();
  }
  // Ship the step edge now (workers' windows follow it), once it is recorded: AfterOpen.
  return kOpensSpecial | (EdgesMoveWindows(n) ? kOpensShipNow : 0);
}

int Arming::OnRangeOpen(ThreadState* ts, uint32_t name, uint8_t flags, uint64_t payload, bool async,
                        uint64_t range_id) {
  if (name == 0) return 0;
  if (is_controller() && name == step_name_id_) return OnStepOpen(ts, flags, payload, async, range_id);
  if (trigger_ == Trigger::kNvtxRange && name == trigger_name_id_) {
    if (async) {
      trigger_range_id_.store(range_id, std::memory_order_relaxed);
    } else {
      ts->trigger_depth = ts->depth;
    }
    SetCaptureActive(true);
    return kOpensSpecial;
  }
  return 0;
}

int Arming::OnRangeClose(ThreadState* ts, bool async, uint64_t range_id) {
  bool step_end = false, trigger_end = false;
  if (async) {
    // A relaxed load first: most ends are neither, and then cost no RMW.
    uint64_t expected = range_id;
    step_end = range_id != 0 && step_range_id_.load(std::memory_order_relaxed) == range_id &&
               step_range_id_.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
    expected = range_id;
    trigger_end = range_id != 0 && trigger_range_id_.load(std::memory_order_relaxed) == range_id &&
                  trigger_range_id_.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
  } else {
    if (ts->step_depth >= 0 && ts->depth == ts->step_depth) {
      ts->step_depth = -1;
      step_end = true;
    }
    if (ts->trigger_depth >= 0 && ts->depth == ts->trigger_depth) {
      ts->trigger_depth = -1;
      trigger_end = true;
    }
  }
  return (step_end ? kClosesStep : 0) | (trigger_end ? kClosesTrigger : 0);
}

void Arming::AfterClose(int closes) {
  if ((closes & kClosesStep) != 0) {
    in_step_.store(false, std::memory_order_relaxed);
    if (trigger_ == Trigger::kController) {
      // Armed from the end of the step before a selected one, as workers are
      // (native/steps.h): a range opened just before that step begins is kept.
      window_open_.store(StepArmedBefore(next_step_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
      SetChosen(next_step_.load(std::memory_order_relaxed), false);
      UpdateArmed();
    }
    if (EdgesMoveWindows(next_step_.load(std::memory_order_relaxed) - 1)) ctx_.Wake();
  }
  if ((closes & kClosesTrigger) != 0) SetCaptureActive(false);
}

void Arming::ArmForNextStep() {
  if (is_controller() && trigger_ == Trigger::kController && !in_step_.load(std::memory_order_relaxed)) {
    window_open_.store(StepArmedBefore(next_step_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
    SetChosen(next_step_.load(std::memory_order_relaxed), false);
  }
}

bool Arming::EdgesMoveWindows(int64_t n) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  if (!chosen_config_.always_on.enabled) return true;
  for (int64_t k = n - 1; k <= n + 2; ++k) {
    if (steps::ChosenUpFront(chosen_config_, k)) return true;
  }
  return false;
}

void Arming::SetChosen(int64_t n, bool ahead) {
  std::lock_guard<std::mutex> lock(arm_mu_);
  chosen_.store(steps::ChosenUpFront(chosen_config_, n) || (ahead && steps::ChosenUpFront(chosen_config_, n + 1)),
                std::memory_order_relaxed);
}

Arming::Claim Arming::ClaimController() {
  if (is_controller()) return Claim::kAlready;
  if (demoted_.load(std::memory_order_relaxed)) return Claim::kRefused;
  is_controller_.store(true, std::memory_order_relaxed);  // before the Hello it makes
  hot_.fetch_or(kHotWatching, std::memory_order_relaxed);
  // Under the run's config when it came (the aggregator re-sends it with its
  // reply to the new Hello: AdoptRunKeys), else its own.
  selected_.store(SelectsProcess(ctx_.own.config, true, rank_), std::memory_order_relaxed);
  ArmForNextStep();
  UpdateArmed();
  return Claim::kClaimed;
}

void Arming::BecomeWorker() {
  demoted_.store(true, std::memory_order_relaxed);
  is_controller_.store(false, std::memory_order_relaxed);
  // The windows come from the aggregator now (this Control's, then its
  // broadcasts); until then, as a worker that has not heard of one.
  window_open_.store(false, std::memory_order_relaxed);
  selected_.store(SelectsProcess(ctx_.own.config, false, rank_), std::memory_order_relaxed);
  UpdateArmed();
}

void Arming::SetNextStep(int64_t n) {
  if (n < 0) return;
  next_step_.store(n, std::memory_order_relaxed);
  if (is_controller() && trigger_ == Trigger::kController && !in_step_.load(std::memory_order_relaxed)) {
    window_open_.store(StepArmedBefore(n), std::memory_order_relaxed);
    SetChosen(n, false);
    UpdateArmed();
  }
}

bool Arming::AdoptRunKeys(const Config& run) {
  const bool selected = SelectsProcess(run, is_controller(), rank_);
  if (!run.ranks.all && ctx_.own.config.ranks.all && rank_ < 0 && !is_controller()) {
    std::fprintf(stderr,  // as at start, when its own config selected ranks
                 "rlscope: the run's config selects ranks %s but this process has no rank "
                 "(set RLSCOPE_RANK or RANK); treating it as rank 0\n",
                 run.ranks.ToString().c_str());
  }
  {
    std::lock_guard<std::mutex> lock(arm_mu_);
    steps_ = steps::RecordedSteps(run);
    chosen_config_.steps = run.steps;
    chosen_config_.always_on = run.always_on;
  }
  // A worker's window open already (its Control came before the run's
  // config): chosen again under the run's steps.
  if (!is_controller() && window_step_ >= 0) SetChosen(window_step_, true);
  // Between steps (a step under way keeps its window; the next edge follows the run's steps).
  ArmForNextStep();
  const bool changed = selected_.exchange(selected, std::memory_order_relaxed) != selected;
  UpdateArmed();
  return changed;
}

void Arming::ApplyWindow(wire::Control::Window window, int64_t step) {
  // Windows steer only workers under the controller trigger; the controller
  // follows its own steps and the other triggers their own events.
  if (window == wire::Control::Window::kUnchanged || trigger_ != Trigger::kController || is_controller()) return;
  if (window == wire::Control::Window::kOpen) {
    if (step >= 0) {
      window_step_ = step;
      SetChosen(step, true);
    }
    window_close_at_ns_ = 0;
    window_open_.store(true, std::memory_order_relaxed);
    UpdateArmed();
  } else if (window_open_.load(std::memory_order_relaxed) && window_close_at_ns_ == 0) {
    // Stay armed a little longer: events in flight at the step's end are kept.
    window_close_at_ns_ = MonotonicNs() + ctx_.own.config.flush.window_slack_ms * 1000000;
  }
}

void Arming::CloseWindowIfDue(int64_t now_ns) {
  if (window_close_at_ns_ == 0 || now_ns < window_close_at_ns_) return;
  window_close_at_ns_ = 0;
  window_open_.store(false, std::memory_order_relaxed);
  UpdateArmed();
}

bool Arming::StepArmedDuring(int64_t n) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  return steps::ControllerArmedDuring(steps_, n);
}

bool Arming::StepArmedBefore(int64_t n) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  return steps::ControllerArmedBefore(steps_, n);
}

}  // namespace rlscope
