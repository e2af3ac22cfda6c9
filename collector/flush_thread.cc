// The Collector's flush thread (collector.h): the loop that wakes on the
// interval, a wake-up or a Control message; what each flush takes from the
// recording side; the hand-over to the Transport (transport.h), which does
// all the socket I/O. Every function here runs on the flush thread only.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "collector/collector.h"

namespace rlscope {

void Collector::FlushLoop() {
  // Before the first Hello, which carries the costs (overhead correction).
  if (selected() && config_.correction.enabled && test_clock_ == nullptr) Calibrate();
  transport_.SetPreambleMaker([this] { return MakePreamble(); });
  transport_.Connect(endpoint_);
  const Transport::ControlHandler apply = [this](const wire::Control& control) { ApplyControl(control); };
  int64_t next_flush_ns = MonotonicNs();
  bool was_armed = armed();
  // Hello before the first probe burst (up to probes_per_burst round trips):
  // the aggregator waits for a process's data only once it knows it.
  SendControl();
  while (true) {
    uint64_t ticket;
    bool stop;
    {
      std::lock_guard<std::mutex> lock(flush_mu_);
      stop = stop_;
    }
    int64_t now = MonotonicNs();
    bool woken = false;
    // Waits for the interval, a wake-up (eventfd) or a Control message from
    // the aggregator, whichever comes first.
    if (!stop && now < next_flush_ns) {
      int64_t wait_ns = next_flush_ns - now;
      if (window_close_at_ns_ != 0) wait_ns = std::min(wait_ns, std::max<int64_t>(0, window_close_at_ns_ - now));
      woken = transport_.Wait(wait_ns);
    }
    transport_.ProbeIfDue(apply);
    if (transport_.ReceiveControls(apply)) woken = true;  // answer the barrier now
    now = MonotonicNs();
    if (window_close_at_ns_ != 0 && now >= window_close_at_ns_) {
      window_close_at_ns_ = 0;
      window_open_.store(false, std::memory_order_relaxed);
      UpdateArmed();
    }
    {
      std::lock_guard<std::mutex> lock(flush_mu_);
      ticket = flush_requests_;
      stop = stop_;
      if (ticket > flushes_done_) woken = true;
    }
    if (!woken && !stop && now < next_flush_ns) continue;
    next_flush_ns = now + config_.flush.interval_ms * 1000000;
    // A window just closed, a barrier, or exit: CUPTI hands over what it
    // buffered first, so the GPU records ship with this flush.
    const bool armed_now = armed();
    if (void (*hook)() = gpu_flush_hook_.load(std::memory_order_acquire);
        hook != nullptr && (stop || pending_ack_ != 0 || (was_armed && !armed_now))) {
      hook();
    }
    was_armed = armed_now;
    SendControl();
    DrainAndSend();
    {
      std::lock_guard<std::mutex> lock(flush_mu_);
      flushes_done_ = ticket;
    }
    flushed_cv_.notify_all();
    if (stop) break;
  }
  ReconcileSampling(/*stop=*/true);  // no timer outlives the collector
  // flush.exit_timeout_ms bounds all of the exit: what waits in the spool
  // goes first, for three quarters of it (the rest is counted lost), still
  // answering the aggregator (a restarted one asks for a hello first); then
  // the goodbye, which must not overtake it; then the socket lingers for
  // what is queued, at least the last quarter. A refused process waits for
  // nothing.
  const int64_t start = MonotonicNs(), timeout_ns = config_.flush.exit_timeout_ms * 1000000;
  const int64_t drain_deadline = start + timeout_ns * 3 / 4, deadline = start + timeout_ns;
  if (transport_.connected()) {
    while (!refused_) {
      transport_.ReceiveControls(apply);
      SendControl();  // the hello again, when asked
      transport_.Pump();
      // Done when nothing waits (and no hello again is due: its replay would).
      if ((transport_.spool().idle() && !rehello_) || MonotonicNs() >= drain_deadline) break;
      transport_.Wait(5000000);
    }
    if (const uint64_t unsent = transport_.AbandonSpool(); unsent > 0) {
      std::fprintf(stderr,
                   "rlscope: pid %d: exiting with %llu recorded events the aggregator at %s never received "
                   "(%s); they are lost\n",
                   static_cast<int>(getpid()), static_cast<unsigned long long>(unsent), endpoint_.c_str(),
                   refused_ ? "it refused this process" : "it could not be reached before flush.exit_timeout_ms");
    }
    rlscope_stats_t stats;
    Stats(&stats);
    if (transport_.ready()) transport_.Send(wire::Encode(wire::Bye{session_, stats.events, stats.dropped}));
  }
  transport_.Close(deadline, refused_);
}

void Collector::SendControl() {
  if (!transport_.connected() || refused_) return;
  const bool again = rehello_;
  std::string hello_msg, expected_msg;
  uint64_t hello_gen = 0, expected_gen = 0;
  {
    std::lock_guard<std::mutex> lock(meta_mu_);
    hello_gen = hello_gen_;
    expected_gen = expected_gen_;
    if (again || hello_gen_ != hello_sent_gen_) hello_msg = wire::Encode(MakeHello());
    if (expected_gen_ != 0 && (again || expected_gen_ != expected_sent_gen_)) {
      expected_msg = wire::Encode(wire::Expected{session_, expected_});
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
      ++hellos_again_;
      transport_.Rewind(MakePreamble());
      // The new aggregator numbers steps from its resume point: the next
      // step's number is announced (steps.h) rather than left to it.
      derived_next_step_.store(-1, std::memory_order_relaxed);
    }
    transport_.SetReady(true);
  }
  if (!expected_msg.empty() && transport_.ready() && transport_.Send(expected_msg)) {
    std::lock_guard<std::mutex> lock(meta_mu_);
    expected_sent_gen_ = expected_gen;
  }
}

void Collector::DrainAndSend() {
  ReconcileSampling(/*stop=*/false);
  converter_.Sample();
  Outgoing out = Snapshot();
  const Transport::SendResult sent = transport_.SendBatches(out, converter_);
  if (sent.acked) pending_ack_ = 0;
  gpu_dropped_.fetch_add(sent.gpu_lost, std::memory_order_relaxed);
  RetireExitedThreads();
  SayTrouble(out.dropped);
}

void Collector::SayTrouble(uint64_t dropped) {
  // One line each, the first time: a loss the user would otherwise see only
  // in the summaries (or, with no aggregator, nowhere).
  constexpr int64_t kSilenceNs = 5'000'000'000;
  if (!said_unreachable_ && !heard_from_aggregator_ &&
      MonotonicNs() - start_ns_ > kSilenceNs) {
    said_unreachable_ = true;
    std::fprintf(stderr,
                 "rlscope: pid %d: no answer from the aggregator at %s after %lld s; events wait in the spool "
                 "(buffers.spool_mb=%lld in memory, then buffers.spool_file_mb=%lld on disk), then the oldest are "
                 "dropped and counted\n",
                 static_cast<int>(getpid()), endpoint_.c_str(), static_cast<long long>(kSilenceNs / 1000000000),
                 static_cast<long long>(config_.buffers.spool_mb), static_cast<long long>(config_.buffers.spool_file_mb));
  }
  if (!said_dropping_ && dropped > 0) {
    said_dropping_ = true;
    std::fprintf(stderr,
                 "rlscope: pid %d: dropping events (%llu so far): a thread recorded faster than the flush thread "
                 "emptied its ring (buffers.per_thread_kb=%lld, flush.interval_ms=%lld); whole ranges are "
                 "dropped, step boundaries kept, and every step's summary counts them\n",
                 static_cast<int>(getpid()), static_cast<unsigned long long>(dropped),
                 static_cast<long long>(config_.buffers.per_thread_kb),
                 static_cast<long long>(config_.flush.interval_ms));
  }
}

Outgoing Collector::Snapshot() {
  Outgoing out;
  // Every event stamped before the watermark is drained, except one whose
  // thread read the clock but had not yet published it (a preemption between
  // the two): allow 5 ms for that. (The flush barrier's ack is the other path.)
  // (Under test costs, events are stamped ahead by the test clock: so is it.)
  out.watermark_ns = converter_.ToNs(ReadTicks(clock_source_)) + std::max<int64_t>(0, TestClockNs()) - 5000000;
  out.ack = pending_ack_;
  std::vector<ThreadEntry*> entries;
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (auto& t : threads_) entries.push_back(t.get());
  }
  for (ThreadEntry* e : entries) {
    out.threads.push_back({e->buffer.get(), e->buffer->size()});
    // CPU samples ship as a block of their own with the thread's tid; their
    // shared objects and modules are named now, before the names are collected.
    if (ThreadBuffer* ring = e->sampled.ring.get(); ring != nullptr && ring->size() > 0) {
      const size_t n = ring->size();
      sampler_.Resolve(ring, n, &strings_);
      out.threads.push_back({ring, n});
    }
  }
  // GPU records queued by CUPTI's callbacks (their names are interned already).
  {
    std::lock_guard<std::mutex> lock(gpu_mu_);
    out.gpu.swap(gpu_records_);
  }
  // After the size snapshot: every drained event's strings exist.
  CollectMetadata(entries, &out.metadata);
  out.dropped = overflow_dropped_.load(std::memory_order_relaxed) + transport_.events_dropped() +
                gpu_dropped_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(registry_mu_);
  out.dropped += retired_dropped_;
  for (auto& t : threads_) out.dropped += t->buffer->dropped();
  return out;
}

}  // namespace rlscope
