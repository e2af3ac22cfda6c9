// GPU activity tracing through the CUPTI activity API.
//
// Two parts:
//  - ActivityConverter walks one completed CUPTI activity buffer with
//    cuptiActivityGetNextRecord (through a function table: the real libcupti
//    or a fake) and turns each record it keeps into a rlscope::GpuRecord. It
//    knows nothing of the Collector: an ActivitySink interns names and says
//    which times were armed, so tests feed hand-built ("golden") buffers and
//    a predicate.
//  - StartGpuTracing wires CUPTI to the Collector: the timestamp callback
//    (CLOCK_MONOTONIC ns, the collector's clock), a bounded buffer pool, the
//    kinds the config enables, and a flush hook. Any CUPTI error leaves the
//    process CPU-only, with the identity label gpu_tracing saying why.
//
// Which records are kept: a record must have 0 < start <= end (else dropped,
// counted as invalid). API records (runtime, driver) and the other host-side
// kinds are kept when WasArmedDuring(start, end). Kernels, copies and sets are
// kept when they overlap an armed period too, or when their correlation id is
// that of an API record kept in the same or an earlier buffer (a bounded set
// of recent ids), so a kernel follows its launch even when it ran after the
// window closed. Everything else is dropped, counted as outside_window.
//
// Struct versions: the CUDA 13.0 toolkit (CUPTI_API_VERSION 130001) has
// CUpti_ActivityKernel10, Memcpy6, Memset4, API, Synchronization2 and
// Overhead3; cupti_records.h picks them by CUPTI_API_VERSION and gpu_activity.cc
// static_asserts the offsets it reads.
#pragma once

#if RLSCOPE_HAVE_CUPTI

#include <cupti_activity.h>  // CUPTI's header (angle brackets: not this file)
#include <cupti_callbacks.h>
#include <cupti_version.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "collector/cupti_api.h"
#include "native/config.h"
#include "native/gpu_record.h"

namespace rlscope {

class Collector;
struct ConvertedActivity;  // one record on its way through Convert (gpu_activity.cc)

// The CUPTI functions conversion needs. get_next_record is required;
// get_callback_name is optional (API names then read "cbid <n>").
struct ActivityApi {
  decltype(&cuptiActivityGetNextRecord) get_next_record = nullptr;
  decltype(&cuptiGetCallbackName) get_callback_name = nullptr;
};

// Where converted records go: names and the armed predicate. Called with the
// converter's lock held; must not call back into the converter.
class ActivitySink {
 public:
  virtual ~ActivitySink() = default;
  virtual uint32_t Intern(std::string_view s) = 0;
  virtual bool WasArmedDuring(int64_t begin_ns, int64_t end_ns) = 0;
};

struct ConversionStats {
  uint64_t records = 0;         // walked
  uint64_t kept = 0;            // converted and returned
  uint64_t invalid = 0;         // start == 0 or end < start
  uint64_t outside_window = 0;  // not armed and not correlated with a kept launch
  uint64_t unknown_kind = 0;    // kinds we do not convert (skipped)
  bool truncated = false;       // the walk ended on an error other than MAX_LIMIT_REACHED
  ConversionStats& operator+=(const ConversionStats& o);
};

// Thread-safe: CUDA 13 completes per-thread buffers on many threads at once.
// The walk runs without the lock; conversion under it (the correlation set
// and the name caches are shared).
class ActivityConverter {
 public:
  static constexpr size_t kDefaultCorrelationCapacity = 1 << 16;
  explicit ActivityConverter(ActivityApi api, size_t correlation_capacity = kDefaultCorrelationCapacity);

  // Walks buffer[0, valid_size) and appends the kept records to *out, in
  // buffer order. Returns this buffer's counts (also added to totals()).
  ConversionStats Convert(const uint8_t* buffer, size_t valid_size, ActivitySink& sink, std::vector<GpuRecord>* out);
  ConversionStats totals() const;

 private:
  // Convert's first pass: keeps or drops each API record by time alone and
  // remembers the kept ones' correlation ids. Returns a decision per record.
  std::vector<uint8_t> DecideApiRecords(const std::vector<const CUpti_Activity*>& records, ActivitySink& sink,
                                        ConversionStats* st);
  // Dispatches on the record's kind to its handler, resolving names and the
  // thread of a synchronisation. False for kinds not converted.
  bool ToGpuRecord(const CUpti_Activity* r, ActivitySink& sink, ConvertedActivity* c);
  uint32_t ApiName(ActivitySink& sink, uint32_t domain, uint32_t cbid);
  uint32_t KernelName(ActivitySink& sink, const char* name);
  uint32_t OverheadName(ActivitySink& sink, uint32_t overhead_kind);
  void RememberCorrelation(uint32_t id, uint32_t tid);

