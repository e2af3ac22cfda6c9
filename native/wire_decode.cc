// wire::Decode: the frame ([magic, version, type, body], nothing after it),
// then one body decoder per message type; the batch's is in
// wire_decode_batch.cc. Decoding never throws: msgpack's exceptions become
// the frame's error.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "native/wire.h"
#include "native/wire_read.h"

namespace rlscope::wire {
namespace {

using internal::Ctx;
using internal::Find;
using internal::GetArray;
using internal::GetBool;
using internal::GetInt;
using internal::GetStr;
using internal::GetStrMap;
using internal::GetUint;
using internal::Require;
using internal::TypeName;
using msgpack::object;
using msgpack::object_array;
using msgpack::type::object_type;

// Hello's `costs`: a map of str to a number of ns in [0, 1e9).
bool DecodeCosts(Ctx& c, const object& o, std::map<std::string, double>* costs) {
  if (o.type != object_type::MAP) return c.Fail("hello.costs", "expected a map");
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    std::string k;
    if (!GetStr(c, o.via.map.ptr[i].key, "hello.costs key", &k)) return false;
    const object& v = o.via.map.ptr[i].val;
    double ns;
    if (v.type == object_type::FLOAT32 || v.type == object_type::FLOAT64)
      ns = v.via.f64;
    else if (v.type == object_type::POSITIVE_INTEGER)
      ns = static_cast<double>(v.via.u64);
    else
      return c.Fail("hello.costs[" + k + "]", std::string("expected a number, got ") + TypeName(v));
    if (!(ns >= 0 && ns < 1e9)) return c.Fail("hello.costs[" + k + "]", "out of range");
    (*costs)[k] = ns;
  }
  return true;
}

bool DecodeHello(Ctx& c, const object& body, Hello* h) {
  const object* o;
  if (!Require(c, body, "hello", "session", &o) || !GetUint(c, *o, "hello.session", &h->session)) return false;
  if (!Require(c, body, "hello", "host", &o) || !GetStr(c, *o, "hello.host", &h->identity.host)) return false;
  if (!Require(c, body, "hello", "pid", &o) || !GetInt(c, *o, "hello.pid", &h->identity.pid)) return false;
  if (!Require(c, body, "hello", "rank", &o) || !GetInt(c, *o, "hello.rank", &h->identity.rank)) return false;
  if (!Require(c, body, "hello", "role", &o) || !GetStr(c, *o, "hello.role", &h->identity.role)) return false;
  if (!Require(c, body, "hello", "name", &o) || !GetStr(c, *o, "hello.name", &h->identity.name)) return false;
  if (!Require(c, body, "hello", "clock", &o) || !GetStr(c, *o, "hello.clock", &h->clock)) return false;
  if (!Require(c, body, "hello", "start_ns", &o) || !GetInt(c, *o, "hello.start_ns", &h->start_ns)) return false;
  // `selected` is optional; absent = true.
  if ((o = Find(body, "selected")) != nullptr && !GetBool(c, *o, "hello.selected", &h->selected)) return false;
  if ((o = Find(body, "labels")) != nullptr) {
    if (o->type != object_type::MAP) return c.Fail("hello.labels", "expected a map");
    if (!GetStrMap(c, *o, "hello.labels", &h->identity.labels)) return false;
  }
  if ((o = Find(body, "costs")) != nullptr && !DecodeCosts(c, *o, &h->costs)) return false;  // optional
  if ((o = Find(body, "config")) != nullptr && !GetStr(c, *o, "hello.config", &h->config)) return false;
  if ((o = Find(body, "secret")) != nullptr && !GetStr(c, *o, "hello.secret", &h->secret)) return false;
  if ((o = Find(body, "kind")) != nullptr) {
    uint64_t kind = 0;
    if (!GetUint(c, *o, "hello.kind", &kind)) return false;
    if (kind > Hello::kReplay) return c.Fail("hello.kind", "unknown hello kind " + std::to_string(kind));
    h->kind = static_cast<uint8_t>(kind);
  }
  if ((o = Find(body, "clock_domain")) != nullptr && !GetStr(c, *o, "hello.clock_domain", &h->clock_domain)) {
    return false;
  }
  return true;
}

bool DecodeBye(Ctx& c, const object& body, Bye* b) {
  const object* o;
  if (!Require(c, body, "bye", "session", &o) || !GetUint(c, *o, "bye.session", &b->session)) return false;
  if (!Require(c, body, "bye", "events", &o) || !GetUint(c, *o, "bye.events", &b->events)) return false;
  if (!Require(c, body, "bye", "dropped", &o) || !GetUint(c, *o, "bye.dropped", &b->dropped)) return false;
  return true;
}

bool DecodeExpected(Ctx& c, const object& body, Expected* ex) {
  const object* o;
  if (!Require(c, body, "expected", "session", &o) || !GetUint(c, *o, "expected.session", &ex->session)) {
    return false;
  }
  const object_array* arr;
  if (!Require(c, body, "expected", "processes", &o) || !GetArray(c, *o, "expected.processes", &arr)) {
    return false;
  }
  for (uint32_t i = 0; i < arr->size; ++i) {
    const std::string where = "expected.processes[" + std::to_string(i) + "]";
    const object& m = arr->ptr[i];
    if (m.type != object_type::MAP) return c.Fail(where, std::string("expected a map, got ") + TypeName(m));
    std::map<std::string, std::string> entry;
    if (!GetStrMap(c, m, where, &entry)) return false;
    ex->processes.push_back(std::move(entry));
  }
  return true;
}

bool DecodeControl(Ctx& c, const object& body, Control* ctl) {
  const object* o;
  uint64_t window = 0;
  if ((o = Find(body, "window")) != nullptr) {
    if (!GetUint(c, *o, "control.window", &window)) return false;
    if (window > 2) return c.Fail("control.window", "unknown window state " + std::to_string(window));
    ctl->window = static_cast<Control::Window>(window);
  }
  if ((o = Find(body, "step")) != nullptr && !GetInt(c, *o, "control.step", &ctl->step)) return false;
  if ((o = Find(body, "flush")) != nullptr && !GetUint(c, *o, "control.flush", &ctl->flush)) return false;
  if ((o = Find(body, "probe_t1")) != nullptr && !GetInt(c, *o, "control.probe_t1", &ctl->probe_t1)) return false;
  if ((o = Find(body, "probe_t2")) != nullptr && !GetInt(c, *o, "control.probe_t2", &ctl->probe_t2)) return false;
  if ((o = Find(body, "probe_t3")) != nullptr && !GetInt(c, *o, "control.probe_t3", &ctl->probe_t3)) return false;
  if ((o = Find(body, "run_config")) != nullptr && !GetStr(c, *o, "control.run_config", &ctl->run_config)) {
    return false;
  }
  if ((o = Find(body, "role")) != nullptr && !GetStr(c, *o, "control.role", &ctl->role)) return false;
  if ((o = Find(body, "hello")) != nullptr && !GetBool(c, *o, "control.hello", &ctl->hello)) return false;
  if ((o = Find(body, "release_ns")) != nullptr && !GetInt(c, *o, "control.release_ns", &ctl->release_ns)) {
    return false;
  }
  if ((o = Find(body, "bye_ack")) != nullptr && !GetBool(c, *o, "control.bye_ack", &ctl->bye_ack)) return false;
  if ((o = Find(body, "probe")) != nullptr && !GetBool(c, *o, "control.probe", &ctl->probe)) return false;
  if ((o = Find(body, "probe_port")) != nullptr) {
    if (!GetUint(c, *o, "control.probe_port", &ctl->probe_port)) return false;
    if (ctl->probe_port > 65535) return c.Fail("control.probe_port", "not a port: " + std::to_string(ctl->probe_port));
  }
  if ((o = Find(body, "probe_host")) != nullptr && !GetStr(c, *o, "control.probe_host", &ctl->probe_host)) {
    return false;
  }
  if ((o = Find(body, "probe_key")) != nullptr && !GetUint(c, *o, "control.probe_key", &ctl->probe_key)) return false;
  if ((o = Find(body, "same_clock")) != nullptr && !GetBool(c, *o, "control.same_clock", &ctl->same_clock)) {
    return false;
  }
  return true;
}

bool DecodeProbe(Ctx& c, const object& body, Probe* p) {
  const object* o;
  if (!Require(c, body, "probe", "session", &o) || !GetUint(c, *o, "probe.session", &p->session)) return false;
  if (!Require(c, body, "probe", "t1", &o) || !GetInt(c, *o, "probe.t1", &p->t1)) return false;
  return true;
}

// Frames of at least kReusedZoneFrom bytes (a batch of thousands of
// events) are unpacked into a zone this thread keeps, cleared after each,
// whose first chunk (kept by clear) holds the largest such frame's objects
// so far, up to kReusedZoneMax: a fresh zone per frame had its object array
// (24 bytes per element, megabytes) mapped, faulted in and unmapped each
// time (aggregator_bench, 4 recording threads: 76 % of the page faults while
// frames came in; that phase took 0.31-0.41 s for 2M events, 0.18-0.22 s
// with the zone kept). A process that only decodes small frames (a
// collector's controls) never makes one.
constexpr size_t kReusedZoneFrom = 64 << 10;
constexpr size_t kReusedZoneMax = 64 << 20;

// The zone for a frame of `size` bytes: this thread's kept one, or null.
msgpack::zone* ReusedZone(size_t size) {
  thread_local std::unique_ptr<msgpack::zone> zone;
  thread_local size_t chunk = 0;
  const size_t want = std::max(size * sizeof(msgpack::object), size_t{1} << 20);  // at most an element per byte
  if (size < kReusedZoneFrom || want > kReusedZoneMax) return nullptr;
  if (zone == nullptr || chunk < want) {
    zone.reset();
    zone = std::make_unique<msgpack::zone>(want);
    chunk = want;
  }
  return zone.get();
}

// Clears the zone when the frame's objects are no longer read.
struct ZoneClear {
  msgpack::zone* zone;
  ~ZoneClear() {
    if (zone != nullptr) zone->clear();
  }
};

// Unpacks `data` as one msgpack object, nothing after it, into *oh (in
// `zone` when given: valid until it is cleared); false with *err set when it
// is not that.
bool Unpack(const char* data, size_t size, msgpack::zone* zone, msgpack::object_handle* oh, std::string* err) {
  try {
    std::size_t off = 0;
    // Every element takes at least one byte, so no valid frame declares more
    // array or map entries than it has bytes; the limit stops a short frame
    // from making msgpack reserve gigabytes for a claimed length.
    const msgpack::unpack_limit limit(size, size, size, size, size);
    if (zone != nullptr) {
      bool referenced = false;
      oh->set(msgpack::unpack(*zone, data, size, off, referenced, nullptr, nullptr, limit));
    } else {
      *oh = msgpack::unpack(data, size, off, nullptr, nullptr, limit);
    }
    if (off != size) {
      *err = "frame: " + std::to_string(size - off) + " trailing bytes after the message";
      return false;
    }
  } catch (const msgpack::insufficient_bytes&) {
    *err = "frame: truncated (" + std::to_string(size) + " bytes)";
    return false;
  } catch (const msgpack::size_overflow&) {
    *err = "frame: truncated or corrupt (declares more entries than its " + std::to_string(size) + " bytes can hold)";
    return false;
  } catch (const std::exception& e) {
    *err = std::string("frame: not msgpack (") + e.what() + ")";
    return false;
  }
  return true;
}

// Checks the frame [magic, version, type, body] around `root`: on success
// *type is the message type (not yet known to be one) and *body its map.
bool ReadFrame(Ctx& c, const object& root, uint8_t* type, const object** body) {
  const object_array* top;
  if (!GetArray(c, root, "frame", &top)) return false;
  if (top->size != 4) {
    return c.Fail("frame", "expected [magic, version, type, body], got " + std::to_string(top->size) + " items");
  }
  std::string magic;
  if (!GetStr(c, top->ptr[0], "frame.magic", &magic)) return false;
  if (magic != kMagic) return c.Fail("frame.magic", "expected 'RLSC', got '" + magic + "'");
  uint64_t version;
  if (!GetUint(c, top->ptr[1], "frame.version", &version)) return false;
  if (version != kVersion) {
    return c.Fail("frame.version", "unsupported wire version " + std::to_string(version) + " (this aggregator speaks " +
                                       std::to_string(kVersion) + ")");
  }
  uint64_t wide_type;
  if (!GetUint(c, top->ptr[2], "frame.type", &wide_type)) return false;
  // Checked before the narrowing cast, so type 257 is not read as 1.
  if (wide_type > UINT8_MAX) return c.Fail("frame.type", "unknown message type " + std::to_string(wide_type));
  *type = static_cast<uint8_t>(wide_type);
  *body = &top->ptr[3];
  if ((*body)->type != object_type::MAP) {
    return c.Fail("frame.body", std::string("expected a map, got ") + TypeName(**body));
  }
  return true;
}

// Decodes `body` with `decode` into a fresh M, stored in *out on success.
template <typename M>
bool DecodeAs(Ctx& c, const object& body, bool (*decode)(Ctx&, const object&, M*), Message* out) {
  M m;
  if (!decode(c, body, &m)) return false;
  *out = std::move(m);
  return true;
}

// The body of a message of type `type`, into *out.
bool DecodeBody(Ctx& c, uint8_t type, const object& body, Message* out) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kHello: return DecodeAs(c, body, DecodeHello, out);
    case MessageType::kBatch: return DecodeAs(c, body, internal::DecodeBatch, out);
    case MessageType::kBye: return DecodeAs(c, body, DecodeBye, out);
    case MessageType::kExpected: return DecodeAs(c, body, DecodeExpected, out);
    case MessageType::kControl: return DecodeAs(c, body, DecodeControl, out);
    case MessageType::kProbe: return DecodeAs(c, body, DecodeProbe, out);
    default: return c.Fail("frame.type", "unknown message type " + std::to_string(type));
  }
}

}  // namespace

DecodeResult Decode(const char* data, size_t size) {
  DecodeResult r;
  Ctx c{&r.error};
  msgpack::object_handle oh;
  msgpack::zone* zone = ReusedZone(size);
  const ZoneClear clear{zone};  // after the decoding, whatever its outcome
  if (!Unpack(data, size, zone, &oh, &r.error)) return r;
  uint8_t type;
  const object* body;
  if (!ReadFrame(c, oh.get(), &type, &body) || !DecodeBody(c, type, *body, &r.message)) return r;
  r.ok = true;
  return r;
}

}  // namespace rlscope::wire
