// GPU activity tracing's live path (gpu_activity.h): the bounded buffer
// pool, CUPTI's buffer callbacks, and StartGpuTracing, which wires CUPTI to
// the collector. libcupti is reached only through the dlopen'ed CuptiApi
// table; the CUPTI headers supply types and constants.
#include "collector/gpu_activity.h"

#if RLSCOPE_HAVE_CUPTI

#include <cupti_result.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>

#include "collector/collector.h"
#include "collector/cupti_records.h"
#include "native/clock.h"

namespace rlscope {

// ---------------------------------------------------------------------------
// Buffer pool.

BufferPool::BufferPool(size_t max_buffers, size_t preallocate) : max_buffers_(std::max<size_t>(1, max_buffers)) {
  const size_t n = std::min(preallocate, max_buffers_);
  for (size_t i = 0; i < n; ++i) {
    void* p = std::aligned_alloc(8, kBufferSize);
    if (p == nullptr) break;
    free_.push_back(static_cast<uint8_t*>(p));
    ++allocated_;
  }
}

BufferPool::~BufferPool() {
  for (uint8_t* p : free_) std::free(p);
}

uint8_t* BufferPool::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      uint8_t* p = free_.back();
      free_.pop_back();
      return p;
    }
    if (allocated_ >= max_buffers_) {
      ++rejected_;
      return nullptr;
    }
    ++allocated_;  // reserve the slot; allocate outside the lock
  }
  void* p = std::aligned_alloc(8, kBufferSize);
  if (p == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    --allocated_;
    ++rejected_;
  }
  return static_cast<uint8_t*>(p);
}

void BufferPool::Release(uint8_t* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(buffer);
}

uint64_t BufferPool::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

// ---------------------------------------------------------------------------
// The live path. CUPTI's callbacks are plain function pointers: the state is
// process-global, created once and never freed (CUPTI may call back until the
// process exits).

namespace {

struct LiveTracer {
  std::atomic<GpuTracingHost*> host{nullptr};  // the last StartGpuTracing's
  CuptiApi api;
  ActivityConverter converter;
  BufferPool pool;
  std::atomic<uint64_t> cupti_dropped{0};
  std::atomic<uint64_t> completed{0};
  LiveTracer(GpuTracingHost* h, const CuptiApi& a, size_t cap)
      : host(h), api(a), converter(ActivityApi{a.activity_get_next_record, a.get_callback_name}), pool(cap) {}
};

std::atomic<LiveTracer*> g_tracer{nullptr};
std::mutex g_start_mu;                // serialises StartGpuTracing
bool g_timestamp_registered = false;  // guarded by g_start_mu: once per process
bool g_started = false;               // guarded by g_start_mu

uint64_t CUPTIAPI MonotonicTimestamp() { return static_cast<uint64_t>(MonotonicNs()); }

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) noexcept {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  LiveTracer* t = g_tracer.load(std::memory_order_acquire);
  if (t == nullptr) return;
  uint8_t* b = t->pool.Acquire();
  if (b == nullptr) return;  // at the cap: CUPTI drops and counts
  *buffer = b;
  *size = BufferPool::kBufferSize;
}

void CUPTIAPI OnBufferCompleted(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t size,
                                size_t valid_size) noexcept {
  (void)size;
  LiveTracer* t = g_tracer.load(std::memory_order_acquire);
  if (t == nullptr) return;  // never handed out by us
  try {
    std::vector<GpuRecord> records;
    GpuTracingHost* host = t->host.load(std::memory_order_acquire);
    t->converter.Convert(buffer, valid_size, *host, &records);
    if (!records.empty()) host->AddGpuRecords(std::move(records));
  } catch (...) {
    // Never let an exception into CUPTI's thread: the buffer's records are lost.
  }
  try {
    size_t dropped = 0;
    if (t->api.activity_get_num_dropped_records != nullptr &&
        t->api.activity_get_num_dropped_records(ctx, stream_id, &dropped) == CUPTI_SUCCESS) {
      t->cupti_dropped.fetch_add(dropped, std::memory_order_relaxed);
    }
  } catch (...) {
  }
  t->completed.fetch_add(1, std::memory_order_relaxed);
  t->pool.Release(buffer);
}

void FlushHook() { FlushGpuActivity(); }

// CUPTI is called from the flush thread (FlushGpuActivity) until the process
// exits, but exit destroys libcupti's statics before ShutdownAtExit stops
// that thread: the collector's handler was registered before libcupti was
// loaded, and exit runs handlers and destructors in reverse order. So once
// tracing has started, FlushAtExit is registered too (after libcupti's
// statics: it runs before their destructors): CUPTI's last flush happens
// there, and no CUPTI call after it (the collector's final flush takes the
// records it handed over). Always on, the flush thread calls CUPTI at every
// flush, and a worker exiting mid-flush crashed in a fake libcupti's freed
// buffer.
std::mutex g_flush_mu;   // serialises CUPTI flushes with FlushAtExit
bool g_exiting = false;  // guarded by g_flush_mu: no CUPTI call from here on

