#include "aggregator/aggregator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <variant>

#include "aggregator/breakdown.h"
#include "aggregator/correction.h"
#include "aggregator/ray_calls.h"
#include "aggregator/relay.h"
#include "aggregator/subtasks.h"
#include "native/names.h"
#include "native/steps.h"

namespace rlscope {

Aggregator::Aggregator(Config config, StepExporter* exporter, std::string config_file, KeySet config_keys)
    : config_(std::move(config)),
      config_file_(std::move(config_file)),
      config_keys_(std::move(config_keys)),
      config_source_(RunKeysIn(config_keys_).empty() ? "defaults" : "aggregator"),
      exporter_(exporter),
      window_open_(steps::WorkersArmedBefore(config_.steps, 1)) {}

std::vector<std::string> Aggregator::TakeNotes() {
  std::vector<std::string> out;
  out.swap(notes_);
  return out;
}

void Aggregator::Resume(const ResumePoint& point) {
  resumed_ = point;
  ++resumed_.resumes;
  steps_written_ = point.steps_written;
  awaited_.insert(point.awaited.begin(), point.awaited.end());
  stats_.steps_written = steps_written_.size();
  stats_.steps_seen = point.steps_seen;
  last_step_ = point.last_step;
  controller_resume_ns_ = point.controller_ns;
  // Flush-barrier tokens of each aggregator of the run in a range of their
  // own: an ack a collector replays from before the restart answers none of
  // this one's barriers.
  barrier_token_ = static_cast<uint64_t>(resumed_.resumes) << 40;
  std::string list;
  for (int64_t n : point.steps_written) list += (list.empty() ? "" : ", ") + std::to_string(n);
  notes_.push_back("resumed this run directory (an earlier aggregator of this run stopped before the run's end): " +
                   std::to_string(point.steps_written.size()) + " steps already written (" +
                   (list.empty() ? "none" : list) + "), the last step done " + std::to_string(point.last_step) +
                   "; collectors replay what it had not written");
  all_notes_.push_back(notes_.back());
}

void Aggregator::SetSecret(std::string secret) {
  secret_ = std::move(secret);
  run_key_ = RunKey(secret_);
}

std::string Aggregator::RunKey(const std::string& secret) {
  if (secret.empty()) return "";
  // FNV-1a 64 over a domain prefix and the secret.
  uint64_t h = 14695981039346656037ull;
  for (char c : std::string("rlscope-run-key\n") + secret) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

namespace {

bool SameSecret(const std::string& given, const std::string& secret) {
  if (secret.empty() || given.size() != secret.size()) return false;
  // Constant time in the contents: a stranger learns nothing from timing.
  unsigned char diff = 0;
  for (size_t i = 0; i < secret.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ secret[i]);
  return diff == 0;
}

uint64_t SessionOf(const wire::Message& message) {
  return std::visit(
      [](const auto& m) -> uint64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, wire::Control>) {
          return 0;
        } else {
          return m.session;
        }
      },
      message);
}

}  // namespace

void Aggregator::Refuse(const std::string& why, const std::string& peer, bool ask_hello, int64_t now_ns) {
  ++stats_.refused_frames;
  stats_.last_refused = why;
  // No connection named (a caller without one): nothing to answer, and an
  // Outgoing without a peer would go to every collector.
  if (!ask_hello || peer.empty() || refused_peers_.count(peer) != 0) return;
  // At most twice a second per connection; the map is bounded (a stranger
  // opening connections only resets it).
  if (asked_hello_.size() > 4096) asked_hello_.clear();
  auto [it, fresh] = asked_hello_.emplace(peer, now_ns);
  if (!fresh && now_ns - it->second < 500000000) return;
  it->second = now_ns;
  wire::Control c;
  c.hello = true;
  outgoing_.push_back({0, wire::Encode(c), peer});
}

