#include "native/wire.h"

#include <cstring>
#include <exception>
#include <string_view>

namespace rlscope::wire {
namespace {

using msgpack::object;
using msgpack::object_array;
using msgpack::type::object_type;

template <typename Packer>
void PackHeader(Packer& pk, MessageType type, uint32_t body_keys) {
  pk.pack_array(4);
  pk.pack_str(4);
  pk.pack_str_body(kMagic, 4);
  pk.pack_uint32(kVersion);
  pk.pack_uint8(static_cast<uint8_t>(type));
  pk.pack_map(body_keys);
}

template <typename Packer>
void PackKey(Packer& pk, std::string_view key) {
  pk.pack_str(static_cast<uint32_t>(key.size()));
  pk.pack_str_body(key.data(), static_cast<uint32_t>(key.size()));
}

template <typename Packer>
void PackString(Packer& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// ---- decoding helpers: each returns false and fills *err on mismatch ----

struct Ctx {
  std::string* err;
  bool Fail(const std::string& where, const std::string& what) {
    *err = where + ": " + what;
    return false;
  }
};

const char* TypeName(const object& o) {
  switch (o.type) {
    case object_type::NIL: return "nil";
    case object_type::BOOLEAN: return "bool";
    case object_type::POSITIVE_INTEGER: return "uint";
    case object_type::NEGATIVE_INTEGER: return "int";
    case object_type::FLOAT32:
    case object_type::FLOAT64: return "float";
    case object_type::STR: return "str";
    case object_type::BIN: return "bin";
    case object_type::ARRAY: return "array";
    case object_type::MAP: return "map";
    default: return "ext";
  }
}

bool GetInt(Ctx& c, const object& o, const std::string& where, int64_t* out) {
  if (o.type == object_type::POSITIVE_INTEGER) {
    *out = static_cast<int64_t>(o.via.u64);
    return true;
  }
  if (o.type == object_type::NEGATIVE_INTEGER) {
    *out = o.via.i64;
    return true;
  }
  return c.Fail(where, std::string("expected an integer, got ") + TypeName(o));
}

bool GetUint(Ctx& c, const object& o, const std::string& where, uint64_t* out) {
  if (o.type != object_type::POSITIVE_INTEGER) {
    return c.Fail(where, std::string("expected an unsigned integer, got ") + TypeName(o));
  }
  *out = o.via.u64;
  return true;
}

// An unsigned integer that must fit the field it lands in (ids are 32-bit,
// flags 8-bit): a larger value is an error, never silently truncated.
bool GetUintAtMost(Ctx& c, const object& o, const std::string& where, uint64_t max,
                   uint64_t* out) {
  if (!GetUint(c, o, where, out)) return false;
  if (*out > max) {
    return c.Fail(where, std::to_string(*out) + " is out of range (max " + std::to_string(max) + ")");
  }
  return true;
}

bool GetStr(Ctx& c, const object& o, const std::string& where, std::string* out) {
  if (o.type != object_type::STR) {
    return c.Fail(where, std::string("expected a string, got ") + TypeName(o));
  }
  out->assign(o.via.str.ptr, o.via.str.size);
  return true;
}

bool GetArray(Ctx& c, const object& o, const std::string& where, const object_array** out) {
  if (o.type != object_type::ARRAY) {
    return c.Fail(where, std::string("expected an array, got ") + TypeName(o));
  }
  *out = &o.via.array;
  return true;
}

// Looks `key` up in a map object; nullptr when absent.
const object* Find(const object& map, std::string_view key) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == object_type::STR &&
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
      return &kv.val;
    }
  }
  return nullptr;
}

