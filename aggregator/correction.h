// Overhead correction: removing the profiler's own time from each thread.
//
// Model (RL-Scope's, per thread and without re-runs): every recorded event
// cost its thread a calibrated amount of time, all of it spent just before
// the event's timestamp (the caller-side work, e.g. the `nvtx` package
// building attributes, comes before the call that records). Within a step,
// anchored at the step's begin, a time t on thread T moves earlier by the
// summed cost of T's events recorded in (step begin, t]. Later events shift,
// enclosing ranges shrink; the step itself shrinks by its controller
// thread's total. Costs, times `correction.scale`: each kind's own cost is
// the mean of the costs its collector measured in place in this step
// (EventKind::kCostSample, one recording call in correction.sample_every
// per thread), else in the run so far, else its start-up calibration (the
// Hello's, wire.h Hello::costs); the caller-side costs (py_*) and the cost
// samples' own are always calibrated. The uncertainty of what is removed
// (UncertaintyParts, step_profile.h) has four parts here, and a fifth, the
// flush thread's CPU, once the step is corrected (step_correction.cc,
// ApplyCorrection): the sampling error of
// those means (per process, sqrt(sum over kinds of (events of the kind)^2 *
// variance / samples)); the start-up calibration's spread (`<key>_spread`) of the
// caller side charged; the model's, for costs the samples cannot see (the
// caller side, the NVTX dispatch before the handler: their start-up figures,
// the `nvtx` package's own path's scaled as the measured ones moved from
// theirs, CostModel::in_place_ratio), half the spread between scaled and
// not; and what capping left. What rests on a model is also stated on its
// own (Corrector::systematic_ns).
//
// Across processes (the controller's waits on its workers, the workers'
// calls re-anchored at their submits, work nothing links): a whole step's
// correction, step_correction.h, over one Corrector per process.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/calibrated_costs.h"
#include "aggregator/records.h"
#include "aggregator/step_profile.h"