bool Aggregator::Admit(const wire::Message& message, const std::string& peer, int64_t now_ns) {
  if (std::holds_alternative<wire::Control>(message)) {
    Refuse("a Control message (the aggregator's own kind) from a connection", peer, false, now_ns);
    return false;
  }
  const uint64_t session = SessionOf(message);
  if (const auto* hello = std::get_if<wire::Hello>(&message)) {
    if (!secret_.empty() && !SameSecret(hello->secret, secret_)) {
      ++stats_.refused_hellos;
      Refuse("a hello " + std::string(hello->secret.empty() ? "without" : "with the wrong") +
                 " secret (pid " + std::to_string(hello->identity.pid) + ")",
             peer, false, now_ns);
      // Told once (a collector says so on its stderr); its later frames are
      // refused without a request to say hello again.
      if (refused_peers_.size() > 4096) refused_peers_.clear();
      if (!peer.empty() && refused_peers_.insert(peer).second) {
        wire::Control c;
        c.role = wire::kRoleRefused;
        outgoing_.push_back({0, wire::Encode(c), peer});
      }
      return false;
    }
    peers_[session] = peer;
    return true;
  }
  auto it = peers_.find(session);
  if (it != peers_.end() && it->second == peer) return true;
  // Unknown here (this aggregator restarted, or the collector reconnected):
  // asked to say hello again, which then binds the session to this peer.
  Refuse(it == peers_.end() ? "a frame from a session that has not said hello"
                            : "a frame for a session that said hello on another connection",
         peer, true, now_ns);
  return false;
}

uint64_t Aggregator::OnFrame(const char* data, size_t size, int64_t now_ns, const std::string& peer) {
  wire::DecodeResult r = wire::Decode(data, size);
  if (!r.ok) {
    ++stats_.decode_errors;
    stats_.last_decode_error = r.error;
    return 0;
  }
  if (!Admit(r.message, peer, now_ns)) return 0;
  OnMessage(r.message, now_ns);
  return SessionOf(r.message);
}

std::vector<Outgoing> Aggregator::TakeOutgoing() {
  std::vector<Outgoing> out;
  out.swap(outgoing_);
  return out;
}

void Aggregator::Send(uint64_t session, const wire::Control& control) {
  outgoing_.push_back({session, wire::Encode(control), ""});
}

void Aggregator::SetWindow(bool open, int64_t step) {
  window_step_ = step;
  if (open == window_open_) return;
  window_open_ = open;
  wire::Control c;
  c.window = open ? wire::Control::Window::kOpen : wire::Control::Window::kClosed;
  c.step = step;
  c.run_config = run_config_yaml_;  // again: a collector that missed it (a full queue) adopts it now
  Send(0, c);
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
  ++stats_.messages;
  std::visit(Overloaded{
                 [&](const wire::Hello& m) { OnHello(m, now_ns); },
                 [&](const wire::Batch& m) { OnBatch(m, now_ns); },
                 [&](const wire::Probe& m) { OnProbe(m, now_ns); },
                 [&](const wire::Expected& m) { OnExpected(m); },
                 [&](const wire::Bye& m) { OnBye(m); },
                 [](const wire::Control&) {},  // ours, not a collector's
             },
             message);
}

