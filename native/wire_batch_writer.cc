// BatchWriter: the collector's streaming batch encoder. AddEvent is the flush
// thread's per-event path: each event is packed by hand into one buffer write.
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "native/wire.h"
#include "native/wire_pack.h"

namespace rlscope::wire {

using internal::PackString;

void BatchWriter::Begin(uint64_t session, uint64_t seq, int64_t watermark_ns, uint64_t dropped, uint64_t ack,
                        int64_t profiler_cpu_ns) {
  buffer_.clear();
  body_keys_ = 0;
  body_at_ = internal::OpenBody(packer_, buffer_, MessageType::kBatch);
  body_open_ = true;
  if (profiler_cpu_ns >= 0) Key("profiler_cpu_ns").pack_int64(profiler_cpu_ns);
  Key("ack").pack_uint64(ack);
  Key("session").pack_uint64(session);
  Key("seq").pack_uint64(seq);
  Key("watermark_ns").pack_int64(watermark_ns);
  Key("dropped").pack_uint64(dropped);
}

void BatchWriter::CpuHandler(int64_t samples, int64_t ps) {
  Key("cpu_handler").pack_array(2);
  packer_.pack_int64(samples);
  packer_.pack_int64(ps);
}

msgpack::packer<msgpack::sbuffer>& BatchWriter::Key(std::string_view key) {
  return internal::PackKey(packer_, key, &body_keys_);
}

namespace {

// A batch section of [id, str] pairs: strings (uint32 ids) or thread names
// (int64 tids).
template <typename Id>
void PackIdStrings(internal::Packer& pk, const std::vector<std::pair<Id, std::string>>& pairs) {
  pk.pack_array(static_cast<uint32_t>(pairs.size()));
  for (const auto& [id, s] : pairs) {
    pk.pack_array(2);
    if constexpr (std::is_signed_v<Id>) {
      pk.pack_int64(id);
    } else {
      pk.pack_uint32(id);
    }
    PackString(pk, s);
  }
}

}  // namespace

void BatchWriter::Strings(const std::vector<std::pair<uint32_t, std::string>>& strings) {
  PackIdStrings(Key("strings"), strings);
}

void BatchWriter::ThreadNames(const std::vector<std::pair<int64_t, std::string>>& names) {
  PackIdStrings(Key("thread_names"), names);
}

void BatchWriter::Categories(const std::vector<CategoryName>& categories) {
  Key("categories").pack_array(static_cast<uint32_t>(categories.size()));
  for (const auto& c : categories) {
    packer_.pack_array(3);
    packer_.pack_uint32(c.domain);
    packer_.pack_uint32(c.category);
    PackString(packer_, c.name);
  }
}

void BatchWriter::Gpu(const std::vector<GpuRecord>& records) {
  Key("gpu").pack_array(static_cast<uint32_t>(records.size() * kFieldsPerGpuRecord));
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

void BatchWriter::Arming(bool reports, const std::vector<ArmEdge>& edges) {
  if (!reports) return;
  Key("arming").pack_array(static_cast<uint32_t>(edges.size() * 2));
  for (const ArmEdge& e : edges) {
    packer_.pack_int64(e.ts_ns);
    packer_.pack(e.armed);
  }
}

void BatchWriter::Memory(const std::vector<MemorySample>& samples) {
  if (samples.empty()) return;
  Key("memory").pack_array(static_cast<uint32_t>(samples.size() * 2));
  for (const MemorySample& m : samples) {
    packer_.pack_int64(m.ts_ns);
    packer_.pack_int64(m.rss_bytes);
  }
}

void BatchWriter::Probes(const std::vector<ProbeSample>& probes) {
  Key("probes").pack_array(static_cast<uint32_t>(probes.size() * 4));
  for (const ProbeSample& p : probes) {
    packer_.pack_int64(p.t1);
    packer_.pack_int64(p.t2);
    packer_.pack_int64(p.t3);
    packer_.pack_int64(p.t4);
  }
}

void BatchWriter::BeginThreads(size_t num_threads) { Key("threads").pack_array(static_cast<uint32_t>(num_threads)); }

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

const msgpack::sbuffer& BatchWriter::Finish() {
  if (body_open_) {
    internal::CloseBody(buffer_, body_at_, body_keys_);
    body_open_ = false;
  }
  return buffer_;
}

}  // namespace rlscope::wire
