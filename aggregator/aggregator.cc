#include "aggregator/aggregator.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <variant>

#include "aggregator/decode_ahead.h"
#include "aggregator/expected.h"
#include "aggregator/ray_calls.h"
#include "aggregator/step_cut.h"
#include "aggregator/subtasks.h"
#include "native/clock.h"
#include "native/names.h"
#include "native/steps.h"

namespace rlscope {

Aggregator::Aggregator(Config config, StepExporter* exporter, std::string config_file, KeySet config_keys)
    : run_config_(&context_, std::move(config), std::move(config_file), std::move(config_keys)),
      admission_(&context_),
      scheduler_(&context_, &run_config_),
      exporter_(exporter),
      clocks_(ClockDomain()),
      second_core_(AvailableCores() > 1),
      run_id_(NewRunId()) {}

std::string Aggregator::NewRunId() {
  std::random_device rd;
  char id[17];
  std::snprintf(id, sizeof(id), "%08x%08x", static_cast<unsigned>(rd()), static_cast<unsigned>(rd()));
  return id;
}

void Aggregator::Resume(const ResumePoint& point) {
  if (!point.run_id.empty()) run_id_ = point.run_id;  // the same run (a new id for one written before ids)
  releases_.Resume(point);
  scheduler_.Resume(releases_.resumed().resumes, point.awaited);
  steps_written_ = point.steps_written;
  context_.stats.steps_written = steps_written_.size();
  steps_triggered_ = point.steps_triggered;
  context_.stats.steps_triggered = steps_triggered_.size();
  context_.stats.steps_figures_only = point.steps_figures_only;
  context_.stats.steps_seen = point.steps_seen;
  recovered_ = point.recovered;
  std::string list;
  for (int64_t n : point.steps_written) list += (list.empty() ? "" : ", ") + std::to_string(n);
  context_.notes.Record(
      "resumed this run directory (an earlier aggregator of this run stopped before the run's end): " +
      std::to_string(point.steps_written.size()) + " steps already written (" + (list.empty() ? "none" : list) +
      "), the last step done " + std::to_string(point.last_step) + "; collectors replay what it had not written");
}

uint64_t Aggregator::OnFrame(const char* data, size_t size, int64_t now_ns, const std::string& peer) {
  return OnDecoded(wire::Decode(data, size), now_ns, peer);
}

std::vector<size_t> Aggregator::PriorityOrder(const std::vector<std::string>& bytes,
                                              const std::vector<std::string>& peers, const std::vector<bool>& ends,
                                              const std::string& controller_peer) {
  std::set<std::string> seen, priority;
  bool message_start = true;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (message_start && seen.insert(peers[i]).second &&
        ((!controller_peer.empty() && peers[i] == controller_peer) ||
         wire::PeekType(bytes[i]) == static_cast<uint8_t>(wire::MessageType::kHello))) {
      priority.insert(peers[i]);
    }
    message_start = ends[i];
  }
  std::vector<size_t> order;
  order.reserve(peers.size());
  for (const bool first : {true, false}) {
    for (size_t i = 0; i < peers.size(); ++i) {
      if ((priority.count(peers[i]) != 0) == first) order.push_back(i);
    }
  }
  return order;
}

void Aggregator::OnFrames(const std::vector<Received>& frames, const std::function<int64_t()>& now,
                          const std::function<void(size_t, uint64_t)>& after) {
  size_t bytes = 0;
  for (const Received& f : frames) bytes += f.bytes.size();
  std::unique_ptr<DecodeAhead> ahead;
  if (second_core_ && frames.size() > 1 && bytes >= kDecodeAheadFrom) {
    std::vector<std::string_view> views;
    for (const Received& f : frames) views.push_back(f.bytes);
    try {
      ahead = std::make_unique<DecodeAhead>(std::move(views));
    } catch (const std::system_error&) {
      // No thread to be had: each decoded as it is taken.
    }
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    const Received& f = frames[i];
    const uint64_t session =
        ahead ? OnDecoded(ahead->Take(i), now(), f.peer) : OnFrame(f.bytes.data(), f.bytes.size(), now(), f.peer);
    after(i, session);
  }
}

