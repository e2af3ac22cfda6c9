// The aggregator's probe thread: answers clock probes on a UDP port of its
// own (native/probe_packet.h), beside the ZeroMQ socket whose message loop
// also writes steps. A probe's receive time is the kernel's, its answer's
// send time read just before the send, so neither the message loop nor this
// thread's scheduling sits inside a collector's round trip. The daemon
// starts it on the host it listens on and the Aggregator tells each
// collector where it is (Control.probe_port, probe_host, probe_key); a
// collector that cannot reach it probes over its ZeroMQ connection as before.
//
// Threads: Start and Stop from the daemon's thread; the loop on its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace rlscope {

class ProbeServer {
 public:
  ProbeServer() = default;
  ~ProbeServer() { Stop(); }
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  // Binds UDP on `host` (numeric; a wildcard for every interface), a port
  // the kernel picks, and starts answering. False, with *error, when it
  // cannot (the collectors then probe over ZeroMQ).
  bool Start(const std::string& host, std::string* error);
  void Stop();
  uint16_t port() const { return port_; }
  uint64_t key() const { return key_; }  // the run's probe key: a datagram without it is not answered
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void Loop();

  int fd_ = -1;
  int stop_fd_ = -1;  // eventfd: Stop wakes the loop
  uint16_t port_ = 0;
  uint64_t key_ = 0;
  std::thread thread_;
  std::atomic<uint64_t> answered_{0}, refused_{0};
};

}  // namespace rlscope
