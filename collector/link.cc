#include "collector/link.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "native/clock.h"
#include "native/names.h"
#include "native/spool_file.h"

namespace rlscope {

namespace {

// A controller's own config is the run's (config.h): the aggregator decides
// the run's from the keys it set.
std::string HelloConfig(const CollectorContext& ctx, bool controller) {
  return controller && !ctx.own.keys.empty() ? ConfigToYaml(ctx.own.config, &ctx.own.keys) : std::string();
}

}  // namespace

Link::Link(CollectorContext& ctx, Recording& recording, Arming& arming, wire::Identity identity)
    : ctx_(ctx),
      recording_(recording),
      arming_(arming),
      transport_(ctx.own.config, ctx.session, ctx.wake_fd),
      identity_(std::move(identity)),
      hello_config_(HelloConfig(ctx, arming.is_controller())),
      spool_dir_(SpoolDirFor(RunKey(ctx.secret))),
      clock_domain_(ClockDomain()) {
  if (ctx.test_clock != nullptr) costs_ = ctx.test_clock->costs();
}

void Link::SetLabel(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  identity_.labels[key] = value;
  ++hello_gen_;
}

void Link::SetCost(const std::string& key, double ns) { SetCosts({{key, ns}}); }

void Link::SetCosts(const std::map<std::string, double>& costs) {
  if (ctx_.test_clock != nullptr) return;
  std::lock_guard<std::mutex> lock(meta_mu_);
  for (const auto& [key, ns] : costs) costs_[key] = ns;
  ++hello_gen_;
}

double Link::Cost(const std::string& key) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  auto it = costs_.find(key);
  return it == costs_.end() ? -1 : it->second;
}

void Link::SetRole(bool controller) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  identity_.role = controller ? names::kController : names::kWorker;
  hello_config_ = HelloConfig(ctx_, controller);
  ++hello_gen_;
}

void Link::SelectionChanged() {
  std::lock_guard<std::mutex> lock(meta_mu_);
  ++hello_gen_;  // the aggregator learns it from the next Hello
}

void Link::ReportExpected(std::vector<std::map<std::string, std::string>> processes) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  expected_ = std::move(processes);
  ++expected_gen_;
}

wire::Hello Link::MakeHello() const {
  wire::Hello hello;
  hello.session = ctx_.session;
  hello.identity = identity_;
  hello.clock = "monotonic";
  hello.clock_domain = clock_domain_;
  hello.start_ns = ctx_.start_ns;
  hello.selected = arming_.selected();
  if (arming_.is_controller()) hello.config = hello_config_;
  hello.costs = costs_;
  hello.secret = ctx_.secret;
  return hello;
}

std::string Link::MakePreamble() {
  wire::Batch b;
  b.session = ctx_.session;
  b.seq = transport_.NextSeq();
  recording_.AllNames(&b);
  return wire::Encode(b);
}

void Link::Start() {
  transport_.SetPreambleMaker([this] { return MakePreamble(); });
  transport_.Connect(ctx_.endpoint);
  connected_ns_ = MonotonicNs();
}

bool Link::settled() {
  // Down, nothing can go out: the connection's return wakes the flush thread.
  if (!transport_.connected() || refused_ || !transport_.link_up()) return true;
  std::lock_guard<std::mutex> lock(meta_mu_);
  return transport_.ready() && !rehello_ && hello_sent_gen_ == hello_gen_ && transport_.spool().idle();
}

void Link::SendControl() {
  if (!transport_.connected() || refused_) return;
  if (transport_.TakeLinkLost() && !rehello_) {
    // The connection went down: what was in flight may be gone with it, and
    // the aggregator that answers next may be a new one (or the same one:
    // it drops what it applied already). Hello again, then the replay.
    rehello_ = true;
    transport_.SetReady(false);
  }
  const bool again = rehello_;
  std::string hello_msg, expected_msg;
  uint64_t hello_gen = 0, expected_gen = 0;
  {
    std::lock_guard<std::mutex> lock(meta_mu_);
    hello_gen = hello_gen_;
    expected_gen = expected_gen_;
    if (again || hello_gen_ != hello_sent_gen_) {
      wire::Hello hello = MakeHello();
      hello.kind = again ? wire::Hello::kReplay : hello_sent_gen_ == 0 ? wire::Hello::kFirst : wire::Hello::kUpdate;
      hello_msg = wire::Encode(hello);
    }
    if (expected_gen_ != 0 && (again || expected_gen_ != expected_sent_gen_)) {
      expected_msg = wire::Encode(wire::Expected{ctx_.session, expected_});
    }
  }
  // A control message that cannot be queued now is retried on the next flush.
  if (!hello_msg.empty() && transport_.Send(hello_msg)) {
    {
      std::lock_guard<std::mutex> lock(meta_mu_);
      hello_sent_gen_ = hello_gen;
    }
    if (again) {
      rehello_ = false;
      // The aggregator that answers may be another, on another clock: its
      // answer says anew whether it reads this one (Control.same_clock).
      transport_.SetSameClock(false);
      transport_.Rewind(MakePreamble());
      // The new aggregator numbers steps from its resume point: the next
      // step's number is announced (steps.h) rather than left to it.
      arming_.AnnounceNextStep();
    }
    transport_.SetReady(true);
  }
  if (!expected_msg.empty() && transport_.ready() && transport_.Send(expected_msg)) {
    std::lock_guard<std::mutex> lock(meta_mu_);
    expected_sent_gen_ = expected_gen;
  }
}