uint64_t Aggregator::OnDecoded(const wire::DecodeResult& r, int64_t now_ns, const std::string& peer) {
  if (!r.ok) {
    ++context_.stats.decode_errors;
    context_.stats.last_decode_error = r.error;
    return 0;
  }
  if (!admission_.Admit(r.message, peer, now_ns)) return 0;
  if (finished_) {
    // The run is written: a goodbye is acknowledged (nothing need be left
    // on disk), everything else is too late to matter.
    if (const auto* bye = std::get_if<wire::Bye>(&r.message)) AckBye(bye->session);
    return SessionOf(r.message);
  }
  OnMessage(r.message, now_ns);
  return SessionOf(r.message);
}

void Aggregator::AckBye(uint64_t session) {
  wire::Control ack;
  ack.bye_ack = true;
  context_.Send(session, ack);
}

std::vector<Outgoing> Aggregator::TakeOutgoing() {
  std::vector<Outgoing> out;
  out.swap(context_.outgoing);
  return out;
}

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

void Aggregator::OnMessage(const wire::Message& message, int64_t now_ns) {
  ++context_.stats.messages;
  // clang-format off
  std::visit(Overloaded{
                 [&](const wire::Hello& m) { OnHello(m, now_ns); },
                 [&](const wire::Batch& m) { OnBatch(m, now_ns); },
                 [&](const wire::Probe& m) { OnProbe(m, now_ns); },
                 [&](const wire::Expected& m) { OnExpected(m, now_ns); },
                 [&](const wire::Bye& m) { OnBye(m); },
                 [](const wire::Control&) {},  // ours, not a collector's
             },
             message);
  // clang-format on
}

void Aggregator::OnHello(const wire::Hello& hello, int64_t now_ns) {
  scheduler_.Back(hello.session);
  expected_.ProcessesChanged();
  auto& slot = processes_[hello.session];
  // A repeated hello updates the identity (labels learnt later, or the
  // real identity of a process first seen through a batch).
  if (!slot) {
    slot = std::make_unique<ProcessTimeline>(hello);
    releases_.Seen(hello.session, slot.get());
  } else {
    slot->Identify(hello);
  }
  clocks_.Update(slot.get(), {}, probes_off());  // one on the aggregator's own clock is placed from now
  slot->Touch(now_ns);
  wire::Control where;  // tell the newcomer where the run stands, and where to probe
  where.probe_port = probe_port_;
  where.probe_host = probe_host_;
  where.probe_key = probe_key_;
  where.same_clock = clocks_.SameClock(hello);  // its probes then come at the idle rate
  ClaimController(hello, slot.get(), &where);
  scheduler_.Where(&where);
  context_.Send(hello.session, where);
  RunInfoChanged(now_ns);
}

void Aggregator::RunInfoChanged(int64_t now_ns) {
  run_info_due_ = true;
  if (run_info_written_ns_ != 0 && now_ns - run_info_written_ns_ < kRunInfoEveryNs) return;  // Tick writes it
  run_info_due_ = false;
  run_info_written_ns_ = now_ns;
  exporter_->ExportRun(MakeRunInfo(false));
}

void Aggregator::ClaimController(const wire::Hello& hello, ProcessTimeline* p, wire::Control* where) {
  if (!p->claims_controller()) return;
  if (controller_session_ == 0 && releases_.MayControl(hello.session)) {
    controller_session_ = hello.session;
    p->set_controller();
    releases_.ControllerBack(hello.session, p);
    run_config_.Decide(hello);  // tells every collector connected so far
    scheduler_.RunConfigDecided();
    return;
  }
  if (hello.session == controller_session_ ||
      (controller_session_ == 0 && releases_.resumed().controller_session == 0)) {
    return;
  }
  where->role = names::kWorker;
  if (!demoted_.insert(hello.session).second) return;  // said once per process
  std::string theirs = "the run's controller before the aggregator restarted is";
  if (auto c = processes_.find(controller_session_); c != processes_.end()) {
    theirs = "pid " + std::to_string(c->second->identity().pid) + " on " + c->second->identity().host + " is";
  }
  context_.notes.Log("pid " + std::to_string(hello.identity.pid) + " on " + hello.identity.host +
                     " said hello as a controller too; " + theirs + " the run's: it records as a worker");
}

