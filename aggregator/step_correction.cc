#include "aggregator/step_correction.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>

#include "aggregator/occurrences.h"
#include "aggregator/ray_calls.h"
#include "aggregator/record_stores.h"
#include "aggregator/sorting.h"
#include "aggregator/step_profile.h"
#include "native/event.h"

namespace rlscope {

std::map<uint64_t, size_t> AwaitedIn(const std::map<uint64_t, int64_t>& got, const std::vector<WaitWindow>& windows) {
  std::map<uint64_t, size_t> out;
  for (const auto& [key, ts] : got) {
    // The first window ending after ts; it holds ts if it began before.
    auto it = std::upper_bound(windows.begin(), windows.end(), ts,
                               [](int64_t t, const WaitWindow& w) { return t < w.end_ns; });
    if (it != windows.end() && it->begin_ns <= ts) out.emplace(key, static_cast<size_t>(it - windows.begin()));
  }
  return out;
}

std::vector<LastWork> LastWorkIn(const std::vector<Span>& spans, const std::map<uint64_t, size_t>& awaited,
                                 const std::vector<WaitWindow>& windows) {
  std::vector<LastWork> last(windows.size());
  for (const Span& s : spans) {
    if (!s.has_payload || s.step >= 0) continue;
    auto it = awaited.find(s.payload);
    if (it == awaited.end()) continue;
    const int64_t end = std::min(s.end_ns, windows[it->second].end_ns);
    LastWork& l = last[it->second];
    if (end > l.end_ns) l = {end, s.end_tid, s.payload};
  }
  return last;
}

int64_t WaitShrinkNs(const std::vector<AwaitedWork>& work, int64_t window_begin_ns,
                     const std::function<int64_t(int64_t)>& controller_shift_ns) {
  int64_t raw = INT64_MIN, corrected = INT64_MIN;
  for (const AwaitedWork& w : work) {
    const LastWork& l = w.last;
    if (l.end_ns == INT64_MIN) continue;
    int64_t shift = 0;
    if (w.anchored && w.worker != nullptr) {
      shift = w.worker->ShiftNs(l.tid, l.end_ns);
    } else {
      // Only what its thread paid inside the window delays this window's end
      // (earlier windows got their own marks).
      shift = controller_shift_ns(window_begin_ns) +
              (w.worker == nullptr ? 0 : std::max<int64_t>(0, w.worker->RemovedNs(l.tid, window_begin_ns, l.end_ns)));
    }
    raw = std::max(raw, l.end_ns);
    corrected = std::max(corrected, l.end_ns - shift);
  }
  return raw == INT64_MIN ? 0 : std::max<int64_t>(0, raw - controller_shift_ns(raw) - corrected);
}

namespace {

// The step's cost samples by kind, against the run's usual costs
// (SpeedSamples): each kind's clipped mean and its standard error.
SpeedSamples StepSpeed(std::array<std::vector<double>, 8>& by_kind, const KindCosts& usual) {
  SpeedSamples speed;
  speed.usual_ps = usual;
  for (size_t k = 0; k < by_kind.size(); ++k) {
    if (by_kind[k].empty()) continue;
    speed.step_n[k] = by_kind[k].size();
    std::tie(speed.step_mean_ps[k], speed.step_se_ps[k]) = ClippedMean(&by_kind[k]);
  }
  return speed;
}

// One process's shifts from its own recorded events plus `waits`
// (aggregator clock), with the costs it used and whether they drifted.
std::unique_ptr<Corrector> MakeCorrector(const StepProfile& step, const std::map<int64_t, std::vector<CostMark>>& waits,
                                         double scale, const ProcessSlice& slice) {
  const std::map<int64_t, std::vector<CostMark>>* marks = &slice.cost_marks;
  std::map<int64_t, std::vector<CostMark>> with_waits;
  if (!waits.empty()) {
    with_waits = slice.cost_marks;
    for (const auto& [tid, list] : waits) with_waits[tid].insert(with_waits[tid].end(), list.begin(), list.end());
    marks = &with_waits;
  }
  // The costs measured in the step (and in each half of it: did they drift?).
  const ClockEstimate& clock = slice.process->clock();
  const int64_t begin = clock.FromAggregator(step.begin_ns), end = clock.FromAggregator(step.end_ns);
  KindSamples in_step, first, second;
  std::array<std::vector<double>, 8> by_kind;
  for (const CostSample& s : slice.cost_samples) {
    in_step[s.kind].Add(static_cast<double>(s.ps));
    (s.ts_ns < begin + (end - begin) / 2 ? first : second)[s.kind].Add(static_cast<double>(s.ps));
    if (s.kind < by_kind.size()) by_kind[s.kind].push_back(static_cast<double>(s.ps));
  }
  const SpeedSamples speed = StepSpeed(by_kind, slice.run_usual_costs);
  auto corrector = std::make_unique<Corrector>(
      *marks,
      CostModel(slice.process->calibrated_costs(), scale, &in_step, &slice.run_cost_samples, &slice.run_cpu_handler,
                &speed),
      step.begin_ns);
  corrector->set_cost_note(CostDrift(first, second));
  return corrector;
}

// Whether the step itself bears out RunsOnRecordingThreads (judged over the
// process's recent samples): its recording threads seen off a CPU for
// anything but a run-queue wait or the GIL under 2 % of the step, and its
// CPU samples on threads that recorded nothing in it (the collector's own
// left out) under 2 % of its sampled CPU in it.
bool StepRunsOnRecordingThreads(const ProcessSlice& slice, int64_t step_ns) {
  int64_t blocked_ns = 0;
  for (const OffCpuSample& s : slice.off_cpu) {
    if (s.reason != static_cast<uint8_t>(OffCpuReason::kCpuWait) &&
        s.reason != static_cast<uint8_t>(OffCpuReason::kGil)) {
      blocked_ns += s.weight_ns;
    }
  }
  std::set<int64_t> recording;
  for (const Span& span : slice.spans) recording.insert(span.tid);
  for (const Instant& i : slice.instants) recording.insert(i.tid);
  int64_t job_ns = 0, other_ns = 0;
  for (const CpuSample& s : slice.cpu_samples) {
    if (s.profiler_thread) continue;
    (recording.count(s.tid) != 0 ? job_ns : other_ns) += s.weight_ns;
  }
  return blocked_ns * RecordStores::kOtherShare <= step_ns &&
         other_ns * RecordStores::kOtherShare <= job_ns + other_ns;
}

// Moves the slice's times by `c`, whose overhead the slice then keeps.
void ApplyCorrection(Corrector& c, ProcessSlice* slice) {
  // Records come thread by thread: each thread's shift is looked up once per run.
  int64_t last_tid = 0;
  Corrector::ThreadShift last = c.ShiftOf(0);
  auto shift_of = [&](int64_t tid) -> Corrector::ThreadShift& {
    if (tid != last_tid) last = c.ShiftOf(tid), last_tid = tid;
    return last;
  };
  for (Span& span : slice->spans) {
    span.begin_ns = shift_of(span.tid).Correct(span.begin_ns);
    span.end_ns = std::max(span.begin_ns, shift_of(span.end_tid).Correct(span.end_ns));
  }
  for (Instant& i : slice->instants) i.ts_ns = shift_of(i.tid).Correct(i.ts_ns);
  for (CpuSample& s : slice->cpu_samples) s.ts_ns = shift_of(s.tid).Correct(s.ts_ns);
  for (OffCpuSample& s : slice->off_cpu) s.ts_ns = shift_of(s.tid).Correct(s.ts_ns);
  // CPU-side GPU records shift with their thread; device-side ones with the
  // thread that launched them (by correlation), at its launch.
  std::map<uint32_t, std::pair<int64_t, int64_t>> launch;  // correlation -> (tid, raw start)
  for (const GpuRecord& g : slice->gpu) {
    if (g.tid != 0 && g.correlation != 0) launch.emplace(g.correlation, std::make_pair(g.tid, g.start_ns));
  }
  for (GpuRecord& g : slice->gpu) {
    int64_t shift = 0;
    if (g.tid != 0) {
      shift = c.ShiftNs(g.tid, g.start_ns);
      g.end_ns -= c.ShiftNs(g.tid, g.end_ns) - shift;
    } else if (auto it = launch.find(g.correlation); g.correlation != 0 && it != launch.end()) {
      shift = c.ShiftNs(it->second.first, it->second.second);
    }
    g.start_ns -= shift;
    g.end_ns -= shift;
    if (g.end_ns < g.start_ns) g.end_ns = g.start_ns;
  }
  slice->overhead = c.TakeOverhead();
  // The flush thread's CPU, not removed, is stated (UncertaintyParts::threads_ns).
  if (slice->profiler_cpu_ns > 0) {
    slice->overhead->uncertainty_parts.threads_ns = slice->profiler_cpu_ns / 2;
    slice->overhead->uncertainty_ns = slice->overhead->uncertainty_parts.TotalNs();
  }
}

// The controller's sub-task windows (raw), nested ones left out: each
// waits on the Ray calls whose results it got (correction.h, waits).
std::vector<WaitWindow> WaitWindows(const StepProfile& step, const std::vector<std::string>& subtasks) {
  std::vector<WaitWindow> windows;
  for (const Occurrence& o : SubtaskOccurrences(step, subtasks)) {
    if (windows.empty() || o.begin_ns >= windows.back().end_ns) {
      windows.push_back({o.begin_ns, o.end_ns, o.end_tid, o.capture});
    }
  }
  return windows;
}

// The step ends where the controller's step range now ends (`end`). Every
// process moved by its own overhead, so what another paid less of may now
// lie past that end: it is held to the step, as cutting held the raw times
// (and a range cut at the step's end ends with it).
void HoldToEnd(StepProfile* step, int64_t end) {
  for (ProcessSlice& slice : step->processes) {
    for (Span& span : slice.spans) {
      if (span.clipped_end) span.end_ns = end;
      span.begin_ns = std::min(span.begin_ns, end);
      span.end_ns = std::clamp(span.end_ns, span.begin_ns, end);
    }
    for (Instant& i : slice.instants) i.ts_ns = std::min(i.ts_ns, end);
    for (GpuRecord& g : slice.gpu) {
      g.start_ns = std::min(g.start_ns, end);
      g.end_ns = std::clamp(g.end_ns, g.start_ns, end);
    }
  }
}

// StepProfile::waits: per window that got any result, how many were linked
// to a profiled process's range carrying the same key, and the wait
// removed from it (`removed_ns`, per window); results got outside every
// window are listed under "" (not corrected).
void ReportWaits(StepProfile* step, const std::vector<WaitWindow>& windows, const std::map<uint64_t, int64_t>& got_ray,
                 const std::map<uint64_t, int64_t>& got_key, const std::map<uint64_t, size_t>& awaited,
                 const std::vector<int64_t>& removed_ns) {
  std::set<uint64_t> worked;  // awaited keys some other process's range carries
  for (const ProcessSlice& slice : step->processes) {
    if (slice.process->is_controller()) continue;
    for (const Span& s : slice.spans) {
      if (s.has_payload && s.step < 0 && awaited.count(s.payload) != 0) worked.insert(s.payload);
    }
  }
  std::vector<StepProfile::WaitLinks> per_window(windows.size());
  StepProfile::WaitLinks outside;
  for (size_t w = 0; w < windows.size(); ++w) {
    per_window[w].capture = windows[w].capture;
    per_window[w].removed_ns = removed_ns[w];
  }
  auto count = [&](const std::map<uint64_t, int64_t>& got, bool by_key) {
    for (const auto& [key, ts] : got) {
      auto it = awaited.find(key);
      StepProfile::WaitLinks& l = it == awaited.end() ? outside : per_window[it->second];
      const bool linked = worked.count(key) != 0;  // only awaited keys are in it
      (by_key ? (linked ? l.linked_key : l.unlinked_key) : (linked ? l.linked_ray : l.unlinked_ray)) += 1;
    }
  };
  count(got_ray, false);
  count(got_key, true);
  step->waits.clear();
  for (StepProfile::WaitLinks& l : per_window) {
    if (l.linked_ray + l.linked_key + l.unlinked_ray + l.unlinked_key > 0) step->waits.push_back(std::move(l));
  }
  if (outside.unlinked_ray + outside.unlinked_key > 0) step->waits.push_back(std::move(outside));
}

// a(), and b() on a thread of its own when `beside` (else after a): both
// done when it returns; what either threw is thrown (a's first).
template <class A, class B>
void RunBoth(bool beside, A a, B b) {
  std::future<void> other;
  if (beside) {
    try {
      other = std::async(std::launch::async, b);
    } catch (const std::system_error&) {
      // No thread to be had: b after a, here.
    }
  }
  try {
    a();
  } catch (...) {
    if (other.valid()) other.wait();
    throw;
  }
  if (other.valid()) {
    other.get();
  } else {
    b();
  }
}

// One step's correction, in correction.h's order: the workers alone; then
// the controller, window by window, with its waits on them (re-anchoring
// each worker's execution of a call once the waits before its submit are
// known); then the workers' times; then the step's totals and end.
class StepCorrection {
 public:
  StepCorrection(StepProfile* step, const std::vector<std::string>& subtasks, double scale, bool second_core);
  void Run();

