#include "aggregator/aggregator.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "aggregator/breakdown.h"
#include "aggregator/subtasks.h"

namespace rlscope {

Aggregator::Aggregator(Config config, StepExporter* exporter)
    : config_(std::move(config)), exporter_(exporter), window_open_(config_.steps.Contains(1)) {}

uint64_t Aggregator::OnFrame(const char* data, size_t size, int64_t now_ns) {
  wire::DecodeResult r = wire::Decode(data, size);
  if (!r.ok) {
    ++stats_.decode_errors;
    stats_.last_decode_error = r.error;
    return 0;
  }
  OnMessage(r.message, now_ns);
  return std::visit(
      [](const auto& m) -> uint64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, wire::Control>) {
          return 0;
        } else {
          return m.session;
        }
      },
      r.message);
}

std::vector<Outgoing> Aggregator::TakeOutgoing() {
  std::vector<Outgoing> out;
  out.swap(outgoing_);
  return out;
}

void Aggregator::Send(uint64_t session, const wire::Control& control) {
  outgoing_.push_back({session, wire::Encode(control)});
}

void Aggregator::SetWindow(bool open, int64_t step) {
  window_step_ = step;
  if (open == window_open_) return;
  window_open_ = open;
  wire::Control c;
  c.window = open ? wire::Control::Window::kOpen : wire::Control::Window::kClosed;
  c.step = step;
  Send(0, c);
}

void Aggregator::OnMessage(const wire::Message& message, int64_t now_ns) {
  ++stats_.messages;
  if (const auto* hello = std::get_if<wire::Hello>(&message)) {
    auto& slot = processes_[hello->session];
    // A repeated hello updates the identity (labels learnt later, or the
    // real identity of a process first seen through a batch).
    if (!slot) slot = std::make_unique<ProcessTimeline>(*hello);
    else slot->Identify(*hello);
    slot->Touch(now_ns);
    if (slot->claims_controller() && controller_session_ == 0) {
      controller_session_ = hello->session;
      slot->set_controller();
    }
    wire::Control window;  // tell the newcomer where the run stands
    window.window = window_open_ ? wire::Control::Window::kOpen : wire::Control::Window::kClosed;
    window.step = window_step_;
    Send(hello->session, window);
    exporter_->ExportRun(MakeRunInfo(false));
    return;
  }
  if (const auto* batch = std::get_if<wire::Batch>(&message)) {
    auto it = processes_.find(batch->session);
    if (it == processes_.end()) {
      // A batch before (or without) its hello: the hello was dropped. Keep the
      // data under an anonymous identity rather than lose it.
      wire::Hello anon;
      anon.session = batch->session;
      anon.identity.host = "unknown";
      anon.identity.role = "worker";
      anon.identity.name = "unidentified";
      it = processes_.emplace(batch->session, std::make_unique<ProcessTimeline>(anon)).first;
    }
    it->second->Touch(now_ns);
    StepEdges edges;
    it->second->Add(*batch, batch->session == controller_session_ ? &edges : nullptr);
    const ClockFit& clock = it->second->clock();
    for (const auto& block : batch->threads) {
      stats_.events += block.events.size();
      if (!block.events.empty() && clock.ToAggregator(block.events.front().ts_ns) < last_cut_end_ns_) {
        ++stats_.late_batches;
        for (const auto& e : block.events) stats_.late_events += clock.ToAggregator(e.ts_ns) < last_cut_end_ns_ ? 1 : 0;
      }
    }
    // Steps live on the aggregator's clock from here on.
    for (std::vector<StepSpan>* list : {&edges.begun, &edges.closed}) {
      for (StepSpan& s : *list) {
        s.begin_ns = clock.ToAggregator(s.begin_ns);
        if (s.end_ns != 0) s.end_ns = clock.ToAggregator(s.end_ns);
      }
    }
    // Workers are armed a step ahead: from the beginning of the step before a
    // selected one. The broadcast takes a millisecond or more to reach them,
    // and a controller often starts the next step's first call at once.
    for (const StepSpan& s : edges.begun) {
      SetWindow(config_.steps.Contains(s.number) || config_.steps.Contains(s.number + 1), s.number);
    }
    for (const StepSpan& s : edges.closed) {
      ++stats_.steps_seen;
      PendingStep step{s, now_ns, 0};
      if (config_.steps.Contains(s.number)) {
        // Flush barrier: every collector flushes now and acknowledges.
        step.barrier = ++barrier_token_;
        wire::Control flush;
        flush.step = s.number;
        flush.flush = step.barrier;
        Send(0, flush);
      }
      pending_.push_back(step);
      SetWindow(config_.steps.Contains(s.number + 1), s.number + 1);
    }
    return;
  }
  if (std::holds_alternative<wire::Control>(message)) return;  // ours, not a collector's
  if (const auto* probe = std::get_if<wire::Probe>(&message)) {
    // Answered at once, stamped with the time the frame was read: the
    // daemon sends it right after this call returns.
    wire::Control reply;
    reply.probe_t1 = probe->t1;
    reply.probe_t2 = now_ns;
    reply.probe_t3 = now_ns;
    Send(probe->session, reply);
    return;
  }
  if (const auto* ex = std::get_if<wire::Expected>(&message)) {
    if (controller_session_ == 0 || ex->session == controller_session_) {
      expected_ = ex->processes;
      exporter_->ExportRun(MakeRunInfo(false));
    }
    return;
  }
  const auto& bye = std::get<wire::Bye>(message);
  if (auto it = processes_.find(bye.session); it != processes_.end()) it->second->Bye(bye);
}

