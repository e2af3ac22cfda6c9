// wire::Encode: one function per message type (a batch goes through
// BatchWriter, wire_batch_writer.cc), and the packing helpers of wire_pack.h.
// Keys are written in the order they always were: the bytes are frozen.
#include <cstring>
#include <variant>

#include "native/wire.h"
#include "native/wire_pack.h"

namespace rlscope::wire {
namespace internal {

size_t OpenBody(Packer& pk, msgpack::sbuffer& buf, MessageType type) {
  pk.pack_array(4);
  pk.pack_str(4);
  pk.pack_str_body(kMagic, 4);
  pk.pack_uint32(kVersion);
  pk.pack_uint8(static_cast<uint8_t>(type));
  const size_t at = buf.size();
  pk.pack_map(0);  // one byte, replaced by CloseBody
  return at;
}

Packer& PackKey(Packer& pk, std::string_view key, uint32_t* keys) {
  ++*keys;
  pk.pack_str(static_cast<uint32_t>(key.size()));
  pk.pack_str_body(key.data(), static_cast<uint32_t>(key.size()));
  return pk;
}

namespace {

// A map header as msgpack-c packs it, held on the stack (at most 5 bytes).
struct MapHeader {
  char bytes[5];
  size_t size = 0;
  void write(const char* p, size_t n) {
    std::memcpy(bytes + size, p, n);
    size += n;
  }
};

}  // namespace

void CloseBody(msgpack::sbuffer& buf, size_t at, uint32_t keys) {
  MapHeader header;
  msgpack::packer<MapHeader>(header).pack_map(keys);
  const size_t grow = header.size - 1;  // OpenBody left one byte
  if (grow > 0) {
    const size_t body = buf.size() - at - 1;
    buf.write(header.bytes, grow);  // room at the end; its bytes are moved over
    std::memmove(buf.data() + at + 1 + grow, buf.data() + at + 1, body);
  }
  std::memcpy(buf.data() + at, header.bytes, header.size);
}

void PackString(Packer& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackStringMap(Packer& pk, const std::map<std::string, std::string>& m) {
  pk.pack_map(static_cast<uint32_t>(m.size()));
  for (const auto& [k, v] : m) {
    PackString(pk, k);
    PackString(pk, v);
  }
}

}  // namespace internal

namespace {

using internal::Packer;
using internal::PackString;

// One message being encoded: Key() writes a body key and counts it, Finish()
// stores the count as the body map's size (wire_pack.h).
class MessageWriter {
 public:
  explicit MessageWriter(MessageType type) : body_at_(internal::OpenBody(pk_, buf_, type)) {}
  // Writes `key`; the caller packs its value next, through the result.
  Packer& Key(std::string_view key) { return internal::PackKey(pk_, key, &keys_); }
  // The encoded message. Call once, after the last key and value.
  std::string Finish() {
    internal::CloseBody(buf_, body_at_, keys_);
    return std::string(buf_.data(), buf_.size());
  }

