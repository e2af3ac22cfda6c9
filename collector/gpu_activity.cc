// GPU activity tracing (gpu_activity.h). libcupti is reached only through
// the dlopen'ed CuptiApi table; the CUPTI headers supply types and constants.
#include "collector/gpu_activity.h"

#if RLSCOPE_HAVE_CUPTI

#include <cupti_result.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "native/clock.h"

#include "collector/cupti_records.h"

namespace rlscope {

#if RLSCOPE_CUPTI_ACTIVITY_SUPPORTED

// A record converted but not yet kept: its raw CUPTI times, and whether it
// may be kept through its launch's correlation id (device work).
struct ConvertedActivity {
  uint64_t start = 0, end = 0;
  bool device_side = false;
  GpuRecord g;
  bool always = false;  // kept armed or not (memory records: gpu_record.h kMemory)
};

namespace {

namespace cs = cupti_structs;

#define RLSCOPE_AT(T, field, off) \
  static_assert(offsetof(T, field) == (off), #T "::" #field " moved: check the CUPTI struct version")
RLSCOPE_AT(cs::Kernel, kind, 0);
RLSCOPE_AT(cs::Kernel, start, 16);
RLSCOPE_AT(cs::Kernel, end, 24);
RLSCOPE_AT(cs::Kernel, deviceId, 40);
RLSCOPE_AT(cs::Kernel, contextId, 44);
RLSCOPE_AT(cs::Kernel, streamId, 48);
RLSCOPE_AT(cs::Kernel, gridX, 52);
RLSCOPE_AT(cs::Kernel, gridY, 56);
RLSCOPE_AT(cs::Kernel, gridZ, 60);
RLSCOPE_AT(cs::Kernel, blockX, 64);
RLSCOPE_AT(cs::Kernel, blockY, 68);
RLSCOPE_AT(cs::Kernel, blockZ, 72);
RLSCOPE_AT(cs::Kernel, correlationId, 92);
RLSCOPE_AT(cs::Kernel, name, 104);
RLSCOPE_AT(cs::Memcpy, copyKind, 4);
RLSCOPE_AT(cs::Memcpy, bytes, 8);
RLSCOPE_AT(cs::Memcpy, start, 16);
RLSCOPE_AT(cs::Memcpy, end, 24);
RLSCOPE_AT(cs::Memcpy, deviceId, 32);
RLSCOPE_AT(cs::Memcpy, contextId, 36);
RLSCOPE_AT(cs::Memcpy, streamId, 40);
RLSCOPE_AT(cs::Memcpy, correlationId, 44);
RLSCOPE_AT(cs::Memset, bytes, 8);
RLSCOPE_AT(cs::Memset, start, 16);
RLSCOPE_AT(cs::Memset, end, 24);
RLSCOPE_AT(cs::Memset, deviceId, 32);
RLSCOPE_AT(cs::Memset, contextId, 36);
RLSCOPE_AT(cs::Memset, streamId, 40);
RLSCOPE_AT(cs::Memset, correlationId, 44);
RLSCOPE_AT(cs::Api, cbid, 4);
RLSCOPE_AT(cs::Api, start, 8);
RLSCOPE_AT(cs::Api, end, 16);
RLSCOPE_AT(cs::Api, threadId, 28);
RLSCOPE_AT(cs::Api, correlationId, 32);
RLSCOPE_AT(cs::Sync, type, 4);
RLSCOPE_AT(cs::Sync, start, 8);
RLSCOPE_AT(cs::Sync, end, 16);
RLSCOPE_AT(cs::Sync, correlationId, 24);
RLSCOPE_AT(cs::Sync, contextId, 28);
RLSCOPE_AT(cs::Sync, streamId, 32);
RLSCOPE_AT(cs::Overhead, overheadKind, 4);
RLSCOPE_AT(cs::Overhead, objectKind, 8);
RLSCOPE_AT(cs::Overhead, objectId, 12);
RLSCOPE_AT(cs::Overhead, start, 24);
RLSCOPE_AT(cs::Overhead, end, 32);
RLSCOPE_AT(cs::Overhead, correlationId, 40);
RLSCOPE_AT(cs::Memory, memoryOperationType, 4);
RLSCOPE_AT(cs::Memory, memoryKind, 8);
RLSCOPE_AT(cs::Memory, correlationId, 12);
RLSCOPE_AT(cs::Memory, bytes, 24);
RLSCOPE_AT(cs::Memory, timestamp, 32);
RLSCOPE_AT(cs::Memory, deviceId, 52);
RLSCOPE_AT(cs::Memory, contextId, 56);
RLSCOPE_AT(cs::Memory, streamId, 60);
#undef RLSCOPE_AT

template <typename T>
const T& As(const CUpti_Activity* r) {
  return *reinterpret_cast<const T*>(r);
}

// Host-side kinds: they run on a CPU thread and are kept by time alone. API
// records also open the correlation path for their device work.
bool IsApiKind(CUpti_ActivityKind k) { return k == CUPTI_ACTIVITY_KIND_RUNTIME || k == CUPTI_ACTIVITY_KIND_DRIVER; }

bool Times(uint64_t start, uint64_t end, int64_t* s, int64_t* e) {
  if (start == 0 || end < start) return false;
  *s = static_cast<int64_t>(start);
  *e = static_cast<int64_t>(end);
  return true;
}

// Walks the buffer (no lock: cuptiActivityGetNextRecord only parses).
// Returns false when the walk ended on an error other than the normal end.
bool Walk(const ActivityApi& api, const uint8_t* buffer, size_t valid_size, std::vector<const CUpti_Activity*>* out) {
  if (api.get_next_record == nullptr || buffer == nullptr || valid_size == 0) return true;
  CUpti_Activity* r = nullptr;
  // CUPTI's signature takes a non-const buffer; it does not write to it.
  uint8_t* b = const_cast<uint8_t*>(buffer);
  for (;;) {
    const CUptiResult st = api.get_next_record(b, valid_size, &r);
    if (st == CUPTI_SUCCESS) {
      if (r == nullptr) return false;
      out->push_back(r);
      continue;
    }
    return st == CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
}

// Convert's decision on a record before it is converted: API records are
// decided first (by time); the others stay undecided until their times and
// correlation are known.
enum Decision : uint8_t { kUndecided = 0, kKeep = 1, kDrop = 2 };

// One handler per record kind: the GpuRecord without its times, which stay
// raw until they are checked, and without a kernel's name, interned only
// when the record is kept.

// What kernels, copies and sets share: device work, kept by time or by its
// launch's correlation id.
template <typename T>
ConvertedActivity FromDeviceWork(const T& r, GpuKind kind) {
  ConvertedActivity c{r.start, r.end, /*device_side=*/true, {}};
  c.g.kind = static_cast<uint8_t>(kind);
  c.g.device = r.deviceId;
  c.g.context = r.contextId;
  c.g.stream = r.streamId;
  c.g.correlation = r.correlationId;
  return c;
}

ConvertedActivity FromKernel(const cs::Kernel& k) {
  ConvertedActivity c = FromDeviceWork(k, GpuKind::kKernel);
  c.g.grid[0] = k.gridX;
  c.g.grid[1] = k.gridY;
  c.g.grid[2] = k.gridZ;
  c.g.block[0] = k.blockX;
  c.g.block[1] = k.blockY;
  c.g.block[2] = k.blockZ;
  return c;
}

ConvertedActivity FromMemcpy(const cs::Memcpy& m) {
  ConvertedActivity c = FromDeviceWork(m, GpuKind::kMemcpy);
  c.g.subkind = m.copyKind;
  c.g.bytes = m.bytes;
  return c;
}

ConvertedActivity FromMemset(const cs::Memset& m) {
  ConvertedActivity c = FromDeviceWork(m, GpuKind::kMemset);
  c.g.bytes = m.bytes;
  return c;
}

ConvertedActivity FromMemory(const cs::Memory& m) {
  ConvertedActivity c{m.timestamp, m.timestamp, /*device_side=*/false, {}};
  c.always = true;
  c.g.kind = static_cast<uint8_t>(GpuKind::kMemory);
  c.g.subkind = (static_cast<uint32_t>(m.memoryOperationType) & 0xff) | (static_cast<uint32_t>(m.memoryKind) << 8);
  c.g.bytes = m.bytes;
  c.g.device = m.deviceId;
  c.g.context = m.contextId;
  c.g.stream = m.streamId;
  c.g.correlation = m.correlationId;
  return c;
}

// `kind`: kRuntimeApi or kDriverApi; `name`: the interned API name.
ConvertedActivity FromApi(const cs::Api& a, GpuKind kind, uint32_t name) {
  ConvertedActivity c{a.start, a.end, /*device_side=*/false, {}};
  c.g.kind = static_cast<uint8_t>(kind);
  c.g.name = name;
  c.g.tid = a.threadId;
  c.g.correlation = a.correlationId;
  return c;
}

// `tid`: the thread of the kept API record with its correlation id, or 0.
ConvertedActivity FromSync(const cs::Sync& y, uint32_t tid) {
  ConvertedActivity c{y.start, y.end, /*device_side=*/false, {}};
  c.g.tid = tid;
  c.g.kind = static_cast<uint8_t>(GpuKind::kSync);
  c.g.subkind = static_cast<uint32_t>(y.type);
  c.g.context = y.contextId;
  c.g.stream = y.streamId;
  c.g.correlation = y.correlationId;
  return c;
}

// `name`: the interned overhead kind.
ConvertedActivity FromOverhead(const cs::Overhead& o, uint32_t name) {
  ConvertedActivity c{o.start, o.end, /*device_side=*/false, {}};
  c.g.kind = static_cast<uint8_t>(GpuKind::kOverhead);
  c.g.subkind = static_cast<uint32_t>(o.overheadKind) >> 16;
  c.g.name = name;
  if (o.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) {
    c.g.tid = o.objectId.pt.threadId;
  } else if (o.objectKind == CUPTI_ACTIVITY_OBJECT_DEVICE || o.objectKind == CUPTI_ACTIVITY_OBJECT_CONTEXT ||
             o.objectKind == CUPTI_ACTIVITY_OBJECT_STREAM) {
    c.g.device = o.objectId.dcs.deviceId;
    if (o.objectKind != CUPTI_ACTIVITY_OBJECT_DEVICE) c.g.context = o.objectId.dcs.contextId;
    if (o.objectKind == CUPTI_ACTIVITY_OBJECT_STREAM) c.g.stream = o.objectId.dcs.streamId;
  }
  c.g.correlation = o.correlationId;
  return c;
}

}  // namespace

std::string StripApiVersion(std::string_view name) {
  // A trailing "_v<digits>".
  size_t i = name.size();
  while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') --i;
  if (i < name.size() && i >= 2 && name[i - 1] == 'v' && name[i - 2] == '_') {
    name = name.substr(0, i - 2);
  }
  return std::string(name);
}

const char* OverheadKindName(uint32_t overhead_kind) {
  switch (overhead_kind) {
    case CUPTI_ACTIVITY_OVERHEAD_UNKNOWN: return "unknown";
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "driver compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "CUPTI buffer flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "CUPTI instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "CUPTI resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "runtime triggered module loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "lazy function loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "command buffer full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "activity buffer request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT: return "UVM activity init";
    default: return nullptr;
  }
}

ActivityConverter::ActivityConverter(ActivityApi api, size_t correlation_capacity)
    : api_(api), correlation_capacity_(std::max<size_t>(1, correlation_capacity)) {}

ConversionStats ActivityConverter::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

void ActivityConverter::RememberCorrelation(uint32_t id, uint32_t tid) {
  if (id == 0) return;
  if (!kept_correlations_.emplace(id, tid).second) return;
  correlation_fifo_.push_back(id);
  while (correlation_fifo_.size() > correlation_capacity_) {
    kept_correlations_.erase(correlation_fifo_.front());
    correlation_fifo_.pop_front();
  }
}

uint32_t ActivityConverter::ApiName(ActivitySink& sink, uint32_t domain, uint32_t cbid) {
  const uint64_t key = (uint64_t{domain} << 32) | cbid;
  if (auto it = api_names_.find(key); it != api_names_.end()) return it->second;
  std::string name;
  const char* s = nullptr;
  if (api_.get_callback_name != nullptr &&
      api_.get_callback_name(static_cast<CUpti_CallbackDomain>(domain), cbid, &s) == CUPTI_SUCCESS && s != nullptr &&
      *s != 0) {
    name = StripApiVersion(s);
  } else {
    name = "cbid " + std::to_string(cbid);
  }
  const uint32_t id = sink.Intern(name);
  api_names_.emplace(key, id);
  return id;
}

uint32_t ActivityConverter::KernelName(ActivitySink& sink, const char* name) {
  if (name == nullptr) name = "<unnamed kernel>";
  auto it = kernel_names_.find(name);
  if (it != kernel_names_.end() && it->second.text == name) return it->second.id;
  const uint32_t id = sink.Intern(name);
  if (kernel_names_.size() >= 65536) kernel_names_.clear();  // bounded
  kernel_names_[name] = NameEntry{std::string(name), id};
  return id;
}

uint32_t ActivityConverter::OverheadName(ActivitySink& sink, uint32_t overhead_kind) {
  if (auto it = overhead_names_.find(overhead_kind); it != overhead_names_.end()) {
    return it->second;
  }
  const char* n = OverheadKindName(overhead_kind);
  const std::string name =
      n != nullptr ? std::string("overhead: ") + n : "overhead: kind " + std::to_string(overhead_kind);
  const uint32_t id = sink.Intern(name);
  overhead_names_.emplace(overhead_kind, id);
  return id;
}

ConversionStats ActivityConverter::Convert(const uint8_t* buffer, size_t valid_size, ActivitySink& sink,
                                           std::vector<GpuRecord>* out) {
  // A local, not a thread_local: CUPTI may complete a buffer on a thread
  // whose thread_locals exit() destroyed already (one allocation per
  // buffer of megabytes).
  std::vector<const CUpti_Activity*> records;
  ConversionStats st;
  st.truncated = !Walk(api_, buffer, valid_size, &records);
  st.records = records.size();

  std::lock_guard<std::mutex> lock(mu_);
  // API records first, so that device work that precedes its launch in the
  // buffer still finds the launch's correlation id; then all in buffer order.
  const std::vector<uint8_t> decided = DecideApiRecords(records, sink, &st);
  out->reserve(out->size() + records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    if (decided[i] == kDrop) continue;
    ConvertedActivity c;
    if (!ToGpuRecord(records[i], sink, &c)) {
      ++st.unknown_kind;
      continue;
    }
    int64_t s, e;
    if (!Times(c.start, c.end, &s, &e)) {
      ++st.invalid;
      continue;
    }
    if (decided[i] != kKeep && !c.always) {
      const bool correlated = c.device_side && c.g.correlation != 0 && kept_correlations_.count(c.g.correlation) != 0;
      if (!correlated && !sink.WasArmedDuring(s, e)) {
        ++st.outside_window;
        continue;
      }
    }
    c.g.start_ns = s;
    c.g.end_ns = e;
    if (c.g.kind == static_cast<uint8_t>(GpuKind::kKernel)) {
      c.g.name = KernelName(sink, As<cs::Kernel>(records[i]).name);
    }
    out->push_back(c.g);
    ++st.kept;
  }
  totals_ += st;
  return st;
}

std::vector<uint8_t> ActivityConverter::DecideApiRecords(const std::vector<const CUpti_Activity*>& records,
                                                         ActivitySink& sink, ConversionStats* st) {
  std::vector<uint8_t> decided(records.size(), kUndecided);
  for (size_t i = 0; i < records.size(); ++i) {
    const CUpti_Activity* r = records[i];
    if (!IsApiKind(r->kind)) continue;
    const auto& a = As<cs::Api>(r);
    int64_t s, e;
    if (!Times(a.start, a.end, &s, &e)) {
      decided[i] = kDrop;
      ++st->invalid;
    } else if (sink.WasArmedDuring(s, e)) {
      decided[i] = kKeep;
      RememberCorrelation(a.correlationId, a.threadId);
    } else {
      decided[i] = kDrop;
      ++st->outside_window;
    }
  }
  return decided;
}

bool ActivityConverter::ToGpuRecord(const CUpti_Activity* r, ActivitySink& sink, ConvertedActivity* c) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: *c = FromKernel(As<cs::Kernel>(r)); return true;
    case CUPTI_ACTIVITY_KIND_MEMCPY: *c = FromMemcpy(As<cs::Memcpy>(r)); return true;
    case CUPTI_ACTIVITY_KIND_MEMSET: *c = FromMemset(As<cs::Memset>(r)); return true;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      *c = FromApi(As<cs::Api>(r), GpuKind::kRuntimeApi,
                   ApiName(sink, CUPTI_CB_DOMAIN_RUNTIME_API, As<cs::Api>(r).cbid));
      return true;
    case CUPTI_ACTIVITY_KIND_DRIVER:
      *c = FromApi(As<cs::Api>(r), GpuKind::kDriverApi, ApiName(sink, CUPTI_CB_DOMAIN_DRIVER_API, As<cs::Api>(r).cbid));
      return true;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      // CUpti_ActivitySynchronization2 has no thread id: take it from the
      // kept API record with the same correlation id (cudaStreamSynchronize,
      // cudaEventSynchronize...) when it was in this or an earlier buffer;
      // 0 otherwise.
      const auto& y = As<cs::Sync>(r);
      const auto it = kept_correlations_.find(y.correlationId);
      *c = FromSync(y, it != kept_correlations_.end() ? it->second : 0);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: *c = FromMemory(As<cs::Memory>(r)); return true;
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
      const auto& o = As<cs::Overhead>(r);
      *c = FromOverhead(o, OverheadName(sink, static_cast<uint32_t>(o.overheadKind)));
      return true;
    }
    default: return false;
  }
}

