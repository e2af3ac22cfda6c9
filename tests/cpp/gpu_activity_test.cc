// cupti_activity_test: GPU activity conversion and the live CUPTI path,
// without a GPU.
//
// Golden buffers: CUPTI records built by hand from this toolkit's structs
// (pinned to CUPTI_API_VERSION 130001, CUDA 13.0), packed back to back, and
// walked by the real libcupti's cuptiActivityGetNextRecord, which parses them
// with no driver. If libcupti cannot be loaded those tests skip, saying why.
// The live path (StartGpuTracing) runs once against a scripted fake table and
// once against the real libcupti, which without a driver fails with 999.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collector/gpu_activity.h"
#include "collector/cupti_trigger.h"
#include "native/clock.h"

#if RLSCOPE_HAVE_CUPTI
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#endif

namespace rlscope {
// Test hook in gpu_tracing.cc.
void ResetGpuTracingForTest();

namespace {

#if RLSCOPE_HAVE_CUPTI

#if CUPTI_API_VERSION == 130001
constexpr bool kPinned = true;
using KernelRec = CUpti_ActivityKernel10;
using MemcpyRec = CUpti_ActivityMemcpy6;
using MemsetRec = CUpti_ActivityMemset4;
using ApiRec = CUpti_ActivityAPI;
using SyncRec = CUpti_ActivitySynchronization2;
using OverheadRec = CUpti_ActivityOverhead3;
using MemoryRec = CUpti_ActivityMemory4;
static_assert(sizeof(MemoryRec) == 128);
static_assert(sizeof(KernelRec) == 216);
static_assert(sizeof(MemcpyRec) == 96);
static_assert(sizeof(MemsetRec) == 88);
static_assert(sizeof(ApiRec) == 40);
static_assert(sizeof(SyncRec) == 56);
static_assert(sizeof(OverheadRec) == 56);
#else
constexpr bool kPinned = false;
#endif

#define SKIP_UNLESS_PINNED()                                                \
  if (!kPinned)                                                             \
  GTEST_SKIP() << "golden buffers are pinned to CUPTI_API_VERSION 130001, " \
                  "this build has "                                         \
               << CUPTI_API_VERSION

// The real libcupti, loaded once.
const CuptiApi* RealCupti(std::string* why) {
  static std::string load_why;
  static CuptiApi api;
  static const bool ok = LoadCuptiLibrary(&api, &load_why) && api.activity_get_next_record != nullptr;
  if (!ok) {
    *why = load_why.empty() ? "libcupti lacks cuptiActivityGetNextRecord" : load_why;
    return nullptr;
  }
  return &api;
}

#define REAL_ACTIVITY_API(var)                                                  \
  std::string load_why_;                                                        \
  const CuptiApi* real_ = RealCupti(&load_why_);                                \
  if (real_ == nullptr) GTEST_SKIP() << "libcupti not loadable: " << load_why_; \
  const ActivityApi var { real_->activity_get_next_record, real_->get_callback_name }

// Packed records back to back, 8-byte aligned storage.
class GoldenBuffer {
 public:
  template <typename T>
  void Add(const T& record) {
    static_assert(sizeof(T) % 8 == 0);
    const size_t at = size_;
    size_ += sizeof(T);
    storage_.resize((size_ + 7) / 8);
    std::memcpy(reinterpret_cast<uint8_t*>(storage_.data()) + at, &record, sizeof(T));
  }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(storage_.data()); }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(storage_.data()); }
  size_t size() const { return size_; }

 private:
  std::vector<uint64_t> storage_;
  size_t size_ = 0;
};

#if CUPTI_API_VERSION == 130001
KernelRec Kernel(uint64_t start, uint64_t end, uint32_t corr, const char* name) {
  KernelRec k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = end;
  k.deviceId = 1;
  k.contextId = 2;
  k.streamId = 7;
  k.correlationId = corr;
  k.gridX = 4096;
  k.gridY = 2;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.name = name;
  return k;
}

MemcpyRec Memcpy(uint64_t start, uint64_t end, uint32_t corr, uint8_t copy_kind, uint64_t bytes) {
  MemcpyRec m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = copy_kind;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = 1;
  m.contextId = 2;
  m.streamId = 13;
  m.correlationId = corr;
  return m;
}

