// rlscope-ray-aggregator --relay-to ROOT --listen ENDPOINT: a node's relay
// (relay.h says what travels how). main() is daemon_main.cc's; this is the
// mode it dispatches to.
//
// A ROUTER for the node's collectors, a DEALER to the root. A collector's
// frame goes up only while the root's connection takes it (else it waits in
// the collector's socket and spool: backpressure, never a drop here); the
// root's answers come down to their collector, or are dropped and counted
// when it is gone (the root repeats what matters). Never blocks: SIGTERM
// stops it at once, what is queued for the root lingers 2 s.
//
// What the node's collectors left on disk at exit (native/spool_file.h: the
// run's directory, by the key of RLSCOPE_SECRET) goes up the same way, each
// file as a collector of its own ("spool:<file name>"), every second; a file
// is removed once the root acknowledges its goodbye (Control.bye_ack), and
// sent again when no acknowledgement came within 10 s (the root drops what
// it applied already).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/daemon_support.h"
#include "aggregator/relay.h"
#include "native/clock.h"
#include "native/names.h"
#include "native/spool_file.h"
#include "native/wire.h"

namespace rlscope::daemon {
namespace {

// The relay's loop over its two sockets, from one thread.
class Relay {
 public:
  Relay(void* front, void* back, std::string spool_dir) : front_(front), back_(back), spool_dir_(std::move(spool_dir)) {
    zmq_msg_init(&part_);
  }
  ~Relay() { zmq_msg_close(&part_); }

  // Until a stop is requested.
  void Run() {
    while (!StopRequested()) {
      const short back_events = static_cast<short>(ZMQ_POLLIN | (up_queue_.empty() ? 0 : ZMQ_POLLOUT));
      zmq_pollitem_t items[2] = {{back_, 0, back_events, 0}, {front_, 0, ZMQ_POLLIN, 0}};
      zmq_poll(items, up_queue_.size() < kMaxQueued ? 2 : 1, 50);
      Down();
      ReadUp();
      if (up_queue_.empty()) ReadSpoolFiles();
      SendUp();
    }
  }

  void Report() const {
    std::printf(
        "rlscope-ray relay: done: %llu frames up, %llu down, %llu down to collectors gone, %llu frames "
        "not for a collector, %zu frames not sent up (their collectors replay them); spool files left at "
        "exit: %llu sent up, %llu delivered\n",
        static_cast<unsigned long long>(up_), static_cast<unsigned long long>(down_),
        static_cast<unsigned long long>(down_dropped_), static_cast<unsigned long long>(malformed_), up_queue_.size(),
        static_cast<unsigned long long>(spool_files_sent_), static_cast<unsigned long long>(spool_files_delivered_));
    std::fflush(stdout);
  }

 private:
  // Collectors are read only while fewer frames than this wait for the root.
  static constexpr size_t kMaxQueued = 256;

