// GPU activity as the collector ships it: one record per CUPTI activity
// record it keeps (kernels, copies, sets, API calls, synchronisation, CUPTI's
// own overhead), converted on the collector's side from the CUDA version's
// structs to this stable shape.
//
// Contract: times are on the collector's clock (CLOCK_MONOTONIC ns, through
// cuptiActivityRegisterTimestampCallback). `correlation` is CUPTI's
// correlation id: an API record and the kernel/copy/set it launched share it.
// The numeric values of GpuKind are part of the wire format: never reuse;
// a new kind is also added to the decoder's bound (wire_decode_batch.cc).
#pragma once

#include <cstdint>

namespace rlscope {

enum class GpuKind : uint8_t {
  kKernel = 1,  // CONCURRENT_KERNEL
  kMemcpy = 2,  // subkind: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD, ...)
  kMemset = 3,
  kRuntimeApi = 4,  // name: the cudaXxx function; tid: the calling thread
  kDriverApi = 5,   // name: the cuXxx function; tid: the calling thread
  kSync = 6,        // subkind: CUpti_ActivitySynchronizationType; tid: the waiting thread
  kOverhead = 7,    // subkind: CUpti_ActivityOverheadKind >> 16; tid when it is a thread's
  // An allocation or release (CUPTI's MEMORY2 records): start = end = when;
  // bytes; device, context, stream; subkind: CUpti_ActivityMemoryOperationType
  // (1 allocation, 2 release) | CUpti_ActivityMemoryKind << 8 (3 device, 2
  // pinned, 5 managed, ...). Kept armed or not: a process's allocated total
  // needs every one since it started (few under a caching allocator; one
  // per sub-allocation under cudaMallocAsync pools: gpu.memory turns them off).
  kMemory = 8,
};

// kMemory's subkind, in parts.
constexpr uint32_t kMemoryAllocation = 1, kMemoryRelease = 2;
constexpr uint32_t kMemoryKindDevice = 3;
inline uint32_t MemoryOperation(uint32_t subkind) { return subkind & 0xff; }
inline uint32_t MemoryKind(uint32_t subkind) { return subkind >> 8; }

struct GpuRecord {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t tid = 0;           // CPU thread (API, sync, overhead), 0 otherwise
  uint64_t bytes = 0;        // memcpy / memset
  uint32_t correlation = 0;  // 0 = none
  uint32_t name = 0;         // interned string id: kernel, API function, overhead kind
  uint32_t device = 0;
  uint32_t context = 0;
  uint32_t stream = 0;
  uint32_t subkind = 0;  // see GpuKind
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
  uint8_t kind = 0;  // GpuKind
  bool operator==(const GpuRecord&) const = default;
};

}  // namespace rlscope