bool Require(Ctx& c, const object& map, const std::string& where, std::string_view key,
             const object** out) {
  *out = Find(map, key);
  if (*out == nullptr) return c.Fail(where, "missing key '" + std::string(key) + "'");
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
  if ((o = Find(body, "selected")) != nullptr) {  // optional; absent = true
    if (o->type != object_type::BOOLEAN) return c.Fail("hello.selected", std::string("expected a bool, got ") + TypeName(*o));
    h->selected = o->via.boolean;
  }
  if ((o = Find(body, "labels")) != nullptr) {
    if (o->type != object_type::MAP) return c.Fail("hello.labels", "expected a map");
    for (uint32_t i = 0; i < o->via.map.size; ++i) {
      std::string k, v;
      if (!GetStr(c, o->via.map.ptr[i].key, "hello.labels key", &k) ||
          !GetStr(c, o->via.map.ptr[i].val, "hello.labels[" + k + "]", &v)) {
        return false;
      }
      h->identity.labels[k] = v;
    }
  }
  if ((o = Find(body, "costs")) != nullptr) {  // optional
    if (o->type != object_type::MAP) return c.Fail("hello.costs", "expected a map");
    for (uint32_t i = 0; i < o->via.map.size; ++i) {
      std::string k;
      if (!GetStr(c, o->via.map.ptr[i].key, "hello.costs key", &k)) return false;
      const object& v = o->via.map.ptr[i].val;
      double ns;
      if (v.type == object_type::FLOAT32 || v.type == object_type::FLOAT64) ns = v.via.f64;
      else if (v.type == object_type::POSITIVE_INTEGER) ns = static_cast<double>(v.via.u64);
      else return c.Fail("hello.costs[" + k + "]", std::string("expected a number, got ") + TypeName(v));
      if (!(ns >= 0 && ns < 1e9)) return c.Fail("hello.costs[" + k + "]", "out of range");
      h->costs[k] = ns;
    }
  }
  if ((o = Find(body, "config")) != nullptr && !GetStr(c, *o, "hello.config", &h->config)) return false;
  if ((o = Find(body, "secret")) != nullptr && !GetStr(c, *o, "hello.secret", &h->secret)) return false;
  return true;
}

// Walks array `o` (named `name` in errors), whose elements are arrays of
// `n` items (`shape` says which), handing each one's items to `each`.
template <typename F>
bool ForEachTuple(Ctx& c, const object& o, const std::string& name, uint32_t n, const char* shape, F each) {
  const object_array* arr;
  if (!GetArray(c, o, name, &arr)) return false;
  for (uint32_t i = 0; i < arr->size; ++i) {
    const std::string where = name + "[" + std::to_string(i) + "]";
    const object_array* tuple;
    if (!GetArray(c, arr->ptr[i], where, &tuple)) return false;
    if (tuple->size != n) return c.Fail(where, shape);
    if (!each(tuple->ptr, where)) return false;
  }
  return true;
}

// The optional sections of a batch: each decodes the array `o` into `b`.
bool DecodeStrings(Ctx& c, const object& o, Batch* b) {
  auto each = [&](const object* f, const std::string& where) {
    uint64_t id;
    std::string s;
    if (!GetUint(c, f[0], where, &id) || !GetStr(c, f[1], where, &s)) return false;
    if (id == 0 || id > UINT32_MAX) return c.Fail(where, "string id out of range");
    b->strings.emplace_back(static_cast<uint32_t>(id), std::move(s));
    return true;
  };
  return ForEachTuple(c, o, "batch.strings", 2, "expected [id, string]", each);
}

bool DecodeThreadNames(Ctx& c, const object& o, Batch* b) {
  auto each = [&](const object* f, const std::string& where) {
    int64_t tid;
    std::string s;
    if (!GetInt(c, f[0], where, &tid) || !GetStr(c, f[1], where, &s)) return false;
    b->thread_names.emplace_back(tid, std::move(s));
    return true;
  };
  return ForEachTuple(c, o, "batch.thread_names", 2, "expected [tid, name]", each);
}

bool DecodeCategories(Ctx& c, const object& o, Batch* b) {
  auto each = [&](const object* f, const std::string& where) {
    uint64_t domain, category;
    CategoryName cn;
    if (!GetUintAtMost(c, f[0], where, UINT32_MAX, &domain) || !GetUintAtMost(c, f[1], where, UINT32_MAX, &category) ||
        !GetStr(c, f[2], where, &cn.name)) {
      return false;
    }
    cn.domain = static_cast<uint32_t>(domain);
    cn.category = static_cast<uint32_t>(category);
    b->categories.push_back(std::move(cn));
    return true;
  };
  return ForEachTuple(c, o, "batch.categories", 3, "expected [domain, category, name]", each);
}