namespace rlscope {

// What one event of a process costs, by kind and entry point.
class CostModel {
 public:
  // Fewest samples of a kind whose mean replaces the next source.
  static constexpr uint64_t kMinSamples = 4;
  static constexpr int kKinds = CostTable::kKinds;  // EventKind values 1..7
  CostModel() = default;
  // `costs`: the Hello's (start-up calibration). `step`: what was measured
  // in the step, per kind, and `run`: in the run so far (either may be
  // empty); the first with kMinSamples of a kind gives its own cost.
  // `cpu_handler`: the CPU sampler's handler timed in place in the run so
  // far; with kMinSamples flushes' figures and the Hello's
  // cpu_sample_handler, a CPU sample costs its mean plus the Hello's
  // cpu_sample less cpu_sample_handler (the signal's delivery and return).
  // `speed`: the step's in-place recording costs and the run's usual ones
  // (SpeedSamples). With kMinSpeedSamples cost samples in the step of
  // kinds that have a usual cost, the step's speed ratio is the kinds'
  // clipped means over their usual costs, weighted by the samples (clamped to
  // [kMinSpeedRatio, kMaxSpeedRatio]; its relative standard error is the
  // unclamped ratio's): how much slower than usual the process ran in the
  // step. The caller sides not scaled by the in-place ratio (all of them
  // when there is none) are their start-up figures (taken at the usual
  // speed, calibration.Speed) times it.
  CostModel(const CalibratedCosts& costs, double scale, const KindSamples* step = nullptr,
            const KindSamples* run = nullptr, const HandlerStats* cpu_handler = nullptr,
            const SpeedSamples* speed = nullptr);
  // The same from the Hello's costs by key (looked up here).
  CostModel(const std::map<std::string, double>& costs, double scale, const KindSamples* step = nullptr,
            const KindSamples* run = nullptr, const HandlerStats* cpu_handler = nullptr,
            const SpeedSamples* speed = nullptr)
      : CostModel(CalibratedCosts(costs), scale, step, run, cpu_handler, speed) {}
  static_assert(CalibratedCosts::kKinds == CostTable::kKinds);
  static constexpr uint64_t kMinSpeedSamples = 32;
  static constexpr double kMinSpeedRatio = 0.5, kMaxSpeedRatio = 2.5;
  // Picoseconds (sub-ns costs add up over millions of events).
  int64_t CostPs(uint8_t kind, uint8_t flags) const;
  // The variance of kind's own cost as estimated (ps^2; 0 when calibrated).
  double MeanVarPs2(uint8_t kind) const { return kind < kKinds ? mean_var_ps2_[kind] : 0; }
  // Of CostPs: the caller-side part.
  int64_t CallerPs(uint8_t kind, uint8_t flags) const;
  // That part's spread as its start-up calibration states it (`<key>_spread`
  // in the Hello: the standard error of its rounds' median figure and
  // CALLER_SIDE_ERROR_SHARE of the figure, in quadrature, calibration.py),
  // scaled as the part is; 0 when not stated.
  int64_t CallerSpreadPs(uint8_t kind, uint8_t flags) const;
  // Whether the caller side of an event with `flags` was scaled by the
  // in-place ratio (kScaledCaller of its entry point).
  static bool CallerScaled(uint8_t flags) { return kScaledCaller[static_cast<int>(CallerOf(flags))]; }
  // Whether it was scaled by the step's speed ratio (speed_ratio).
  bool CallerAtSpeed(uint8_t kind, uint8_t flags) const {
    return kind < kKinds &&
           table_.caller_source[static_cast<int>(CallerOf(flags))][kind] == CostSource::kStepSpeedCalibration;
  }
  static constexpr bool kScaledCaller[kCallers] = {false, true, false, false, false};
  // The costs actually used (ns per event, scaled), where each own cost
  // came from ("step", "run" or "calibration") and the measurements behind
  // the first two, for summaries. Its in_place_ratio: over the cost samples
  // behind the own costs measured in place, their mean / the start-up
  // figures of the same kinds, each kind weighted by its samples in the
  // step (1 in N of its events: a kind costed from the run weighs only what
  // the step has of it), or by the samples behind each own cost where the
  // step has fewer than kMinSamples of them all; 0 when no own cost was
  // measured. The caller-side costs
  // of the `nvtx` package's own path (py_nvtx_*, never measured in place)
  // are their start-up figures times this ratio: the machine state that
  // slowed the handler against its start-up loop (caches, a busy core) was
  // taken to slow that microsecond of Python alike (bench section accuracy:
  // on this 2-core machine it once took the push/pop workload's median
  // error from +64 % to +6 %). Those of rlscope's entry points for the
  // package (py_fast_*, py_annotate_*: a C call's dispatch, tens of ns) and
  // of rlscope_ray's ranges (py_range_*) are their start-up figures: scaled
  // by a ratio of 2-4 they over-corrected 3 of the 4 accuracy workloads (6
  // rounds); measured inside one run, scaling them or not moved the dense
  // workloads' median error by less than the processes' own variation.
  // Either way half the spread between the two estimates is the model part
  // of the stated uncertainty (Corrector: uncertainty_parts).
  const CostTable& table() const { return table_; }
  // The same, spelled out by key (CostTable::Spelled).
  UsedCosts used() const { return table_.Spelled(); }

 private:
  static void SetSpeedRatio(const SpeedSamples& speed, CostTable* t);
  // The caller sides' costs and spreads from `costs`, once the in-place and
  // speed ratios are set (the constructor's last part).
  void SetCallerCosts(const CalibratedCosts& costs, double scale);

  int64_t own_ps_[kKinds] = {};  // the collector's recording
  // [caller][kind]: the caller side an event with that caller's flag
  // (CallerOf, event.h) pays on its side of the pair; caller 0 none.
  int64_t caller_ps_[kCallers][kKinds] = {};
  int64_t caller_spread_ps_[kCallers][kKinds] = {};
  double mean_var_ps2_[kKinds] = {};
  CostTable table_;
};

// CostKey: calibrated_costs.h.

// The time shift of one process in one step, and what it removed (the
// Overhead a slice keeps, step_profile.h).
class Corrector {
 public:
  // A re-anchoring (Reanchor): from `ts` on, the thread shifts by `base_ps`
  // plus what it paid at or after ts; `paid_before_ps` is what it paid
  // before ts (ThreadCosts::PaidPs(ts, true)), kept so a shift needs one
  // search of the thread's marks, not two.
  struct Anchor {
    int64_t ts = 0;
    int64_t base_ps = 0;
    int64_t paid_before_ps = 0;
  };
  // `marks`: per thread, the events recorded in the step (aggregator clock),
  // in time order; `begin_ns` anchors the step (no shift before it).
  Corrector(const std::map<int64_t, std::vector<CostMark>>& marks, const CostModel& model, int64_t begin_ns);
  // How much earlier a time `t` on thread `tid` moves: what the thread paid
  // since the step's begin up to and including `t`, or since its last
  // re-anchoring at or before `t` plus the shift set there.
  int64_t ShiftNs(int64_t tid, int64_t t) const;
  int64_t Correct(int64_t tid, int64_t t) const { return t - ShiftNs(tid, t); }
  // ShiftNs of one thread, its costs and anchors looked up once: valid
  // until the corrector changes (Reanchor) or goes.
  // One thread's user at a time (it keeps where its last search ended).
  class ThreadShift {
   public:
    int64_t ShiftNs(int64_t t) {
      if (costs_ == nullptr) return 0;
      return ShiftPs(*costs_, *anchors_, t, &hint_, &anchor_hint_) / 1000;
    }
    int64_t Correct(int64_t t) { return t - ShiftNs(t); }