MemoryRec Memory(uint64_t ts, CUpti_ActivityMemoryOperationType op, CUpti_ActivityMemoryKind kind, uint64_t bytes) {
  MemoryRec m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = op;
  m.memoryKind = kind;
  m.correlationId = 31;
  m.address = 0x7f0000000000;
  m.bytes = bytes;
  m.timestamp = ts;
  m.deviceId = 1;
  m.contextId = 2;
  m.streamId = 15;
  return m;
}

MemsetRec Memset(uint64_t start, uint64_t end, uint32_t corr, uint64_t bytes) {
  MemsetRec m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = 1;
  m.contextId = 2;
  m.streamId = 14;
  m.correlationId = corr;
  return m;
}

ApiRec Api(CUpti_ActivityKind kind, uint32_t cbid, uint64_t start, uint64_t end, uint32_t tid, uint32_t corr) {
  ApiRec a;
  std::memset(&a, 0, sizeof(a));
  a.kind = kind;
  a.cbid = cbid;
  a.start = start;
  a.end = end;
  a.processId = 4242;
  a.threadId = tid;
  a.correlationId = corr;
  return a;
}

SyncRec Sync(uint64_t start, uint64_t end, uint32_t corr) {
  SyncRec y;
  std::memset(&y, 0, sizeof(y));
  y.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  y.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  y.start = start;
  y.end = end;
  y.correlationId = corr;
  y.contextId = 2;
  y.streamId = 7;
  return y;
}

OverheadRec Overhead(uint64_t start, uint64_t end, uint32_t tid) {
  OverheadRec o;
  std::memset(&o, 0, sizeof(o));
  o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  o.objectId.pt.processId = 4242;
  o.objectId.pt.threadId = tid;
  o.start = start;
  o.end = end;
  return o;
}
#endif

// Collects names; armed over the given intervals (all time when none).
class FakeSink : public ActivitySink {
 public:
  uint32_t Intern(std::string_view s) override {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == s) return static_cast<uint32_t>(i + 1);
    }
    names.emplace_back(s);
    return static_cast<uint32_t>(names.size());
  }
  bool WasArmedDuring(int64_t b, int64_t e) override {
    ++armed_queries;
    if (armed.empty()) return true;
    for (const auto& [lo, hi] : armed) {
      if (lo <= e && b <= hi) return true;
    }
    return false;
  }
  std::string Name(uint32_t id) const { return id == 0 ? "" : names.at(id - 1); }
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> armed;
  int armed_queries = 0;
};

// ---------------------------------------------------------------------------
// Pure helpers.

TEST(StripApiVersion, DropsTheTrailingVersionOnly) {
  EXPECT_EQ(StripApiVersion("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(StripApiVersion("cudaMemcpyAsync_ptsz_v7000"), "cudaMemcpyAsync_ptsz");
  EXPECT_EQ(StripApiVersion("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(StripApiVersion("cuMemAlloc_v2"), "cuMemAlloc");
  EXPECT_EQ(StripApiVersion("_v"), "_v");
  EXPECT_EQ(StripApiVersion(""), "");
}

TEST(GpuBufferCap, IsAnEighthOfMaxMbAndAtLeastFour) {
  Config c;
  c.buffers.max_mb = 256;
  EXPECT_EQ(GpuBufferCap(c), 32u);
  c.buffers.max_mb = 8;
  EXPECT_EQ(GpuBufferCap(c), 4u);
  c.buffers.max_mb = 1;
  EXPECT_EQ(GpuBufferCap(c), 4u);
}

TEST(GpuTracingWanted, AnyKindTurnsItOn) {
  Config c;
  EXPECT_TRUE(GpuTracingWanted(c));
  c.gpu = {false, false, false, false, false, false, false};
  EXPECT_FALSE(GpuTracingWanted(c));
  c.gpu.sync = true;
  EXPECT_TRUE(GpuTracingWanted(c));
  c.gpu = {false, false, false, false, false, false, true};  // allocations alone
  EXPECT_TRUE(GpuTracingWanted(c));
}

TEST(BufferPool, HandsOutAlignedMegabytesUpToTheCapThenNull) {
  BufferPool pool(2, 1);
  uint8_t* a = pool.Acquire();
  uint8_t* b = pool.Acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 8, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 8, 0u);
  a[BufferPool::kBufferSize - 1] = 1;  // really 1 MiB (ASan would notice)
  EXPECT_EQ(pool.Acquire(), nullptr);
  EXPECT_EQ(pool.rejected(), 1u);
  pool.Release(a);
  EXPECT_EQ(pool.Acquire(), a);  // reused
  pool.Release(a);
  pool.Release(b);
}

// ---------------------------------------------------------------------------
// Golden buffers walked by the real libcupti.

#if CUPTI_API_VERSION == 130001

TEST(GoldenBuffer, TheRealParserWalksHandBuiltRecords) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 10, 20, 77, 5));
  buf.Add(Kernel(30, 40, 5, "k"));
  buf.Add(Memcpy(50, 60, 6, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 64));
  std::vector<size_t> offsets;
  CUpti_Activity* r = nullptr;
  CUptiResult st;
  while ((st = api.get_next_record(buf.data(), buf.size(), &r)) == CUPTI_SUCCESS) {
    offsets.push_back(reinterpret_cast<uint8_t*>(r) - buf.data());
  }
  EXPECT_EQ(st, CUPTI_ERROR_MAX_LIMIT_REACHED);
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 40, 256}));
}