  const ActivityApi api_;
  const size_t correlation_capacity_;
  mutable std::mutex mu_;
  // Correlation ids of kept API records -> their thread, oldest first in the
  // FIFO. The thread fills in synchronisation records, which have none.
  std::unordered_map<uint32_t, uint32_t> kept_correlations_;
  std::deque<uint32_t> correlation_fifo_;
  // Kernel names by CUPTI's pointer, verified against the text (the pointer
  // may be reused for another name once CUPTI frees it).
  struct NameEntry {
    std::string text;
    uint32_t id;
  };
  std::unordered_map<const char*, NameEntry> kernel_names_;
  std::unordered_map<uint64_t, uint32_t> api_names_;       // (domain << 32 | cbid) -> id
  std::unordered_map<uint32_t, uint32_t> overhead_names_;  // kind >> 16 -> id
  ConversionStats totals_;
};

// Free-function form: a one-shot converter (no correlation memory across
// calls). Appends to *out.
ConversionStats ConvertActivityBuffer(const uint8_t* buffer, size_t valid_size, const ActivityApi& api,
                                      ActivitySink& sink, std::vector<GpuRecord>* out);

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": CUPTI's callback names carry
// the API version; the trace shows the function.
std::string StripApiVersion(std::string_view name);

// Human name of CUpti_ActivityOverheadKind (the full enum value).
const char* OverheadKindName(uint32_t overhead_kind);

// True when the config enables any GPU kind.
bool GpuTracingWanted(const Config& config);

// Buffers handed to CUPTI: 1 MiB each, 8-byte aligned, at most `max_buffers`
// out at once (then Acquire returns nullptr and CUPTI drops and counts).
// Freed buffers are reused. Thread-safe; O(1) under a mutex after warm-up.
class BufferPool {
 public:
  static constexpr size_t kBufferSize = size_t{1} << 20;
  explicit BufferPool(size_t max_buffers, size_t preallocate = 4);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  uint8_t* Acquire();
  void Release(uint8_t* buffer);
  size_t max_buffers() const { return max_buffers_; }
  uint64_t rejected() const;

 private:
  const size_t max_buffers_;
  mutable std::mutex mu_;
  std::vector<uint8_t*> free_;
  size_t allocated_ = 0;
  uint64_t rejected_ = 0;
};

// max(4, buffers.max_mb / 8) buffers of 1 MiB.
size_t GpuBufferCap(const Config& config);

// What StartGpuTracing talks to: the Collector in production, a fake in tests.
class GpuTracingHost : public ActivitySink {
 public:
  virtual const Config& config() const = 0;
  virtual void AddGpuRecords(std::vector<GpuRecord>&& records) = 0;
  virtual void SetGpuFlushHook(void (*hook)()) = 0;
  virtual void SetLabel(const std::string& key, const std::string& value) = 0;
};

// Starts GPU activity tracing once per process. On success sets the label
// gpu_tracing to "on" and returns true. On any CUPTI error (999 without a
// driver; 39 when nsys, ncu or torch.profiler holds CUPTI) undoes what it
// enabled, sets gpu_tracing to "unavailable: <why>", returns false with *why
// naming the failed call and CUPTI's error. Never throws. The host must
// outlive the process's CUDA use (the Collector does: it is never deleted).
bool StartGpuTracing(GpuTracingHost* host, const CuptiApi& api, std::string* why);
bool StartGpuTracing(Collector* collector, const CuptiApi& api, std::string* why);

// Counters of the live path (all zero before StartGpuTracing succeeds).
struct GpuTracingStats {
  ConversionStats conversion;
  uint64_t buffers_rejected = 0;  // requests refused at the pool cap
  uint64_t cupti_dropped = 0;     // cuptiActivityGetNumDroppedRecords
  uint64_t buffers_completed = 0;
};
GpuTracingStats GetGpuTracingStats();

// Forces CUPTI to hand back its buffers now (cuptiActivityFlushAll(FORCED));
// what the collector's flush hook calls. No-op when tracing is off.
void FlushGpuActivity();

}  // namespace rlscope

#endif  // RLSCOPE_HAVE_CUPTI