ProcessTimeline& Aggregator::SenderOf(const wire::Batch& batch) {
  auto it = processes_.find(batch.session);
  if (it == processes_.end()) {
    // A batch before (or without) its hello: the hello was dropped. Keep the
    // data under an anonymous identity rather than lose it.
    wire::Hello anon;
    anon.session = batch.session;
    anon.identity.host = "unknown";
    anon.identity.role = "worker";
    anon.identity.name = "unidentified";
    it = processes_.emplace(batch.session, std::make_unique<ProcessTimeline>(anon)).first;
    expected_.ProcessesChanged();
  }
  return *it->second;
}

void Aggregator::CountEvents(const wire::Batch& batch, const ClockEstimate& clock) {
  AggregatorStats& stats = context_.stats;
  for (const auto& block : batch.threads) {
    stats.events += block.events.size();
    if (!block.events.empty() && clock.ToAggregator(block.events.front().ts_ns) < last_cut_end_ns_) {
      ++stats.late_batches;
      for (const auto& e : block.events) stats.late_events += clock.ToAggregator(e.ts_ns) < last_cut_end_ns_ ? 1 : 0;
    }
  }
}

void Aggregator::OnBatch(const wire::Batch& batch, int64_t now_ns) {
  ProcessTimeline& sender = SenderOf(batch);
  sender.Touch(now_ns);
  if (!admission_.FirstTime(batch)) return;
  clocks_.Update(&sender, batch.probes, probes_off());
  StepEdges edges;
  sender.Add(batch, batch.session == controller_session_ ? &edges : nullptr);
  CountEvents(batch, sender.clock());
  scheduler_.OnEdges(std::move(edges), sender.clock(), now_ns);
}

void Aggregator::OnProbe(const wire::Probe& probe, int64_t now_ns) {
  // Answered at once, stamped with the time the frame was read: the
  // daemon sends it right after this call returns.
  wire::Control reply;
  reply.probe_t1 = probe.t1;
  reply.probe_t2 = now_ns;
  reply.probe_t3 = now_ns;
  context_.Send(probe.session, reply);
}

void Aggregator::OnExpected(const wire::Expected& expected, int64_t now_ns) {
  if (controller_session_ == 0 || expected.session == controller_session_) {
    expected_.Set(expected.processes, now_ns);
    RunInfoChanged(now_ns);
  }
}

void Aggregator::OnBye(const wire::Bye& bye) {
  if (auto it = processes_.find(bye.session); it != processes_.end()) it->second->Bye(bye);
  // Its messages arrive in order: everything it sent is here. It need leave
  // nothing on disk (a relay passes this back the same way).
  AckBye(bye.session);
}

void Aggregator::Tick(int64_t now_ns) {
  // Expected processes still starting hold steps (expected.h), within the grace.
  const bool starting =
      !scheduler_.idle() && expected_.Awaiting(processes_, now_ns, run_config_.config().flush.step_grace_ms * 1000000);
  while (const PendingStep* step = scheduler_.NextReady(now_ns, processes_, starting)) {
    if (!Emit(*step, false, now_ns)) break;  // stays pending; the daemon stops
    scheduler_.Done();
  }
  // A step that waits for processes' clocks: they are asked for a burst.
  if (const PendingStep* waiting = scheduler_.Next(); waiting != nullptr && context_.stats.write_errors == 0) {
    const std::vector<uint64_t> holders = scheduler_.ClockHolders(*waiting, processes_, now_ns);
    if (!holders.empty() && steps::RecordedSteps(run_config_.config()).Contains(waiting->span.number)) {
      clocks_.AskForBursts(holders, now_ns, &context_);
    }
  }
  if (release_due_ && now_ns - released_at_ns_ >= kRunInfoEveryNs && !Release(now_ns)) return;
  if (run_info_due_ && now_ns - run_info_written_ns_ >= kRunInfoEveryNs) RunInfoChanged(now_ns);
}