bool Link::Apply(const wire::Control& control) {
  heard_from_aggregator_ = true;
  ++controls_heard_;
  if (control.role == wire::kRoleRefused) {
    if (!refused_) {
      refused_ = true;
      transport_.SetReady(false);  // for good: what it records waits in the spool, then is dropped (counted)
      std::fprintf(stderr,
                   "rlscope: pid %d: the aggregator at %s refused this process: its hello %s the run's secret "
                   "(%s); nothing it records reaches the run\n",
                   static_cast<int>(getpid()), ctx_.endpoint.c_str(), ctx_.secret.empty() ? "lacks" : "does not carry",
                   names::kEnvSecret);
    }
    return false;
  }
  if (refused_) return false;
  if (control.hello && !rehello_) {
    // An aggregator that does not know this collector (it restarted): hello
    // again, then the spool's replay; nothing else goes out before.
    rehello_ = true;
    transport_.SetReady(false);
  }
  if (control.same_clock) transport_.SetSameClock(true);
  if (control.release_ns != 0) transport_.Release(control.release_ns);
  if (control.bye_ack) bye_acked_ = true;
  if (control.release_ns == wire::kRunOver) run_over_ = true;
  if (control.flush > pending_ack_) pending_ack_ = control.flush;
  transport_.Heard();
  if (control.probe_port != 0) transport_.SetProbePath(control.probe_host, control.probe_port, control.probe_key);
  if (control.probe) transport_.RequestBurst();
  return true;
}

uint64_t Link::SendBatches(Outgoing& out) {
  out.ack = pending_ack_;
  const Transport::SendResult sent = transport_.SendBatches(out, ctx_.converter);
  if (sent.acked) pending_ack_ = 0;
  return sent.gpu_lost;
}

void Link::SayTrouble(uint64_t dropped) {
  // One line each, the first time: a loss the user would otherwise see only
  // in the summaries (or, with no aggregator, nowhere).
  constexpr int64_t kSilenceNs = 5'000'000'000;
  const Config& config = ctx_.own.config;
  // Counted from the connect, not the process's start: a start-up slowed by
  // a busy host (calibration first) is not the aggregator's silence.
  if (!said_unreachable_ && !heard_from_aggregator_ && connected_ns_ != 0 &&
      MonotonicNs() - connected_ns_ > kSilenceNs) {
    said_unreachable_ = true;
    std::fprintf(stderr,
                 "rlscope: pid %d: no answer from the aggregator at %s after %lld s; events wait in the spool "
                 "(buffers.spool_mb=%lld in memory, then buffers.spool_file_mb=%lld on disk), then the oldest are "
                 "dropped and counted\n",
                 static_cast<int>(getpid()), ctx_.endpoint.c_str(), static_cast<long long>(kSilenceNs / 1000000000),
                 static_cast<long long>(config.buffers.spool_mb), static_cast<long long>(config.buffers.spool_file_mb));
  }
  if (!said_dropping_ && dropped > 0) {
    said_dropping_ = true;
    std::fprintf(stderr,
                 "rlscope: pid %d: dropping events (%llu so far): threads recorded faster than the flush thread "
                 "emptied their rings, and their overflow reached buffers.max_mb=%lld (buffers.per_thread_kb=%lld, "
                 "flush.interval_ms=%lld); whole ranges are dropped, step boundaries kept, and every step's "
                 "summary counts them\n",
                 static_cast<int>(getpid()), static_cast<unsigned long long>(dropped),
                 static_cast<long long>(config.buffers.max_mb), static_cast<long long>(config.buffers.per_thread_kb),
                 static_cast<long long>(config.flush.interval_ms));
  }
}

