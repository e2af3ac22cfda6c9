// Clock probes on a path of their own: one UDP datagram each way between a
// collector's flush thread and the aggregator's probe thread
// (aggregator/probe_server.h), each side's receive time taken by the kernel
// as the datagram arrives (SO_TIMESTAMPNS), its send time read just before
// the send. Neither side's queues, ZeroMQ's threads or scheduling delays
// before a read sit inside the round trip: what is left is the two sends'
// way through the kernel (docs/wire_format.md "Probe").
//
// A request and its reply are the same size (40 bytes, little-endian), so
// the aggregator's answers amplify nothing: "RLSP", version 1, type (1
// request, 2 reply), 2 bytes zero, then a request's key (the run's probe
// key, Control.probe_key: a datagram without it is not answered), session,
// nonce, t1; or a reply's nonce, t1, t2, t3 (the nonce is the collector's
// random, so an off-path sender cannot forge an answer).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace rlscope::probe {

inline constexpr size_t kPacketBytes = 40;

struct Request {
  uint64_t key = 0, session = 0, nonce = 0;
  int64_t t1 = 0;
};

struct Reply {
  uint64_t nonce = 0;
  int64_t t1 = 0, t2 = 0, t3 = 0;
};

void Encode(const Request& r, char out[kPacketBytes]);
void Encode(const Reply& r, char out[kPacketBytes]);
// False for anything else than exactly one such packet.
bool Decode(const char* data, size_t size, Request* r);
bool Decode(const char* data, size_t size, Reply* r);

// The host of a ZeroMQ tcp endpoint ("tcp://10.0.0.7:5557" -> "10.0.0.7",
// "tcp://[::1]:5557" -> "::1", "tcp://*:5557" -> "*"); "" for any other
// transport (ipc, inproc) or a malformed one.
std::string EndpointHost(const std::string& endpoint);
// Whether `host` (EndpointHost) means every interface: "*", "0.0.0.0", "::".
bool IsWildcardHost(const std::string& host);

// Turns on kernel receive timestamps (SO_TIMESTAMPNS) on a UDP socket.
bool EnableRxTimestamps(int fd);
// Receives one datagram without blocking: its bytes, and the kernel's
// receive time moved onto this process's CLOCK_MONOTONIC (the kernel stamps
// CLOCK_REALTIME; the two clocks tick alike, their difference read now).
// `from` may be null. -1 when none waits (or on error); rx_ns is 0 when the
// kernel gave no timestamp (then read now).
ssize_t ReceiveStamped(int fd, char* buf, size_t cap, int64_t* rx_ns, sockaddr_storage* from, socklen_t* from_len);

}  // namespace rlscope::probe