bool Aggregator::CaughtUp(const ProcessTimeline& p, const PendingStep& step) {
  const bool acked = step.barrier != 0 && p.last_ack() >= step.barrier;
  const bool flushed_past =
      p.watermark_ns() != 0 && p.clock().ToAggregator(p.watermark_ns()) >= step.span.end_ns;
  return p.said_bye() || acked || flushed_past;
}

bool Aggregator::Ready(const PendingStep& step, int64_t now_ns) const {
  if (now_ns - step.closed_at_ns >= config_.flush.step_grace_ms * 1000000) return true;
  for (const auto& [session, p] : processes_) {
    if (!p->hello().selected) continue;
    if (now_ns - p->last_seen_ns() > AggregatorStats::kSilentAfterNs) continue;  // gone without a bye
    if (!CaughtUp(*p, step)) return false;
  }
  return true;
}

void Aggregator::Tick(int64_t now_ns) {
  size_t n = 0;
  while (n < pending_.size() && Ready(pending_[n], now_ns)) {
    Emit(pending_[n], false);
    ++n;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(n));
}

void Aggregator::Finish(int64_t now_ns) {
  for (const PendingStep& step : pending_) Emit(step, true);
  (void)now_ns;  // Finish waits for nothing: every closed step goes out now
  pending_.clear();
  exporter_->ExportRun(MakeRunInfo(true));
  exporter_->Flush(std::chrono::milliseconds(10000));
  exporter_->Shutdown();
}

bool Aggregator::RunComplete() const { return ControllerDone() && pending_.empty(); }

std::vector<ExpectedProcess> Aggregator::NotProfiled() const {
  std::vector<ExpectedProcess> missing;
  for (const ExpectedProcess& e : expected_) {
    auto get = [](const std::map<std::string, std::string>& m, const char* k) {
      auto it = m.find(k);
      return it == m.end() ? std::string() : it->second;
    };
    const std::string actor_id = get(e, "actor_id"), node_id = get(e, "node_id"), pid = get(e, "pid");
    bool found = false;
    for (const auto& [session, p] : processes_) {
      const auto& labels = p->identity().labels;
      if (!actor_id.empty() && get(labels, "actor_id") == actor_id) found = true;
      if (actor_id.empty() && !pid.empty() && std::to_string(p->identity().pid) == pid &&
          (node_id.empty() || get(labels, "node_id") == node_id)) {
        found = true;
      }
      if (found) break;
    }
    if (!found) missing.push_back(e);
  }
  return missing;
}

