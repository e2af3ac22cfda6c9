// A stranger on the aggregator's port (tests/test_faults.py): a process that
// knows the endpoint, and perhaps a collector's session read from run.json,
// but not the run's secret. Unlike the other programs here it speaks the wire
// format itself (native/wire.h), as a hostile or confused peer would.
//
//   stranger ENDPOINT VICTIM_SESSION REPORT
//
// Sends, on one connection: a hello as a controller without the secret; a
// batch with a "step" range; a goodbye, a batch, an Expected list and a probe
// in VICTIM_SESSION's name; a frame that is not the wire format. Then reads
// for 500 ms what comes back and writes REPORT (JSON): how many messages, and
// how many were anything but "refused" or a request to say hello.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <zmq.h>

#include "native/event.h"
#include "native/wire.h"

using namespace rlscope;

namespace {

wire::Batch ForgedBatch(uint64_t session, uint64_t seq, const char* name) {
  wire::Batch b;
  b.session = session;
  b.seq = seq;
  b.watermark_ns = INT64_MAX / 2;
  b.strings = {{1, "step"}, {2, name}};
  wire::ThreadEvents t;
  t.tid = 4242;
  auto ev = [](int64_t ts, EventKind kind, uint32_t name) {
    wire::Event e;
    e.ts_ns = ts;
    e.kind = static_cast<uint8_t>(kind);
    e.name = name;
    return e;
  };
  t.events = {ev(1000, EventKind::kRangePush, 1), ev(2000, EventKind::kRangePush, 2), ev(3000, EventKind::kRangePop, 0),
              ev(4000, EventKind::kRangePop, 0)};
  b.threads.push_back(t);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: stranger ENDPOINT VICTIM_SESSION REPORT\n");
    return 2;
  }
  const uint64_t victim = std::strtoull(argv[2], nullptr, 16);  // as run.json writes sessions
  void* ctx = zmq_ctx_new();
  void* sock = zmq_socket(ctx, ZMQ_DEALER);
  const int linger = 2000;
  zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
  if (zmq_connect(sock, argv[1]) != 0) return 1;

  wire::Hello hello;
  hello.session = 0x5742414e474552;  // "STRANGER"
  hello.identity.host = "stranger-host";
  hello.identity.pid = 4242;
  hello.identity.role = "controller";
  hello.identity.name = "stranger";
  hello.clock = "monotonic";
  const std::string frames[] = {
      wire::Encode(hello),
      wire::Encode(ForgedBatch(hello.session, 0, "evil")),
      wire::Encode(wire::Bye{victim, 0, 0}),
      wire::Encode(ForgedBatch(victim, uint64_t{1} << 40, "forged")),
      wire::Encode(wire::Expected{victim, {{{"name", "ghost"}, {"pid", "4243"}}}}),
      wire::Encode(wire::Probe{victim, 1}),
      std::string("\x93\xa4RLSC\x01", 7),  // the magic, then nothing a decoder can use
  };
  for (const std::string& f : frames) zmq_send(sock, f.data(), f.size(), 0);

  int replies = 0, other = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < deadline) {
    zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 50) <= 0) continue;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, 0) >= 0) {
      ++replies;
      const wire::DecodeResult r = wire::Decode(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      const auto* c = r.ok ? std::get_if<wire::Control>(&r.message) : nullptr;
      wire::Control say_hello, refused;  // what the aggregator may answer anyone
      say_hello.hello = true;
      refused.role = wire::kRoleRefused;
      if (c == nullptr || !(*c == say_hello || *c == refused)) ++other;
    }
    zmq_msg_close(&msg);
  }
  FILE* out = std::fopen(argv[3], "w");
  if (out == nullptr) return 1;
  std::fprintf(out, "{\"replies\": %d, \"other\": %d}\n", replies, other);
  std::fclose(out);
  zmq_close(sock);
  zmq_ctx_term(ctx);
  return 0;
}