 private:
  struct Worker {
    ProcessSlice* slice;
    std::unique_ptr<Corrector> corrector;
    std::vector<LastWork> last;  // per window
  };
  // A call the controller submitted, executed by a worker (its method
  // range); or (`linked` false) a worker's top-level range after an idle gap
  // that no call explains, re-anchored at the controller's shift at its
  // begin on the step range's thread (correction.h, idle threads).
  struct Call {
    int64_t submit_ns, submit_tid;
    const Worker* worker;  // its corrector charged by the time calls are anchored
    const Span* span;
    bool linked = true;
  };
  // Each worker's costs, on its own; what it did last of what a window
  // awaited, from its raw times. Reads the step, writes workers_' correctors
  // and lasts only.
  void CorrectWorkersAlone();
  // The calls the controller submitted and the workers' unlinked top-level
  // ranges, and their submit (begin) order. Reads the step and workers_' slices,
  // writes calls_ only: it may run beside CorrectWorkersAlone.
  void ListCalls();
  // The controller's shift at raw t on thread `tid`, its waits so far included.
  int64_t ControllerShift(int64_t tid, int64_t t);
  void AnchorCallsSubmittedBy(int64_t t);
  // Window w's wait mark on the controller's thread; returns what it removed.
  int64_t WaitOn(size_t w);
  void CorrectController();
  void Totals();