 private:
  msgpack::sbuffer buf_;
  Packer pk_{buf_};
  size_t body_at_;
  uint32_t keys_ = 0;
};

std::string EncodeBody(const Hello& h) {
  MessageWriter w(MessageType::kHello);
  w.Key("session").pack_uint64(h.session);
  PackString(w.Key("host"), h.identity.host);
  w.Key("pid").pack_int64(h.identity.pid);
  w.Key("rank").pack_int64(h.identity.rank);
  PackString(w.Key("role"), h.identity.role);
  PackString(w.Key("name"), h.identity.name);
  PackString(w.Key("clock"), h.clock);
  w.Key("start_ns").pack_int64(h.start_ns);
  Packer& selected = w.Key("selected");
  if (h.selected) {
    selected.pack_true();
  } else {
    selected.pack_false();
  }
  internal::PackStringMap(w.Key("labels"), h.identity.labels);
  Packer& costs = w.Key("costs");
  costs.pack_map(static_cast<uint32_t>(h.costs.size()));
  for (const auto& [k, ns] : h.costs) {
    PackString(costs, k);
    costs.pack_double(ns);
  }
  if (!h.config.empty()) PackString(w.Key("config"), h.config);
  if (!h.secret.empty()) PackString(w.Key("secret"), h.secret);
  if (h.kind != Hello::kFirst) w.Key("kind").pack_uint8(h.kind);
  if (!h.clock_domain.empty()) PackString(w.Key("clock_domain"), h.clock_domain);
  return w.Finish();
}

std::string EncodeBody(const Batch& b) {
  BatchWriter w;
  w.Begin(b.session, b.seq, b.watermark_ns, b.dropped, b.ack, b.profiler_cpu_ns);
  if (b.cpu_handler_samples >= 0) w.CpuHandler(b.cpu_handler_samples, b.cpu_handler_ps);
  w.Strings(b.strings);
  w.ThreadNames(b.thread_names);
  w.Categories(b.categories);
  w.Gpu(b.gpu);
  w.Probes(b.probes);
  w.Arming(b.reports_arming, b.arming);
  w.Memory(b.memory);
  w.BeginThreads(b.threads.size());
  for (const auto& te : b.threads) {
    w.BeginThread(te.tid, te.events.size());
    for (const auto& e : te.events) w.AddEvent(e);
  }
  const msgpack::sbuffer& out = w.Finish();
  return std::string(out.data(), out.size());
}

std::string EncodeBody(const Bye& bye) {
  MessageWriter w(MessageType::kBye);
  w.Key("session").pack_uint64(bye.session);
  w.Key("events").pack_uint64(bye.events);
  w.Key("dropped").pack_uint64(bye.dropped);
  return w.Finish();
}

std::string EncodeBody(const Expected& ex) {
  MessageWriter w(MessageType::kExpected);
  w.Key("session").pack_uint64(ex.session);
  Packer& processes = w.Key("processes");
  processes.pack_array(static_cast<uint32_t>(ex.processes.size()));
  for (const auto& p : ex.processes) internal::PackStringMap(processes, p);
  return w.Finish();
}

std::string EncodeBody(const Control& ctl) {
  MessageWriter w(MessageType::kControl);
  w.Key("window").pack_uint8(static_cast<uint8_t>(ctl.window));
  w.Key("step").pack_int64(ctl.step);
  w.Key("flush").pack_uint64(ctl.flush);
  w.Key("probe_t1").pack_int64(ctl.probe_t1);
  w.Key("probe_t2").pack_int64(ctl.probe_t2);
  w.Key("probe_t3").pack_int64(ctl.probe_t3);
  if (!ctl.run_config.empty()) PackString(w.Key("run_config"), ctl.run_config);
  if (!ctl.role.empty()) PackString(w.Key("role"), ctl.role);
  if (ctl.hello) w.Key("hello").pack_true();
  if (ctl.release_ns != 0) w.Key("release_ns").pack_int64(ctl.release_ns);
  if (ctl.bye_ack) w.Key("bye_ack").pack_true();
  if (ctl.probe) w.Key("probe").pack_true();
  if (ctl.probe_port != 0) {
    w.Key("probe_port").pack_uint64(ctl.probe_port);
    PackString(w.Key("probe_host"), ctl.probe_host);
    w.Key("probe_key").pack_uint64(ctl.probe_key);
  }
  if (ctl.same_clock) w.Key("same_clock").pack_true();
  return w.Finish();
}

std::string EncodeBody(const Probe& probe) {
  MessageWriter w(MessageType::kProbe);
  w.Key("session").pack_uint64(probe.session);
  w.Key("t1").pack_int64(probe.t1);
  return w.Finish();
}

}  // namespace

std::string Encode(const Message& message) {
  return std::visit([](const auto& m) { return EncodeBody(m); }, message);
}

}  // namespace rlscope::wire
