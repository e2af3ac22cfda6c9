// Baseline NVTX injection tools for bench/nvtx_pair_bench (reference points,
// not products). Built twice from this file:
//   rlscope_bench_counting_tool  push/pop handlers only bump a thread_local
//                                counter: the floor of any tool (NVTX's
//                                indirect call + our handler's entry).
//   rlscope_bench_clock_tool     (RLSCOPE_BENCH_CLOCK_TOOL=1) handlers also read
//                                clock_gettime(CLOCK_MONOTONIC) and store it in a
//                                thread_local ring: a "just timestamp it"
//                                recorder to compare the collector against.
//   rlscope_bench_rdtsc_tool     (RLSCOPE_BENCH_RDTSC_TOOL=1, x86-64) the same
//                                ring written with raw __rdtsc() ticks: the
//                                bare-rdtsc recorder reference.
//   rlscope_bench_rdtsc_record32_tool (RLSCOPE_BENCH_RDTSC_TOOL=1 and
//                                RLSCOPE_BENCH_RECORD32=1) raw ticks in 32-byte
//                                records, the collector's record size, in a
//                                prefaulted 64 MiB ring, the collector's bench
//                                ring: the rdtsc floor with the collector's
//                                memory traffic per event (no consumer).
//
// Both export rlscope_bench_tool_events(): events the calling thread handled,
// so the bench can confirm the tool really was loaded (NVTX fails silently).
// TLS uses the initial-exec model: a few bytes of static TLS, no
// __tls_get_addr call per event (the cheapest a dlopen'ed tool can get).
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <time.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifndef RLSCOPE_BENCH_CLOCK_TOOL
#define RLSCOPE_BENCH_CLOCK_TOOL 0
#endif
#ifndef RLSCOPE_BENCH_RDTSC_TOOL
#define RLSCOPE_BENCH_RDTSC_TOOL 0
#endif
#ifndef RLSCOPE_BENCH_RECORD32
#define RLSCOPE_BENCH_RECORD32 0
#endif
#if RLSCOPE_BENCH_RDTSC_TOOL
#if !defined(__x86_64__)
#error "rlscope_bench_rdtsc_tool needs x86-64"
#endif
#include <x86intrin.h>
#endif

#define RLSCOPE_BENCH_TLS __thread __attribute__((tls_model("initial-exec")))

namespace rlscope_bench {
namespace {

RLSCOPE_BENCH_TLS uint64_t tls_events = 0;

#if RLSCOPE_BENCH_CLOCK_TOOL || RLSCOPE_BENCH_RDTSC_TOOL
// 2^16 timestamps (512 KiB) per thread, heap-allocated on a thread's first
// event; overwritten when it wraps (no consumer: the cost of writing is what
// is measured).
#if RLSCOPE_BENCH_RECORD32
struct alignas(32) Slot {  // the collector's EventRecord layout (native/event.h)
  uint64_t ts, value;
  uint32_t name, domain, category;
  uint8_t kind, flags;
  uint16_t reserved;
};
constexpr uint64_t kRingSize = uint64_t{1} << 21;  // 64 MiB
#else
using Slot = uint64_t;
constexpr uint64_t kRingSize = uint64_t{1} << 16;
#endif
RLSCOPE_BENCH_TLS Slot* tls_ring = nullptr;

inline void RecordNow() {
  Slot* ring = tls_ring;
  if (__builtin_expect(ring == nullptr, 0)) {
    ring = static_cast<Slot*>(std::calloc(kRingSize, sizeof(Slot)));
    if (ring == nullptr) return;
    std::memset(static_cast<void*>(ring), 0, kRingSize * sizeof(Slot));  // prefaulted, as the collector's
    tls_ring = ring;  // leaked at thread exit: fine for a benchmark tool
  }
#if RLSCOPE_BENCH_RECORD32
  Slot& r = ring[tls_events & (kRingSize - 1)];
  r.ts = __rdtsc();
  r.value = 0;
  r.name = r.domain = r.category = 0;
  r.kind = 1;
  r.flags = 0;
  r.reserved = 0;
#elif RLSCOPE_BENCH_RDTSC_TOOL
  ring[tls_events & (kRingSize - 1)] = __rdtsc();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ring[tls_events & (kRingSize - 1)] =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
#endif
  ++tls_events;
}
#else
inline void RecordNow() { ++tls_events; }
#endif

int NVTX_API RangePushA(const char*) {
  RecordNow();
  return 0;
}
int NVTX_API RangePushEx(const nvtxEventAttributes_t*) {
  RecordNow();
  return 0;
}
int NVTX_API RangePop() {
  RecordNow();
  return 0;
}
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t, const nvtxEventAttributes_t*) {
  RecordNow();
  return 0;
}
int NVTX_API DomainRangePop(nvtxDomainHandle_t) {
  RecordNow();
  return 0;
}

template <typename Fn>
void Set(NvtxFunctionTable table, unsigned size, unsigned cbid, Fn fn) {
  if (cbid < size && table[cbid] != nullptr) {
    *table[cbid] = reinterpret_cast<NvtxFunctionPointer>(fn);
  }
}

int FillTables(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable t = nullptr;
  unsigned n = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) == 0 || t == nullptr) return 0;
  Set(t, n, NVTX_CBID_CORE_RangePushA, static_cast<nvtxRangePushA_impl_fntype>(&RangePushA));
  Set(t, n, NVTX_CBID_CORE_RangePushEx, static_cast<nvtxRangePushEx_impl_fntype>(&RangePushEx));
  Set(t, n, NVTX_CBID_CORE_RangePop, static_cast<nvtxRangePop_impl_fntype>(&RangePop));
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) == 0 || t == nullptr) return 0;
  Set(t, n, NVTX_CBID_CORE2_DomainRangePushEx, static_cast<nvtxDomainRangePushEx_impl_fntype>(&DomainRangePushEx));
  Set(t, n, NVTX_CBID_CORE2_DomainRangePop, static_cast<nvtxDomainRangePop_impl_fntype>(&DomainRangePop));
  return 1;
}

}  // namespace
}  // namespace rlscope_bench

extern "C" __attribute__((visibility("default"))) int NVTX_API
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  if (get_export_table == nullptr) return 0;
  return rlscope_bench::FillTables(get_export_table);
}

// Events handled on the calling thread so far.
extern "C" __attribute__((visibility("default"))) uint64_t rlscope_bench_tool_events(void) {
  return rlscope_bench::tls_events;
}
