// The collector's side of the wire: the process's only ZeroMQ socket and what
// rides on it (Hello/Expected, clock probes, Control messages, event batches).
//
// Threads: the flush thread only (Collector::FlushLoop, transport.cc), which
// is the only thread that touches ZeroMQ. The send counters are atomics, read
// by Collector::Stats on any thread. The transport knows nothing of arming or
// thread registration: Control messages go to a handler, and what a flush
// sends arrives as an Outgoing taken from the recording side.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "native/clock.h"
#include "native/config.h"
#include "native/gpu_record.h"
#include "native/thread_buffer.h"
#include "native/wire.h"
#include "collector/spool.h"

namespace rlscope {

// Names that events refer to, new since the last flush.
struct Metadata {
  std::vector<std::pair<uint32_t, std::string>> strings;
  std::vector<std::pair<int64_t, std::string>> thread_names;
  std::vector<wire::CategoryName> categories;
  void Append(Metadata&& more);
  void Clear();  // keeps the capacity
  bool empty() const { return strings.empty() && thread_names.empty() && categories.empty(); }
};

// What one flush sends, taken from the units (Collector::FlushOnce, flush_thread.cc).
struct Outgoing {
  // The first `count` records of one thread's ring.
  struct Thread {
    ThreadBuffer* buffer;
    size_t count;
  };
  int64_t watermark_ns = 0;  // every event stamped before it is in this flush
  uint64_t dropped = 0;      // the process's drops so far
  uint64_t ack = 0;          // flush token to acknowledge in the last message, 0 none
  std::vector<Thread> threads;
  std::vector<GpuRecord> gpu;
  // Arming edges since the last flush (Arming::TakeEdges), in the first
  // message; reports_arming false: none sent (wire.h Batch::arming).
  bool reports_arming = false;
  std::vector<wire::ArmEdge> arming;
  std::vector<wire::MemorySample> memory;  // in the first message too
  // The CPU sampler's recorded samples so far and the time its handler took
  // in them (running totals; -1: no sampler): in the last message.
  int64_t cpu_handler_samples = -1;
  int64_t cpu_handler_ps = 0;
  Metadata metadata;
};

class Transport {
 public:
  using ControlHandler = std::function<void(const wire::Control&)>;

  // `wake_fd` is the collector's eventfd (-1: none; waits then run the full
  // interval). Nothing is opened until Connect.
  Transport(const Config& config, uint64_t session, int wake_fd);