#else  // !RLSCOPE_CUPTI_ACTIVITY_SUPPORTED

std::string StripApiVersion(std::string_view name) { return std::string(name); }
const char* OverheadKindName(uint32_t) { return nullptr; }
ActivityConverter::ActivityConverter(ActivityApi api, size_t correlation_capacity)
    : api_(api), correlation_capacity_(correlation_capacity) {}
ConversionStats ActivityConverter::totals() const { return totals_; }
ConversionStats ActivityConverter::Convert(const uint8_t*, size_t, ActivitySink&, std::vector<GpuRecord>*) {
  ConversionStats st;
  st.truncated = true;
  return st;
}

#endif  // RLSCOPE_CUPTI_ACTIVITY_SUPPORTED

ConversionStats& ConversionStats::operator+=(const ConversionStats& o) {
  records += o.records;
  kept += o.kept;
  invalid += o.invalid;
  outside_window += o.outside_window;
  unknown_kind += o.unknown_kind;
  truncated = truncated || o.truncated;
  return *this;
}

ConversionStats ConvertActivityBuffer(const uint8_t* buffer, size_t valid_size, const ActivityApi& api,
                                      ActivitySink& sink, std::vector<GpuRecord>* out) {
  ActivityConverter converter(api);
  return converter.Convert(buffer, valid_size, sink, out);
}

bool GpuTracingWanted(const Config& config) {
  const Config::Gpu& g = config.gpu;
  return g.kernels || g.memcpy || g.memset || g.runtime_api || g.driver_api || g.sync || g.memory;
}

size_t GpuBufferCap(const Config& config) {
  const int64_t n = config.buffers.max_mb / 8;
  return static_cast<size_t>(std::max<int64_t>(4, n));
}

}  // namespace rlscope

#endif  // RLSCOPE_HAVE_CUPTI
