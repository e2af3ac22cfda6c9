// The batch body's decoding (internal::DecodeBatch): its optional sections,
// GPU records, and the events of each thread block. An event takes the fast
// path (DecodeEventFast) unless something in it is off; the checked path then
// says what.
#include <cstdint>
#include <string>

#include "native/wire_read.h"

namespace rlscope::wire::internal {
namespace {

using msgpack::object;
using msgpack::object_array;
using msgpack::type::object_type;

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
  if (kind < static_cast<uint64_t>(GpuKind::kKernel) || kind > static_cast<uint64_t>(GpuKind::kMemory)) {
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

// The array `name` of `n`-field tuples into `out`, each decoded by
// `each(fields, where, &item)`; its length must be a multiple of n.
template <typename T, typename Each>
bool DecodeTuples(Ctx& c, const object& o, const char* name, uint32_t n, std::vector<T>* out, Each each) {
  const object_array* arr;
  if (!GetArray(c, o, name, &arr)) return false;
  if (arr->size % n != 0) {
    return c.Fail(name, "length " + std::to_string(arr->size) + " is not a multiple of " + std::to_string(n));
  }
  out->resize(arr->size / n);
  for (size_t i = 0; i < out->size(); ++i) {
    const std::string where = std::string(name) + "[" + std::to_string(i) + "]";
    if (!each(arr->ptr + i * n, where, &(*out)[i])) return false;
  }
  return true;
}

bool DecodeGpu(Ctx& c, const object& o, Batch* b) {
  return DecodeTuples(
      c, o, "batch.gpu", kFieldsPerGpuRecord, &b->gpu,
      [&](const object* f, const std::string& where, GpuRecord* g) { return DecodeGpuRecord(c, f, where, g); });
}

bool DecodeProbes(Ctx& c, const object& o, Batch* b) {
  return DecodeTuples(c, o, "batch.probes", 4, &b->probes,
                      [&](const object* f, const std::string& where, ProbeSample* p) {
                        return GetInt(c, f[0], where, &p->t1) && GetInt(c, f[1], where, &p->t2) &&
                               GetInt(c, f[2], where, &p->t3) && GetInt(c, f[3], where, &p->t4);
                      });
}

bool DecodeArming(Ctx& c, const object& o, Batch* b) {
  b->reports_arming = true;
  return DecodeTuples(c, o, "batch.arming", 2, &b->arming, [&](const object* f, const std::string& where, ArmEdge* e) {
    return GetInt(c, f[0], where, &e->ts_ns) && GetBool(c, f[1], where, &e->armed);
  });
}

bool DecodeMemory(Ctx& c, const object& o, Batch* b) {
  return DecodeTuples(c, o, "batch.memory", 2, &b->memory,
                      [&](const object* f, const std::string& where, MemorySample* m) {
                        if (!GetInt(c, f[0], where, &m->ts_ns) || !GetInt(c, f[1], where, &m->rss_bytes)) return false;
                        return m->rss_bytes >= 0 || c.Fail(where, "negative resident bytes");
                      });
}

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
  if (kind < static_cast<uint64_t>(EventKind::kRangePush) || kind > static_cast<uint64_t>(EventKind::kProcessCpu) ||
      f[2].via.u64 > UINT32_MAX || f[3].via.u64 > UINT32_MAX || f[4].via.u64 > UINT32_MAX || f[6].via.u64 > UINT8_MAX) {
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

// One event: kFieldsPerEvent fields from `f`; `*ts` is the previous
// event's time, advanced by this one's delta.
bool DecodeEvent(Ctx& c, const object* f, const std::string& where, int64_t* ts, Event* ev) {
  uint64_t kind, name, domain, category, value, flags;
  int64_t dts;
  if (!GetUint(c, f[0], where + ".kind", &kind) || !GetInt(c, f[1], where + ".dts", &dts) ||
      !GetUintAtMost(c, f[2], where + ".name", UINT32_MAX, &name) ||
      !GetUintAtMost(c, f[3], where + ".domain", UINT32_MAX, &domain) ||
      !GetUintAtMost(c, f[4], where + ".category", UINT32_MAX, &category) ||
      !GetUint(c, f[5], where + ".value", &value) || !GetUintAtMost(c, f[6], where + ".flags", UINT8_MAX, &flags)) {
    return false;
  }
  if (kind < static_cast<uint64_t>(EventKind::kRangePush) || kind > static_cast<uint64_t>(EventKind::kProcessCpu)) {
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
    return c.Fail(where + ".events",
                  "length " + std::to_string(flat->size) + " is not a multiple of " + std::to_string(kFieldsPerEvent));
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

}  // namespace

bool DecodeBatch(Ctx& c, const object& body, Batch* b) {
  const object* o;
  if (!Require(c, body, "batch", "session", &o) || !GetUint(c, *o, "batch.session", &b->session)) return false;
  if (!Require(c, body, "batch", "seq", &o) || !GetUint(c, *o, "batch.seq", &b->seq)) return false;
  if (!Require(c, body, "batch", "watermark_ns", &o) || !GetInt(c, *o, "batch.watermark_ns", &b->watermark_ns))
    return false;
  if (!Require(c, body, "batch", "dropped", &o) || !GetUint(c, *o, "batch.dropped", &b->dropped)) return false;
  if ((o = Find(body, "ack")) != nullptr && !GetUint(c, *o, "batch.ack", &b->ack)) return false;
  if ((o = Find(body, "profiler_cpu_ns")) != nullptr) {
    if (!GetInt(c, *o, "batch.profiler_cpu_ns", &b->profiler_cpu_ns)) return false;
    if (b->profiler_cpu_ns < 0) return c.Fail("batch.profiler_cpu_ns", "negative CPU time");
  }
  if ((o = Find(body, "cpu_handler")) != nullptr) {
    const object_array* h;
    if (!GetArray(c, *o, "batch.cpu_handler", &h)) return false;
    if (h->size != 2) return c.Fail("batch.cpu_handler", "not [samples, ps]");
    if (!GetInt(c, h->ptr[0], "batch.cpu_handler", &b->cpu_handler_samples) ||
        !GetInt(c, h->ptr[1], "batch.cpu_handler", &b->cpu_handler_ps)) {
      return false;
    }
    if (b->cpu_handler_samples < 0 || b->cpu_handler_ps < 0) return c.Fail("batch.cpu_handler", "negative");
  }
  if ((o = Find(body, "strings")) != nullptr && !DecodeStrings(c, *o, b)) return false;
  if ((o = Find(body, "thread_names")) != nullptr && !DecodeThreadNames(c, *o, b)) return false;
  if ((o = Find(body, "categories")) != nullptr && !DecodeCategories(c, *o, b)) return false;
  if ((o = Find(body, "gpu")) != nullptr && !DecodeGpu(c, *o, b)) return false;
  if ((o = Find(body, "probes")) != nullptr && !DecodeProbes(c, *o, b)) return false;
  if ((o = Find(body, "arming")) != nullptr && !DecodeArming(c, *o, b)) return false;
  if ((o = Find(body, "memory")) != nullptr && !DecodeMemory(c, *o, b)) return false;
  const object_array* arr;
  if (!Require(c, body, "batch", "threads", &o) || !GetArray(c, *o, "batch.threads", &arr)) return false;
  b->threads.resize(arr->size);
  for (uint32_t i = 0; i < arr->size; ++i) {
    if (!DecodeThread(c, arr->ptr[i], "batch.threads[" + std::to_string(i) + "]", &b->threads[i])) return false;
  }
  return true;
}

}  // namespace rlscope::wire::internal