  // Down: [tag, collector's routing id, bytes] -> [routing id, bytes].
  void Down() {
    while (!StopRequested() && zmq_msg_recv(&part_, back_, ZMQ_DONTWAIT) >= 0) {
      std::vector<std::string> parts{std::string(PartView(&part_))};
      while (MoreParts(back_) && zmq_msg_recv(&part_, back_, 0) >= 0) parts.emplace_back(PartView(&part_));
      if (parts.size() != 3 || parts[0] != kRelayTag) {
        ++malformed_;  // not for a collector
        continue;
      }
      if (parts[1].rfind(kSpoolPeerPrefix, 0) == 0) {
        SpoolAnswered(parts[1].substr(sizeof(kSpoolPeerPrefix) - 1), parts[2]);
        continue;
      }
      if (zmq_send(front_, parts[1].data(), parts[1].size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
          zmq_send(front_, parts[2].data(), parts[2].size(), ZMQ_DONTWAIT) >= 0) {
        ++down_;
      } else {
        ++down_dropped_;  // the collector is gone (ROUTER_MANDATORY) or cannot take it now
      }
    }
  }

  // Up, first half: read [routing id, frame...] while the queue is short.
  void ReadUp() {
    while (!StopRequested() && up_queue_.size() < kMaxQueued && zmq_msg_recv(&part_, front_, ZMQ_DONTWAIT) >= 0) {
      const std::string rid(PartView(&part_));
      while (MoreParts(front_) && zmq_msg_recv(&part_, front_, 0) >= 0) up_queue_.emplace_back(rid, PartView(&part_));
    }
  }

  // Up, second half: each frame as [tag, routing id, frame] while the
  // root's connection takes it.
  void SendUp() {
    while (!StopRequested() && !up_queue_.empty()) {
      const auto& [rid, frame] = up_queue_.front();
      // Only the first part can meet the high-water mark; the rest of a
      // message then always goes (ZeroMQ queues a message whole).
      if (zmq_send(back_, kRelayTag.data(), kRelayTag.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        break;  // EAGAIN (the root is slow or away) or EINTR: tried again next pass
      }
      zmq_send(back_, rid.data(), rid.size(), ZMQ_SNDMORE);
      zmq_send(back_, frame.data(), frame.size(), 0);
      up_queue_.pop_front();
      ++up_;
    }
  }

  // The files of spool_dir_ not in flight (or in flight too long), queued
  // up as their own collectors; at most once a second.
  void ReadSpoolFiles() {
    const int64_t now = MonotonicNs();
    if (spool_dir_.empty() || now < next_scan_ns_) return;
    next_scan_ns_ = now + 1000000000;
    for (const std::string& path : ListSpoolFiles(spool_dir_)) {
      const std::string name = path.substr(path.rfind('/') + 1);
      auto it = spool_sent_.find(name);
      if (it != spool_sent_.end() && now - it->second < 10000000000) continue;
      std::vector<std::string> messages;
      std::string error;
      if (!ReadSpoolFile(path, &messages, &error)) {
        if (spool_said_.insert(name).second) std::fprintf(stderr, "rlscope-ray relay: %s\n", error.c_str());
        continue;
      }
      for (std::string& m : messages) up_queue_.emplace_back(kSpoolPeerPrefix + name, std::move(m));
      spool_sent_[name] = now;
      ++spool_files_sent_;
    }
  }

  // The root's answer to a spool file's frames: its goodbye acknowledged,
  // the file goes.
  void SpoolAnswered(const std::string& name, const std::string& frame) {
    const wire::DecodeResult r = wire::Decode(frame.data(), frame.size());
    const auto* control = r.ok ? std::get_if<wire::Control>(&r.message) : nullptr;
    if (control == nullptr || !control->bye_ack || spool_sent_.erase(name) == 0) return;
    unlink((spool_dir_ + "/" + name).c_str());
    ++spool_files_delivered_;
  }

  void* front_;
  void* back_;
  const std::string spool_dir_;  // "" (no secret): none taken up
  int64_t next_scan_ns_ = 0;
  std::map<std::string, int64_t> spool_sent_;  // file name -> when its frames were queued up
  std::set<std::string> spool_said_;           // unreadable files, said once
  uint64_t spool_files_sent_ = 0, spool_files_delivered_ = 0;
  zmq_msg_t part_;
  // Frames read from collectors, not yet taken by the root's connection:
  // (routing id, frame).
  std::deque<std::pair<std::string, std::string>> up_queue_;
  uint64_t up_ = 0, down_ = 0, down_dropped_ = 0, malformed_ = 0;
};

}  // namespace

int RunRelay(void* ctx, const Options& o) {
  void* front = zmq_socket(ctx, ZMQ_ROUTER);
  void* back = zmq_socket(ctx, ZMQ_DEALER);
  // Back to the root within about 100 ms of its return, as collectors are (transport.cc).
  const int hwm = 100000, backlog = 4096, reconnect_ms = 50, reconnect_max_ms = 100, mandatory = 1, no_linger = 0;
  zmq_setsockopt(front, ZMQ_RCVHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(front, ZMQ_BACKLOG, &backlog, sizeof(backlog));
  zmq_setsockopt(front, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof(mandatory));  // a gone collector: an error
  zmq_setsockopt(front, ZMQ_LINGER, &no_linger, sizeof(no_linger));
  zmq_setsockopt(back, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(back, ZMQ_RECONNECT_IVL, &reconnect_ms, sizeof(reconnect_ms));
  zmq_setsockopt(back, ZMQ_RECONNECT_IVL_MAX, &reconnect_max_ms, sizeof(reconnect_max_ms));
  if (zmq_bind(front, o.listen.c_str()) != 0 || zmq_connect(back, o.relay_to.c_str()) != 0) {
    std::fprintf(stderr, "rlscope-ray relay: cannot listen on '%s' or reach '%s': %s\n", o.listen.c_str(),
                 o.relay_to.c_str(), zmq_strerror(zmq_errno()));
    return 2;
  }
  const std::string bound = PublishEndpoint(front, o);
  std::printf("rlscope-ray relay: listening on %s, relaying to %s\n", bound.c_str(), o.relay_to.c_str());
  std::fflush(stdout);
  StopOnSignals(o.exit_with_parent);
  {
    const char* secret = std::getenv(names::kEnvSecret);
    Relay relay(front, back, secret != nullptr && *secret != '\0' ? SpoolDirFor(RunKey(secret)) : std::string());
    relay.Run();
    relay.Report();
  }
  const int linger = 2000;  // what is queued for the root goes, for a while
  zmq_setsockopt(back, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(front);
  zmq_close(back);
  zmq_ctx_term(ctx);
  return 0;
}

}  // namespace rlscope::daemon