void Aggregator::OnHello(const wire::Hello& hello, int64_t now_ns) {
  awaited_.erase(hello.session);
  auto& slot = processes_[hello.session];
  // A repeated hello updates the identity (labels learnt later, or the
  // real identity of a process first seen through a batch).
  if (!slot) {
    slot = std::make_unique<ProcessTimeline>(hello);
    if (auto r = resumed_.released.find(hello.session); r != resumed_.released.end()) {
      slot->SkipBefore(r->second);
      released_ns_[hello.session] = r->second;
    }
  } else {
    slot->Identify(hello);
  }
  slot->Touch(now_ns);
  wire::Control where;  // tell the newcomer where the run stands
  // A resumed run's controller role is the session that held it before the
  // restart: another claimant saying hello first does not take the run.
  const bool may_control =
      controller_session_ == 0 && (resumed_.controller_session == 0 || hello.session == resumed_.controller_session);
  if (slot->claims_controller() && may_control) {
    controller_session_ = hello.session;
    slot->set_controller();
    // The controller of a resumed run: what it replays of the steps already
    // done is neither numbered nor written again.
    if (resumed_.last_step >= 0 && hello.session == resumed_.controller_session) {
      slot->ContinueSteps(resumed_.last_step + 1, resumed_.controller_ns);
    }
    DecideRunConfig(hello);  // tells every collector connected so far
  } else if (slot->claims_controller() && hello.session != controller_session_ &&
             (controller_session_ != 0 || resumed_.controller_session != 0)) {
    // One controller per run: a second claimant (a Ray actor created by the
    // controller actor inherits its runtime_env, role included) is a worker.
    where.role = names::kWorker;
    if (demoted_.insert(hello.session).second) {  // said once per process
      std::string theirs = "the run's controller before the aggregator restarted is";
      if (auto c = processes_.find(controller_session_); c != processes_.end()) {
        theirs = "pid " + std::to_string(c->second->identity().pid) + " on " + c->second->identity().host + " is";
      }
      notes_.push_back("pid " + std::to_string(hello.identity.pid) + " on " + hello.identity.host +
                       " said hello as a controller too; " + theirs + " the run's: it records as a worker");
    }
  }
  where.window = window_open_ ? wire::Control::Window::kOpen : wire::Control::Window::kClosed;
  where.step = window_step_;
  where.run_config = run_config_yaml_;
  Send(hello.session, where);
  exporter_->ExportRun(MakeRunInfo(false));
}

void Aggregator::DecideRunConfig(const wire::Hello& controller) {
  // config_source_: who set the run keys (a default is nobody's choice).
  const ConfigResult theirs = ParseConfig(controller.config, "the controller's config");
  if (!theirs.ok()) {  // a collector's own output: never expected
    notes_.push_back("the controller's config cannot be read (" + theirs.errors[0] + "): using " +
                     (config_file_.empty() ? "the defaults" : "--config " + config_file_));
  } else if (const KeySet theirs_run = RunKeysIn(theirs.keys); !theirs_run.empty()) {
    // Where both set a run key and disagree: one line, the controller's wins.
    std::string diff;
    for (const std::string& d : RunKeyDifferences(config_, theirs.config, &theirs_run)) {
      if (config_keys_.count(d.substr(0, d.find(':'))) != 0) diff += (diff.empty() ? "" : "; ") + d;
    }
    if (!diff.empty()) {
      notes_.push_back("the controller's config (pid " + std::to_string(controller.identity.pid) +
                       ") disagrees with --config " + config_file_ + " (" + diff + "): using the controller's");
    }
    bool aggregator_too = false;  // a run key only the aggregator's --config set
    for (const std::string& k : RunKeysIn(config_keys_)) aggregator_too |= theirs_run.count(k) == 0;
    AdoptRunKeys(theirs.config, &config_, &theirs_run);
    config_source_ = aggregator_too ? "controller and aggregator" : "controller";
  }
  all_notes_.insert(all_notes_.end(), notes_.begin(), notes_.end());
  run_config_yaml_ = ConfigToYaml(config_);
  wire::Control all;
  all.run_config = run_config_yaml_;
  Send(0, all);
  // Before the first step the window follows the run's steps (a step under
  // way keeps its own: the next edge follows them).
  if (!step_begun_) SetWindow(steps::WorkersArmedBefore(config_.steps, 1), 1);
}

bool Aggregator::Selected(const ProcessTimeline& p) const {
  if (run_config_yaml_.empty()) return p.hello().selected;
  return SelectsProcess(config_, p.is_controller(), p.identity().rank);  // a second claimant is a worker
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
  }
  return *it->second;
}