TEST(ConvertActivityBuffer, EachKind) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 100, 110, 77, 5));
  buf.Add(Kernel(120, 180, 5, "Busy(float*, int, int)"));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, 190, 260, 77, 6));
  buf.Add(Memcpy(200, 250, 6, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 1 << 20));
  buf.Add(Memset(270, 280, 9, 4096));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 101, 109, 77, 5));
  buf.Add(Sync(300, 350, 10));
  buf.Add(Overhead(400, 410, 78));
  FakeSink sink;
  std::vector<GpuRecord> out;
  const ConversionStats st = ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  EXPECT_EQ(st.records, 8u);
  EXPECT_EQ(st.kept, 8u);
  EXPECT_EQ(st.invalid, 0u);
  EXPECT_EQ(st.outside_window, 0u);
  EXPECT_FALSE(st.truncated);
  ASSERT_EQ(out.size(), 8u);

  GpuRecord launch;
  launch.kind = static_cast<uint8_t>(GpuKind::kRuntimeApi);
  launch.start_ns = 100;
  launch.end_ns = 110;
  launch.tid = 77;
  launch.correlation = 5;
  launch.name = sink.Intern("cudaLaunchKernel");
  EXPECT_EQ(out[0], launch);

  GpuRecord kernel;
  kernel.kind = static_cast<uint8_t>(GpuKind::kKernel);
  kernel.start_ns = 120;
  kernel.end_ns = 180;
  kernel.device = 1;
  kernel.context = 2;
  kernel.stream = 7;
  kernel.correlation = 5;
  kernel.grid[0] = 4096;
  kernel.grid[1] = 2;
  kernel.grid[2] = 1;
  kernel.block[0] = 256;
  kernel.block[1] = 1;
  kernel.block[2] = 1;
  kernel.name = sink.Intern("Busy(float*, int, int)");
  EXPECT_EQ(out[1], kernel);

  EXPECT_EQ(sink.Name(out[2].name), "cudaMemcpy");
  EXPECT_EQ(out[2].correlation, 6u);

  GpuRecord copy;
  copy.kind = static_cast<uint8_t>(GpuKind::kMemcpy);
  copy.start_ns = 200;
  copy.end_ns = 250;
  copy.subkind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.bytes = 1 << 20;
  copy.device = 1;
  copy.context = 2;
  copy.stream = 13;
  copy.correlation = 6;
  EXPECT_EQ(out[3], copy);

  GpuRecord set;
  set.kind = static_cast<uint8_t>(GpuKind::kMemset);
  set.start_ns = 270;
  set.end_ns = 280;
  set.bytes = 4096;
  set.device = 1;
  set.context = 2;
  set.stream = 14;
  set.correlation = 9;
  EXPECT_EQ(out[4], set);

  EXPECT_EQ(out[5].kind, static_cast<uint8_t>(GpuKind::kDriverApi));
  EXPECT_EQ(sink.Name(out[5].name), "cuLaunchKernel");
  EXPECT_EQ(out[5].tid, 77);
  EXPECT_EQ(out[5].correlation, 5u);

  GpuRecord sync;
  sync.kind = static_cast<uint8_t>(GpuKind::kSync);
  sync.start_ns = 300;
  sync.end_ns = 350;
  sync.subkind = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.context = 2;
  sync.stream = 7;
  sync.correlation = 10;
  EXPECT_EQ(out[6], sync);  // tid 0: no API record with its correlation id

  GpuRecord over;
  over.kind = static_cast<uint8_t>(GpuKind::kOverhead);
  over.start_ns = 400;
  over.end_ns = 410;
  over.subkind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH >> 16;
  over.tid = 78;
  over.name = sink.Intern("overhead: CUPTI buffer flush");
  EXPECT_EQ(out[7], over);
}