int64_t Aggregator::TickDueNs(int64_t now_ns) const {
  int64_t due = now_ns + kLongestSleepNs;
  if (release_due_) due = std::min(due, released_at_ns_ + kRunInfoEveryNs);
  if (run_info_due_) due = std::min(due, run_info_written_ns_ + kRunInfoEveryNs);
  if (const PendingStep* step = scheduler_.Next()) {
    due = std::min(due, step->closed_at_ns + run_config_.config().flush.step_grace_ms * 1000000);
    if (step->clock_held) due = std::min(due, now_ns + kClockWaitSleepNs);
  }
  return std::max(due, now_ns);
}

void Aggregator::Finish(int64_t now_ns) {
  if (context_.stats.write_errors == 0) {
    while (const PendingStep* step = scheduler_.Next()) {  // waits for nothing
      if (!Emit(*step, true, now_ns)) break;
      scheduler_.Done();
    }
  }
  NoteEmptyRun();
  if (context_.stats.write_errors == 0) Release(now_ns);  // the resume point: the last step done
  // Final only when every step is written: otherwise an aggregator started
  // again on this directory takes the run up from what the collectors kept.
  if (!exporter_->ExportRun(MakeRunInfo(context_.stats.write_errors == 0))) ++context_.stats.write_errors;
  finished_ = true;
  if (context_.stats.write_errors == 0) {
    // The run is over: nothing a collector still holds or records can be
    // written, so none of it is left on disk at its exit (kRunOver).
    wire::Control over;
    over.release_ns = wire::kRunOver;
    context_.Send(0, over);
  }
  exporter_->Flush(std::chrono::milliseconds(10000));
  exporter_->Shutdown();
}

void Aggregator::NoteEmptyRun() {
  if (!steps_written_.empty() || processes_.empty() || releases_.resumed().resumes > 0) return;
  uint64_t events = 0;
  for (const auto& [session, p] : processes_) events += p->events_received();
  std::string why;
  if (controller_session_ == 0) {
    why = "no step written: " + std::to_string(processes_.size()) + " processes connected and sent " +
          std::to_string(events) + " events, but no controller did (the process whose rlscope_ray.step or " +
          "\"step\" ranges cut the run into steps); without it nothing can be cut. If it ran, its hello never " +
          "reached this aggregator before it exited: its own stderr says what it could not deliver (on an " +
          "overloaded host, raise its flush.exit_timeout_ms)";
  } else if (context_.stats.steps_seen == 0) {
    const ProcessTimeline& c = *processes_.at(controller_session_);
    why = "no step written: the controller (pid " + std::to_string(c.identity().pid) + " on " + c.identity().host +
          ") connected but began no step (no rlscope_ray.step and no \"step\" range arrived)";
  }
  if (!why.empty()) context_.notes.Record(why);
}

std::vector<ExpectedProcess> Aggregator::NotProfiled() const {
  return rlscope::NotProfiled(expected_.processes(), processes_);
}

bool Aggregator::ControllerDone() const {
  auto c = processes_.find(controller_session_);
  return c != processes_.end() && c->second->said_bye();
}

namespace {

// Whether a step's analysis is worth a second thread (the correction's
// halves, the breakdown beside the export): a thread's start and join cost
// tens of microseconds, more than the halves of a small step take; most
// always-on steps are small.
constexpr size_t kSecondThreadRecords = 20000;

bool WorthASecondThread(const StepProfile& profile) {
  size_t records = 0;
  for (const ProcessSlice& s : profile.processes) {
    records += s.spans.size() + s.instants.size() + s.cpu_samples.size() + s.off_cpu.size() + s.gpu.size();
  }
  return records >= kSecondThreadRecords;
}

}  // namespace

