// The collector's ZeroMQ side (transport.h): the only file that includes
// zmq.h. Flush thread only.
#include "collector/transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <iterator>
#include <thread>
#include <variant>

#include <zmq.h>

#include "collector/proc_self.h"
#include "native/names.h"
#include "native/probe_packet.h"

namespace rlscope {

namespace {

// The Control message in a received frame, or nullptr (not one, or corrupt).
const wire::Control* AsControl(const wire::DecodeResult& r) {
  return r.ok ? std::get_if<wire::Control>(&r.message) : nullptr;
}

wire::DecodeResult DecodeMsg(zmq_msg_t* msg) {
  return wire::Decode(static_cast<const char*>(zmq_msg_data(msg)), zmq_msg_size(msg));
}

// Takes up to max_events events off the front of `threads` (threads in order,
// their counts reduced); *taken is how many.
std::vector<Outgoing::Thread> TakeEvents(std::vector<Outgoing::Thread>* threads, size_t max_events, size_t* taken) {
  std::vector<Outgoing::Thread> take;
  size_t budget = max_events;
  for (Outgoing::Thread& t : *threads) {
    if (t.count == 0 || budget == 0) continue;
    const size_t n = std::min(t.count, budget);
    take.push_back({t.buffer, n});
    t.count -= n;
    budget -= n;
  }
  *taken = max_events - budget;
  return take;
}

}  // namespace

void Metadata::Append(Metadata&& more) {
  strings.insert(strings.end(), std::make_move_iterator(more.strings.begin()),
                 std::make_move_iterator(more.strings.end()));
  thread_names.insert(thread_names.end(), std::make_move_iterator(more.thread_names.begin()),
                      std::make_move_iterator(more.thread_names.end()));
  categories.insert(categories.end(), more.categories.begin(), more.categories.end());
}

void Metadata::Clear() {
  strings.clear();
  thread_names.clear();
  categories.clear();
}

Transport::Transport(const Config& config, uint64_t session, int wake_fd)
    : config_(config),
      session_(session),
      wake_fd_(wake_fd),
      spool_(static_cast<size_t>(config.buffers.spool_mb) << 20, static_cast<size_t>(config.buffers.spool_file_mb)
                                                                     << 20) {
  // Here, on the thread that starts the collector, not in Connect on the
  // flush thread: creating a context reads the environment (libpgm's
  // getenv), and a host thread's setenv meanwhile frees the array getenv
  // walks (a profiled process crashed so under load).
  context_ = zmq_ctx_new();
  if (const char* late = std::getenv(names::kEnvTestProbeLate); late != nullptr && *late != '\0') {
    const char* rest = late;
    if (std::strncmp(late, "drop", 4) == 0) {
      drop_answers_ = true;
      rest = late + 4;
    } else {
      char* end = nullptr;
      late_ns_ = std::strtoll(late, &end, 10) * 1000000;
      rest = end;
    }
    late_own_only_ = std::strcmp(rest, ":own") == 0;
    late_bursts_ = *rest == ':' && !late_own_only_ ? std::strtoll(rest + 1, nullptr, 10) : -1;
  }
}

void Transport::Connect(const std::string& endpoint) {
  endpoint_ = endpoint;
  // ZeroMQ starts its I/O thread with the first socket: the threads that
  // appear meanwhile under ZeroMQ's name are ours (CPU sampling's profiler time).
  const std::vector<int64_t> before = ListThreads();
  socket_ = context_ != nullptr ? zmq_socket(context_, ZMQ_DEALER) : nullptr;
  for (int64_t tid : ListThreads()) {
    if (std::find(before.begin(), before.end(), tid) == before.end() && ReadThreadName(tid).rfind("ZMQbg", 0) == 0) {
      own_threads_.push_back(tid);
    }
  }
  if (socket_ == nullptr) return;
  const int hwm = 1000;
  const int linger = static_cast<int>(config_.flush.exit_timeout_ms);
  // Immediate: nothing is queued while no connection is up (the spool
  // keeps it, counted if it never goes), so a message is "sent" only once it
  // is on its way to a live aggregator.
  const int immediate = 1;
  zmq_setsockopt(socket_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(socket_, ZMQ_IMMEDIATE, &immediate, sizeof(immediate));
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  // Retries every 50-150 ms (ZeroMQ adds up to one interval of random
  // jitter), never backing off further: a collector is back within about
  // 100 ms of the aggregator's return, including while it drains at exit.
  // Hundreds of collectors retrying at that rate cost a refused connect
  // each while it is away; once it is back, the accept queue (ZMQ_BACKLOG
  // 4096 on the aggregator) takes them.
  const int reconnect_ms = 50, reconnect_max_ms = 100;
  zmq_setsockopt(socket_, ZMQ_RECONNECT_IVL, &reconnect_ms, sizeof(reconnect_ms));
  zmq_setsockopt(socket_, ZMQ_RECONNECT_IVL_MAX, &reconnect_max_ms, sizeof(reconnect_max_ms));
  // The connection's ups and downs, from ZeroMQ's monitor (TakeLinkLost).
  const std::string monitor = "inproc://rlscope-link-monitor";
  if (zmq_socket_monitor(socket_, monitor.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) == 0) {
    monitor_ = zmq_socket(context_, ZMQ_PAIR);
    if (monitor_ != nullptr && zmq_connect(monitor_, monitor.c_str()) != 0) {
      zmq_close(monitor_);
      monitor_ = nullptr;
    }
  }
  if (zmq_connect(socket_, endpoint.c_str()) != 0) {
    std::fprintf(stderr,
                 "rlscope: cannot use aggregator endpoint '%s' (%s); events will be "
                 "counted and dropped. Set RLSCOPE_AGGREGATOR to tcp://host:port.\n",
                 endpoint.c_str(), zmq_strerror(zmq_errno()));
    zmq_close(socket_);
    socket_ = nullptr;
  }
}

bool Transport::Wait(int64_t wait_ns) {
  zmq_pollitem_t items[3] = {
      {nullptr, wake_fd_, ZMQ_POLLIN, 0}, {socket_, 0, ZMQ_POLLIN, 0}, {monitor_, 0, ZMQ_POLLIN, 0}};
  const int num_items = (wake_fd_ >= 0 ? 1 : 0) + (socket_ != nullptr ? 1 : 0) + (monitor_ != nullptr ? 1 : 0);
  zmq_pollitem_t* first_item = wake_fd_ >= 0 ? &items[0] : &items[1];
  if (num_items > 0) {
    zmq_poll(first_item, num_items, static_cast<long>(wait_ns / 1000000) + 1);
  } else {
    std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
  }
  const bool connected = PollMonitor();
  if (wake_fd_ < 0 || (items[0].revents & ZMQ_POLLIN) == 0) return connected;
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
  return true;
}

bool Transport::PollMonitor() {
  if (monitor_ == nullptr) return false;
  bool connected = false;
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  // Each event is two frames: 2 bytes of event and 4 of value, then the address.
  while (zmq_msg_recv(&msg, monitor_, ZMQ_DONTWAIT) >= 0) {
    uint16_t event = 0;
    if (zmq_msg_size(&msg) >= sizeof(event)) std::memcpy(&event, zmq_msg_data(&msg), sizeof(event));
    while (zmq_msg_more(&msg)) zmq_msg_recv(&msg, monitor_, 0);
    if (event == ZMQ_EVENT_CONNECTED) {
      link_up_ = connected = true;
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      link_up_ = false;
      link_lost_ = true;
    }
  }
  zmq_msg_close(&msg);
  return connected;
}

bool Transport::TakeLinkLost() {
  PollMonitor();
  const bool lost = link_lost_;
  link_lost_ = false;
  return lost;
}

bool Transport::ProbeIfDue(const ControlHandler& apply, int64_t interval_ms) {
  if (socket_ == nullptr || !ready_ || config_.clock.probe_interval_ms <= 0) return false;
  const int64_t now = MonotonicNs();
  // The first burst waits for the aggregator's answer to the hello, which
  // says where to probe (SetProbePath): it goes there, not on the connection.
  if (last_burst_ns_ == 0 && !heard_ && !burst_requested_) return false;
  if (!burst_requested_ && !burst_now_ && last_burst_ns_ != 0 && now - last_burst_ns_ < interval_ms * 1000000) {
    return false;
  }
  const bool requested = burst_requested_;
  burst_requested_ = burst_now_ = false;
  last_burst_ns_ = now;
  ProbeBurst(apply, requested);
  return true;
}

void Transport::SetProbePath(const std::string& host, uint64_t port, uint64_t key) {
  const std::string to = host.empty() ? probe::EndpointHost(endpoint_) : host;
  if (port == udp_port_ && key == udp_key_ && to == udp_host_ && udp_fd_ >= 0) return;  // as it is
  CloseProbePath();
  udp_port_ = port, udp_key_ = key, udp_host_ = to, udp_failures_ = 0;
  if (port == 0 || to.empty() || probe::IsWildcardHost(to)) return;
  // Numeric only: a name would be a DNS lookup on the flush thread (which
  // may block, and reads the environment): such a host probes on the
  // connection.
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(to.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return;
  udp_fd_ = socket(found->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (udp_fd_ >= 0 &&
      (connect(udp_fd_, found->ai_addr, found->ai_addrlen) != 0 || !probe::EnableRxTimestamps(udp_fd_))) {
    CloseProbePath();
  }
  freeaddrinfo(found);
  // A new path (an aggregator that came back, or moved): a burst on it now.
  if (udp_fd_ >= 0 && config_.clock.udp_probes && last_burst_ns_ != 0) burst_now_ = true;
}

void Transport::CloseProbePath() {
  if (udp_fd_ >= 0) close(udp_fd_);
  udp_fd_ = -1;
}

bool Transport::UdpBurst(int64_t count, int64_t burst_end, bool late, bool drop) {
  char buf[probe::kPacketBytes + 1];
  int64_t rx = 0;
  while (probe::ReceiveStamped(udp_fd_, buf, sizeof(buf), &rx, nullptr, nullptr) >= 0) {
  }  // answers that came after their wait
  for (int64_t i = 0; i < count && (i == 0 || MonotonicNs() < burst_end); ++i) {
    probe::Request req{udp_key_, session_, rng_(), 0};
    char out[probe::kPacketBytes];
    req.t1 = MonotonicNs();
    probe::Encode(req, out);
    if (send(udp_fd_, out, sizeof(out), MSG_DONTWAIT) != static_cast<ssize_t>(sizeof(out))) return i > 0;
    const int64_t deadline = req.t1 + kUdpWaitNs;
    bool answered = false;
    while (!answered) {
      const int64_t now = MonotonicNs();
      if (now >= deadline) return i > 0;  // unanswered: the burst ends here
      pollfd p{udp_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>((deadline - now) / 1000000) + 1) <= 0) continue;
      ssize_t n;
      while ((n = probe::ReceiveStamped(udp_fd_, buf, sizeof(buf), &rx, nullptr, nullptr)) >= 0) {
        probe::Reply reply;
        if (!probe::Decode(buf, static_cast<size_t>(n), &reply) || reply.nonce != req.nonce || reply.t1 != req.t1) {
          continue;
        }
        const int64_t t4 = (rx != 0 ? rx : MonotonicNs()) + (late ? late_ns_ : 0);
        if (!drop) pending_probes_.push_back({req.t1, reply.t2, reply.t3, t4});
        answered = true;
      }
    }
  }
  return true;
}

void Transport::ProbeBurst(const ControlHandler& apply, bool requested) {
  const bool late = late_own_only_ ? !requested : late_bursts_ < 0 || bursts_ < late_bursts_;  // test only
  const bool drop = drop_answers_ && late;
  // Those asked for carry more probes: a step waits for them, and the best
  // round trip of more is tighter.
  const int64_t count = config_.clock.probes_per_burst * (requested ? 4 : 1);
  // No probe begins after kBurstMaxNs: the flush thread's other work waits meanwhile.
  const int64_t burst_end = MonotonicNs() + kBurstMaxNs;
  ++bursts_;
  if (udp_fd_ >= 0 && udp_failures_ < kUdpGiveUpAfter && config_.clock.udp_probes) {
    if (UdpBurst(count, burst_end, late, drop)) {
      udp_failures_ = 0;
      return;
    }
    ++udp_failures_;  // not reachable from here (a relay's node, a firewall): on the connection instead
  }
  for (int64_t i = 0; i < count && (i == 0 || MonotonicNs() < burst_end); ++i) {
    wire::Probe probe{session_, 0};
    probe.t1 = MonotonicNs();
    if (!Send(wire::Encode(probe))) return;
    const int64_t deadline = probe.t1 + 50000000;
    bool answered = false;
    while (!answered) {
      const int64_t now = MonotonicNs();
      if (now >= deadline) return;  // no aggregator (yet): try at the next burst
      zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, static_cast<long>((deadline - now) / 1000000) + 1) <= 0) continue;
      zmq_msg_t reply;
      zmq_msg_init(&reply);
      while (zmq_msg_recv(&reply, socket_, ZMQ_DONTWAIT) >= 0) {
        const int64_t t4 = MonotonicNs() + (late ? late_ns_ : 0);  // late_ns_ 0 with drop_answers_
        const wire::DecodeResult r = DecodeMsg(&reply);
        const wire::Control* control = AsControl(r);
        if (control == nullptr) continue;
        if (control->probe_t1 == probe.t1 && control->probe_t2 != 0) {
          if (!drop) pending_probes_.push_back({probe.t1, control->probe_t2, control->probe_t3, t4});
          answered = true;
        }
        apply(*control);
      }
      zmq_msg_close(&reply);
    }
  }
}

bool Transport::ReceiveControls(const ControlHandler& apply) {
  if (socket_ == nullptr) return false;
  bool flush = false;
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  while (zmq_msg_recv(&msg, socket_, ZMQ_DONTWAIT) >= 0) {
    const wire::DecodeResult r = DecodeMsg(&msg);
    if (const wire::Control* control = AsControl(r)) {
      apply(*control);
      if (control->flush != 0) flush = true;
    }
  }
  zmq_msg_close(&msg);
  return flush;
}

bool Transport::Send(const std::string& message) {
  return socket_ != nullptr && zmq_send(socket_, message.data(), message.size(), ZMQ_DONTWAIT) >= 0;
}

Transport::SendResult Transport::SendBatches(Outgoing& out, const TickConverter& converter) {
  unsent_.Append(std::move(out.metadata));
  SendResult result;
  const Metadata no_metadata;
  const std::vector<GpuRecord> no_gpu;
  const std::vector<wire::ProbeSample> no_probes;
  const std::vector<wire::MemorySample> no_memory;
  bool first = true;
  size_t remaining_total = 0;
  for (const Outgoing::Thread& t : out.threads) remaining_total += t.count;
  do {
    size_t in_message = 0;
    const std::vector<Outgoing::Thread> take = TakeEvents(&out.threads, kMaxEventsPerMessage, &in_message);
    remaining_total -= in_message;
    const bool last = remaining_total == 0;
    const bool with_metadata = first;
    first = false;
    const Metadata& metadata = with_metadata ? unsent_ : no_metadata;
    const std::vector<GpuRecord>& gpu = with_metadata ? out.gpu : no_gpu;
    message_max_ts_ = INT64_MIN;
    for (const GpuRecord& g : gpu) message_max_ts_ = std::max(message_max_ts_, g.end_ns);
    // The flush thread's own CPU time rides with the watermark (this runs on it).
    int64_t cpu_ns = -1;
    if (last) {
      timespec t{};
      if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0) cpu_ns = t.tv_sec * 1000000000LL + t.tv_nsec;
    }
    writer_.Begin(session_, seq_++, last ? out.watermark_ns : 0, out.dropped, last ? out.ack : 0, cpu_ns);
    if (last && out.cpu_handler_samples >= 0) writer_.CpuHandler(out.cpu_handler_samples, out.cpu_handler_ps);
    writer_.Strings(metadata.strings);
    writer_.ThreadNames(metadata.thread_names);
    writer_.Categories(metadata.categories);
    writer_.Gpu(gpu);
    writer_.Probes(with_metadata ? pending_probes_ : no_probes);
    writer_.Arming(with_metadata && out.reports_arming, out.arming);
    writer_.Memory(with_metadata ? out.memory : no_memory);
    writer_.BeginThreads(take.size());
    for (const Outgoing::Thread& t : take) AddEvents(t, converter);
    const msgpack::sbuffer& buf = writer_.Finish();
    // Into the spool, in order (never refused: a full spool drops its oldest, counted).
    spool_.Push(std::string(buf.data(), buf.size()), in_message + gpu.size(), message_max_ts_);
    events_sent_.fetch_add(in_message, std::memory_order_relaxed);
    if (last) result.acked = true;
    if (with_metadata) {
      pending_probes_.clear();
      unsent_.Clear();
    }
  } while (remaining_total > 0);
  Pump();
  return result;
}