bool Aggregator::ControllerDone() const {
  auto c = processes_.find(controller_session_);
  return c != processes_.end() && c->second->said_bye();
}

void Aggregator::Emit(const PendingStep& step, bool forced) {
  const StepSpan& s = step.span;
  if (config_.steps.Contains(s.number)) {
    StepProfile profile;
    profile.step = s.number;
    profile.begin_ns = s.begin_ns;
    profile.end_ns = s.end_ns;
    bool any_late = false;
    for (const auto& [session, p] : processes_) {
      if (!p->hello().selected) continue;  // connected, but its rank is not profiled
      ProcessSlice slice;
      slice.process = p.get();
      // Cut on the process's own clock, then move what was cut onto the
      // aggregator's (clock_fit.h), where the step's bounds are.
      const ClockFit& clock = p->clock();
      const int64_t begin = clock.FromAggregator(s.begin_ns), end = clock.FromAggregator(s.end_ns);
      p->Cut(begin, end, &slice.spans, &slice.instants);
      p->CutGpu(begin, end, &slice.gpu);
      for (Span& span : slice.spans) {
        span.begin_ns = clock.ToAggregator(span.begin_ns);
        span.end_ns = clock.ToAggregator(span.end_ns);
      }
      for (Instant& i : slice.instants) i.ts_ns = clock.ToAggregator(i.ts_ns);
      for (GpuRecord& g : slice.gpu) {
        g.start_ns = clock.ToAggregator(g.start_ns);
        g.end_ns = clock.ToAggregator(g.end_ns);
      }
      for (Span& span : slice.spans) {
        if (span.begin_ns < s.begin_ns) span.begin_ns = s.begin_ns, span.clipped_begin = true;
        if (span.end_ns > s.end_ns || span.open) span.end_ns = s.end_ns, span.clipped_end = true;
        span.raw_begin_ns = span.begin_ns;
        span.raw_end_ns = span.end_ns;
      }
      slice.late = !CaughtUp(*p, step);
      any_late = any_late || slice.late;
      profile.processes.push_back(std::move(slice));
    }
    if (config_.correction.enabled) {
      profile.corrected = true;
      profile.correction_scale = config_.correction.scale;
      CorrectStep(&profile);
    }
    for (ProcessSlice& slice : profile.processes) {
      std::sort(slice.spans.begin(), slice.spans.end(), [](const Span& a, const Span& b) {
        if (a.tid != b.tid) return a.tid < b.tid;
        if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
        return a.end_ns > b.end_ns;  // enclosing first
      });
      std::sort(slice.instants.begin(), slice.instants.end(),
                [](const Instant& a, const Instant& b) { return a.ts_ns < b.ts_ns; });
      std::sort(slice.gpu.begin(), slice.gpu.end(),
                [](const GpuRecord& a, const GpuRecord& b) { return a.start_ns < b.start_ns; });
    }
    profile.reason = !any_late ? "complete" : forced ? "final" : "grace_timeout";
    profile.not_profiled = NotProfiled();
    profile.clock_warn_bound_ns = config_.clock.warn_bound_us * 1000;
    CheckCausality(&profile);
    // On the whole step, before sub-task filtering drops what lies outside.
    profile.analysis = std::make_shared<const StepAnalysis>(AnalyzeStep(profile, config_.subtasks));
    if (config_.discrete || !config_.subtasks.empty()) ApplySubtasks(&profile);
    if (exporter_->ExportStep(profile)) {
      steps_written_.push_back(s.number);
      ++stats_.steps_written;
    }
    exporter_->ExportRun(MakeRunInfo(false));
  } else {
    ++stats_.steps_skipped;
  }
  // Steps are sequential: nothing that ended by this step's end can belong to
  // a later one.
  for (const auto& [session, p] : processes_) p->DiscardBefore(p->clock().FromAggregator(s.end_ns));
  last_cut_end_ns_ = std::max(last_cut_end_ns_, s.end_ns);
}