void Aggregator::CountEvents(const wire::Batch& batch, const ClockFit& clock) {
  for (const auto& block : batch.threads) {
    stats_.events += block.events.size();
    if (!block.events.empty() && clock.ToAggregator(block.events.front().ts_ns) < last_cut_end_ns_) {
      ++stats_.late_batches;
      for (const auto& e : block.events) stats_.late_events += clock.ToAggregator(e.ts_ns) < last_cut_end_ns_ ? 1 : 0;
    }
  }
}

void Aggregator::OnBatch(const wire::Batch& batch, int64_t now_ns) {
  ProcessTimeline& sender = SenderOf(batch);
  sender.Touch(now_ns);
  // A collector's messages arrive in order; a replay after a reconnect
  // starts with what this aggregator may have applied already. Only batches
  // with data count: names alone (the replay's preamble, numbered after the
  // batches it precedes) are applied whenever they come.
  if (!batch.threads.empty() || !batch.gpu.empty()) {
    uint64_t& next_seq = next_seq_[batch.session];
    if (batch.seq < next_seq) {
      ++stats_.duplicate_frames;
      return;
    }
    next_seq = batch.seq + 1;
  }
  StepEdges edges;
  sender.Add(batch, batch.session == controller_session_ ? &edges : nullptr);
  const ClockFit& clock = sender.clock();
  CountEvents(batch, clock);
  // Steps live on the aggregator's clock from here on (the controller's own
  // end of each is kept: a resumed run skips by it, exactly).
  std::vector<int64_t> raw_ends;
  for (const StepSpan& s : edges.closed) raw_ends.push_back(s.end_ns);
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
    step_begun_ = true;
    SetWindow(steps::WorkersArmedDuring(config_.steps, s.number), s.number);
  }
  for (size_t i = 0; i < edges.closed.size(); ++i) {
    const StepSpan& s = edges.closed[i];
    ++stats_.steps_seen;
    PendingStep step{s, now_ns, 0, raw_ends[i]};
    if (config_.steps.Contains(s.number)) {
      // Flush barrier: every collector flushes now and acknowledges.
      step.barrier = ++barrier_token_;
      wire::Control flush;
      flush.step = s.number;
      flush.flush = step.barrier;
      flush.run_config = run_config_yaml_;  // again, as with windows
      Send(0, flush);
    }
    pending_.push_back(step);
    SetWindow(steps::WorkersArmedBefore(config_.steps, s.number + 1), s.number + 1);
  }
}

void Aggregator::OnProbe(const wire::Probe& probe, int64_t now_ns) {
  // Answered at once, stamped with the time the frame was read: the
  // daemon sends it right after this call returns.
  wire::Control reply;
  reply.probe_t1 = probe.t1;
  reply.probe_t2 = now_ns;
  reply.probe_t3 = now_ns;
  Send(probe.session, reply);
}

void Aggregator::OnExpected(const wire::Expected& expected) {
  if (controller_session_ == 0 || expected.session == controller_session_) {
    expected_ = expected.processes;
    exporter_->ExportRun(MakeRunInfo(false));
  }
}

void Aggregator::OnBye(const wire::Bye& bye) {
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
  if (!awaited_.empty()) return false;  // a resumed run's processes, not back yet
  for (const auto& [session, p] : processes_) {
    if (!Selected(*p)) continue;
    if (now_ns - p->last_seen_ns() > AggregatorStats::kSilentAfterNs) continue;  // gone without a bye
    if (!CaughtUp(*p, step)) return false;
  }
  return true;
}

void Aggregator::Tick(int64_t now_ns) {
  size_t n = 0;
  while (n < pending_.size() && Ready(pending_[n], now_ns)) {
    if (!awaited_.empty()) {  // ready only by the grace time: they are not coming back
      notes_.push_back(std::to_string(awaited_.size()) + " processes of this run did not say hello again after "
                       "the aggregator restarted; steps no longer wait for them");
      all_notes_.push_back(notes_.back());
      awaited_.clear();
    }
    if (!Emit(pending_[n], false, now_ns)) break;  // stays pending; the daemon stops
    ++n;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(n));
}