TEST(ConvertActivityBuffer, KernelAndItsLaunchShareTheCorrelationId) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 10, 20, 77, 41));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 21, 30, 77, 42));
  buf.Add(Kernel(40, 50, 42, "second"));
  buf.Add(Kernel(25, 35, 41, "first"));
  FakeSink sink;
  std::vector<GpuRecord> out;
  ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  ASSERT_EQ(out.size(), 4u);
  std::map<uint32_t, std::vector<std::string>> by_corr;
  for (const GpuRecord& r : out) by_corr[r.correlation].push_back(sink.Name(r.name));
  EXPECT_EQ(by_corr[41], (std::vector<std::string>{"cudaLaunchKernel", "first"}));
  EXPECT_EQ(by_corr[42], (std::vector<std::string>{"cudaLaunchKernel", "second"}));
}

TEST(ConvertActivityBuffer, ApiNamesFallBackToTheCbid) {
  REAL_ACTIVITY_API(real);
  ActivityApi api = real;
  api.get_callback_name = nullptr;
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 10, 20, 77, 1));
  FakeSink sink;
  std::vector<GpuRecord> out;
  ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(sink.Name(out[0].name), "cbid " + std::to_string(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
}

// Armed over [100, 200]: the launch inside is kept, its kernel at [250, 300]
// follows it by correlation, an unrelated kernel at [250, 300] is dropped.
TEST(ActivityConverter, WindowCutKeepsKernelsOfLaunchesInsideIt) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 150, 160, 77, 7));
  buf.Add(Kernel(250, 300, 7, "launched_inside"));
  buf.Add(Kernel(250, 300, 8, "unrelated"));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 210, 220, 77,
              8));                                          // the unrelated kernel's launch, after the window
  buf.Add(Kernel(190, 240, 9, "overlaps_the_window_end"));  // kept by time
  FakeSink sink;
  sink.armed = {{100, 200}};
  ActivityConverter conv(api);
  std::vector<GpuRecord> out;
  ConversionStats st = conv.Convert(buf.data(), buf.size(), sink, &out);
  EXPECT_EQ(st.records, 5u);
  EXPECT_EQ(st.kept, 3u);
  EXPECT_EQ(st.outside_window, 2u);
  std::vector<std::string> names;
  for (const GpuRecord& r : out) names.push_back(sink.Name(r.name));
  EXPECT_EQ(names, (std::vector<std::string>{"cudaLaunchKernel", "launched_inside", "overlaps_the_window_end"}));

  // A later buffer: the launch's kernel (and a memcpy of it) still follow it;
  // a copy of another correlation does not.
  GoldenBuffer later;
  later.Add(Kernel(400, 450, 7, "launched_inside"));
  later.Add(Memcpy(460, 470, 7, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 8));
  later.Add(Memset(460, 470, 8, 8));
  out.clear();
  st = conv.Convert(later.data(), later.size(), sink, &out);
  EXPECT_EQ(st.kept, 2u);
  EXPECT_EQ(st.outside_window, 1u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, static_cast<uint8_t>(GpuKind::kKernel));
  EXPECT_EQ(out[1].kind, static_cast<uint8_t>(GpuKind::kMemcpy));
  EXPECT_EQ(conv.totals().outside_window, 3u);
  EXPECT_EQ(conv.totals().kept, 5u);
}

// Allocations and releases are kept armed or not (a process's allocated total
// needs every one), as kMemory records with their operation and memory kind.
TEST(ActivityConverter, MemoryRecordsAreKeptOutsideTheWindowWithTheirOperationAndKind) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Memory(50, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 1 << 30));
  buf.Add(Memory(150, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 1 << 20));
  buf.Add(Memory(250, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 4096));
  buf.Add(Kernel(250, 300, 7, "outside"));  // dropped: outside the window, no launch kept
  FakeSink sink;
  sink.armed = {{100, 200}};
  std::vector<GpuRecord> out;
  const ConversionStats st = ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  EXPECT_EQ(st.kept, 3u);
  EXPECT_EQ(st.outside_window, 1u);
  ASSERT_EQ(out.size(), 3u);
  GpuRecord want;
  want.kind = static_cast<uint8_t>(GpuKind::kMemory);
  want.start_ns = want.end_ns = 50;
  want.subkind = kMemoryAllocation | kMemoryKindDevice << 8;
  want.bytes = uint64_t{1} << 30;
  want.device = 1;
  want.context = 2;
  want.stream = 15;
  want.correlation = 31;
  EXPECT_EQ(out[0], want);
  EXPECT_EQ(MemoryOperation(out[1].subkind), kMemoryRelease);
  EXPECT_EQ(out[1].start_ns, 150);
  EXPECT_EQ(out[1].bytes, uint64_t{1} << 20);
  EXPECT_EQ(MemoryKind(out[2].subkind), static_cast<uint32_t>(CUPTI_ACTIVITY_MEMORY_KIND_PINNED));
}