StepProfile Aggregator::CutStep(const PendingStep& step, bool forced, int64_t now_ns) {
  const StepSpan& s = step.span;
  StepProfile profile;
  profile.step = s.number;
  profile.begin_ns = s.begin_ns;
  profile.end_ns = s.end_ns;
  profile.window_late_ns = step.window_late_ns;
  profile.clock_held = step.clock_held;
  bool any_late = false, any_unaligned = false;
  profile.clock_allowed_bound_ns = AllowedClockBoundNs(run_config_.config(), s.end_ns - s.begin_ns);
  for (const auto& [session, p] : processes_) {
    if (!run_config_.Selected(*p)) continue;  // connected, but its rank is not profiled
    // Flushed up to here (aggregator clock); 0 = never.
    const int64_t flushed = p->watermark_ns() != 0 ? p->clock().ToAggregator(p->watermark_ns()) : 0;
    if (p->lost() && flushed < s.begin_ns) continue;  // gone before this step
    ProcessSlice slice = CutProcess(*p, s, run_config_.config(), second_core_);
    slice.late = !StepScheduler::CaughtUp(*p, step);
    if (slice.late && !p->lost() && !p->said_bye() && now_ns - p->last_seen_ns() > AggregatorStats::kSilentAfterNs) {
      p->set_lost();  // said once, in the log and run.json
      context_.notes.Record("pid " + std::to_string(p->identity().pid) + " on " + p->identity().host +
                            " went silent without a goodbye during step " + std::to_string(s.number) +
                            ": lost; later steps do not wait for it");
    }
    if (p->lost()) {
      slice.lost = true;
      for (Span& span : slice.spans) {  // it never closed them: they end where its data ends (still open)
        if (!span.open || flushed >= s.end_ns) continue;
        span.end_ns = span.raw_end_ns = std::max(span.begin_ns, flushed);
        span.clipped_end = false;  // not cut at the step's end (correction moves those there)
      }
    }
    any_late = any_late || slice.late;
    slice.clock_fitness = FitnessOf(p->clock(), profile.clock_allowed_bound_ns);
    any_unaligned = any_unaligned || HoldsStep(slice.clock_fitness);
    profile.processes.push_back(std::move(slice));
  }
  profile.reason = any_late ? (forced ? "final" : "grace_timeout") : any_unaligned ? "clock_unaligned" : "complete";
  // What its Ray calls prove of the workers' clocks, for the steps after
  // (this one's causality check reads the estimates it was cut with).
  for (const auto& [session, bounds] : CausalOffsetBounds(profile)) {
    if (auto p = processes_.find(session); p != processes_.end()) {
      clocks_.AddCausality(p->second.get(), bounds, probes_off());
    }
  }
  AnalyzeCutStep(&profile, run_config_.config(), NotProfiled(), second_core_ && WorthASecondThread(profile));
  return profile;
}

PendingStep Aggregator::OnControllerClockNow(const PendingStep& pending) const {
  // The step's edges were put on the aggregator's clock when they arrived;
  // the controller's clock estimate may have moved since (its first probe
  // burst often lands within the first steps). Its spans are cut with the
  // estimate of now, so its step is too: the controller's own step range is
  // the step, exactly, not clipped by the estimate's change. Steps stay
  // apart: none begins before the last one written ended.
  PendingStep step = pending;
  auto c = processes_.find(controller_session_);
  if (c == processes_.end() || step.controller_end_ns == 0) return step;
  const ClockEstimate& clock = c->second->clock();
  step.span.begin_ns = std::max(last_cut_end_ns_, clock.ToAggregator(step.controller_begin_ns));
  step.span.end_ns = std::max(step.span.begin_ns, clock.ToAggregator(step.controller_end_ns));
  return step;
}