void Aggregator::Finish(int64_t now_ns) {
  size_t n = 0;
  if (stats_.write_errors == 0) {
    while (n < pending_.size() && Emit(pending_[n], true, now_ns)) ++n;  // waits for nothing
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(n));
  NoteEmptyRun();
  // Final only when every step is written: otherwise an aggregator started
  // again on this directory takes the run up from what the collectors kept.
  if (!exporter_->ExportRun(MakeRunInfo(stats_.write_errors == 0))) ++stats_.write_errors;
  exporter_->Flush(std::chrono::milliseconds(10000));
  exporter_->Shutdown();
}

void Aggregator::NoteEmptyRun() {
  if (!steps_written_.empty() || processes_.empty() || resumed_.resumes > 0) return;
  uint64_t events = 0;
  for (const auto& [session, p] : processes_) events += p->events_received();
  std::string why;
  if (controller_session_ == 0) {
    why = "no step written: " + std::to_string(processes_.size()) + " processes connected and sent " +
          std::to_string(events) + " events, but no controller did (the process whose rlscope_ray.step or " +
          "\"step\" ranges cut the run into steps); without it nothing can be cut. If it ran, its hello never " +
          "reached this aggregator before it exited: its own stderr says what it could not deliver (on an " +
          "overloaded host, raise its flush.exit_timeout_ms)";
  } else if (stats_.steps_seen == 0) {
    const ProcessTimeline& c = *processes_.at(controller_session_);
    why = "no step written: the controller (pid " + std::to_string(c.identity().pid) + " on " + c.identity().host +
          ") connected but began no step (no rlscope_ray.step and no \"step\" range arrived)";
  }
  if (why.empty()) return;
  notes_.push_back(why);
  all_notes_.push_back(why);
}

bool Aggregator::RunComplete() const { return ControllerDone() && pending_.empty(); }