void FlushAtExit() {
  FlushGpuActivity();
  std::lock_guard<std::mutex> lock(g_flush_mu);
  g_exiting = true;
}

class CollectorHost final : public GpuTracingHost {
 public:
  explicit CollectorHost(Collector* c) : c_(c) {}
  uint32_t Intern(std::string_view s) override { return c_->Intern(s); }
  bool WasArmedDuring(int64_t b, int64_t e) override { return c_->WasArmedDuring(b, e); }
  const Config& config() const override { return c_->config(); }
  void AddGpuRecords(std::vector<GpuRecord>&& r) override { c_->AddGpuRecords(std::move(r)); }
  void SetGpuFlushHook(void (*hook)()) override { c_->SetGpuFlushHook(hook); }
  void SetLabel(const std::string& k, const std::string& v) override { c_->SetLabel(k, v); }

 private:
  Collector* c_;
};

std::string Failed(const CuptiApi& api, const char* call, CUptiResult r) {
  std::string why = std::string(call) + " failed: " + CuptiResultText(api, r);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    why += "; another CUPTI tool (nsys, ncu, torch.profiler, a debugger) is attached";
  } else if (r == CUPTI_ERROR_UNKNOWN || r == CUPTI_ERROR_NOT_INITIALIZED) {
    why += "; no usable CUDA driver?";
  }
  return why;
}

#if RLSCOPE_CUPTI_ACTIVITY_SUPPORTED
// The CUPTI functions the live path cannot do without; "" when all are there.
std::string MissingFunction(const CuptiApi& api) {
  struct Need {
    const void* fn;
    const char* name;
  };
  for (const Need& n :
       {Need{reinterpret_cast<const void*>(api.activity_register_timestamp_callback),
             "cuptiActivityRegisterTimestampCallback"},
        Need{reinterpret_cast<const void*>(api.activity_register_callbacks), "cuptiActivityRegisterCallbacks"},
        Need{reinterpret_cast<const void*>(api.activity_enable), "cuptiActivityEnable"},
        Need{reinterpret_cast<const void*>(api.activity_flush_all), "cuptiActivityFlushAll"},
        Need{reinterpret_cast<const void*>(api.activity_get_next_record), "cuptiActivityGetNextRecord"}}) {
    if (n.fn == nullptr) return std::string("libcupti lacks ") + n.name;
  }
  return "";
}

// Records on the collector's clock, with the kernel's thread ids.
bool SetClockAndThreadIds(const CuptiApi& api, std::string* why) {
  // Before enabling any kind, and once per process (re-registering corrupts
  // records: pytorch/pytorch#192021). A failed attempt may be retried.
  if (!g_timestamp_registered) {
    const CUptiResult r = api.activity_register_timestamp_callback(&MonotonicTimestamp);
    if (r != CUPTI_SUCCESS) {
      *why = Failed(api, "cuptiActivityRegisterTimestampCallback", r);
      return false;
    }
    g_timestamp_registered = true;
  }
  // CUPTI thread ids = gettid, as the NVTX side records them.
  if (api.set_thread_id_type != nullptr) {
    const CUptiResult r = api.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if (r != CUPTI_SUCCESS) {
      *why = Failed(api, "cuptiSetThreadIdType", r);
      return false;
    }
  }
  return true;
}

// The tracer exists before CUPTI can call back; it is never freed.
bool InstallTracer(GpuTracingHost* host, const CuptiApi& api, std::string* why) {
  LiveTracer* t = g_tracer.load(std::memory_order_acquire);
  if (t == nullptr) {
    t = new (std::nothrow) LiveTracer(host, api, GpuBufferCap(host->config()));
    if (t == nullptr) {
      *why = "out of memory";
      return false;
    }
    g_tracer.store(t, std::memory_order_release);
  } else {
    t->host.store(host, std::memory_order_release);
  }
  const CUptiResult r = api.activity_register_callbacks(&OnBufferRequested, &OnBufferCompleted);
  if (r != CUPTI_SUCCESS) {
    *why = Failed(api, "cuptiActivityRegisterCallbacks", r);
    return false;
  }
  return true;
}