bool Aggregator::Emit(const PendingStep& pending, bool forced, int64_t now_ns) {
  const PendingStep step = OnControllerClockNow(pending);
  const Config& config = run_config_.config();
  if (!steps::RecordedSteps(config).Contains(step.span.number)) {
    ++context_.stats.steps_skipped;
    return StepDone(step, false, now_ns);
  }
  const int64_t emit_began_ns = MonotonicNs();
  StepProfile profile = CutStep(step, forced, now_ns);
  // Always on: figures only unless chosen up front or a trigger picks it
  // (triggers.h); its records are still the collectors' until StepDone.
  const bool chosen = steps::ChosenUpFront(config, step.span.number);
  if (config.always_on.enabled) {
    profile.trigger = triggers_.Decide(profile, chosen, config.always_on);
    profile.figures_only = !chosen && profile.trigger.empty();
    if (!profile.trigger.empty()) {
      ++context_.stats.steps_triggered;
      steps_triggered_.push_back(step.span.number);
      context_.notes.Log("step " + std::to_string(step.span.number) + " written in full: " + profile.trigger);
    }
  }
  if (!profile.figures_only) AnalyzeFullStep(&profile);
  // The breakdown, on the whole step: beside the trace's export when
  // nothing selects sub-tasks (then the trace is the step as analysed) and
  // there is a core for it. It reads the profile alone (its processes are
  // values, process_view.h): done before the profile goes.
  AnalyzeStepInto(&profile, config,
                  second_core_ && WorthASecondThread(profile) && config.subtasks.empty() && !config.discrete);
  struct Joined {
    const StepProfile& profile;
    ~Joined() { profile.analysis.Wait(); }
  } joined{profile};
  // Discrete captures go out before their step's summary.
  const LevelCutter recut = [this](int64_t begin_ns, int64_t end_ns, ProcessSlice* slice) {
    CutLevelsAndArming(*processes_.at(slice->process->hello().session), begin_ns, end_ns, slice);
  };
  // A figures-only step of a discrete run keeps the whole step, as a full
  // step's own profile does (its captures are full detail).
  if (!(profile.figures_only && config.discrete)) {
    for (const StepProfile& capture : ApplySubtasks(&profile, config.subtasks, config.discrete, recut)) {
      exporter_->ExportStep(capture);
    }
  }
  const bool exported = exporter_->ExportStep(profile);
  profile.analysis.Wait();
  if (!exported) {
    // Kept in the collectors' spools (nothing released): an aggregator
    // started again once the disk has room writes it from their replays.
    ++context_.stats.write_errors;
    return false;
  }
  if (profile.figures_only) {
    ++context_.stats.steps_figures_only;
  } else {
    // What a step overlapping this write took is not its own (triggers.h).
    triggers_.WroteFull(now_ns, now_ns + (MonotonicNs() - emit_began_ns));
    steps_written_.push_back(step.span.number);
    ++context_.stats.steps_written;
  }
  clocks_.Written(profile);
  if (profile.reason == "clock_unaligned") ++steps_clock_unaligned_;
  WaiveClocks(profile);
  return StepDone(step, !profile.figures_only, now_ns);
}

void Aggregator::WaiveClocks(const StepProfile& step) {
  for (const ProcessSlice& slice : step.processes) {
    auto p = processes_.find(slice.process->hello().session);
    if (!HoldsStep(slice.clock_fitness) || p == processes_.end() || p->second->clock_waived()) continue;
    const ClockEstimate& e = p->second->clock();
    p->second->WaiveClock(e.valid() ? e.bound_ns : -1);
    context_.notes.Record(
        ProcessLabel(*p->second) + ": its clock " +
        (e.valid() ? "error bound (" + std::to_string(e.bound_ns / 1000) + " us)" : std::string("estimate")) +
        " did not come good within flush.step_grace_ms of step " + std::to_string(step.step) +
        ": later steps do not wait for it (each is marked clock_unaligned) until its bound halves");
  }
}

bool Aggregator::StepDone(const PendingStep& step, bool written_in_full, int64_t now_ns) {
  // Each collector's release point, while its records of the step are
  // still here to say where a range across the step's end began; a later
  // step's point replaces one not yet sent.
  for (Outgoing& o : releases_.Done(step, processes_)) releases_due_[o.session] = std::move(o);
  release_due_ = true;
  if (written_in_full || now_ns - released_at_ns_ >= kRunInfoEveryNs) {
    if (!Release(now_ns)) return false;
  }
  // Steps are sequential: nothing that ended by this step's end can belong to
  // a later one.
  const int64_t end = step.span.end_ns;
  for (const auto& [session, p] : processes_) p->DiscardBefore(p->clock().FromAggregator(end));
  last_cut_end_ns_ = std::max(last_cut_end_ns_, end);
  return true;
}

