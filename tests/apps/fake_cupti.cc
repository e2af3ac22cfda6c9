// A stand-in for libcupti where there is no GPU (RLSCOPE_CUPTI_LIBRARY points
// the collector at it): the collector's real GPU path runs on it, from
// InitializeInjection through StartGpuTracing, its buffer callbacks, the
// conversion of CUPTI activity records (gpu_activity.cc) and the flush thread's
// GPU queue, to the aggregator. Only the records are made up: a test program
// describes kernels, copies and their API calls (fake_cupti_* below), built
// as CUPTI 13.0 lays them out, and they are handed to the collector's
// completion callback at the next cuptiActivityFlushAll, as CUPTI would.
//
// Walking a buffer and naming API callbacks are the real libcupti's
// (dlopen'ed: it loads without a driver, as tests/cpp/gpu_activity_test.cc
// does). Times come from the collector's own timestamp callback, so records
// sit on its clock. Built only against CUPTI_API_VERSION 130001 (the layout
// collector/cupti_records.h pins).
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "collector/cupti_records.h"

#if RLSCOPE_CUPTI_ACTIVITY_SUPPORTED
namespace {

namespace cs = rlscope::cupti_structs;

std::mutex g_mu;
std::vector<uint64_t> g_pending;  // packed records, 8-byte aligned
size_t g_pending_bytes = 0;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
CUpti_TimestampCallbackFunc g_timestamp = nullptr;

template <typename T>
void Append(const T& record) {
  static_assert(sizeof(T) % 8 == 0);
  std::lock_guard<std::mutex> lock(g_mu);
  const size_t at = g_pending_bytes;
  g_pending_bytes += sizeof(T);
  g_pending.resize((g_pending_bytes + 7) / 8);
  std::memcpy(reinterpret_cast<uint8_t*>(g_pending.data()) + at, &record, sizeof(T));
}

void* Real() {
  static void* lib = [] {
    for (const char* p : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                          "/usr/local/cuda/lib64/libcupti.so"}) {
      if (void* l = dlopen(p, RTLD_NOW | RTLD_LOCAL)) return l;
    }
    return static_cast<void*>(nullptr);
  }();
  return lib;
}

template <typename F>
F RealFn(const char* name) {
  void* lib = Real();
  return lib != nullptr ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

}  // namespace

extern "C" {

// ---- What the collector calls ----
CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*) {
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(1);
  return CUPTI_SUCCESS;
}
CUptiResult cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) {
  return CUPTI_SUCCESS;
}
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle) { return CUPTI_SUCCESS; }
CUptiResult cuptiGetResultString(CUptiResult, const char** str) {
  *str = "fake libcupti";
  return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
  g_timestamp = f;
  return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityEnable(CUpti_ActivityKind) { return CUPTI_SUCCESS; }
CUptiResult cuptiActivityDisable(CUpti_ActivityKind) { return CUPTI_SUCCESS; }
CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType) { return CUPTI_SUCCESS; }
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = 0;
  return CUPTI_SUCCESS;
}
// The records described since the last flush, in one buffer the collector
// gives (its request callback) and takes back (its completion callback).
CUptiResult cuptiActivityFlushAll(uint32_t) {
  std::vector<uint64_t> records;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    records.swap(g_pending);
    std::swap(bytes, g_pending_bytes);
  }
  if (bytes == 0 || g_request == nullptr || g_complete == nullptr) return CUPTI_SUCCESS;
  uint8_t* buffer = nullptr;
  size_t size = 0, max_records = 0;
  g_request(&buffer, &size, &max_records);
  if (buffer == nullptr || size < bytes) return CUPTI_ERROR_UNKNOWN;  // the collector's cap: none
  std::memcpy(buffer, records.data(), bytes);
  g_complete(nullptr, 0, buffer, size, bytes);
  return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  using F = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
  static const F real = RealFn<F>("cuptiActivityGetNextRecord");
  return real != nullptr ? real(buffer, valid, record) : CUPTI_ERROR_NOT_INITIALIZED;
}
CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char** name) {
  using F = CUptiResult (*)(CUpti_CallbackDomain, uint32_t, const char**);
  static const F real = RealFn<F>("cuptiGetCallbackName");
  return real != nullptr ? real(domain, cbid, name) : CUPTI_ERROR_NOT_INITIALIZED;
}

// ---- What a test program calls ----
// Now on the collector's clock (0 before it registered its callback).
uint64_t fake_cupti_now(void) { return g_timestamp != nullptr ? g_timestamp() : 0; }

// A runtime API call (cudaLaunchKernel: cbid 211; cudaMemcpyAsync: 41) on
// thread `tid` (gettid), launching correlation `corr`.
void fake_cupti_api(uint32_t cbid, uint64_t start, uint64_t end, uint32_t tid, uint32_t corr) {
  cs::Api a;
  std::memset(&a, 0, sizeof(a));
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = cbid;
  a.start = start;
  a.end = end;
  a.threadId = tid;
  a.correlationId = corr;
  Append(a);
}

// A kernel; `name` must outlive the next flush (a string literal, or one the
// caller keeps): CUPTI's records point at their kernel's name.
void fake_cupti_kernel(const char* name, uint32_t device, uint32_t stream, uint64_t start, uint64_t end,
                       uint32_t corr) {
  cs::Kernel k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = end;
  k.deviceId = device;
  k.contextId = 1;
  k.streamId = stream;
  k.correlationId = corr;
  k.gridX = 64;
  k.gridY = 1;
  k.gridZ = 1;
  k.blockX = 128;
  k.blockY = 1;
  k.blockZ = 1;
  k.name = name;
  Append(k);
}

// A host-to-device copy of `bytes`.
void fake_cupti_memcpy(uint32_t device, uint32_t stream, uint64_t start, uint64_t end, uint64_t bytes, uint32_t corr) {
  cs::Memcpy m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = device;
  m.contextId = 1;
  m.streamId = stream;
  m.correlationId = corr;
  Append(m);
}

}  // extern "C"
#endif  // RLSCOPE_CUPTI_ACTIVITY_SUPPORTED