TEST(ActivityConverter, HostSideRecordsAreNotKeptByCorrelation) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 150, 160, 77, 7));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 250, 260, 77, 7));
  buf.Add(Sync(250, 260, 7));
  FakeSink sink;
  sink.armed = {{100, 200}};
  std::vector<GpuRecord> out;
  const ConversionStats st = ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  EXPECT_EQ(st.kept, 1u);
  EXPECT_EQ(st.outside_window, 2u);
}

TEST(ActivityConverter, SynchronizationTakesTheThreadOfItsApiRecord) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Sync(150, 190, 12));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 140, 195, 4321, 12));
  FakeSink sink;
  std::vector<GpuRecord> out;
  ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, static_cast<uint8_t>(GpuKind::kSync));
  EXPECT_EQ(out[0].tid, 4321);
  EXPECT_EQ(sink.Name(out[1].name), "cudaStreamSynchronize");
}

TEST(ActivityConverter, CorrelationMemoryIsBounded) {
  REAL_ACTIVITY_API(api);
  ActivityConverter conv(api, /*correlation_capacity=*/2);
  FakeSink sink;
  sink.armed = {{100, 200}};
  GoldenBuffer launches;
  for (uint32_t corr : {1u, 2u, 3u}) {
    launches.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 100 + corr,
                     101 + corr, 77, corr));
  }
  std::vector<GpuRecord> out;
  conv.Convert(launches.data(), launches.size(), sink, &out);
  GoldenBuffer kernels;
  for (uint32_t corr : {1u, 2u, 3u}) kernels.Add(Kernel(500, 600, corr, "k"));
  out.clear();
  conv.Convert(kernels.data(), kernels.size(), sink, &out);
  ASSERT_EQ(out.size(), 2u);  // 1 was forgotten
  EXPECT_EQ(out[0].correlation, 2u);
  EXPECT_EQ(out[1].correlation, 3u);
}

TEST(ConvertActivityBuffer, InvalidTimesAreDroppedAndCounted) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  buf.Add(Kernel(0, 0, 1, "no_timing"));      // device buffer ran out
  buf.Add(Kernel(300, 200, 2, "backwards"));  // end < start
  buf.Add(Memcpy(0, 10, 3, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 8));
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 20, 10, 77, 4));
  buf.Add(Kernel(5, 5, 5, "zero_length_is_fine"));
  FakeSink sink;
  std::vector<GpuRecord> out;
  const ConversionStats st = ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  EXPECT_EQ(st.records, 5u);
  EXPECT_EQ(st.invalid, 4u);
  EXPECT_EQ(st.kept, 1u);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(sink.Name(out[0].name), "zero_length_is_fine");
}

TEST(ConvertActivityBuffer, OtherKindsAreSkippedAndCounted) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  CUpti_ActivityExternalCorrelation ext;
  std::memset(&ext, 0, sizeof(ext));
  ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ext.externalId = 1;
  ext.correlationId = 2;
  buf.Add(ext);
  buf.Add(Kernel(10, 20, 2, "k"));
  FakeSink sink;
  std::vector<GpuRecord> out;
  const ConversionStats st = ConvertActivityBuffer(buf.data(), buf.size(), api, sink, &out);
  EXPECT_EQ(st.records, 2u);
  EXPECT_EQ(st.unknown_kind, 1u);
  EXPECT_EQ(out.size(), 1u);
}

TEST(ConvertActivityBuffer, EmptyBufferIsNothing) {
  REAL_ACTIVITY_API(api);
  FakeSink sink;
  std::vector<GpuRecord> out;
  const ConversionStats st = ConvertActivityBuffer(nullptr, 0, api, sink, &out);
  EXPECT_EQ(st.records, 0u);
  EXPECT_FALSE(st.truncated);
}