bool Aggregator::Release(int64_t now_ns) {
  if (!release_due_) return true;
  // The resume point, with each process's release point, is on disk before
  // any collector forgets the step: a restarted aggregator leaves out of a
  // replay at least what was released (and writes the figures-only steps
  // after it again: readers keep a step's last line).
  release_due_ = false;
  released_at_ns_ = now_ns;
  run_info_due_ = false;  // written now, with every change so far
  run_info_written_ns_ = now_ns;
  if (!exporter_->ExportRun(MakeRunInfo(false))) {
    ++context_.stats.write_errors;
    return false;
  }
  for (auto& [session, o] : releases_due_) context_.outgoing.push_back(std::move(o));
  releases_due_.clear();
  return true;
}

void Aggregator::CountRecovered(const RecoveredCounts& counts, const std::string& path) {
  recovered_.files += counts.files;
  recovered_.processes += counts.processes;
  recovered_.events += counts.events;
  context_.notes.Log("took up " + std::to_string(counts.events) + " events a process left on disk at its exit (" +
                     path + ")");
}

bool Aggregator::NoteUnreadableSpool(const std::string& path, const std::string& error) {
  if (!unreadable_spools_.insert(path).second) return false;
  ++recovered_.unreadable_files;
  recovered_.last_error = error;
  context_.notes.Record("a spool file left at a process's exit cannot be taken up: " + error);
  return true;
}

std::optional<std::string> Aggregator::ArmedSteps(const ProcessTimeline& p) const {
  std::vector<int64_t> armed;
  for (const StepSpan& s : scheduler_.seen()) {
    const int during = p.ArmedDuring(p.clock().FromAggregator(s.begin_ns), p.clock().FromAggregator(s.end_ns));
    if (during < 0) return std::nullopt;
    if (during > 0) armed.push_back(s.number);
  }
  std::sort(armed.begin(), armed.end());
  armed.erase(std::unique(armed.begin(), armed.end()), armed.end());
  std::string out;
  for (size_t i = 0; i < armed.size();) {
    size_t j = i;
    while (j + 1 < armed.size() && armed[j + 1] == armed[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(armed[i]) + (j > i ? "-" + std::to_string(armed[j]) : "");
    i = j + 1;
  }
  return out;
}

RunInfo Aggregator::MakeRunInfo(bool final) const {
  const AggregatorStats& stats = context_.stats;
  RunInfo run;
  // The run's, as sent to collectors (RunConfig::Decide: the config changes
  // only there); the aggregator's own until then. Not emitted again for each
  // step's run.json.
  run.config_yaml = run_config_.yaml().empty() ? ConfigToYaml(run_config_.config()) : run_config_.yaml();
  run.config_source = run_config_.source();
  run.config_notes = context_.notes.recorded();
  for (const auto& [session, p] : processes_) {
    run.processes.push_back({session, std::make_shared<const ProcessView>(p->View()), run_config_.Selected(*p),
                             releases_.released_ns(session), admission_.ViaRelay(session), std::nullopt});
    if (final) run.processes.back().armed_steps = ArmedSteps(*p);
  }
  run.steps_written = steps_written_;
  run.steps_triggered = steps_triggered_;
  run.steps_figures_only = context_.stats.steps_figures_only;
  run.expected = expected_.processes();
  run.not_profiled = NotProfiled();
  run.steps_seen = stats.steps_seen;
  run.decode_errors = stats.decode_errors;
  run.late_events = stats.late_events;
  run.last_decode_error = stats.last_decode_error;
  run.refused_frames = stats.refused_frames;
  run.refused_hellos = stats.refused_hellos;
  run.last_refused = stats.last_refused;
  run.duplicate_frames = stats.duplicate_frames;
  run.probe_requests = clocks_.probe_requests();
  run.steps_clock_unaligned = steps_clock_unaligned_;
  run.clock_revisions = clocks_.revisions();
  run.clock_revisions_total = clocks_.revisions_total();
  run.last_step = releases_.last_step();
  run.controller_session = controller_session_ != 0 ? controller_session_ : releases_.resumed().controller_session;
  run.controller_resume_ns = releases_.controller_resume_ns();
  run.resumes = releases_.resumed().resumes;
  run.recovered = recovered_;
  run.run_key = admission_.run_key();
  run.run_id = run_id_;
  run.output_formats = exporter_->formats();  // as its exporter writes them (outputs.h)
  run.final = final;
  return run;
}

}  // namespace rlscope