// The kinds the config asks for; all or none (a failure disables those
// already enabled).
bool EnableKinds(const CuptiApi& api, const Config::Gpu& g, std::string* why) {
  struct KindOn {
    CUpti_ActivityKind kind;
    bool on;
    const char* name;
  };
  // CONCURRENT_KERNEL, never KERNEL (it serialises kernels). OVERHEAD has no
  // key of its own: on whenever tracing is.
  const KindOn kinds[] = {
      {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, g.kernels, "CONCURRENT_KERNEL"},
      {CUPTI_ACTIVITY_KIND_MEMCPY, g.memcpy, "MEMCPY"},
      {CUPTI_ACTIVITY_KIND_MEMSET, g.memset, "MEMSET"},
      {CUPTI_ACTIVITY_KIND_RUNTIME, g.runtime_api, "RUNTIME"},
      {CUPTI_ACTIVITY_KIND_DRIVER, g.driver_api, "DRIVER"},
      {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, g.sync, "SYNCHRONIZATION"},
      {CUPTI_ACTIVITY_KIND_MEMORY2, g.memory, "MEMORY2"},
      {CUPTI_ACTIVITY_KIND_OVERHEAD, true, "OVERHEAD"},
  };
  std::vector<CUpti_ActivityKind> enabled;
  for (const KindOn& k : kinds) {
    if (!k.on) continue;
    const CUptiResult r = api.activity_enable(k.kind);
    if (r != CUPTI_SUCCESS) {
      *why = Failed(api, (std::string("cuptiActivityEnable(") + k.name + ")").c_str(), r);
      if (api.activity_disable != nullptr) {
        for (CUpti_ActivityKind e : enabled) api.activity_disable(e);
      }
      return false;
    }
    enabled.push_back(k.kind);
  }
  return true;
}
#endif  // RLSCOPE_CUPTI_ACTIVITY_SUPPORTED

// Caller holds g_start_mu.
bool StartLocked(GpuTracingHost* host, const CuptiApi& api, std::string* why) {
#if !RLSCOPE_CUPTI_ACTIVITY_SUPPORTED
  (void)host;
  (void)api;
  *why = "this collector was built against CUPTI_API_VERSION " + std::to_string(CUPTI_API_VERSION) +
         ", whose record layout it does not know";
  return false;
#else
  if (g_started) {
    *why = "GPU tracing already started in this process";
    return false;
  }
  if (*why = MissingFunction(api); !why->empty()) return false;
  if (!SetClockAndThreadIds(api, why) || !InstallTracer(host, api, why) || !EnableKinds(api, host->config().gpu, why)) {
    return false;
  }
  host->SetGpuFlushHook(&FlushHook);
  g_started = true;
  std::atexit(FlushAtExit);
  return true;
#endif
}

}  // namespace

bool StartGpuTracing(GpuTracingHost* host, const CuptiApi& api, std::string* why) {
  std::string local;
  if (why == nullptr) why = &local;
  if (host == nullptr) {
    *why = "no collector";
    return false;
  }
  bool ok = false;
  try {
    std::lock_guard<std::mutex> lock(g_start_mu);
    ok = StartLocked(host, api, why);
  } catch (const std::exception& e) {
    *why = std::string("internal error: ") + e.what();
    ok = false;
  } catch (...) {
    *why = "internal error";
    ok = false;
  }
  try {
    host->SetLabel("gpu_tracing", ok ? std::string("on") : "unavailable: " + *why);
  } catch (...) {
  }
  return ok;
}

bool StartGpuTracing(Collector* collector, const CuptiApi& api, std::string* why) {
  if (collector == nullptr) {
    if (why != nullptr) *why = "no collector";
    return false;
  }
  // Lives as long as the process: CUPTI's callbacks reach it through g_tracer.
  // One collector per process, so the first one is the one.
  CollectorHost* host = nullptr;
  try {
    static CollectorHost* const the_host = new CollectorHost(collector);
    host = the_host;
  } catch (...) {
    if (why != nullptr) *why = "out of memory";
    return false;
  }
  return StartGpuTracing(host, api, why);
}

// For tests only (declared there): forget this process's start so the live
// path can be driven again with another (fake) table. The old tracer is
// leaked: a real CUPTI may still hold the callbacks.
void ResetGpuTracingForTest() {
  std::lock_guard<std::mutex> lock(g_start_mu);
  g_started = false;
  g_timestamp_registered = false;
  g_tracer.store(nullptr, std::memory_order_release);
}

GpuTracingStats GetGpuTracingStats() {
  GpuTracingStats s;
  LiveTracer* t = g_tracer.load(std::memory_order_acquire);
  if (t == nullptr) return s;
  s.conversion = t->converter.totals();
  s.buffers_rejected = t->pool.rejected();
  s.cupti_dropped = t->cupti_dropped.load(std::memory_order_relaxed);
  s.buffers_completed = t->completed.load(std::memory_order_relaxed);
  return s;
}

void FlushGpuActivity() {
  LiveTracer* t = g_tracer.load(std::memory_order_acquire);
  if (t == nullptr || t->api.activity_flush_all == nullptr) return;
  std::lock_guard<std::mutex> lock(g_flush_mu);
  if (g_exiting) return;  // libcupti may be half torn down
  try {
    t->api.activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  } catch (...) {
  }
}

}  // namespace rlscope

#endif  // RLSCOPE_HAVE_CUPTI