  // Creates the DEALER socket and connects it. On failure says so on stderr
  // and goes on without a socket: nothing is sent, batches count as dropped.
  void Connect(const std::string& endpoint);
  bool connected() const { return socket_ != nullptr; }
  // ZeroMQ's I/O threads, started by Connect (the collector's own threads).
  const std::vector<int64_t>& own_threads() const { return own_threads_; }
  // Waits up to wait_ns for a wake-up (the eventfd, then drained), a
  // Control message, or the connection coming up or going down, whichever
  // comes first. True when the eventfd or a new connection woke it (a hello
  // and the spool's replay can go out at once).
  bool Wait(int64_t wait_ns);
  // True once after the connection to the aggregator went down (ZeroMQ's
  // socket monitor): what was in flight may be lost with it, and the peer
  // that comes back may be another aggregator, so the link says hello again
  // and replays what the spool kept (Link::SendControl).
  bool TakeLinkLost();
  // Whether a connection is up now (as the monitor last said; true without
  // a monitor, when nothing better is known).
  bool link_up() {
    PollMonitor();
    return monitor_ == nullptr || link_up_;
  }
  // A burst of clock probes when `interval_ms` passed since the last (none
  // when clock.probe_interval_ms is 0; the first once the aggregator's first
  // answer said where to probe): each answered before the next is sent
  // (bounded by 20 ms per probe on the aggregator's probe path of its own,
  // SetProbePath, when it has one and answers, else 50 ms on this
  // connection; none begun after kBurstMaxNs; the burst stops at the first
  // unanswered one). Other Control messages arriving meanwhile go to
  // `apply`. The samples ride on the next batch. A requested burst
  // (RequestBurst) runs whatever the interval, with 4x
  // clock.probes_per_burst. True when a burst ran.
  bool ProbeIfDue(const ControlHandler& apply, int64_t interval_ms);
  // The aggregator asked for a burst (Control.probe: a step waits for this
  // process's clock): the next ProbeIfDue runs one.
  void RequestBurst() { burst_requested_ = true; }
  // A Control came from the aggregator (the first: the answer to the hello).
  void Heard() { heard_ = true; }
  // The aggregator's probe path (Control.probe_port, probe_host, probe_key;
  // native/probe_packet.h): a UDP socket to it ("" host: the endpoint's).
  // Port 0, or a host that cannot be resolved: none.
  void SetProbePath(const std::string& host, uint64_t port, uint64_t key);
  bool burst_requested() const { return burst_requested_ || burst_now_; }
  // The aggregator reads this process's own clock (Control.same_clock):
  // its probes place nothing, and come at the idle rate (flush_thread.cc).
  void SetSameClock(bool same) { same_clock_ = same; }
  bool same_clock() const { return same_clock_; }
  // Whether anything waits to ride on the next batch: probe samples, or
  // names a batch could not take.
  bool has_pending() const { return !pending_probes_.empty() || !unsent_.empty(); }
  // Hands every Control message that arrived to `apply`. True when one asked
  // for a flush (a barrier to answer now).
  bool ReceiveControls(const ControlHandler& apply);
  // Queues one encoded message without blocking. False when it cannot be
  // queued (no socket, or the high-water mark): the caller retries later.
  bool Send(const std::string& message);

  struct SendResult {
    bool acked = false;     // the message carrying out.ack was queued
    uint64_t gpu_lost = 0;  // GPU records of a metadata message that could not be queued
  };
  // Encodes one flush into the spool (spool.h) and sends what the socket
  // takes: one message per kMaxEventsPerMessage events, metadata (with
  // out.gpu and the probe samples) on the first, the watermark and ack on the
  // last; the flush thread sends an empty one as a heartbeat only (its
  // FlushOnce skips the others). Nothing is sent
  // before ready (a hello was queued to this aggregator): it waits in order.
  SendResult SendBatches(Outgoing& out, const TickConverter& converter);
  // Sends what waits in the spool, in order, as far as the socket takes it.
  void Pump();
  // Whether batches and probes may go out: false from a Control.hello (an
  // aggregator that does not know this collector) until the new hello is
  // queued, then Rewind replays what the spool kept after `preamble`.
  void SetReady(bool ready) { ready_ = ready; }
  bool ready() const { return ready_; }
  void Rewind(std::string preamble) { spool_.Rewind(std::move(preamble)); }
  // Makes the message that re-sends every name (Collector::MakePreamble):
  // sent again after the spool dropped a message that may have carried some.
  void SetPreambleMaker(std::function<std::string()> make) { make_preamble_ = std::move(make); }
  // Forgets spooled batches of steps the aggregator has written.
  void Release(int64_t before_ns) { spool_.Release(before_ns); }
  // The next batch sequence number (for a message made outside SendBatches).
  uint64_t NextSeq() { return seq_++; }
  // At exit, after the last Pump: what still waits in the spool is lost
  // (counted); returns its events.
  uint64_t AbandonSpool() { return spool_.AbandonUnsent(); }
  // At exit, to leave on disk: Spool::TakeAll.
  uint64_t TakeSpool(size_t max_bytes, std::vector<std::string>* out, uint64_t* events) {
    return spool_.TakeAll(max_bytes, out, events);
  }
  void CountSpoolLost(uint64_t events, uint64_t messages) { spool_.CountLost(events, messages); }
  const Spool& spool() const { return spool_; }
  // Closes the socket (it lingers until `deadline`, MonotonicNs, to
  // deliver what is queued; 0 ms when `refused`) and the context.
  void Close(int64_t deadline, bool refused = false);