namespace {

// The controller's "ray.submit" marks, each named by the "ray.task" mark
// that follows it on its thread (session.py _install_call_marks): a call's
// key -> when and on which thread the controller submitted it.
std::map<uint64_t, std::pair<int64_t, int64_t>> RaySubmits(const ProcessSlice& controller) {
  std::map<uint64_t, std::pair<int64_t, int64_t>> submitted;
  std::map<int64_t, int64_t> last_submit;  // tid -> ts
  for (const Instant& i : controller.instants) {
    const std::string_view name = controller.process->String(i.name);
    if (name == "ray.submit") {
      last_submit[i.tid] = i.ts_ns;
    } else if (name == "ray.task" && i.has_payload && last_submit.count(i.tid) != 0) {
      submitted.emplace(i.payload, std::make_pair(last_submit[i.tid], i.tid));
    }
  }
  return submitted;
}

// The controller's "ray.got" marks (session.py _install_call_marks): a
// call's key -> when the controller got its result.
std::map<uint64_t, int64_t> RayGot(const ProcessSlice& controller) {
  std::map<uint64_t, int64_t> got;
  for (const Instant& i : controller.instants) {
    if (i.has_payload && std::string_view(controller.process->String(i.name)) == "ray.got") {
      got.emplace(i.payload, i.ts_ns);
    }
  }
  return got;
}

}  // namespace