// Conversion throughput over a 1 MiB buffer of kernel records, reported as a
// one-line JSON (and a test property). A timing, so DISABLED_: the suite never
// runs it; `make bench` (bench/run_bench.py, gpu_conversion) runs it with
// --gtest_also_run_disabled_tests. Its expectation checks only the count.
TEST(ConvertActivityBuffer, DISABLED_ThroughputOfAMegabyteOfKernels) {
  REAL_ACTIVITY_API(api);
  GoldenBuffer buf;
  static const char* const kNames[] = {"gemm", "softmax", "layernorm", "elementwise"};
  uint32_t corr = 1;
  while (buf.size() + sizeof(KernelRec) <= BufferPool::kBufferSize) {
    buf.Add(Kernel(1000 + corr * 10, 1005 + corr * 10, corr, kNames[corr % 4]));
    ++corr;
  }
  FakeSink sink;  // armed everywhere
  ActivityConverter conv(api);
  std::vector<GpuRecord> out;
  conv.Convert(buf.data(), buf.size(), sink, &out);  // warm-up: names interned
  const int rounds = 20;
  const int64_t t0 = MonotonicNs();
  size_t n = 0;
  for (int i = 0; i < rounds; ++i) {
    out.clear();
    n += conv.Convert(buf.data(), buf.size(), sink, &out).kept;
  }
  const double s = static_cast<double>(MonotonicNs() - t0) / 1e9;
  const double rate = static_cast<double>(n) / s;
  std::printf(
      "{\"bench\": \"cupti_conversion\", \"records_per_buffer\": %zu, "
      "\"records_per_s\": %.0f, \"ns_per_record\": %.1f}\n",
      out.size(), rate, 1e9 / rate);
  RecordProperty("records_per_s", std::to_string(static_cast<int64_t>(rate)));
  EXPECT_EQ(out.size(), corr - 1);
}

#endif  // CUPTI_API_VERSION == 130001

// ---------------------------------------------------------------------------
// The live path against a scripted CUPTI table.

class FakeHost : public GpuTracingHost {
 public:
  uint32_t Intern(std::string_view s) override { return sink.Intern(s); }
  bool WasArmedDuring(int64_t b, int64_t e) override { return sink.WasArmedDuring(b, e); }
  const Config& config() const override { return cfg; }
  void AddGpuRecords(std::vector<GpuRecord>&& r) override { records.insert(records.end(), r.begin(), r.end()); }
  void SetGpuFlushHook(void (*hook)()) override { flush_hook = hook; }
  void SetLabel(const std::string& k, const std::string& v) override { labels[k] = v; }
  FakeSink sink;
  Config cfg;
  std::vector<GpuRecord> records;
  void (*flush_hook)() = nullptr;
  std::map<std::string, std::string> labels;
};

struct FakeCupti {
  CUptiResult timestamp_result = CUPTI_SUCCESS;
  CUptiResult register_result = CUPTI_SUCCESS;
  std::map<CUpti_ActivityKind, CUptiResult> enable_results;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  std::vector<CUpti_ActivityKind> enabled, disabled;
  std::vector<uint32_t> flushes;
  // What the next forced flush "completes": copied into a buffer obtained
  // from `requested`, as CUPTI would.
  const GoldenBuffer* pending = nullptr;
  int timestamp_calls = 0;
};
FakeCupti* g_fake = nullptr;