// One GPU record: kFieldsPerGpuRecord fields from `f`.
bool DecodeGpuRecord(Ctx& c, const object* f, const std::string& where, GpuRecord* g) {
  uint64_t kind, corr, name, device, context, stream, subkind;
  int64_t start, dur, grid[3], block[3];
  if (!GetUint(c, f[0], where + ".kind", &kind) || !GetInt(c, f[1], where + ".start", &start) ||
      !GetInt(c, f[2], where + ".dur", &dur) || !GetUint(c, f[3], where + ".correlation", &corr) ||
      !GetUint(c, f[4], where + ".name", &name) || !GetUint(c, f[5], where + ".device", &device) ||
      !GetUint(c, f[6], where + ".context", &context) || !GetUint(c, f[7], where + ".stream", &stream) ||
      !GetInt(c, f[8], where + ".tid", &g->tid) || !GetUint(c, f[9], where + ".bytes", &g->bytes) ||
      !GetUint(c, f[10], where + ".subkind", &subkind)) {
    return false;
  }
  for (int k = 0; k < 3; ++k) {
    if (!GetInt(c, f[11 + k], where + ".grid", &grid[k]) || !GetInt(c, f[14 + k], where + ".block", &block[k])) {
      return false;
    }
    g->grid[k] = static_cast<int32_t>(grid[k]);
    g->block[k] = static_cast<int32_t>(block[k]);
  }
  if (kind < static_cast<uint64_t>(GpuKind::kKernel) || kind > static_cast<uint64_t>(GpuKind::kOverhead)) {
    return c.Fail(where + ".kind", "unknown GPU record kind " + std::to_string(kind));
  }
  if (dur < 0) return c.Fail(where + ".dur", "negative duration");
  g->kind = static_cast<uint8_t>(kind);
  g->start_ns = start;
  g->end_ns = static_cast<int64_t>(static_cast<uint64_t>(start) + static_cast<uint64_t>(dur));
  g->correlation = static_cast<uint32_t>(corr);
  g->name = static_cast<uint32_t>(name);
  g->device = static_cast<uint32_t>(device);
  g->context = static_cast<uint32_t>(context);
  g->stream = static_cast<uint32_t>(stream);
  g->subkind = static_cast<uint32_t>(subkind);
  return true;
}

bool DecodeGpu(Ctx& c, const object& o, Batch* b) {
  const object_array* arr;
  if (!GetArray(c, o, "batch.gpu", &arr)) return false;
  if (arr->size % kFieldsPerGpuRecord != 0) {
    return c.Fail("batch.gpu", "length " + std::to_string(arr->size) + " is not a multiple of " +
                                   std::to_string(kFieldsPerGpuRecord));
  }
  b->gpu.resize(arr->size / kFieldsPerGpuRecord);
  for (size_t i = 0; i < b->gpu.size(); ++i) {
    const std::string where = "batch.gpu[" + std::to_string(i) + "]";
    if (!DecodeGpuRecord(c, arr->ptr + i * kFieldsPerGpuRecord, where, &b->gpu[i])) return false;
  }
  return true;
}

bool DecodeProbes(Ctx& c, const object& o, Batch* b) {
  const object_array* arr;
  if (!GetArray(c, o, "batch.probes", &arr)) return false;
  if (arr->size % 4 != 0) return c.Fail("batch.probes", "length " + std::to_string(arr->size) + " is not a multiple of 4");
  for (uint32_t i = 0; i < arr->size; i += 4) {
    ProbeSample p;
    const std::string where = "batch.probes[" + std::to_string(i / 4) + "]";
    if (!GetInt(c, arr->ptr[i], where, &p.t1) || !GetInt(c, arr->ptr[i + 1], where, &p.t2) ||
        !GetInt(c, arr->ptr[i + 2], where, &p.t3) || !GetInt(c, arr->ptr[i + 3], where, &p.t4)) {
      return false;
    }
    b->probes.push_back(p);
  }
  return true;
}