void Aggregator::CorrectStep(StepProfile* profile) {
  profile->corrected_end_ns = profile->end_ns;  // until the controller's step range says otherwise
  // The controller's sub-task windows (raw), nested ones left out: each
  // waits on the Ray calls whose results it got (correction.h, waits).
  std::vector<WaitWindow> windows;
  for (const Occurrence& o : SubtaskOccurrences(*profile, config_.subtasks)) {
    if (windows.empty() || o.begin_ns >= windows.back().end_ns) windows.push_back({o.begin_ns, o.end_ns, o.end_tid});
  }
  ProcessSlice* controller = nullptr;
  for (ProcessSlice& slice : profile->processes) {
    if (slice.process->is_controller()) controller = &slice;
  }
  const std::map<uint64_t, size_t> awaited =
      controller != nullptr ? AwaitedIn(RayGot(*controller), windows) : std::map<uint64_t, size_t>{};
  // Workers' costs first, each on its own; what each did last of what a
  // window awaited is taken from its raw times.
  struct Worker {
    ProcessSlice* slice;
    std::shared_ptr<Corrector> corrector;
    std::vector<LastWork> last;  // per window
  };
  std::vector<Worker> workers;
  for (ProcessSlice& slice : profile->processes) {
    if (&slice == controller) continue;
    workers.push_back({&slice, MakeCorrector(*profile, {}, &slice), LastWorkIn(slice.spans, awaited, windows)});
  }
  // The calls the controller submitted, in submit order: each worker's
  // execution of one is re-anchored at the controller's shift at its submit
  // (correction.h, calls), once the waits before that submit are known.
  struct Call {
    int64_t submit_ns, submit_tid;
    Corrector* worker;
    const Span* span;
  };
  std::vector<Call> calls;
  std::set<uint64_t> anchored;
  if (controller != nullptr) {
    const std::map<uint64_t, std::pair<int64_t, int64_t>> submits = RaySubmits(*controller);
    for (Worker& w : workers) {
      for (const Span& span : w.slice->spans) {
        auto it = span.has_payload && span.step < 0 && !span.clipped_begin ? submits.find(span.payload)
                                                                            : submits.end();
        if (it != submits.end()) calls.push_back({it->second.first, it->second.second, w.corrector.get(), &span});
      }
    }
    std::sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) { return a.submit_ns < b.submit_ns; });
  }
  // The controller: its own costs, and, window by window, the waits that
  // the workers' corrected ends shrink.
  std::map<int64_t, std::vector<CostMark>> waits;
  std::shared_ptr<Corrector> own;
  auto controller_shift = [&](int64_t tid, int64_t t) {
    int64_t ns = own->ShiftNs(tid, t);
    for (const CostMark& m : waits[tid]) ns += m.ts_ns <= t ? m.wait_ps / 1000 : 0;
    return ns;
  };
  size_t next_call = 0;
  auto anchor_calls_submitted_by = [&](int64_t t) {
    for (; next_call < calls.size() && calls[next_call].submit_ns <= t; ++next_call) {
      const Call& c = calls[next_call];
      if (c.worker->Reanchor(c.span->tid, c.span->begin_ns, controller_shift(c.submit_tid, c.submit_ns))) {
        anchored.insert(c.span->payload);
      }
    }
  };
  if (controller != nullptr) {
    own = MakeCorrector(*profile, {}, controller);
    for (size_t w = 0; w < windows.size(); ++w) {
      anchor_calls_submitted_by(windows[w].end_ns);
      std::vector<AwaitedWork> work;
      for (const Worker& worker : workers) {
        const LastWork& l = worker.last[w];
        work.push_back({worker.corrector.get(), l, anchored.count(l.key) != 0});
      }
      const int64_t tid = windows[w].tid;
      const int64_t shrink = std::min(WaitShrinkNs(work, windows[w].begin_ns,
                                                   [&](int64_t t) { return controller_shift(tid, t); }),
                                      windows[w].end_ns - windows[w].begin_ns);
      // The wait ends when the last awaited work does: from there on the
      // controller's thread (its "ray.got" marks, the window's end) moves.
      int64_t last_end = windows[w].begin_ns;
      for (const AwaitedWork& a : work) last_end = std::max(last_end, a.last.end_ns);
      if (shrink > 0) waits[tid].push_back({last_end, 0, 0, shrink * 1000});
    }
    anchor_calls_submitted_by(INT64_MAX);
    ApplyCorrection(MakeCorrector(*profile, waits, controller), controller);
  }
  for (Worker& w : workers) ApplyCorrection(w.corrector, w.slice);
  if (controller == nullptr) return;

  // The step ends where the controller's step range now ends. Every process
  // moved by its own overhead, so what another paid less of may now lie past
  // that end: it is held to the step, as cutting held the raw times (and a
  // range cut at the step's end ends with it).
  for (const Span& span : controller->spans) {
    if (span.step == profile->step) profile->corrected_end_ns = span.end_ns;
  }
  const int64_t end = profile->corrected_end_ns;
  for (ProcessSlice& slice : profile->processes) {
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

std::shared_ptr<Corrector> Aggregator::MakeCorrector(const StepProfile& step,
                                                     const std::map<int64_t, std::vector<CostMark>>& waits,
                                                     ProcessSlice* slice) const {
  // Marks are cut on the process's clock like the spans (a nanosecond wider:
  // the clock fit's rounding), moved onto the aggregator's, where the step
  // begins, and held to [begin, end] there, as the spans were; waits are on
  // the aggregator's clock already.
  const ProcessTimeline& p = *slice->process;
  const ClockFit& clock = p.clock();
  std::map<int64_t, std::vector<CostMark>> marks;
  p.CutCosts(clock.FromAggregator(step.begin_ns) - 1, clock.FromAggregator(step.end_ns) + 1, &marks);
  for (auto& [tid, list] : marks) {
    for (CostMark& m : list) m.ts_ns = clock.ToAggregator(m.ts_ns);
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const CostMark& m) { return m.ts_ns < step.begin_ns || m.ts_ns > step.end_ns; }),
               list.end());
  }
  for (const auto& [tid, list] : waits) marks[tid].insert(marks[tid].end(), list.begin(), list.end());
  slice->costs = CostModel(p.hello().costs, config_.correction.scale);
  return std::make_shared<Corrector>(marks, slice->costs, step.begin_ns);
}