void Transport::Pump() {
  if (socket_ == nullptr || !ready_) return;
  if (spool_.TakeNamesLost() && make_preamble_) spool_.SetPreamble(make_preamble_());
  spool_.Pump([this](const std::string& message) {
    if (zmq_send(socket_, message.data(), message.size(), ZMQ_DONTWAIT) < 0) return false;  // waits in the spool
    batches_sent_.fetch_add(1, std::memory_order_relaxed);
    return true;
  });
}

// Drains the thread's first `count` records into the message, ticks to ns.
void Transport::AddEvents(const Outgoing::Thread& thread, const TickConverter& converter) {
  writer_.BeginThread(thread.buffer->tid(), thread.count);
  thread.buffer->Drain(
      [&](const EventRecord* records, size_t n) {
        for (size_t i = 0; i < n; ++i) {
          const EventRecord& r = records[i];
          wire::Event ev;
          ev.ts_ns = converter.ToNs(r.ts);
          message_max_ts_ = std::max(message_max_ts_, ev.ts_ns);
          ev.value = r.value;
          // A cost sample's value: ticks in the ring, picoseconds on the wire.
          // (0: not measurable yet; the aggregator leaves it out of the costs.)
          if (r.kind == static_cast<uint8_t>(EventKind::kCostSample)) ev.value = converter.DurationPs(r.value);
          ev.name = r.name;
          ev.domain = r.domain;
          ev.category = r.category;
          ev.kind = r.kind;
          ev.flags = r.flags;
          writer_.AddEvent(ev);
        }
      },
      thread.count);
}

void Transport::Close(int64_t deadline, bool refused) {
  if (monitor_ != nullptr) {
    zmq_socket_monitor(socket_, nullptr, 0);
    const int no_linger = 0;
    zmq_setsockopt(monitor_, ZMQ_LINGER, &no_linger, sizeof(no_linger));
    zmq_close(monitor_);
    monitor_ = nullptr;
  }
  if (socket_ != nullptr) {
    // Lingers to deliver what is queued, until the exit deadline.
    const int linger = refused ? 0 : static_cast<int>(std::max<int64_t>(0, deadline - MonotonicNs()) / 1000000);
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_close(socket_);
  }
  socket_ = nullptr;
  CloseProbePath();
  if (context_ != nullptr) zmq_ctx_term(context_);
  context_ = nullptr;
}

}  // namespace rlscope