// One event: kFieldsPerEvent fields from `f`; `*ts` is the previous
// event's time, advanced by this one's delta.
// The common case of DecodeEvent with no error text built: the seven
// fields are integers in range and the kind is known. False leaves *ts and
// *ev untouched; DecodeEvent then says what is wrong.
bool DecodeEventFast(const object* f, int64_t* ts, Event* ev) {
  for (int i = 0; i < 7; ++i) {
    if (f[i].type != object_type::POSITIVE_INTEGER && (i != 1 || f[i].type != object_type::NEGATIVE_INTEGER)) {
      return false;
    }
  }
  const uint64_t kind = f[0].via.u64;
  if (kind < static_cast<uint64_t>(EventKind::kRangePush) || kind > static_cast<uint64_t>(EventKind::kCpuSample) ||
      f[2].via.u64 > UINT32_MAX || f[3].via.u64 > UINT32_MAX || f[4].via.u64 > UINT32_MAX ||
      f[6].via.u64 > UINT8_MAX) {
    return false;
  }
  const int64_t dts = f[1].type == object_type::POSITIVE_INTEGER ? static_cast<int64_t>(f[1].via.u64) : f[1].via.i64;
  // Wrapping add, as DecodeEvent.
  *ts = static_cast<int64_t>(static_cast<uint64_t>(*ts) + static_cast<uint64_t>(dts));
  ev->kind = static_cast<uint8_t>(kind);
  ev->ts_ns = *ts;
  ev->name = static_cast<uint32_t>(f[2].via.u64);
  ev->domain = static_cast<uint32_t>(f[3].via.u64);
  ev->category = static_cast<uint32_t>(f[4].via.u64);
  ev->value = f[5].via.u64;
  ev->flags = static_cast<uint8_t>(f[6].via.u64);
  return true;
}

bool DecodeEvent(Ctx& c, const object* f, const std::string& where, int64_t* ts, Event* ev) {
  uint64_t kind, name, domain, category, value, flags;
  int64_t dts;
  if (!GetUint(c, f[0], where + ".kind", &kind) || !GetInt(c, f[1], where + ".dts", &dts) ||
      !GetUintAtMost(c, f[2], where + ".name", UINT32_MAX, &name) ||
      !GetUintAtMost(c, f[3], where + ".domain", UINT32_MAX, &domain) ||
      !GetUintAtMost(c, f[4], where + ".category", UINT32_MAX, &category) ||
      !GetUint(c, f[5], where + ".value", &value) ||
      !GetUintAtMost(c, f[6], where + ".flags", UINT8_MAX, &flags)) {
    return false;
  }
  if (kind < static_cast<uint64_t>(EventKind::kRangePush) ||
      kind > static_cast<uint64_t>(EventKind::kCpuSample)) {
    return c.Fail(where + ".kind", "unknown event kind " + std::to_string(kind));
  }
  // Wrapping add: a hostile dts must not be signed-overflow UB.
  *ts = static_cast<int64_t>(static_cast<uint64_t>(*ts) + static_cast<uint64_t>(dts));
  ev->kind = static_cast<uint8_t>(kind);
  ev->ts_ns = *ts;
  ev->name = static_cast<uint32_t>(name);
  ev->domain = static_cast<uint32_t>(domain);
  ev->category = static_cast<uint32_t>(category);
  ev->value = value;
  ev->flags = static_cast<uint8_t>(flags);
  return true;
}

// One thread block: [tid, flat events].
bool DecodeThread(Ctx& c, const object& o, const std::string& where, ThreadEvents* te) {
  const object_array* block;
  if (!GetArray(c, o, where, &block)) return false;
  if (block->size != 2) return c.Fail(where, "expected [tid, events]");
  if (!GetInt(c, block->ptr[0], where + ".tid", &te->tid)) return false;
  const object_array* flat;
  if (!GetArray(c, block->ptr[1], where + ".events", &flat)) return false;
  if (flat->size % kFieldsPerEvent != 0) {
    return c.Fail(where + ".events", "length " + std::to_string(flat->size) +
                                         " is not a multiple of " + std::to_string(kFieldsPerEvent));
  }
  te->events.resize(flat->size / kFieldsPerEvent);
  int64_t ts = 0;
  for (size_t e = 0; e < te->events.size(); ++e) {
    const object* f = flat->ptr + e * kFieldsPerEvent;
    if (DecodeEventFast(f, &ts, &te->events[e])) continue;
    // Something is off: the checked path names the field and what is wrong.
    const std::string ewhere = where + ".events[" + std::to_string(e) + "]";
    if (!DecodeEvent(c, f, ewhere, &ts, &te->events[e])) return false;
  }
  return true;
}