  // Events lost on the way out: dropped from a full spool before they were
  // sent, still waiting at exit, or evicted before an aggregator restart.
  uint64_t events_dropped() const { return spool_.lost_events(); }
  uint64_t batches_sent() const { return batches_sent_.load(std::memory_order_relaxed); }
  // Batches never sent: dropped from a full spool, or still waiting at exit.
  uint64_t batches_dropped() const { return spool_.lost_messages(); }

 private:
  static constexpr size_t kMaxEventsPerMessage = 1 << 16;
  static constexpr int64_t kUdpWaitNs = 20000000;  // a probe on the UDP path unanswered after 20 ms is lost
  static constexpr int kUdpGiveUpAfter = 3;
  // A burst begins no probe after this long (each may then wait its own
  // answer: 20 ms on the UDP path, 50 ms on the connection).
  static constexpr int64_t kBurstMaxNs = 50000000;
  // `requested`: the aggregator asked for it (Control.probe).
  void ProbeBurst(const ControlHandler& apply, bool requested);
  // `count` probes on the UDP path; false when its first went unanswered
  // (the burst then goes on the connection).
  bool UdpBurst(int64_t count, int64_t burst_end, bool late, bool drop);
  void CloseProbePath();
  // Reads the monitor's events (non-blocking); true when one said connected.
  bool PollMonitor();
  void AddEvents(const Outgoing::Thread& thread, const TickConverter& converter);

  const Config& config_;
  const uint64_t session_;
  const int wake_fd_;
  void* context_ = nullptr;
  void* socket_ = nullptr;
  void* monitor_ = nullptr;  // PAIR socket receiving socket_'s connect/disconnect events
  bool link_up_ = false, link_lost_ = false;
  std::vector<int64_t> own_threads_;  // ZeroMQ's I/O threads (Connect)
  uint64_t seq_ = 0;
  int64_t last_burst_ns_ = 0;     // when the last probe burst began (MonotonicNs), 0 none
  bool burst_requested_ = false;  // Control.probe came: burst at the next ProbeIfDue
  bool burst_now_ = false;        // a new probe path (SetProbePath): likewise, of its own accord
  bool heard_ = false;            // Heard: the first burst may go
  bool same_clock_ = false;       // SetSameClock
  std::string endpoint_;          // as Connect was given it
  int udp_fd_ = -1;               // the probe path (SetProbePath), -1 none
  uint64_t udp_key_ = 0, udp_port_ = 0;
  std::string udp_host_;
  int udp_failures_ = 0;                         // bursts in a row it did not answer: at kUdpGiveUpAfter, given up
  std::mt19937_64 rng_{std::random_device{}()};  // probe nonces
  int64_t bursts_ = 0;                           // bursts begun
  // Test only (names.h kEnvTestProbeLate): answers stamped this late in the
  // first late_bursts_ bursts (-1 every one), or with late_own_only_ in
  // those it starts itself (not those asked for); drop_answers_: those
  // bursts' answers are not taken at all.
  int64_t late_ns_ = 0, late_bursts_ = 0;
  bool late_own_only_ = false, drop_answers_ = false;
  std::vector<wire::ProbeSample> pending_probes_;  // answered probes to ship
  Metadata unsent_;
  wire::BatchWriter writer_;
  Spool spool_;
  std::function<std::string()> make_preamble_;
  bool ready_ = false;
  int64_t message_max_ts_ = INT64_MIN;  // latest event time in the message being encoded

  // Statistics (relaxed: counters read for reporting only).
  std::atomic<uint64_t> events_sent_{0};
  std::atomic<uint64_t> batches_sent_{0};
};

}  // namespace rlscope
