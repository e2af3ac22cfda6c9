// Arming: when this process records. Whether its rank and role are
// profiled under the run's config (selected), which trigger opens its
// captures, the controller's steps (numbering, windows around selected
// steps) and its role, a worker's windows from the aggregator, and the
// armed periods GPU records are matched against later.
//
// Threads: armed() and watching() are read on the hot path (relaxed loads);
// OnRangeOpen/AfterOpen/OnRangeClose/AfterClose run on recording threads (the controller's step
// ranges, a trigger range); the window and run-config changes on the flush
// thread; the claims on whatever thread calls them. arm_mu_ serialises the
// arming itself, so the last edge wins, never a stale one.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "collector/context.h"
#include "collector/recording.h"
#include "native/config.h"
#include "native/wire.h"

namespace rlscope {

// What opens and closes a process's capture (config `capture_range`).
enum class Trigger : uint8_t {
  kController,       // the controller's selected steps (workers: windows from the aggregator)
  kApi,              // rlscope_ray.start()/stop()
  kNvtxRange,        // a range named `nvtx:<name>` in this process
  kCudaProfilerApi,  // cuProfilerStart/Stop, through CUPTI callbacks (cupti_trigger.cc)
};

class Arming {
 public:
  // `child`: a process a profiled one started (children.h), armed from its
  // start until the aggregator's first word on the window.
  Arming(CollectorContext& ctx, Recording& recording, bool controller, int64_t rank, bool child = false);

  // Hot path: relaxed is enough for "armed", a hint read once per event; the
  // flush barrier, not this flag, orders data with the aggregator.
  bool armed() const { return (hot() & kHotArmed) != 0; }
  // Whether disarmed ranges are looked at: a controller finding its "step"
  // ranges (always recorded: they number the steps), or an nvtx:<name>
  // trigger. Relaxed: a range opened while it flips is simply not a step.
  bool watching() const { return (hot() & kHotWatching) != 0; }
  // armed(), watching(), whether events are stamped by the TSC with no test
  // clock, and whether the process's collector runs (kHotOff: not yet, or a
  // forked child's), in one process-wide byte: the handlers' fast lanes
  // (Recording::FastPush, FastPop) read it once per call, without the
  // collector's pointer.
  // kHotArmed alone: record without looking at names; neither kHotArmed nor
  // kHotWatching: count depth only. One Arming per process (the collector's).
  static constexpr uint8_t kHotArmed = rlscope::kHotArmed, kHotWatching = rlscope::kHotWatching,
                           kHotSlowClock = rlscope::kHotSlowClock, kHotOff = rlscope::kHotOff;
  static uint8_t hot() { return hot_.load(std::memory_order_relaxed); }
  // Clears kHotOff once the collector is the process's instance; sets it
  // in a forked child.
  static void SetOn(bool on) {
    if (on) {
      hot_.fetch_and(static_cast<uint8_t>(~kHotOff), std::memory_order_relaxed);
    } else {
      hot_.fetch_or(kHotOff, std::memory_order_relaxed);
    }
  }
  // This rank/role is profiled under the run's config (an unselected one
  // never arms); its own config's until the aggregator sends the run's.
  bool selected() const { return selected_.load(std::memory_order_relaxed); }
  bool is_controller() const { return is_controller_.load(std::memory_order_relaxed); }
  Trigger trigger() const { return trigger_; }

  // Slow paths of a watching process, on the recording thread: true when
  // the range opens/closes a step or a trigger range (it is then recorded
  // whatever the arming). A step whose number the aggregator would not
  // derive itself is announced with a `rlscope.step_number` mark.
  // An open returns kOpensSpecial when it opens a step or a trigger range
  // (0 neither), with kOpensShipNow for a step's beginning that moves
  // workers' windows; the caller records the open, then calls AfterOpen
  // with it, which wakes the flush thread only once the edge is in the ring.
  // Woken before, the flush thread (often run at once, on the waker's core)
  // found nothing new and the edge waited for the next flush: workers armed
  // a step late, inside the selected step.
  static constexpr int kOpensSpecial = 1, kOpensShipNow = 2;
  int OnRangeOpen(ThreadState* ts, uint32_t name, uint8_t flags, uint64_t payload, bool async, uint64_t range_id);
  void AfterOpen(int opens) {
    if ((opens & kOpensShipNow) != 0) ctx_.Wake();
  }
  // A close returns what it closes (kClosesStep | kClosesTrigger, 0
  // neither); the caller records the close, then calls AfterClose with it,
  // which disarms where the step or trigger range says: after the close is
  // stamped, so the process records up to its end (its edge, TakeEdges, is
  // not inside the step).
  static constexpr int kClosesStep = 1, kClosesTrigger = 2;
  // (Between the two, another thread may open the next step or trigger
  // range of an async pair: AfterClose then still disarms as the close says,
  // and that range's own open arms again only at its next edge. Steps and
  // trigger ranges opened on other threads in that window are rare.)
  int OnRangeClose(ThreadState* ts, bool async, uint64_t range_id);
  void AfterClose(int closes);

  // Opens/closes the capture of the api, nvtx:<name> and cudaProfilerApi
  // triggers (no effect on the controller trigger's windows).
  void SetCaptureActive(bool active);
  // True when this process was armed at some time in [begin_ns, end_ns]
  // (collector clock): GPU records outside every window are dropped.
  bool WasArmedDuring(int64_t begin_ns, int64_t end_ns) const;
  // Flush thread: the arming's edges since the last call, oldest first, for
  // the aggregator to say how much of a step a process did not record
  // (wire.h Batch::arming). Only under the controller trigger, whose windows
  // the aggregator steers (reports_arming); the others arm as their user says.
  bool reports_arming() const { return trigger_ == Trigger::kController; }
  std::vector<wire::ArmEdge> TakeEdges();