bool DecodeBatch(Ctx& c, const object& body, Batch* b) {
  const object* o;
  if (!Require(c, body, "batch", "session", &o) || !GetUint(c, *o, "batch.session", &b->session)) return false;
  if (!Require(c, body, "batch", "seq", &o) || !GetUint(c, *o, "batch.seq", &b->seq)) return false;
  if (!Require(c, body, "batch", "watermark_ns", &o) || !GetInt(c, *o, "batch.watermark_ns", &b->watermark_ns)) return false;
  if (!Require(c, body, "batch", "dropped", &o) || !GetUint(c, *o, "batch.dropped", &b->dropped)) return false;
  if ((o = Find(body, "ack")) != nullptr && !GetUint(c, *o, "batch.ack", &b->ack)) return false;
  if ((o = Find(body, "profiler_cpu_ns")) != nullptr) {
    if (!GetInt(c, *o, "batch.profiler_cpu_ns", &b->profiler_cpu_ns)) return false;
    if (b->profiler_cpu_ns < 0) return c.Fail("batch.profiler_cpu_ns", "negative CPU time");
  }
  if ((o = Find(body, "strings")) != nullptr && !DecodeStrings(c, *o, b)) return false;
  if ((o = Find(body, "thread_names")) != nullptr && !DecodeThreadNames(c, *o, b)) return false;
  if ((o = Find(body, "categories")) != nullptr && !DecodeCategories(c, *o, b)) return false;
  if ((o = Find(body, "gpu")) != nullptr && !DecodeGpu(c, *o, b)) return false;
  if ((o = Find(body, "probes")) != nullptr && !DecodeProbes(c, *o, b)) return false;
  const object_array* arr;
  if (!Require(c, body, "batch", "threads", &o) || !GetArray(c, *o, "batch.threads", &arr)) return false;
  b->threads.resize(arr->size);
  for (uint32_t i = 0; i < arr->size; ++i) {
    if (!DecodeThread(c, arr->ptr[i], "batch.threads[" + std::to_string(i) + "]", &b->threads[i])) return false;
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
    for (uint32_t j = 0; j < m.via.map.size; ++j) {
      std::string k, v;
      if (!GetStr(c, m.via.map.ptr[j].key, where + " key", &k) ||
          !GetStr(c, m.via.map.ptr[j].val, where + "[" + k + "]", &v)) {
        return false;
      }
      entry[k] = v;
    }
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
  if ((o = Find(body, "hello")) != nullptr) {
    if (o->type != object_type::BOOLEAN) return c.Fail("control.hello", std::string("expected a bool, got ") + TypeName(*o));
    ctl->hello = o->via.boolean;
  }
  if ((o = Find(body, "release_ns")) != nullptr && !GetInt(c, *o, "control.release_ns", &ctl->release_ns)) {
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

}  // namespace

void BatchWriter::Begin(uint64_t session, uint64_t seq, int64_t watermark_ns, uint64_t dropped,
                        uint64_t ack, int64_t profiler_cpu_ns) {
  buffer_.clear();
  PackHeader(packer_, MessageType::kBatch, profiler_cpu_ns >= 0 ? 12 : 11);
  if (profiler_cpu_ns >= 0) {
    PackKey(packer_, "profiler_cpu_ns");
    packer_.pack_int64(profiler_cpu_ns);
  }
  PackKey(packer_, "ack");
  packer_.pack_uint64(ack);
  PackKey(packer_, "session");
  packer_.pack_uint64(session);
  PackKey(packer_, "seq");
  packer_.pack_uint64(seq);
  PackKey(packer_, "watermark_ns");
  packer_.pack_int64(watermark_ns);
  PackKey(packer_, "dropped");
  packer_.pack_uint64(dropped);
}

void BatchWriter::Strings(const std::vector<std::pair<uint32_t, std::string>>& strings) {
  PackKey(packer_, "strings");
  packer_.pack_array(static_cast<uint32_t>(strings.size()));
  for (const auto& [id, s] : strings) {
    packer_.pack_array(2);
    packer_.pack_uint32(id);
    PackString(packer_, s);
  }
}

void BatchWriter::ThreadNames(const std::vector<std::pair<int64_t, std::string>>& names) {
  PackKey(packer_, "thread_names");
  packer_.pack_array(static_cast<uint32_t>(names.size()));
  for (const auto& [tid, s] : names) {
    packer_.pack_array(2);
    packer_.pack_int64(tid);
    PackString(packer_, s);
  }
}

void BatchWriter::Categories(const std::vector<CategoryName>& categories) {
  PackKey(packer_, "categories");
  packer_.pack_array(static_cast<uint32_t>(categories.size()));
  for (const auto& c : categories) {
    packer_.pack_array(3);
    packer_.pack_uint32(c.domain);
    packer_.pack_uint32(c.category);
    PackString(packer_, c.name);
  }
}

void BatchWriter::Gpu(const std::vector<GpuRecord>& records) {
  PackKey(packer_, "gpu");
  packer_.pack_array(static_cast<uint32_t>(records.size() * kFieldsPerGpuRecord));
  for (const GpuRecord& g : records) {
    packer_.pack_uint8(g.kind);
    packer_.pack_int64(g.start_ns);
    packer_.pack_int64(g.end_ns - g.start_ns);
    packer_.pack_uint32(g.correlation);
    packer_.pack_uint32(g.name);
    packer_.pack_uint32(g.device);
    packer_.pack_uint32(g.context);
    packer_.pack_uint32(g.stream);
    packer_.pack_int64(g.tid);
    packer_.pack_uint64(g.bytes);
    packer_.pack_uint32(g.subkind);
    for (int v : g.grid) packer_.pack_int32(v);
    for (int v : g.block) packer_.pack_int32(v);
  }
}

void BatchWriter::Probes(const std::vector<ProbeSample>& probes) {
  PackKey(packer_, "probes");
  packer_.pack_array(static_cast<uint32_t>(probes.size() * 4));
  for (const ProbeSample& p : probes) {
    packer_.pack_int64(p.t1);
    packer_.pack_int64(p.t2);
    packer_.pack_int64(p.t3);
    packer_.pack_int64(p.t4);
  }
}

void BatchWriter::BeginThreads(size_t num_threads) {
  PackKey(packer_, "threads");
  packer_.pack_array(static_cast<uint32_t>(num_threads));
}

void BatchWriter::BeginThread(int64_t tid, size_t num_events) {
  packer_.pack_array(2);
  packer_.pack_int64(tid);
  packer_.pack_array(static_cast<uint32_t>(num_events * kFieldsPerEvent));
  prev_ts_ = 0;
}

namespace {

// msgpack's compact integer encodings, byte for byte as msgpack-c's packer
// writes them (pack_imp_uint64, pack_imp_int64; uint8/uint32 values encode
// as uint64 ones do), stored at `p`; each returns the end. The event path
// packs a whole event into one buffer write instead of seven.
inline __attribute__((always_inline)) char* PutBigEndian(char* p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) *p++ = static_cast<char>(v >> (8 * i));
  return p;
}

inline __attribute__((always_inline)) char* PutUint(char* p, uint64_t v) {
  if (v < 0x80) {
    *p++ = static_cast<char>(v);
    return p;
  }
  if (v < 0x100) {
    *p++ = static_cast<char>(0xcc);
    *p++ = static_cast<char>(v);
    return p;
  }
  if (v < 0x10000) {
    *p++ = static_cast<char>(0xcd);
    return PutBigEndian(p, v, 2);
  }
  if (v < (uint64_t{1} << 32)) {
    *p++ = static_cast<char>(0xce);
    return PutBigEndian(p, v, 4);
  }
  *p++ = static_cast<char>(0xcf);
  return PutBigEndian(p, v, 8);
}

inline __attribute__((always_inline)) char* PutInt(char* p, int64_t d) {
  if (d >= 0) return PutUint(p, static_cast<uint64_t>(d));
  const uint64_t u = static_cast<uint64_t>(d);
  if (d >= -32) {  // negative fixnum
    *p++ = static_cast<char>(u);
    return p;
  }
  if (d >= -128) {
    *p++ = static_cast<char>(0xd0);
    *p++ = static_cast<char>(u);
    return p;
  }
  if (d >= -32768) {
    *p++ = static_cast<char>(0xd1);
    return PutBigEndian(p, u, 2);
  }
  if (d >= INT32_MIN) {
    *p++ = static_cast<char>(0xd2);
    return PutBigEndian(p, u, 4);
  }
  *p++ = static_cast<char>(0xd3);
  return PutBigEndian(p, u, 8);
}

}  // namespace

void BatchWriter::AddEvent(const Event& e) {
  char buf[2 + 9 + 3 * 5 + 9 + 2];  // the longest encoding of each field
  char* p = PutUint(buf, e.kind);
  p = PutInt(p, e.ts_ns - prev_ts_);
  prev_ts_ = e.ts_ns;
  p = PutUint(p, e.name);
  p = PutUint(p, e.domain);
  p = PutUint(p, e.category);
  p = PutUint(p, e.value);
  p = PutUint(p, e.flags);
  buffer_.write(buf, static_cast<size_t>(p - buf));
}

const msgpack::sbuffer& BatchWriter::Finish() { return buffer_; }

std::string Encode(const Message& message) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  if (const auto* h = std::get_if<Hello>(&message)) {
    PackHeader(pk, MessageType::kHello, 11 + (h->config.empty() ? 0 : 1) + (h->secret.empty() ? 0 : 1));
    PackKey(pk, "session");
    pk.pack_uint64(h->session);
    PackKey(pk, "host");
    PackString(pk, h->identity.host);
    PackKey(pk, "pid");
    pk.pack_int64(h->identity.pid);
    PackKey(pk, "rank");
    pk.pack_int64(h->identity.rank);
    PackKey(pk, "role");
    PackString(pk, h->identity.role);
    PackKey(pk, "name");
    PackString(pk, h->identity.name);
    PackKey(pk, "clock");
    PackString(pk, h->clock);
    PackKey(pk, "start_ns");
    pk.pack_int64(h->start_ns);
    PackKey(pk, "selected");
    if (h->selected) pk.pack_true(); else pk.pack_false();
    PackKey(pk, "labels");
    pk.pack_map(static_cast<uint32_t>(h->identity.labels.size()));
    for (const auto& [k, v] : h->identity.labels) {
      PackString(pk, k);
      PackString(pk, v);
    }
    PackKey(pk, "costs");
    pk.pack_map(static_cast<uint32_t>(h->costs.size()));
    for (const auto& [k, ns] : h->costs) {
      PackString(pk, k);
      pk.pack_double(ns);
    }
    if (!h->config.empty()) {
      PackKey(pk, "config");
      PackString(pk, h->config);
    }
    if (!h->secret.empty()) {
      PackKey(pk, "secret");
      PackString(pk, h->secret);
    }
    return std::string(buf.data(), buf.size());
  }
  if (const auto* b = std::get_if<Batch>(&message)) {
    BatchWriter w;
    w.Begin(b->session, b->seq, b->watermark_ns, b->dropped, b->ack, b->profiler_cpu_ns);
    w.Strings(b->strings);
    w.ThreadNames(b->thread_names);
    w.Categories(b->categories);
    w.Gpu(b->gpu);
    w.Probes(b->probes);
    w.BeginThreads(b->threads.size());
    for (const auto& te : b->threads) {
      w.BeginThread(te.tid, te.events.size());
      for (const auto& e : te.events) w.AddEvent(e);
    }
    const msgpack::sbuffer& out = w.Finish();
    return std::string(out.data(), out.size());
  }
  if (const auto* ex = std::get_if<Expected>(&message)) {
    PackHeader(pk, MessageType::kExpected, 2);
    PackKey(pk, "session");
    pk.pack_uint64(ex->session);
    PackKey(pk, "processes");
    pk.pack_array(static_cast<uint32_t>(ex->processes.size()));
    for (const auto& p : ex->processes) {
      pk.pack_map(static_cast<uint32_t>(p.size()));
      for (const auto& [k, v] : p) {
        PackString(pk, k);
        PackString(pk, v);
      }
    }
    return std::string(buf.data(), buf.size());
  }
  if (const auto* probe = std::get_if<Probe>(&message)) {
    PackHeader(pk, MessageType::kProbe, 2);
    PackKey(pk, "session");
    pk.pack_uint64(probe->session);
    PackKey(pk, "t1");
    pk.pack_int64(probe->t1);
    return std::string(buf.data(), buf.size());
  }
  if (const auto* ctl = std::get_if<Control>(&message)) {
    PackHeader(pk, MessageType::kControl, 6 + (ctl->run_config.empty() ? 0 : 1) + (ctl->role.empty() ? 0 : 1) +
                                              (ctl->hello ? 1 : 0) + (ctl->release_ns != 0 ? 1 : 0));
    PackKey(pk, "window");
    pk.pack_uint8(static_cast<uint8_t>(ctl->window));
    PackKey(pk, "step");
    pk.pack_int64(ctl->step);
    PackKey(pk, "flush");
    pk.pack_uint64(ctl->flush);
    PackKey(pk, "probe_t1");
    pk.pack_int64(ctl->probe_t1);
    PackKey(pk, "probe_t2");
    pk.pack_int64(ctl->probe_t2);
    PackKey(pk, "probe_t3");
    pk.pack_int64(ctl->probe_t3);
    if (!ctl->run_config.empty()) {
      PackKey(pk, "run_config");
      PackString(pk, ctl->run_config);
    }
    if (!ctl->role.empty()) {
      PackKey(pk, "role");
      PackString(pk, ctl->role);
    }
    if (ctl->hello) {
      PackKey(pk, "hello");
      pk.pack_true();
    }
    if (ctl->release_ns != 0) {
      PackKey(pk, "release_ns");
      pk.pack_int64(ctl->release_ns);
    }
    return std::string(buf.data(), buf.size());
  }
  const auto& bye = std::get<Bye>(message);
  PackHeader(pk, MessageType::kBye, 3);
  PackKey(pk, "session");
  pk.pack_uint64(bye.session);
  PackKey(pk, "events");
  pk.pack_uint64(bye.events);
  PackKey(pk, "dropped");
  pk.pack_uint64(bye.dropped);
  return std::string(buf.data(), buf.size());
}