std::vector<ExpectedProcess> Aggregator::NotProfiled() const {
  auto get = [](const std::map<std::string, std::string>& m, const char* k) {
    auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  std::vector<ExpectedProcess> missing;
  for (const ExpectedProcess& e : expected_) {
    const std::string actor_id = get(e, "actor_id"), node_id = get(e, "node_id"), pid = get(e, "pid");
    bool found = false, node_seen = false;
    for (const auto& [session, p] : processes_) {
      const auto& labels = p->identity().labels;
      if (!actor_id.empty() && get(labels, "actor_id") == actor_id) found = true;
      if (actor_id.empty() && !pid.empty() && std::to_string(p->identity().pid) == pid &&
          (node_id.empty() || get(labels, "node_id") == node_id)) {
        found = true;
      }
      node_seen |= !node_id.empty() && get(labels, "node_id") == node_id;
      if (found) break;
    }
    if (found) continue;
    ExpectedProcess out = e;
    if (out.count("reason") == 0) {  // the reporter's own reason wins
      out["reason"] = node_seen ? "its runtime_env asks for profiling and other processes on its node connected, "
                                  "but its collector did not (its worker setup failed: see its log)"
                    : node_id.empty() ? "its runtime_env asks for profiling, but its collector never connected"
                                      : "its runtime_env asks for profiling, but no process on its node connected: "
                                        "the node has no rlscope plugin registered (RAY_RUNTIME_ENV_PLUGINS before "
                                        "`ray start`), or it cannot reach the aggregator";
    }
    missing.push_back(std::move(out));
  }
  return missing;
}

bool Aggregator::ControllerDone() const {
  auto c = processes_.find(controller_session_);
  return c != processes_.end() && c->second->said_bye();
}

namespace {

// One process's part of step `s`: cut on the process's own clock, then
// what was cut moved onto the aggregator's (clock_fit.h), where the step's
// bounds are, and clipped to them.
ProcessSlice CutProcess(const ProcessTimeline& p, const StepSpan& s) {
  ProcessSlice slice;
  slice.process = &p;
  const ClockFit& clock = p.clock();
  const int64_t begin = clock.FromAggregator(s.begin_ns), end = clock.FromAggregator(s.end_ns);
  p.Cut(begin, end, &slice.spans, &slice.instants);
  p.CutGpu(begin, end, &slice.gpu);
  p.CutCpuSamples(begin, end, &slice.cpu_samples);
  slice.profiler_cpu_ns = p.ProfilerCpuNs(begin, end);
  for (Span& span : slice.spans) {
    span.begin_ns = clock.ToAggregator(span.begin_ns);
    span.end_ns = clock.ToAggregator(span.end_ns);
  }
  for (Instant& i : slice.instants) i.ts_ns = clock.ToAggregator(i.ts_ns);
  for (CpuSample& c : slice.cpu_samples) c.ts_ns = clock.ToAggregator(c.ts_ns);
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
  return slice;
}

// The orders ProcessSlice promises (step_profile.h).
void SortSlice(ProcessSlice* slice) {
  std::sort(slice->spans.begin(), slice->spans.end(), [](const Span& a, const Span& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;  // enclosing first
  });
  std::sort(slice->instants.begin(), slice->instants.end(),
            [](const Instant& a, const Instant& b) { return a.ts_ns < b.ts_ns; });
  std::sort(slice->gpu.begin(), slice->gpu.end(),
            [](const GpuRecord& a, const GpuRecord& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(slice->cpu_samples.begin(), slice->cpu_samples.end(),
                   [](const CpuSample& a, const CpuSample& b) { return a.ts_ns < b.ts_ns; });
}

}  // namespace

bool Aggregator::Emit(const PendingStep& step, bool forced, int64_t now_ns) {
  const StepSpan& s = step.span;
  if (config_.steps.Contains(s.number)) {
    StepProfile profile;
    profile.step = s.number;
    profile.begin_ns = s.begin_ns;
    profile.end_ns = s.end_ns;
    bool any_late = false;
    for (const auto& [session, p] : processes_) {
      if (!Selected(*p)) continue;  // connected, but its rank is not profiled
      // Flushed up to here (aggregator clock); 0 = never.
      const int64_t flushed = p->watermark_ns() != 0 ? p->clock().ToAggregator(p->watermark_ns()) : 0;
      if (p->lost() && flushed < s.begin_ns) continue;  // gone before this step
      ProcessSlice slice = CutProcess(*p, s);
      slice.late = !CaughtUp(*p, step);
      if (slice.late && !p->lost() && !p->said_bye() && now_ns - p->last_seen_ns() > AggregatorStats::kSilentAfterNs) {
        p->set_lost();  // said once, in the log and run.json
        notes_.push_back("pid " + std::to_string(p->identity().pid) + " on " + p->identity().host +
                         " went silent without a goodbye during step " + std::to_string(s.number) +
                         ": lost; later steps do not wait for it");
        all_notes_.push_back(notes_.back());
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
      profile.processes.push_back(std::move(slice));
    }
    profile.reason = !any_late ? "complete" : forced ? "final" : "grace_timeout";
    Analyze(&profile);
    // Discrete captures go out before their step's summary.
    for (const StepProfile& capture : ApplySubtasks(&profile, config_.subtasks, config_.discrete)) {
      exporter_->ExportStep(capture);
    }
    if (!exporter_->ExportStep(profile)) {
      // Kept in the collectors' spools (nothing released): an aggregator
      // started again once the disk has room writes it from their replays.
      ++stats_.write_errors;
      return false;
    }
    steps_written_.push_back(s.number);
    ++stats_.steps_written;
  } else {
    ++stats_.steps_skipped;
  }
  last_step_ = std::max(last_step_, s.number);
  controller_resume_ns_ = step.controller_end_ns;
  // The resume point, with each process's release point, is on disk before
  // any collector forgets the step: a restarted aggregator leaves out of a
  // replay at least what was released.
  std::vector<Outgoing> releases = Release(s);
  if (!exporter_->ExportRun(MakeRunInfo(false))) {
    ++stats_.write_errors;
    return false;
  }
  outgoing_.insert(outgoing_.end(), releases.begin(), releases.end());
  // Steps are sequential: nothing that ended by this step's end can belong to
  // a later one.
  for (const auto& [session, p] : processes_) p->DiscardBefore(p->clock().FromAggregator(s.end_ns));
  last_cut_end_ns_ = std::max(last_cut_end_ns_, s.end_ns);
  return true;
}

std::vector<Outgoing> Aggregator::Release(const StepSpan& s) {
  std::vector<Outgoing> out;
  for (const auto& [session, p] : processes_) {
    const ClockFit& clock = p->clock();
    // Without a fit, another host's times cannot be placed (it releases at
    // a later step, or keeps what it spooled until its spool is full).
    if (!clock.estimate().valid) continue;
    int64_t release = p->ReleasePoint(clock.FromAggregator(s.end_ns));
    // A range open since before the previous step's end (a whole-run range)
    // does not hold the spool for ever: a restart loses only its open.
    if (released_end_ns_ != INT64_MIN) release = std::max(release, clock.FromAggregator(released_end_ns_));
    int64_t& last = released_ns_[session];
    if (release == 0 || release <= last) continue;
    last = release;
    wire::Control c;
    c.release_ns = release;
    out.push_back({session, wire::Encode(c), ""});
  }
  released_end_ns_ = s.end_ns;
  return out;
}

void Aggregator::Analyze(StepProfile* profile) const {
  if (config_.correction.enabled) CorrectStep(profile, config_.subtasks, config_.correction.scale);
  for (ProcessSlice& slice : profile->processes) SortSlice(&slice);
  profile->not_profiled = NotProfiled();
  profile->clock_warn_bound_ns = config_.clock.warn_bound_us * 1000;
  CheckCausality(profile);
  ClassifyStepSamples(profile, AttributionRules(config_.attribution));
  // On the whole step, before sub-task filtering drops what lies outside.
  profile->analysis = std::make_shared<const StepAnalysis>(AnalyzeStep(*profile, config_.subtasks));
}

RunInfo Aggregator::MakeRunInfo(bool final) const {
  RunInfo run;
  run.config_yaml = ConfigToYaml(config_);
  run.config_source = config_source_;
  run.config_notes = all_notes_;
  for (const auto& [session, p] : processes_) {
    auto r = released_ns_.find(session);
    auto peer = peers_.find(session);
    std::string_view relay, inner;
    const bool via_relay = peer != peers_.end() && SplitRelayPeer(peer->second, &relay, &inner);
    run.processes.push_back({session, p.get(), Selected(*p), r != released_ns_.end() ? r->second : 0, via_relay});
  }
  run.steps_written = steps_written_;
  run.expected = expected_;
  run.not_profiled = NotProfiled();
  run.steps_seen = stats_.steps_seen;
  run.decode_errors = stats_.decode_errors;
  run.late_events = stats_.late_events;
  run.last_decode_error = stats_.last_decode_error;
  run.refused_frames = stats_.refused_frames;
  run.refused_hellos = stats_.refused_hellos;
  run.last_refused = stats_.last_refused;
  run.duplicate_frames = stats_.duplicate_frames;
  run.last_step = last_step_;
  run.controller_session = controller_session_ != 0 ? controller_session_ : resumed_.controller_session;
  run.controller_resume_ns = controller_resume_ns_;
  run.resumes = resumed_.resumes;
  run.run_key = run_key_;
  run.final = final;
  return run;
}

}  // namespace rlscope
