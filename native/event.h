// Packed event records: what a host thread writes on the hot path.
//
// Contract: EventRecord is a trivially copyable POD of exactly 32 bytes. It is
// written by one thread into its own ThreadBuffer and read by the collector's
// flush thread. Timestamps are raw ticks of the process clock (see clock.h) and
// are converted to nanoseconds on the flush thread, never on the hot path.
// The numeric values of EventKind and EventFlags are part of the wire format
// (docs/wire_format.md): never renumber, never reuse.
#pragma once

#include <cstdint>
#include <type_traits>

namespace rlscope {

enum class EventKind : uint8_t {
  kRangePush = 1,   // nested range opened on this thread (NVTX push)
  kRangePop = 2,    // innermost open range of this thread closed (NVTX pop)
  kRangeStart = 3,  // start/end range opened; `value` is its range id
  kRangeEnd = 4,    // start/end range `value` closed (may be another thread)
  kMark = 5,        // instant event
  // The measured cost of the handler call that recorded the event just
  // before it on this thread (in-place cost sampling, correction.h):
  // `value` is ticks in a record, picoseconds on the wire; `category` the
  // measured event's kind, `flags` its flags. Not a span or an instant.
  kCostSample = 6,
  // A CPU sample (collector/cpu_sampler.h): the thread's CPU-time timer fired
  // while it ran here. `value` is the interrupted instruction's address;
  // `name` the interned path of the shared object holding it (0 unknown);
  // `category` the interned name of the module of the thread's current
  // Python frame (0 none); `domain` the thread CPU time the sample stands
  // for, microseconds ((1 + the timer's overruns) x its period). Not a span
  // or an instant, nor one of the process's recorded events. With
  // kFlagNativeStack, `value` is the interned id of its native stack (below);
  // without, the interrupted instruction's address in a ring, 0 on the wire.
  kCpuSample = 7,
  // An off-CPU sample (collector/thread_states.h), recorded by the flush
  // thread in a block of its own: thread `value` (a tid of the process) was
  // not running when looked at, for the reason `category` (OffCpuReason),
  // and stands for the `domain` microseconds of wall time before `ts`. For
  // kCpuWait, `domain` is the run-queue wait since the thread's run delay was
  // last read and `name` the microseconds since that reading (0: not known),
  // over which the wait is spread; `name` is not an interned string here.
  kOffCpuSample = 8,
  // The process's CPU time (all threads, CLOCK_PROCESS_CPUTIME_ID) at `ts`,
  // `value` ns: the denominator of attribution's coverage. Flush thread.
  kProcessCpu = 9,
};

// Why a thread was off CPU (kOffCpuSample's category). Frozen numbers.
enum class OffCpuReason : uint8_t {
  kOther = 0,     // any other wait (a child, a signal, stopped)
  kGil = 1,       // waiting for Python's GIL (a futex on the interpreter's GIL)
  kLock = 2,      // another futex: a mutex, condition, semaphore, Python lock
  kPoll = 3,      // poll, select, epoll: sockets (Ray's gRPC, ZeroMQ) and pipes
  kIo = 4,        // a read, write, send, receive, open, sync; or uninterruptible sleep
  kSleep = 5,     // nanosleep, clock_nanosleep
  kCpuWait = 6,   // runnable but not running: the run queue (schedstat's run delay)
  kCudaSync = 7,  // inside a CUDA API call (CUPTI): set by the aggregator, not sent
};
inline constexpr int kOffCpuReasons = 8;

enum EventFlags : uint8_t {
  kFlagNone = 0,
  kFlagHasPayload = 1 << 0,  // `value` carries an integer payload
  // Came in through an NVTX *Ex entry point (event attributes), or closes a
  // range that did (its pop or end): overhead correction charges it the
  // `nvtx` Python package's calibrated caller-side cost of its side.
  kFlagViaNvtxEx = 1 << 1,
  // On a kCpuSample: the thread's Python frame could not be read (a read of
  // it failed: memory unmapped under the sampler); `category` is 0.
  kFlagFrameUnread = 1 << 2,
  // On a range push, and the pop that closes it: recorded by rlscope_ray's
  // own Python ranges (rlscope_ray.range, the Ray method wrapper's):
  // charged that path's calibrated caller side (py_range_*). The same bit
  // as kFlagFrameUnread, which only CPU samples carry.
  kFlagViaPyRange = 1 << 2,
  // On a kCpuSample: its native stack was walked. On the wire `value` is the
  // interned id of the shared objects of its frames, from the interrupted one
  // outwards, each named once, '\n'-joined (collector/native_stack.h).
  kFlagNativeStack = 1 << 3,
  // On a kCpuSample: of a thread the collector itself runs (its flush thread,
  // ZeroMQ's I/O threads): the profiler's time.
  kFlagProfilerThread = 1 << 4,
  // Recorded by a call to the `nvtx` package's push_range, pop_range,
  // start_range, end_range or mark through rlscope's own entry points for
  // them (rlscope_ray/nvtx_fast.py): a pop or end carries the flag of the
  // call that closed it. Charged that path's calibrated caller side
  // (py_fast_*), never py_nvtx_*.
  kFlagViaNvtxFast = 1 << 5,
  // Opened or closed by rlscope's `nvtx.annotate` (its __enter__, __exit__):
  // charged py_annotate_push / py_annotate_pop.
  kFlagViaNvtxAnnotate = 1 << 6,
  // With kFlagHasPayload: `value` is an int64 (an NVTX payload of a signed
  // type; a Python int), shown as such; without it an unsigned one.
  kFlagPayloadSigned = 1 << 7,
};

// Which Python entry point's caller side an event paid, from its flags
// (overhead correction; the cost keys' prefixes, wire.h Hello::costs): none
// modelled, the `nvtx` package through an NVTX *Ex entry point (py_nvtx_*),
// rlscope's replacement of its functions (py_fast_*), of its annotate
// (py_annotate_*), rlscope_ray's own ranges (py_range_*). A replacement's
// flag wins over kFlagViaNvtxEx. (A CPU sample's kFlagFrameUnread reads as
// kPyRange here: no caller side is ever keyed for a CPU sample.)
enum class Caller : uint8_t { kNone = 0, kNvtxEx = 1, kNvtxFast = 2, kNvtxAnnotate = 3, kPyRange = 4 };
inline constexpr int kCallers = 5;
inline constexpr const char* kCallerKeyPrefix[kCallers] = {"", "py_nvtx_", "py_fast_", "py_annotate_", "py_range_"};
inline constexpr Caller CallerOf(uint8_t flags) {
  return (flags & kFlagViaNvtxAnnotate) != 0 ? Caller::kNvtxAnnotate
         : (flags & kFlagViaNvtxFast) != 0   ? Caller::kNvtxFast
         : (flags & kFlagViaNvtxEx) != 0     ? Caller::kNvtxEx
         : (flags & kFlagViaPyRange) != 0    ? Caller::kPyRange
                                             : Caller::kNone;
}

struct EventRecord {
  uint64_t ts;        // raw clock ticks (clock.h)
  uint64_t value;     // range id (start/end) or payload (kFlagHasPayload)
  uint32_t name;      // interned string id, 0 = unnamed
  uint32_t category;  // NVTX category, 0 = none
  uint32_t domain;    // interned domain-name id, 0 = default domain
  uint8_t kind;       // EventKind
  uint8_t flags;      // EventFlags
  uint16_t reserved;  // zero
};

static_assert(sizeof(EventRecord) == 32, "EventRecord must stay 32 bytes");
static_assert(std::is_trivially_copyable_v<EventRecord>);

}  // namespace rlscope