DecodeResult Decode(const char* data, size_t size) {
  DecodeResult r;
  Ctx c{&r.error};
  msgpack::object_handle oh;
  try {
    std::size_t off = 0;
    // Every element takes at least one byte, so no valid frame declares more
    // array or map entries than it has bytes; the limit stops a short frame
    // from making msgpack reserve gigabytes for a claimed length.
    const msgpack::unpack_limit limit(size, size, size, size, size);
    oh = msgpack::unpack(data, size, off, nullptr, nullptr, limit);
    if (off != size) {
      r.error = "frame: " + std::to_string(size - off) + " trailing bytes after the message";
      return r;
    }
  } catch (const msgpack::insufficient_bytes&) {
    r.error = "frame: truncated (" + std::to_string(size) + " bytes)";
    return r;
  } catch (const msgpack::size_overflow&) {
    r.error = "frame: truncated or corrupt (declares more entries than its " + std::to_string(size) +
              " bytes can hold)";
    return r;
  } catch (const std::exception& e) {
    r.error = std::string("frame: not msgpack (") + e.what() + ")";
    return r;
  }
  const object& root = oh.get();
  const object_array* top;
  if (!GetArray(c, root, "frame", &top)) return r;
  if (top->size != 4) {
    r.error = "frame: expected [magic, version, type, body], got " + std::to_string(top->size) + " items";
    return r;
  }
  std::string magic;
  if (!GetStr(c, top->ptr[0], "frame.magic", &magic)) return r;
  if (magic != kMagic) {
    r.error = "frame.magic: expected 'RLSC', got '" + magic + "'";
    return r;
  }
  uint64_t version, type;
  if (!GetUint(c, top->ptr[1], "frame.version", &version)) return r;
  if (version != kVersion) {
    r.error = "frame.version: unsupported wire version " + std::to_string(version) +
              " (this aggregator speaks " + std::to_string(kVersion) + ")";
    return r;
  }
  if (!GetUint(c, top->ptr[2], "frame.type", &type)) return r;
  // Checked before the narrowing cast below, so type 257 is not read as 1.
  if (type > UINT8_MAX) {
    r.error = "frame.type: unknown message type " + std::to_string(type);
    return r;
  }
  const object& body = top->ptr[3];
  if (body.type != object_type::MAP) {
    r.error = std::string("frame.body: expected a map, got ") + TypeName(body);
    return r;
  }
  switch (static_cast<MessageType>(type)) {
    case MessageType::kHello: {
      Hello h;
      if (!DecodeHello(c, body, &h)) return r;
      r.message = std::move(h);
      break;
    }
    case MessageType::kBatch: {
      Batch b;
      if (!DecodeBatch(c, body, &b)) return r;
      r.message = std::move(b);
      break;
    }
    case MessageType::kBye: {
      Bye b;
      if (!DecodeBye(c, body, &b)) return r;
      r.message = std::move(b);
      break;
    }
    case MessageType::kExpected: {
      Expected ex;
      if (!DecodeExpected(c, body, &ex)) return r;
      r.message = std::move(ex);
      break;
    }
    case MessageType::kControl: {
      Control ctl;
      if (!DecodeControl(c, body, &ctl)) return r;
      r.message = ctl;
      break;
    }
    case MessageType::kProbe: {
      Probe p;
      if (!DecodeProbe(c, body, &p)) return r;
      r.message = p;
      break;
    }
    default:
      r.error = "frame.type: unknown message type " + std::to_string(type);
      return r;
  }
  r.ok = true;
  return r;
}

}  // namespace rlscope::wire
