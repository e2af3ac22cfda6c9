#include "aggregator/correction.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "aggregator/sorting.h"
#include "aggregator/step_profile.h"
#include "native/event.h"

namespace rlscope {

namespace {
int64_t Ps(double ns) { return static_cast<int64_t>(std::llround(ns * 1000.0)); }

}  // namespace

// The step's speed into `t` (speed_ratio, speed_rel_se; left 0 without
// enough samples): its recording calls' in-place costs against the run's
// usual ones, kind by kind, weighted as the samples fall.
void CostModel::SetSpeedRatio(const SpeedSamples& speed, CostTable* t) {
  double step_ps = 0, usual_ps = 0, var_ps2 = 0;
  uint64_t n = 0;
  for (const EventKind kind : {EventKind::kRangePush, EventKind::kRangePop, EventKind::kRangeStart,
                               EventKind::kRangeEnd, EventKind::kMark}) {
    const int k = static_cast<int>(kind);
    const double nk = static_cast<double>(speed.step_n[k]);
    if (speed.step_n[k] == 0 || speed.usual_ps[k] <= 0) continue;
    step_ps += nk * speed.step_mean_ps[k];
    usual_ps += nk * speed.usual_ps[k];
    var_ps2 += std::pow(nk * speed.step_se_ps[k], 2);
    n += speed.step_n[k];
  }
  if (n >= kMinSpeedSamples && usual_ps > 0 && step_ps > 0) {
    t->speed_ratio = std::clamp(step_ps / usual_ps, kMinSpeedRatio, kMaxSpeedRatio);
    t->speed_rel_se = std::sqrt(var_ps2) / step_ps;
  }
}

namespace {

// The in-place ratio's sums (CostModel::in_place_ratio): each measured
// kind's in-place mean against its start-up figure, weighted by its samples
// in the step, and by the samples behind its cost (the run's, for a kind
// costed from the run), the fallback of a step with too few of its own.
// Samples are 1 in N of every kind's events: weighted as the step's events
// are (a kind costed from the run weighs its few samples in the step, not
// the run's: in a start/end loop the only pushes are the steps' own, which
// arm and wake the flush thread at 60x a push's start-up figure, and by the
// run's count they came to outweigh the step's starts and ends).
struct InPlaceSums {
  double step_measured_ps = 0, step_calibrated_ps = 0, step_weight = 0;
  double cost_measured_ps = 0, cost_calibrated_ps = 0;
  void Add(double mean_ps, double calibrated_ps, uint64_t step_n, uint64_t cost_n) {
    step_measured_ps += mean_ps * static_cast<double>(step_n);
    step_calibrated_ps += calibrated_ps * static_cast<double>(step_n);
    step_weight += static_cast<double>(step_n);
    cost_measured_ps += mean_ps * static_cast<double>(cost_n);
    cost_calibrated_ps += calibrated_ps * static_cast<double>(cost_n);
  }
  // 0 when nothing was measured; the cost samples' weights when the step
  // has fewer than `min_samples` of them all (a short step).
  double Ratio(uint64_t min_samples) const {
    const bool short_step = step_weight < static_cast<double>(min_samples);
    const double measured = short_step ? cost_measured_ps : step_measured_ps;
    const double calibrated = short_step ? cost_calibrated_ps : step_calibrated_ps;
    return measured > 0 && calibrated > 0 ? measured / calibrated : 0;
  }
};

}  // namespace

CostModel::CostModel(const CalibratedCosts& costs, double scale, const KindSamples* step, const KindSamples* run,
                     const HandlerStats* cpu_handler, const SpeedSamples* speed) {
  CostTable& t = table_;
  InPlaceSums in_place;
  for (uint8_t kind = 1; kind < kKinds; ++kind) {
    if (costs.own[kind]) {
      t.own_ns[kind] = *costs.own[kind] * scale;
      t.own_source[kind] = CostSource::kCalibration;
    }
    own_ps_[kind] = Ps(t.own_ns[kind]);
    const int64_t calibrated_own_ps = own_ps_[kind];
    // A cost sample is recorded after its own timing.
    if (kind == static_cast<uint8_t>(EventKind::kCostSample)) continue;
    // A CPU sample's handler times itself in place (HandlerStats); its
    // signal's delivery and return, and the handler's dispatch, are the
    // start-up figure less what the handler took there (cpu_sample_handler).
    if (kind == static_cast<uint8_t>(EventKind::kCpuSample)) {
      const std::optional<double>&total = costs.own[kind], &handler = costs.cpu_sample_handler;
      if (cpu_handler == nullptr || cpu_handler->per_flush.n < kMinSamples || cpu_handler->samples <= 0 || !total ||
          !handler) {
        continue;
      }
      const SampleStats& flushes = cpu_handler->per_flush;
      const double mean_ps = static_cast<double>(cpu_handler->ps) / static_cast<double>(cpu_handler->samples);
      const double rest_ns = std::max(0.0, *total - *handler);
      t.own_ns[kind] = (rest_ns + mean_ps / 1000.0) * scale;
      own_ps_[kind] = Ps(t.own_ns[kind]);
      mean_var_ps2_[kind] = flushes.var_ps2() / static_cast<double>(flushes.n) * scale * scale;
      t.own_source[kind] = CostSource::kRun;
      t.measured[kind] = {mean_ps / 1000.0, std::sqrt(flushes.var_ps2()) / 1000.0, flushes.n};
      continue;
    }
    for (const auto& [stats, source] :
         {std::make_pair(step, CostSource::kStep), std::make_pair(run, CostSource::kRun)}) {
      if (stats == nullptr || (*stats)[kind].n < kMinSamples) continue;
      const SampleStats& s = (*stats)[kind];
      own_ps_[kind] = std::llround(s.mean_ps() * scale);
      mean_var_ps2_[kind] = s.var_ps2() / static_cast<double>(s.n) * scale * scale;
      t.own_ns[kind] = s.mean_ps() * scale / 1000.0;
      t.own_source[kind] = source;
      t.measured[kind] = {s.mean_ps() / 1000.0, std::sqrt(s.var_ps2()) / 1000.0, s.n};
      if (calibrated_own_ps > 0) {
        in_place.Add(s.mean_ps() * scale, static_cast<double>(calibrated_own_ps), step != nullptr ? (*step)[kind].n : s.n,
                     s.n);
      }
      break;
    }
  }
  t.in_place_ratio = in_place.Ratio(kMinSamples);
  if (speed != nullptr) SetSpeedRatio(*speed, &t);
  SetCallerCosts(costs, scale);
}

void CostModel::SetCallerCosts(const CalibratedCosts& costs, double scale) {
  CostTable& t = table_;
  // Caller-side costs, per entry point (kCallerKeyPrefix: py_nvtx_*,
  // py_fast_*, py_annotate_*, py_range_*), each side of a pair on its own event (the
  // close's on the pop or end that carries the caller's flag): the start-up
  // figures, times the in-place ratio when there is one for the entry
  // points kScaledCaller says, else times the step's speed ratio when
  // there is one.
  for (int caller = 1; caller < kCallers; ++caller) {
    const bool scaled = kScaledCaller[caller] && t.in_place_ratio > 0;
    const bool at_speed = !scaled && t.speed_ratio > 0;
    const double ratio = scaled ? t.in_place_ratio : at_speed ? t.speed_ratio : 1.0;
    for (const EventKind kind : {EventKind::kRangePush, EventKind::kRangePop, EventKind::kRangeStart,
                                 EventKind::kRangeEnd, EventKind::kMark}) {
      const int k = static_cast<int>(kind);
      const std::optional<double>& cost = costs.caller[caller][k];
      if (!cost) continue;
      caller_ps_[caller][k] = Ps(*cost * scale * ratio);
      t.caller_ns[caller][k] = *cost * scale * ratio;
      t.caller_source[caller][k] = scaled     ? CostSource::kScaledCalibration
                                   : at_speed ? CostSource::kStepSpeedCalibration
                                              : CostSource::kCalibration;
      if (const std::optional<double>& spread = costs.caller_spread[caller][k]; spread && *spread > 0) {
        caller_spread_ps_[caller][k] = Ps(*spread * scale * ratio);
      }
    }
  }
}

UsedCosts CostTable::Spelled() const {
  static constexpr const char* kSourceNames[] = {"",    "calibration", "scaled calibration", "step",
                                                 "run", "calibration at step speed"};
  UsedCosts u;
  u.in_place_ratio = in_place_ratio;
  u.speed_ratio = speed_ratio;
  for (uint8_t kind = 1; kind < kKinds; ++kind) {
    if (own_source[kind] == CostSource::kNone) continue;
    const char* key = CostKey(kind);
    u.ns[key] = own_ns[kind];
    u.sources[key] = kSourceNames[static_cast<int>(own_source[kind])];
    if (own_source[kind] == CostSource::kStep || own_source[kind] == CostSource::kRun) u.measured[key] = measured[kind];
  }
  for (int caller = 1; caller < kCallers; ++caller) {
    for (int kind = 1; kind < kKinds; ++kind) {
      if (caller_source[caller][kind] == CostSource::kNone) continue;
      const std::string& key = CallerCostKey(caller, static_cast<uint8_t>(kind));
      u.ns[key] = caller_ns[caller][kind];
      u.sources[key] = kSourceNames[static_cast<int>(caller_source[caller][kind])];
    }
  }
  return u;
}

int64_t CostModel::CallerPs(uint8_t kind, uint8_t flags) const {
  return kind < kKinds ? caller_ps_[static_cast<int>(CallerOf(flags))][kind] : 0;
}

int64_t CostModel::CallerSpreadPs(uint8_t kind, uint8_t flags) const {
  return kind < kKinds ? caller_spread_ps_[static_cast<int>(CallerOf(flags))][kind] : 0;
}

int64_t CostModel::CostPs(uint8_t kind, uint8_t flags) const {
  if (kind >= kKinds) return 0;
  return own_ps_[kind] + caller_ps_[static_cast<int>(CallerOf(flags))][kind];
}

namespace {

// What a step's marks were charged, all threads: the sums behind Overhead.
struct Charged {
  int64_t total_ps = 0, waits_ps = 0, cpu_samples_ps = 0, caller_ps = 0;
  int64_t caller_scaled_ps = 0;  // of caller_ps: scaled by the in-place ratio (CostModel::CallerScaled)
  int64_t caller_at_speed_ps = 0;  // of caller_ps: scaled by the step's speed ratio (CostModel::CallerAtSpeed)
  int64_t capped_ps = 0;         // what the model charged capped events beyond their gaps
  int64_t caller_spread_ps = 0;  // the calibration's spread of the caller sides charged (CallerSpreadPs)
  uint64_t events = 0, capped = 0, cpu_samples = 0;
  uint64_t per_kind[CostModel::kKinds] = {};  // recorded events
};

// The marks after the step's begin (its own begin is the anchor), in time
// order: `list` itself most often, else `copy` filled. Recording order is
// time order on one thread, except for clock-fit rounding; kept stable.
const std::vector<CostMark>& InTimeOrder(const std::vector<CostMark>& list, int64_t begin_ns,
                                         std::vector<CostMark>* copy) {
  auto earlier = [](const CostMark& a, const CostMark& b) { return a.ts_ns < b.ts_ns; };
  if (std::is_sorted(list.begin(), list.end(), earlier) && (list.empty() || list[0].ts_ns > begin_ns)) return list;
  copy->reserve(list.size());
  for (const CostMark& m : list) {
    if (m.ts_ns > begin_ns) copy->push_back(m);
  }
  std::stable_sort(copy->begin(), copy->end(), earlier);
  return *copy;
}

// Adds what mark `m` was charged (`ps`, after capping) to the step's sums.
void Tally(const CostMark& m, int64_t ps, const CostModel& model, Charged* sums) {
  if (m.kind == 0) {
    sums->waits_ps += ps;
  } else if (m.kind == static_cast<uint8_t>(EventKind::kCpuSample)) {
    ++sums->cpu_samples;
    sums->cpu_samples_ps += ps;
  } else if (m.kind != static_cast<uint8_t>(EventKind::kCostSample)) {
    ++sums->events;
    if (m.kind < CostModel::kKinds) ++sums->per_kind[m.kind];
    // The caller-side part of what was charged (a capped event's first).
    const int64_t caller = std::min(ps, model.CallerPs(m.kind, m.flags));
    sums->caller_ps += caller;
    if (caller > 0) sums->caller_spread_ps += model.CallerSpreadPs(m.kind, m.flags);
    if (CostModel::CallerScaled(m.flags)) sums->caller_scaled_ps += caller;
    if (model.CallerAtSpeed(m.kind, m.flags)) sums->caller_at_speed_ps += caller;
  }
}

// One thread's marks (after the step's begin `begin_ns`), charged: each its
// cost, never more than the time since the thread's previous mark.
ThreadCosts Charge(const std::vector<CostMark>& list, const CostModel& model, int64_t begin_ns, Charged* sums) {
  std::vector<CostMark> copy;
  const std::vector<CostMark>& sorted = InTimeOrder(list, begin_ns, &copy);
  ThreadCosts t;
  t.ts.reserve(sorted.size());
  t.cum_ps.reserve(sorted.size());
  int64_t cum = 0;
  int64_t prev_ns = begin_ns;        // the thread's previous mark (or the step's begin)
  int64_t prev_event_ns = begin_ns;  // its previous mark that is no CPU sample
  int64_t since_event_ps = 0;        // charged to CPU samples since then
  int64_t event_slack_ps = 0;        // what the previous event was charged less than its gap
  size_t event_at = 0;               // that event's entry in t.cum_ps
  for (const CostMark& m : sorted) {
    // An event never costs more than the time since the thread's previous
    // mark: what it paid there cannot exceed what passed, and corrected
    // times must keep their order (a range nested in another stays
    // nested). A calibration made on a busier machine than the run's
    // overestimates the costs; counted. (A wait mark shares its time with
    // the event that ends the wait: it is what waiting took, not capped.)
    // A CPU sample can land inside the recording call whose cost comes
    // before an event: an event's bound is the time since the previous
    // mark that is not one, less what the samples there were charged.
    // A cost sample (CostSampler) is recorded right after the event its
    // call timed, with none of the program's work between: the two are
    // bounded together, by the time since the mark before the event. What
    // the sample costs beyond its own gap is charged at the event's mark,
    // within what that event left of its gap, so that times keep their
    // order. (The sample's mark comes before the end of its own recording,
    // and the gap between the two marks is shorter than what recording the
    // sample costs: bounded alone, nearly every sample was capped, 1 event
    // in correction.sample_every.)
    const bool cpu_sample = m.kind == static_cast<uint8_t>(EventKind::kCpuSample);
    const bool cost_sample = m.kind == static_cast<uint8_t>(EventKind::kCostSample);
    const int64_t gap_ps = cpu_sample ? (m.ts_ns - prev_ns) * 1000 : (m.ts_ns - prev_event_ns) * 1000 - since_event_ps;
    int64_t ps = m.kind == 0 ? m.wait_ps : model.CostPs(m.kind, m.flags);
    if (cost_sample && ps > gap_ps && event_slack_ps > 0) {
      const int64_t borrowed = std::min(ps - std::max<int64_t>(0, gap_ps), event_slack_ps);
      for (size_t j = event_at; j < t.cum_ps.size(); ++j) t.cum_ps[j] += borrowed;
      cum += borrowed;
      ps -= borrowed;
    }
    if (m.kind != 0 && ps > gap_ps) {
      const int64_t capped_to = std::max<int64_t>(0, gap_ps);
      sums->capped_ps += ps - capped_to;
      ps = capped_to;
      ++sums->capped;
    }
    Tally(m, ps, model, sums);
    cum += ps;
    prev_ns = m.ts_ns;
    if (cpu_sample) {
      since_event_ps += ps;
    } else {
      prev_event_ns = m.ts_ns;
      since_event_ps = 0;
      event_slack_ps = m.kind != 0 && !cost_sample ? std::max<int64_t>(0, gap_ps - ps) : 0;
      event_at = t.cum_ps.size();  // this mark's entry, pushed below
    }
    t.ts.push_back(m.ts_ns);
    t.cum_ps.push_back(cum);
  }
  sums->total_ps += cum;
  return t;
}

}  // namespace

Corrector::Corrector(const std::map<int64_t, std::vector<CostMark>>& marks, const CostModel& model, int64_t begin_ns)
    : begin_ns_(begin_ns) {
  Charged sums;
  for (const auto& [tid, list] : marks) overhead_.threads.emplace(tid, Charge(list, model, begin_ns, &sums));
  Overhead& o = overhead_;
  o.total_ns = sums.total_ps / 1000;
  o.waits_ns = sums.waits_ps / 1000;
  o.cpu_samples_ns = sums.cpu_samples_ps / 1000;
  o.events = sums.events;
  o.capped = sums.capped;
  o.capped_ns = sums.capped_ps / 1000;
  o.cpu_samples = sums.cpu_samples;
  double var_ps2 = 0;
  // CPU samples too: their handler's mean, where measured in place.
  var_ps2 += std::pow(static_cast<double>(sums.cpu_samples), 2) *
             model.MeanVarPs2(static_cast<uint8_t>(EventKind::kCpuSample));
  for (uint8_t kind = 1; kind < CostModel::kKinds; ++kind) {
    const double n = static_cast<double>(sums.per_kind[kind]);
    var_ps2 += n * n * model.MeanVarPs2(kind);
    const CostSource source = model.table().own_source[kind];
    if (source == CostSource::kNone || source == CostSource::kCalibration) {
      o.calibrated_events += sums.per_kind[kind];
    }
  }
  UncertaintyParts& parts = o.uncertainty_parts;
  parts.sampling_ns = std::llround(std::sqrt(var_ps2) / 1000.0);
  o.caller_ns = sums.caller_ps / 1000;
  if (const double ratio = model.table().in_place_ratio; ratio > 0) {
    // The spread between the caller side scaled by the in-place ratio and
    // not: what was removed scaled, times |1 - 1/r|; the rest (its
    // start-up figure, or that times the step's speed ratio), times |r - 1|.
    const double scaled = static_cast<double>(sums.caller_scaled_ps) / 1000.0;
    const double unscaled = static_cast<double>(sums.caller_ps - sums.caller_scaled_ps) / 1000.0;
    o.systematic_ns = std::llround(scaled * std::abs(1.0 - 1.0 / ratio) + unscaled * std::abs(ratio - 1.0));
  }
  parts.model_ns = o.systematic_ns / 2;
  // The step's speed ratio is a mean of cost samples: its standard error,
  // over the caller side it scaled, is the model's too.
  if (const double se = model.table().speed_rel_se; se > 0) {
    const double at_speed = static_cast<double>(sums.caller_at_speed_ps) / 1000.0;
    parts.model_ns = std::llround(std::hypot(static_cast<double>(parts.model_ns), at_speed * se));
  }
  // Each caller-side figure's stated spread (its rounds' standard error and
  // what a start-up figure is off by in the program's loop), over the
  // events that were charged one, is too.
  o.calibration_spread_ns = sums.caller_spread_ps / 1000;
  o.systematic_ns += o.calibration_spread_ns;
  // A capped event is evidence that the model is off: its two estimates of
  // the event's cost (the model's, and the gap that bounds what it can have
  // cost) differ by what was not removed. That spread is systematic too.
  o.systematic_ns += o.capped_ns;
  parts.calibration_ns = o.calibration_spread_ns;
  parts.capped_ns = o.capped_ns;
  o.uncertainty_ns = parts.TotalNs();
  o.costs = model.table();
}

int64_t UncertaintyParts::TotalNs() const {
  const double s = std::pow(static_cast<double>(sampling_ns), 2) + std::pow(static_cast<double>(calibration_ns), 2) +
                   std::pow(static_cast<double>(model_ns), 2) + std::pow(static_cast<double>(capped_ns), 2) +
                   std::pow(static_cast<double>(threads_ns), 2);
  return std::llround(std::sqrt(s));
}

const char* UncertaintyParts::Largest() const {
  const std::pair<int64_t, const char*> parts[] = {
      {sampling_ns, "sampling"}, {calibration_ns, "calibration"}, {model_ns, "model"}, {capped_ns, "capped"},
      {threads_ns, "threads"}};
  const auto* best = std::max_element(std::begin(parts), std::end(parts),
                                      [](const auto& a, const auto& b) { return a.first < b.first; });
  return best->first > 0 ? best->second : "";
}

void UncertaintyParts::Add(const UncertaintyParts& other) {
  auto add = [](int64_t a, int64_t b) {
    return std::llround(std::hypot(static_cast<double>(a), static_cast<double>(b)));
  };
  sampling_ns = add(sampling_ns, other.sampling_ns);
  calibration_ns = add(calibration_ns, other.calibration_ns);
  model_ns += other.model_ns;
  capped_ns = add(capped_ns, other.capped_ns);
  threads_ns += other.threads_ns;
}

int64_t Corrector::ShiftPs(const ThreadCosts& costs, const Anchors& anchors, int64_t t, size_t* hint,
                           size_t* anchor_hint) {
  const int64_t paid_ps = costs.PaidPsNear(t, hint);
  if (anchors.empty()) return paid_ps;
  const size_t n = UpperBoundNear(anchors.size(), t, *anchor_hint, [&](size_t i) { return anchors[i].ts; });
  *anchor_hint = n;
  if (n == 0) return paid_ps;
  const Anchor& a = anchors[n - 1];  // the last re-anchoring at or before t
  return a.base_ps + paid_ps - a.paid_before_ps;
}

int64_t Corrector::ShiftAtMarkPs(const ThreadCosts& costs, const Anchors& anchors, size_t i) {
  const int64_t t = costs.ts[i];
  auto a = anchors.end();  // the last re-anchoring at or before t: most often the last one
  if (!anchors.empty() && anchors.back().ts > t) {
    a = std::upper_bound(anchors.begin(), anchors.end(), t, [](int64_t v, const Anchor& x) { return v < x.ts; });
  }
  if (a == anchors.begin()) return costs.cum_ps[i];
  --a;
  return a->base_ps + costs.cum_ps[i] - a->paid_before_ps;
}

int64_t Corrector::ShiftNs(int64_t tid, int64_t t) const { return ShiftOf(tid).ShiftNs(t); }

Corrector::ThreadShift Corrector::ShiftOf(int64_t tid) const {
  ThreadShift view;
  auto it = overhead_.threads.find(tid);
  if (it == overhead_.threads.end()) return view;
  static const Anchors kNone;
  auto a = anchors_.find(tid);
  view.costs_ = &it->second;
  view.anchors_ = a == anchors_.end() ? &kNone : &a->second.list;
  return view;
}

bool Corrector::ReanchorAfterIdle(int64_t tid, int64_t begin_ns, int64_t anchor_shift_ns) {
  auto it = overhead_.threads.find(tid);
  if (it == overhead_.threads.end()) return false;
  const ThreadCosts& th = it->second;
  ThreadAnchors& anchors = anchors_[tid];
  const size_t prev = th.UpperNear(begin_ns - 1, &anchors.mark_hint);  // its first mark at or after begin_ns
  if (prev == 0) return false;                                         // nothing paid before it: nothing carried
  // What it carried at its last mark before begin_ns.
  const int64_t carried_ns = ShiftAtMarkPs(th, anchors.list, prev - 1) / 1000;
  if (carried_ns <= anchor_shift_ns || begin_ns - th.ts[prev - 1] <= carried_ns) return false;
  return Reanchor(tid, begin_ns, anchor_shift_ns);
}

bool Corrector::Reanchor(int64_t tid, int64_t begin_ns, int64_t caller_shift_ns) {
  auto it = overhead_.threads.find(tid);
  if (it == overhead_.threads.end()) return false;  // paid nothing in the step: nothing moves
  const ThreadCosts& th = it->second;
  ThreadAnchors& anchors = anchors_[tid];
  if (!anchors.list.empty() && begin_ns <= anchors.list.back().ts) return false;  // not in time order
  // The thread was free from its last event before `begin_ns` (or the
  // step's begin) on: the call, with what its first events cost before
  // `begin_ns`, cannot start before that event, corrected.
  const size_t prev = th.UpperNear(begin_ns - 1, &anchors.mark_hint);  // its first mark at or after begin_ns
  const int64_t free_ns = prev == 0 ? begin_ns_ : th.ts[prev - 1];
  const int64_t free_shift_ps = prev == 0 ? 0 : ShiftAtMarkPs(th, anchors.list, prev - 1);
  const int64_t before_ps = prev == 0 ? 0 : th.cum_ps[prev - 1];  // paid before begin_ns
  size_t at = prev;                                               // past its marks at begin_ns
  while (at < th.ts.size() && th.ts[at] == begin_ns) ++at;
  const int64_t at_begin_ps = at == prev ? 0 : th.cum_ps[at - 1] - before_ps;
  const int64_t base_ps = std::min(caller_shift_ns * 1000, (begin_ns - free_ns) * 1000 + free_shift_ps - at_begin_ps);
  anchors.list.push_back({begin_ns, std::max<int64_t>(0, base_ps), before_ps});
  return true;
}

std::string CostDrift(const KindSamples& first, const KindSamples& second) {
  for (uint8_t kind = 1; kind < first.size(); ++kind) {
    const SampleStats &a = first[kind], &b = second[kind];
    if (a.n < CostModel::kMinSamples || b.n < CostModel::kMinSamples) continue;
    const double d = std::abs(a.mean_ps() - b.mean_ps());
    const double se = std::sqrt(a.var_ps2() / static_cast<double>(a.n) + b.var_ps2() / static_cast<double>(b.n));
    if (d > 3 * se && d > 0.25 * std::max(a.mean_ps(), b.mean_ps())) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "%s costs drifted during the step: %.0f ns in its first half, %.0f ns in its second", CostKey(kind),
                    a.mean_ps() / 1000.0, b.mean_ps() / 1000.0);
      return text;
    }
  }
  return "";
}

}  // namespace rlscope