  // Makes this process the controller unless it already is (kAlready) or the
  // aggregator named another (kRefused).
  enum class Claim { kClaimed, kAlready, kRefused };
  Claim ClaimController();
  // The aggregator named another controller: records as a worker from now
  // on (windows from the aggregator). Flush thread.
  void BecomeWorker();
  // The number of the next step range that carries none. n >= 0.
  void SetNextStep(int64_t n);
  // After a hello again (a restarted aggregator numbers steps from its
  // resume point): the next step's number is announced, not derived.
  void AnnounceNextStep() { derived_next_step_.store(-1, std::memory_order_relaxed); }

  // The run's config arrived (flush thread): its steps arm a controller,
  // and it says whether this process is selected. True when the selection
  // changed.
  bool AdoptRunKeys(const Config& run);
  // A window from the aggregator (flush thread; workers under the
  // controller trigger only): opens now, closes after flush.window_slack_ms.
  void ApplyWindow(wire::Control::Window window, int64_t step = -1);
  // Whether the steps being recorded now are chosen up front (native/steps.h
  // ChosenUpFront): always true unless always_on; the CPU sampler runs at
  // always_on.sampling_hz, and the flush thread at a longer interval, when
  // not. Any thread. The last SetChosen's: the flush thread arming for the
  // next step as a recording thread opens it may leave it a step off until
  // the next edge (a rate, never what is recorded).
  bool chosen() const { return chosen_.load(std::memory_order_relaxed); }
  // Whether step n's edges must ship at once (the flush thread woken): the
  // aggregator moves workers' windows on them (native/steps.h), except
  // always on with n and the steps beside it (n - 1 to n + 2) not chosen up
  // front, when the windows stay as they are and the edges go out with the
  // next flush (within the interval): two flushes a step fewer.
  bool EdgesMoveWindows(int64_t n) const;
  // Flush thread: when a closing window disarms (MonotonicNs), 0 none; and
  // the close itself once that time came.
  int64_t window_close_at() const { return window_close_at_ns_; }
  void CloseWindowIfDue(int64_t now_ns);
  // Disarms for good (exit).
  void Stop();

 private:
  void UpdateArmed();
  // Whether the controller records step `n` / before step `n` (steps.h).
  bool StepArmedDuring(int64_t n) const;
  bool StepArmedBefore(int64_t n) const;
  int OnStepOpen(ThreadState* ts, uint8_t flags, uint64_t payload, bool async, uint64_t range_id);
  // Between steps, a controller under the controller trigger is armed for
  // the next one (steps.h).
  void ArmForNextStep();

  CollectorContext& ctx_;
  Recording& recording_;
  const int64_t rank_;
  const Trigger trigger_;
  const uint32_t step_name_id_;         // interned "step"
  const uint32_t step_number_name_id_;  // interned "rlscope.step_number"
  const uint32_t trigger_name_id_;      // interned <name> of nvtx:<name>, 0 otherwise

  std::atomic<bool> selected_;
  // Starts as RLSCOPE_ROLE says; set by ClaimController; cleared when the
  // aggregator says another process is the run's controller, which also
  // sets demoted_ (no claim after that).
  std::atomic<bool> is_controller_;
  std::atomic<bool> demoted_{false};

  mutable std::mutex arm_mu_;  // serialises UpdateArmed; guards armed_intervals_, edges_, steps_
  IntSelection steps_;        // the steps the run records (steps.h RecordedSteps; own config's until the run's arrives)
  Config chosen_config_;      // its always_on.enabled and steps: which steps are chosen up front (ChosenUpFront)
  int64_t window_step_ = -1;  // a worker's last window's step (ApplyWindow, flush thread); -1 none
  std::atomic<bool> chosen_{true};
  // chosen_ for a window over step n (and, ahead, n + 1 too: a worker's window opens a step early).
  void SetChosen(int64_t n, bool ahead);
  // Armed periods [begin, end] (end INT64_MAX while armed), newest last;
  // bounded: the oldest are forgotten.
  std::vector<std::pair<int64_t, int64_t>> armed_intervals_;
  // Arming edges not yet taken (TakeEdges), under the controller trigger
  // only; at most 1024 between two flushes (the rest are not kept).
  struct RawEdge {
    uint64_t ticks;         // ReadTicks: the events' clock before conversion
    int64_t test_clock_ns;  // a test clock's lead then (test_clock.h), else 0
    bool armed;
  };
  std::vector<RawEdge> edges_;
  // kHot* bits (hot()): set and cleared by fetch_or/fetch_and, so the
  // flush thread's arming and a recording thread's claim never undo each other.
  static std::atomic<uint8_t> hot_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> capture_active_{false};    // api / nvtx / cudaProfilerApi triggers
  std::atomic<bool> window_open_{false};       // controller trigger: inside a selected step
  std::atomic<int64_t> next_step_{1};          // controller: number of the next unnumbered step
  std::atomic<int64_t> derived_next_step_{1};  // what the aggregator numbers it without an announcement
  std::atomic<bool> in_step_{false};           // controller: a step range is open
  std::atomic<uint64_t> step_range_id_{0};     // controller's open start/end "step" range
  std::atomic<uint64_t> trigger_range_id_{0};  // open start/end trigger range
  int64_t window_close_at_ns_ = 0;             // flush thread: a closed window disarms at this time (slack), 0 = none
};

}  // namespace rlscope