  StepProfile* step_;
  double scale_;
  const bool second_core_;  // side by side what reads the step apart (RunBoth)
  const std::vector<WaitWindow> windows_;
  ProcessSlice* controller_ = nullptr;
  std::map<uint64_t, int64_t> got_ray_, got_key_;  // what the controller got, by Ray call or by a user's key
  std::map<uint64_t, size_t> awaited_;
  std::vector<Worker> workers_;
  std::vector<Call> calls_;
  std::vector<uint32_t> call_order_;                      // calls_ by submit (SortRuns' order)
  size_t next_call_ = 0;                                  // in call_order_
  std::set<uint64_t> anchored_;                           // keys of the calls re-anchored
  std::map<int64_t, std::vector<CostMark>> waits_;        // the controller's wait marks, by tid
  std::unique_ptr<Corrector> own_;                        // the controller's own costs, without waits
  std::map<int64_t, Corrector::ThreadShift> own_shifts_;  // views of own_ (set once, never re-anchored), by tid
};

StepCorrection::StepCorrection(StepProfile* step, const std::vector<std::string>& subtasks, double scale,
                               bool second_core)
    : step_(step), scale_(scale), second_core_(second_core), windows_(WaitWindows(*step, subtasks)) {
  for (ProcessSlice& slice : step->processes) {
    if (slice.process->is_controller()) controller_ = &slice;
  }
  for (ProcessSlice& slice : step->processes) {  // all here before anything points into workers_
    if (&slice != controller_) workers_.push_back({&slice, nullptr, {}});
  }
  if (controller_ != nullptr) {
    got_ray_ = RayGot(*controller_);
    got_key_ = Waited(*controller_);
  }
  std::map<uint64_t, int64_t> got = got_ray_;
  got.insert(got_key_.begin(), got_key_.end());
  awaited_ = AwaitedIn(got, windows_);
}

void StepCorrection::CorrectWorkersAlone() {
  for (Worker& w : workers_) {
    w.corrector = MakeCorrector(*step_, {}, scale_, *w.slice);
    w.last = LastWorkIn(w.slice->spans, awaited_, windows_);
  }
}

// A worker's ranges that begin on their thread with nothing of the thread
// open (by time, across domains; a range open since before the step counts
// as open), are no Ray call (`submits`) and no step's, in time order per
// thread.
std::vector<const Span*> UnlinkedTopLevel(const std::vector<Span>& spans,
                                          const std::map<uint64_t, std::pair<int64_t, int64_t>>& submits) {
  std::vector<const Span*> sorted;
  sorted.reserve(spans.size());
  for (const Span& s : spans) {
    if (!s.async) sorted.push_back(&s);
  }
  SortRunsGrouped(
      &sorted, [](const Span* s) { return s->tid; },
      [](const Span* a, const Span* b) { return std::tie(a->tid, a->begin_ns) < std::tie(b->tid, b->begin_ns); });
  std::vector<const Span*> out;
  out.reserve(sorted.size());
  // Sorted by thread: each thread's ranges come together.
  int64_t open_until = 0;  // the latest end of the thread's ranges so far
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Span* s = sorted[i];
    const bool first = i == 0 || sorted[i - 1]->tid != s->tid;
    if (!first && s->begin_ns < open_until) {
      open_until = std::max(open_until, s->end_ns);
      continue;
    }
    open_until = s->end_ns;
    const bool call = s->has_payload && submits.count(s->payload) != 0;
    if (!call && s->step < 0 && !s->clipped_begin) out.push_back(s);
  }
  return out;
}

void StepCorrection::ListCalls() {
  const std::map<uint64_t, std::pair<int64_t, int64_t>> submits = RaySubmits(*controller_);
  std::optional<int64_t> step_tid;  // the controller's step range's thread (none: no idle re-anchoring)
  for (const Span& span : controller_->spans) {
    if (span.step == step_->step) step_tid = span.tid;
  }
  size_t spans = 0;
  for (const Worker& w : workers_) spans += w.slice->spans.size();
  calls_.reserve(spans);  // at most one call per range
  for (const Worker& w : workers_) {
    for (const Span& span : w.slice->spans) {
      auto it = span.has_payload && span.step < 0 && !span.clipped_begin ? submits.find(span.payload) : submits.end();
      if (it != submits.end()) calls_.push_back({it->second.first, it->second.second, &w, &span});
    }
    if (!step_tid) continue;
    for (const Span* span : UnlinkedTopLevel(w.slice->spans, submits)) {
      calls_.push_back({span->begin_ns, *step_tid, &w, span, false});
    }
  }
  call_order_ = SortRunsOrder(calls_, [](const Call& a, const Call& b) { return a.submit_ns < b.submit_ns; });
}

int64_t StepCorrection::ControllerShift(int64_t tid, int64_t t) {
  auto own = own_shifts_.find(tid);
  if (own == own_shifts_.end()) own = own_shifts_.emplace(tid, own_->ShiftOf(tid)).first;
  int64_t ns = own->second.ShiftNs(t);
  for (const CostMark& m : waits_[tid]) ns += m.ts_ns <= t ? m.wait_ps / 1000 : 0;
  return ns;
}

void StepCorrection::AnchorCallsSubmittedBy(int64_t t) {
  for (; next_call_ < call_order_.size() && calls_[call_order_[next_call_]].submit_ns <= t; ++next_call_) {
    const Call& c = calls_[call_order_[next_call_]];
    const int64_t shift_ns = ControllerShift(c.submit_tid, c.submit_ns);
    // Anchors go in time order per thread: an unlinked range that began
    // between a call's submit and the call's begin on the same thread comes
    // after the call's anchor here and is refused (it keeps the shift it
    // carried, as before idle re-anchoring).
    if (!c.linked) {
      c.worker->corrector->ReanchorAfterIdle(c.span->tid, c.span->begin_ns, shift_ns);
    } else if (c.worker->corrector->Reanchor(c.span->tid, c.span->begin_ns, shift_ns)) {
      anchored_.insert(c.span->payload);
    }
  }
}

int64_t StepCorrection::WaitOn(size_t w) {
  const WaitWindow& window = windows_[w];
  AnchorCallsSubmittedBy(window.end_ns);
  std::vector<AwaitedWork> work;
  for (const Worker& worker : workers_) {
    const LastWork& l = worker.last[w];
    work.push_back({worker.corrector.get(), l, anchored_.count(l.key) != 0});
  }
  const int64_t tid = window.tid;
  const int64_t shrink =
      std::min(WaitShrinkNs(work, window.begin_ns, [&](int64_t t) { return ControllerShift(tid, t); }),
               window.end_ns - window.begin_ns);
  // The wait ends when the last awaited work does: from there on the
  // controller's thread (its "ray.got" marks, the window's end) moves.
  int64_t last_end = window.begin_ns;
  for (const AwaitedWork& a : work) last_end = std::max(last_end, a.last.end_ns);
  if (shrink > 0) waits_[tid].push_back({last_end, 0, 0, shrink * 1000});
  return std::max<int64_t>(0, shrink);
}

void StepCorrection::CorrectController() {
  own_ = MakeCorrector(*step_, {}, scale_, *controller_);
  std::vector<int64_t> removed_ns(windows_.size(), 0);
  for (size_t w = 0; w < windows_.size(); ++w) removed_ns[w] = WaitOn(w);
  AnchorCallsSubmittedBy(INT64_MAX);
  ApplyCorrection(*MakeCorrector(*step_, waits_, scale_, *controller_), controller_);
  ReportWaits(step_, windows_, got_ray_, got_key_, awaited_, removed_ns);
}

void StepCorrection::Totals() {
  // The `threads` part bounded by the run-queue waits, where every process
  // in the step runs on its recording threads (UncertaintyParts): then
  // nothing that records nothing (a Ray call's I/O threads, torch's
  // intra-op pool, a process the step waits on) carries the step. A flush
  // thread may take its CPU from another process of its host, so the bound
  // is per host: its processes' flush CPU, F, against their waits, W; each
  // process's part is half its own CPU times min(1, W / F). A process that
  // had not flushed past the step's end (late, lost) has not said all its
  // waits: no bound. A host is its name (Hello identity, gethostname):
  // containers that share a machine's CPUs under names of their own are
  // bounded apart, which can state too little for a flush thread that took
  // another container's CPU.
  bool bounded = false;
  std::map<std::string, std::pair<int64_t, int64_t>> host_cpu_waits;  // host -> (F, W)
  for (const ProcessSlice& slice : step_->processes) {
    if (!slice.overhead) continue;
    if (!slice.runs_on_recording_threads || slice.profiler_cpu_ns < 0 || slice.run_queue_wait_ns < 0 ||
        slice.late || slice.lost || !StepRunsOnRecordingThreads(slice, step_->end_ns - step_->begin_ns)) {
      bounded = false;
      break;
    }
    bounded = true;
    auto& [cpu, waits] = host_cpu_waits[slice.process->identity().host];
    cpu += slice.profiler_cpu_ns;
    waits += slice.run_queue_wait_ns;
  }
  for (ProcessSlice& slice : step_->processes) {
    if (!bounded || !slice.overhead || slice.profiler_cpu_ns < 0) continue;
    const auto& [cpu, waits] = host_cpu_waits[slice.process->identity().host];
    const double share = cpu > waits ? static_cast<double>(waits) / static_cast<double>(cpu) : 1.0;
    slice.overhead->uncertainty_parts.threads_ns =
        std::llround(static_cast<double>(slice.profiler_cpu_ns) * share / 2.0);
    slice.overhead->uncertainty_ns = slice.overhead->uncertainty_parts.TotalNs();
    slice.overhead->threads_bounded_by_waits = true;
  }
  step_->correction_uncertainty_parts = {};
  for (const ProcessSlice& slice : step_->processes) {
    if (slice.overhead) step_->correction_uncertainty_parts.Add(slice.overhead->uncertainty_parts);
  }
  step_->correction_uncertainty_ns = step_->correction_uncertainty_parts.TotalNs();
  step_->correction_systematic_ns = 0;
  for (const ProcessSlice& slice : step_->processes) {
    if (slice.overhead) step_->correction_systematic_ns += slice.overhead->systematic_ns;
  }
}

void StepCorrection::Run() {
  step_->corrected = true;
  step_->correction_scale = scale_;
  step_->corrected_end_ns = step_->end_ns;  // until the controller's step range says otherwise
  // The workers' charges and the calls' list read the step apart.
  RunBoth(
      second_core_ && controller_ != nullptr, [this] { CorrectWorkersAlone(); },
      [this] {
        if (controller_ != nullptr) ListCalls();
      });
  if (controller_ != nullptr) CorrectController();
  // Each worker's times moved by its own corrector: half of them beside.
  const size_t half = workers_.size() / 2;
  RunBoth(
      second_core_ && workers_.size() > 1,
      [&] {
        for (size_t i = 0; i < half; ++i) ApplyCorrection(*workers_[i].corrector, workers_[i].slice);
      },
      [&] {
        for (size_t i = half; i < workers_.size(); ++i) ApplyCorrection(*workers_[i].corrector, workers_[i].slice);
      });
  Totals();
  if (controller_ == nullptr) return;
  for (const Span& span : controller_->spans) {
    if (span.step == step_->step) step_->corrected_end_ns = span.end_ns;
  }
  HoldToEnd(step_, step_->corrected_end_ns);
}

}  // namespace

void CorrectStep(StepProfile* step, const std::vector<std::string>& subtasks, double scale, bool second_core) {
  StepCorrection(step, subtasks, scale, second_core).Run();
  for (ProcessSlice& slice : step->processes) {  // consumed: their memory goes now
    std::map<int64_t, std::vector<CostMark>>().swap(slice.cost_marks);
    std::vector<CostSample>().swap(slice.cost_samples);
  }
}

}  // namespace rlscope