CUptiResult CUPTIAPI FakeRegisterTimestamp(CUpti_TimestampCallbackFunc f) {
  ++g_fake->timestamp_calls;
  if (g_fake->timestamp_result == CUPTI_SUCCESS) g_fake->timestamp = f;
  return g_fake->timestamp_result;
}
CUptiResult CUPTIAPI FakeRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                           CUpti_BuffersCallbackCompleteFunc done) {
  if (g_fake->register_result == CUPTI_SUCCESS) {
    g_fake->requested = req;
    g_fake->completed = done;
  }
  return g_fake->register_result;
}
CUptiResult CUPTIAPI FakeEnable(CUpti_ActivityKind k) {
  auto it = g_fake->enable_results.find(k);
  const CUptiResult r = it == g_fake->enable_results.end() ? CUPTI_SUCCESS : it->second;
  if (r == CUPTI_SUCCESS) g_fake->enabled.push_back(k);
  return r;
}
CUptiResult CUPTIAPI FakeDisable(CUpti_ActivityKind k) {
  g_fake->disabled.push_back(k);
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI FakeFlushAll(uint32_t flag) {
  g_fake->flushes.push_back(flag);
  if (g_fake->pending != nullptr && g_fake->requested != nullptr) {
    uint8_t* b = nullptr;
    size_t size = 0, max_records = 0;
    g_fake->requested(&b, &size, &max_records);
    if (b != nullptr && size >= g_fake->pending->size()) {
      std::memcpy(b, g_fake->pending->data(), g_fake->pending->size());
      g_fake->completed(nullptr, 0, b, size, g_fake->pending->size());
    }
    g_fake->pending = nullptr;
  }
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI FakeSetThreadIdType(CUpti_ActivityThreadIdType) { return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI FakeGetResultString(CUptiResult r, const char** str) {
  switch (r) {
    case CUPTI_ERROR_UNKNOWN: *str = "CUPTI_ERROR_UNKNOWN"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    default: *str = "CUPTI_ERROR_SOMETHING";
  }
  return CUPTI_SUCCESS;
}

class StartGpuTracingTest : public testing::Test {
 protected:
  void SetUp() override {
    ResetGpuTracingForTest();
    g_fake = &fake_;
  }
  void TearDown() override {
    ResetGpuTracingForTest();
    g_fake = nullptr;
  }
  CuptiApi FakeApi() {
    CuptiApi api;
    api.get_result_string = &FakeGetResultString;
    api.activity_register_timestamp_callback = &FakeRegisterTimestamp;
    api.activity_register_callbacks = &FakeRegisterCallbacks;
    api.activity_enable = &FakeEnable;
    api.activity_disable = &FakeDisable;
    api.activity_flush_all = &FakeFlushAll;
    api.set_thread_id_type = &FakeSetThreadIdType;
    std::string why;
    if (const CuptiApi* real = RealCupti(&why)) {
      api.activity_get_next_record = real->activity_get_next_record;
      api.get_callback_name = real->get_callback_name;
    }
    return api;
  }
  FakeCupti fake_;
  FakeHost host_;
};

TEST_F(StartGpuTracingTest, EnablesTheConfiguredKindsAndLabelsOn) {
  CuptiApi api = FakeApi();
  if (api.activity_get_next_record == nullptr) GTEST_SKIP() << "libcupti not loadable";
  std::string why;
  ASSERT_TRUE(StartGpuTracing(&host_, api, &why)) << why;
  EXPECT_EQ(host_.labels["gpu_tracing"], "on");
  ASSERT_NE(fake_.timestamp, nullptr);
  const int64_t now = MonotonicNs();
  const auto ts = static_cast<int64_t>(fake_.timestamp());
  EXPECT_GE(ts, now);  // CLOCK_MONOTONIC ns
  EXPECT_LT(ts - now, 1000000000);
  // Defaults: everything but the driver API; never the serialising KERNEL.
  const std::vector<CUpti_ActivityKind> want = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_MEMORY2,
      CUPTI_ACTIVITY_KIND_OVERHEAD};
  EXPECT_EQ(fake_.enabled, want);
  ASSERT_NE(host_.flush_hook, nullptr);
  host_.flush_hook();
  EXPECT_EQ(fake_.flushes, (std::vector<uint32_t>{CUPTI_ACTIVITY_FLAG_FLUSH_FORCED}));
  // A second start in the same process is refused (the timestamp callback
  // must be registered once).
  std::string again;
  EXPECT_FALSE(StartGpuTracing(&host_, api, &again));
  EXPECT_EQ(fake_.timestamp_calls, 1);
}

TEST_F(StartGpuTracingTest, DriverApiOnlyWhenConfigured) {
  CuptiApi api = FakeApi();
  if (api.activity_get_next_record == nullptr) GTEST_SKIP() << "libcupti not loadable";
  host_.cfg.gpu = {true, false, false, false, true, false, false};
  std::string why;
  ASSERT_TRUE(StartGpuTracing(&host_, api, &why)) << why;
  const std::vector<CUpti_ActivityKind> want = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_DRIVER,
                                                CUPTI_ACTIVITY_KIND_OVERHEAD};
  EXPECT_EQ(fake_.enabled, want);
}

#if CUPTI_API_VERSION == 130001
TEST_F(StartGpuTracingTest, CompletedBuffersAreConvertedAndHandedToTheCollector) {
  CuptiApi api = FakeApi();
  if (api.activity_get_next_record == nullptr) GTEST_SKIP() << "libcupti not loadable";
  host_.sink.armed = {{100, 200}};
  std::string why;
  ASSERT_TRUE(StartGpuTracing(&host_, api, &why)) << why;
  GoldenBuffer buf;
  buf.Add(Api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 150, 160, 77, 7));
  buf.Add(Kernel(250, 300, 7, "kept"));
  buf.Add(Kernel(250, 300, 8, "dropped"));
  fake_.pending = &buf;
  host_.flush_hook();
  ASSERT_EQ(host_.records.size(), 2u);
  EXPECT_EQ(host_.sink.Name(host_.records[1].name), "kept");
  const GpuTracingStats s = GetGpuTracingStats();
  EXPECT_EQ(s.buffers_completed, 1u);
  EXPECT_EQ(s.conversion.outside_window, 1u);
}
#endif