   private:
    friend class Corrector;
    const ThreadCosts* costs_ = nullptr;
    const std::vector<Anchor>* anchors_ = nullptr;
    size_t hint_ = 0, anchor_hint_ = 0;  // where the last searches ended
  };
  ThreadShift ShiftOf(int64_t tid) const;
  // From `begin_ns` on (events at it included), thread `tid` shifts by
  // `caller_shift_ns` plus what it pays from there, or less: never so much
  // that the call would start before the thread's previous event
  // (corrected). A worker's call execution (step_correction.h, calls). Calls on
  // one thread in time order.
  // Returns false, doing nothing, for a call not after the thread's last.
  bool Reanchor(int64_t tid, int64_t begin_ns, int64_t caller_shift_ns);
  // Work no link explains (step_correction.h, idle threads): when thread `tid`
  // was idle before `begin_ns` for longer than the shift it carries there,
  // that shift is not carried past the gap beyond `anchor_shift_ns` (it is
  // re-anchored at `begin_ns` to it, as Reanchor). Returns whether it was.
  bool ReanchorAfterIdle(int64_t tid, int64_t begin_ns, int64_t anchor_shift_ns);
  // What thread `tid` paid in [from, to] (its own events and wait marks;
  // re-anchoring moves times, it costs nothing).
  int64_t RemovedNs(int64_t tid, int64_t from, int64_t to) const { return overhead_.RemovedNs(tid, from, to); }
  // What was removed: totals over threads, the sampling error (from
  // CostModel::MeanVarPs2 of each kind), the caller side and what rests on
  // its model (the caller side scaled by the in-place ratio times
  // |1 - 1 / ratio|, the caller side not scaled times |ratio - 1|: the
  // spread between the two estimates; plus the calibration's own spread
  // over the events charged a caller side, and what capping left), the
  // costs used.
  const Overhead& overhead() const { return overhead_; }
  // Why the costs may be off (CostDrift), kept with the overhead.
  void set_cost_note(std::string note) { overhead_.cost_note = std::move(note); }
  // The overhead, for the slice that keeps it; the corrector is spent.
  Overhead TakeOverhead() { return std::move(overhead_); }

 private:
  using Anchors = std::vector<Anchor>;  // in time order
  // One thread's re-anchorings, and where the last search of its marks for
  // a call's begin ended (calls come in time order per thread).
  struct ThreadAnchors {
    Anchors list;
    size_t mark_hint = 0;
  };
  // What a thread with `costs` and `anchors` shifts by at t, ps: from each
  // re-anchoring's ts on, its base_ps plus what was paid at or after ts.
  // The searches start at, and leave, the hints.
  static int64_t ShiftPs(const ThreadCosts& costs, const Anchors& anchors, int64_t t, size_t* hint,
                         size_t* anchor_hint);
  // ShiftPs at the time of the thread's mark `i`, the last of its marks at that time.
  static int64_t ShiftAtMarkPs(const ThreadCosts& costs, const Anchors& anchors, size_t i);
  int64_t begin_ns_ = 0;
  Overhead overhead_;
  std::map<int64_t, ThreadAnchors> anchors_;  // Reanchor, by tid
};

// The first kind (by EventKind) whose measured costs differ between the two
// halves of a step by more than three standard errors and a quarter, said
// in one line; "" when none did.
std::string CostDrift(const KindSamples& first, const KindSamples& second);

}  // namespace rlscope