void Aggregator::ApplyCorrection(std::shared_ptr<const Corrector> corrector, ProcessSlice* slice) {
  const Corrector& c = *corrector;
  for (Span& span : slice->spans) {
    span.begin_ns = c.Correct(span.tid, span.begin_ns);
    span.end_ns = std::max(span.begin_ns, c.Correct(span.end_tid, span.end_ns));
  }
  for (Instant& i : slice->instants) i.ts_ns = c.Correct(i.tid, i.ts_ns);
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
  slice->corrector = std::move(corrector);
}

void Aggregator::CheckCausality(StepProfile* profile) {
  // The controller's marks: "ray.submit" just before a call, "ray.task"
  // naming its task right after (same thread), "ray.got" once its result is in.
  std::map<uint64_t, int64_t> submitted, got;
  for (const ProcessSlice& slice : profile->processes) {
    if (!slice.process->is_controller()) continue;
    for (const auto& [key, at] : RaySubmits(slice)) submitted.emplace(key, at.first);
    got.merge(RayGot(slice));
  }
  StepProfile::Causality& c = profile->causality;
  for (const ProcessSlice& slice : profile->processes) {
    if (slice.process->is_controller()) continue;
    for (const Span& s : slice.spans) {
      if (!s.has_payload || s.clipped_begin || s.clipped_end) continue;
      auto sub = submitted.find(s.payload);
      if (sub == submitted.end()) continue;
      ++c.checked;
      int64_t violation = std::max<int64_t>(0, sub->second - s.begin_ns);
      if (auto g = got.find(s.payload); g != got.end()) violation = std::max(violation, s.end_ns - g->second);
      if (violation > 0) {
        ++c.violations;
        c.max_violation_ns = std::max(c.max_violation_ns, violation);
      }
    }
  }
}

void Aggregator::ApplySubtasks(StepProfile* profile) {
  const std::vector<Occurrence> occurrences = SubtaskOccurrences(*profile, config_.subtasks);
  if (config_.discrete) {
    // One capture per occurrence, each cut to it; the step keeps a summary.
    for (const Occurrence& o : occurrences) {
      StepProfile capture = *profile;
      capture.capture = o.capture;
      capture.begin_ns = o.begin_ns;
      capture.end_ns = o.end_ns;
      for (ProcessSlice& slice : capture.processes) RestrictToIntervals(&slice, {{o.begin_ns, o.end_ns}});
      exporter_->ExportStep(capture);
      profile->captures.push_back(o.capture);
    }
    profile->summary_only = true;
    return;
  }
  Intervals controller;
  for (const Occurrence& o : occurrences) controller.emplace_back(o.begin_ns, o.end_ns);
  for (ProcessSlice& slice : profile->processes) {
    Intervals keep = controller;
    for (const auto& iv : OwnSubtaskIntervals(slice, config_.subtasks)) keep.push_back(iv);
    RestrictToIntervals(&slice, MergeIntervals(std::move(keep)));
  }
}

RunInfo Aggregator::MakeRunInfo(bool final) const {
  RunInfo run;
  run.config_yaml = ConfigToYaml(config_);
  for (const auto& [session, p] : processes_) run.processes.push_back({session, p.get()});
  run.steps_written = steps_written_;
  run.expected = expected_;
  run.not_profiled = NotProfiled();
  run.steps_seen = stats_.steps_seen;
  run.decode_errors = stats_.decode_errors;
  run.late_events = stats_.late_events;
  run.last_decode_error = stats_.last_decode_error;
  run.final = final;
  return run;
}

}  // namespace rlscope