TEST_F(StartGpuTracingTest, NoDriverNamesTheCallAndCuptisError) {
  CuptiApi api = FakeApi();
  fake_.timestamp_result = CUPTI_ERROR_UNKNOWN;
  std::string why;
  EXPECT_FALSE(StartGpuTracing(&host_, api, &why));
  EXPECT_EQ(why.rfind("cuptiActivityRegisterTimestampCallback failed: CUPTI_ERROR_UNKNOWN (999)", 0), 0u) << why;
  EXPECT_EQ(host_.labels["gpu_tracing"], "unavailable: " + why);
  EXPECT_TRUE(fake_.enabled.empty());
  EXPECT_EQ(host_.flush_hook, nullptr);
}

TEST_F(StartGpuTracingTest, AnotherCuptiToolIsNamedAndEnabledKindsAreUndone) {
  CuptiApi api = FakeApi();
  if (api.activity_get_next_record == nullptr) GTEST_SKIP() << "libcupti not loadable";
  fake_.enable_results[CUPTI_ACTIVITY_KIND_MEMSET] = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  std::string why;
  EXPECT_FALSE(StartGpuTracing(&host_, api, &why));
  EXPECT_NE(why.find("cuptiActivityEnable(MEMSET) failed"), std::string::npos) << why;
  EXPECT_NE(why.find("(39)"), std::string::npos) << why;
  EXPECT_NE(why.find("another CUPTI tool"), std::string::npos) << why;
  EXPECT_NE(why.find("nsys"), std::string::npos) << why;
  EXPECT_NE(why.find("torch.profiler"), std::string::npos) << why;
  EXPECT_EQ(fake_.disabled, fake_.enabled);  // both CONCURRENT_KERNEL and MEMCPY undone
  EXPECT_EQ(host_.labels["gpu_tracing"], "unavailable: " + why);
  EXPECT_EQ(host_.flush_hook, nullptr);
}

TEST_F(StartGpuTracingTest, AMissingFunctionIsNamed) {
  CuptiApi api = FakeApi();
  api.activity_register_callbacks = nullptr;
  std::string why;
  EXPECT_FALSE(StartGpuTracing(&host_, api, &why));
  EXPECT_NE(why.find("cuptiActivityRegisterCallbacks"), std::string::npos) << why;
}

// The real libcupti on this machine. Without a driver it fails (999) and says
// which call; with one (a GPU machine) it succeeds.
TEST_F(StartGpuTracingTest, RealLibcuptiWithoutADriverFailsCleanly) {
  std::string load_why;
  const CuptiApi* real = RealCupti(&load_why);
  if (real == nullptr) GTEST_SKIP() << "libcupti not loadable: " << load_why;
  std::string why;
  const bool ok = StartGpuTracing(&host_, *real, &why);
  std::printf("StartGpuTracing with the real libcupti: %s%s\n", ok ? "on" : "unavailable: ", why.c_str());
  RecordProperty("why", why);
  if (ok) {
    EXPECT_EQ(host_.labels["gpu_tracing"], "on");
    host_.flush_hook();
    return;
  }
  EXPECT_NE(why.find("cupti"), std::string::npos) << why;
  EXPECT_NE(why.find(" failed: "), std::string::npos) << why;
  EXPECT_NE(why.find("CUPTI_ERROR_"), std::string::npos) << why;
  EXPECT_EQ(host_.labels["gpu_tracing"], "unavailable: " + why);
  EXPECT_EQ(host_.flush_hook, nullptr);
  FlushGpuActivity();  // harmless
}

#endif  // RLSCOPE_HAVE_CUPTI

}  // namespace
}  // namespace rlscope