void Link::Stop(const Transport::ControlHandler& apply, const std::function<std::pair<uint64_t, uint64_t>()>& totals) {
  // flush.exit_timeout_ms bounds all of the exit: what waits in the spool
  // goes first, for three quarters of it, still answering the aggregator (a
  // restarted one asks for a hello first; a connection that comes back says
  // hello again and replays); then the goodbye, which must not overtake it;
  // then its acknowledgement, or any sign that the aggregator is alive and
  // reading after it, to the deadline. What is not known delivered by then
  // is left on disk (LeaveOnDisk), unless the aggregator said the run is
  // over (wire::kRunOver: no step can take it). A refused process waits for
  // nothing.
  const int64_t start = MonotonicNs(), timeout_ns = ctx_.own.config.flush.exit_timeout_ms * 1000000;
  const int64_t drain_deadline = start + timeout_ns * 3 / 4, deadline = start + timeout_ns;
  bool alive_after_bye = false;
  if (transport_.connected()) {
    while (!refused_) {
      transport_.ReceiveControls(apply);
      SendControl();  // the hello again, when asked
      transport_.Pump();
      // Done when nothing waits on a connection that is up (and no hello
      // again is due: its replay would), or when the run is over.
      if ((transport_.spool().idle() && !rehello_ && transport_.link_up()) || run_over_ ||
          MonotonicNs() >= drain_deadline) {
        break;
      }
      transport_.Wait(5000000);
    }
    if (refused_) {
      if (const uint64_t unsent = transport_.AbandonSpool(); unsent > 0) SayLost(unsent, "it refused this process");
    } else if (transport_.spool().idle() && !rehello_ && transport_.ready()) {
      // Everything went out: the goodbye, then its acknowledgement (through
      // a relay, from the root), in what is left of the timeout. An
      // aggregator that is behind answers late; any message from it after
      // the goodbye went says it is alive and reading in order (a step it
      // wrote, a window), and is taken as delivery: waiting out the timeout
      // and leaving all it has yet to write on disk would cost every exit
      // while it catches up. (What that leaves: it dies before reading the
      // goodbye.)
      const auto [events, dropped] = totals();
      transport_.Send(wire::Encode(wire::Bye{ctx_.session, events, dropped + transport_.events_dropped()}));
      const uint64_t heard = controls_heard_;
      while (!bye_acked_ && controls_heard_ == heard && transport_.link_up() && MonotonicNs() < deadline) {
        transport_.Wait(5000000);
        transport_.ReceiveControls(apply);
      }
      // (Not one asking for a hello again: a new aggregator, which has none of it.)
      if (controls_heard_ != heard && !rehello_) alive_after_bye = true;
    }
    if (!refused_ && !bye_acked_ && !run_over_ && !alive_after_bye) {
      // Not all of it is known to have arrived: all that is kept is left
      // on disk, and nothing more goes out (the file has it all).
      LeaveOnDisk(totals);
      transport_.Close(start, false);
      return;
    }
  }
  transport_.Close(deadline, refused_);
}

void Link::SayLost(uint64_t events, const std::string& why) {
  std::fprintf(stderr,
               "rlscope: pid %d: exiting with %llu recorded events the aggregator at %s never received (%s); "
               "they are lost\n",
               static_cast<int>(getpid()), static_cast<unsigned long long>(events), ctx_.endpoint.c_str(), why.c_str());
}

void Link::LeaveOnDisk(const std::function<std::pair<uint64_t, uint64_t>()>& totals) {
  // An aggregator that went away may have taken sent messages with it
  // (what its spool evicted is lost then: counted by Rewind). The file
  // holds all that is kept, sent or not, after the hello and every name:
  // whoever takes it up may know none of them.
  if (rehello_ || !transport_.link_up()) transport_.Rewind("");
  std::vector<std::string> messages;
  {
    std::lock_guard<std::mutex> lock(meta_mu_);
    wire::Hello hello = MakeHello();
    hello.kind = wire::Hello::kReplay;  // all the spool kept follows
    messages.push_back(wire::Encode(hello));
  }
  messages.push_back(MakePreamble());
  uint64_t events = 0;
  const size_t max_bytes = static_cast<size_t>(ctx_.own.config.buffers.spool_file_mb) << 20;
  transport_.TakeSpool(max_bytes, &messages, &events);
  const size_t taken = messages.size() - 2;
  if (events == 0) return;  // names and a goodbye only: nothing of the run's to keep
  const auto [recorded, dropped] = totals();
  messages.push_back(wire::Encode(wire::Bye{ctx_.session, recorded, dropped + transport_.events_dropped()}));
  char name[64];
  std::snprintf(name, sizeof(name), "%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(ctx_.session));
  const SpoolWriteResult written = WriteSpoolFile(spool_dir_, name, messages);
  if (!written.ok) {
    transport_.CountSpoolLost(events, taken);
    SayLost(events, "it could not be reached before flush.exit_timeout_ms, and " + written.error);
    return;
  }
  std::fprintf(stderr,
               "rlscope: pid %d: the aggregator at %s did not take %llu recorded events before "
               "flush.exit_timeout_ms; left on this node's disk in %s: a restarted aggregator of the run, the "
               "node's relay or rlscope_ray.shutdown takes them up (by hand: rlscope-ray recover RUN_DIR)\n",
               static_cast<int>(getpid()), ctx_.endpoint.c_str(), static_cast<unsigned long long>(events),
               written.path.c_str());
}

}  // namespace rlscope
