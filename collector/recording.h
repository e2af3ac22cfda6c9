// Recording: the hot path and the threads that record.
//
// Each application thread that records gets a ThreadState and a ring of its
// own (ThreadBuffer), registered here on its first event and reached through
// an initial-exec thread_local; Record writes one packed record into it. A
// full ring overflows by chunks into the thread's reserved store (no drop)
// until buffers.max_mb, which bounds the rings and their overflow together.
// Nothing on the hot path locks, allocates or makes a system call, except a
// thread's first event (registration) and an eventfd write every half ring
// (every overflow chunk, during an overflow).
// The flush thread (collector.h) snapshots the rings, ships the names the
// events need, and retires the rings of threads that exited.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collector/context.h"
#include "collector/sampled_thread.h"
#include "collector/transport.h"
#include "native/event.h"
#include "native/string_table.h"
#include "native/thread_buffer.h"
#include "native/wire.h"

// The hot path is inlined into each entry point (NVTX handlers, the C ABI,
// the Python fast path): a call with nine arguments spills and reloads more
// than the record itself costs (tests: the instruction count per pair in
// bench/nvtx_pair_bench under callgrind).
#define RLSCOPE_HOT inline __attribute__((always_inline))

namespace rlscope {

// A start/end range's handle (what RangeStart returns to NVTX callers): its
// id, with the bit that says its start was recorded (so its end is, on any
// thread) or dropped (so its end is counted, not recorded), and the bit that
// says it was opened through an NVTX *Ex entry point (so its end carries
// kFlagViaNvtxEx: the `nvtx` package's caller side of the close).
inline constexpr uint64_t kRecordedRangeBit = uint64_t{1} << 63;
inline constexpr uint64_t kDroppedRangeBit = uint64_t{1} << 62;
inline constexpr uint64_t kViaNvtxExRangeBit = uint64_t{1} << 61;
inline constexpr uint64_t kRangeHandleBits = kRecordedRangeBit | kDroppedRangeBit | kViaNvtxExRangeBit;

// The bits of the process's hot byte (Arming owns it: Arming::hot()), which
// the handlers' fast lanes (Recording::FastPush, FastPop) read once per
// call: armed; watching (a controller's step ranges, an nvtx:<name>
// trigger: names must be looked at); events stamped by something else than
// the TSC, or a test clock; the collector not (or no longer, in a forked
// child) the process's instance.
inline constexpr uint8_t kHotArmed = 1, kHotWatching = 2, kHotSlowClock = 4, kHotOff = 0x80;
inline constexpr uint8_t kHotArmedOrWatching = kHotArmed | kHotWatching;

// What a range's open says, its name resolved to an id (the NVTX handlers'
// attributes, the fast lanes').
struct RangeAttr {
  uint32_t name = 0;
  uint32_t category = 0;
  uint64_t value = 0;
  uint8_t flags = kFlagNone;
};

// One recording thread's state, reached through a thread_local pointer; its
// own thread alone writes it (the CPU sampler's handler, on that thread,
// reads sample_ring and bumps signals).
struct ThreadState {
  // What became of the push at each depth, kept so its pop does the same
  // (push/pop pairing): kOpenRecorded (so its pop is recorded),
  // kOpenDropped (so its pop is counted), kOpenViaEx (through an *Ex entry
  // point) and kOpenViaPyRange (rlscope_ray's own range), so its pop is
  // flagged alike. kTrackedDepth levels deep; deeper, a pop is recorded when
  // armed at its time.
  static constexpr int kTrackedDepth = 64;
  static constexpr uint8_t kOpenRecorded = 1, kOpenDropped = 2, kOpenViaEx = 4, kOpenViaPyRange = 8;
  // The kOpenVia* bits of a push with `flags`.
  static constexpr uint8_t OpenVia(uint8_t flags) {
    return ((flags & kFlagViaNvtxEx) != 0 ? kOpenViaEx : 0) | ((flags & kFlagViaPyRange) != 0 ? kOpenViaPyRange : 0);
  }

  // The hot path's fields first, on one cache line with the ring's pointer.
  ThreadBuffer* buffer = nullptr;  // owned by the registry's entry
  int depth = 0;                   // open push/pop ranges, returned to NVTX callers
  bool calibrating = false;        // in a scratch scope (CostSampling::ScratchScope): `buffer` is `scratch`
  // In-place cost sampling (cost_sampling.h): calls left until the next
  // timed one; the thread's own virtual costs so far (test clock only).
  uint32_t sample_countdown = 1;
  uint8_t open[kTrackedDepth] = {};  // kOpen* of the push at each depth
  uint32_t sample_rng = 0x9E3779B9;  // xorshift32: the gaps between timed calls vary
  int step_depth = -1;               // depth of this thread's open "step" push (controller), -1 none
  int trigger_depth = -1;            // depth of its open nvtx:<name> trigger push, -1 none
  int64_t virtual_own_ns = 0;
  NameCache names;
  // CostSampling::ScratchScope: the thread's own ring while `buffer` is a
  // scratch ring that nothing reads (calibration loops), else null.
  ThreadBuffer* real_buffer = nullptr;
  std::unique_ptr<ThreadBuffer> scratch;
  // CPU sampling (cpu_sampler.h): the ring its signal handler records into
  // (set by the flush thread with the thread's timer, null before), and the
  // signals taken so far (a timed recording call a signal lands in is no
  // cost sample: the signal's cost is not the handler's).
  std::atomic<ThreadBuffer*> sample_ring{nullptr};
  std::atomic<uint32_t> signals{0};
  explicit ThreadState(StringTable* table) : names(table) {}
  // The push at depth d: what became of it (kOpen* bits); deeper than
  // tracked, nothing is kept.
  void SetOpen(int d, uint8_t state) {
    if (d < kTrackedDepth) open[d] = state;
  }
  // Whether the push at depth d was recorded; deeper, `deeper`.
  bool WasRecorded(int d, bool deeper) const { return d < kTrackedDepth ? (open[d] & kOpenRecorded) != 0 : deeper; }
  bool WasDropped(int d) const { return d < kTrackedDepth && (open[d] & kOpenDropped) != 0; }
  // The flags of the pop closing depth d: kFlagViaNvtxEx or kFlagViaPyRange
  // when its push had it.
  uint8_t PopFlags(int d) const { return d < kTrackedDepth ? PopFlagsOf(open[d]) : static_cast<uint8_t>(kFlagNone); }
  static constexpr uint8_t PopFlagsOf(uint8_t open_state) {
    return (open_state & kOpenViaEx) != 0        ? kFlagViaNvtxEx
           : (open_state & kOpenViaPyRange) != 0 ? kFlagViaPyRange
                                                 : kFlagNone;
  }
};

// A registered thread: its ring and state, freed by the flush thread once
// the thread exited and everything it recorded was shipped.
struct ThreadEntry {
  std::unique_ptr<ThreadBuffer> buffer;
  std::unique_ptr<ThreadState> state;
  std::atomic<bool> exited{false};  // set by the thread's TLS destructor
  bool name_sent = false;           // flush thread
  SampledThread sampled;            // its CPU-time timer and sample ring (cpu_sampling.h; flush thread)
};

class Recording {
 public:
  explicit Recording(CollectorContext& ctx);

  // Records one event into `ts`, the calling thread's state. Returns false
  // when dropped (ring full and no overflow left, counted unless `counted` is false: a cost
  // sample). `privileged`: a recorded range's close or a step edge, which may
  // take the ring's reserve (ThreadBuffer::TryPush).
  RLSCOPE_HOT bool Record(ThreadState* ts, EventKind kind, uint32_t name, uint32_t domain, uint32_t category,
                          uint64_t value, uint8_t flags, bool privileged = false, bool counted = true) {
    EventRecord r;
    r.ts = ReadTicks(clock_source_);
    // Test-only virtual costs (test_clock.h; the clock source is then
    // monotonic, so ticks are ns). Constant after start: a predicted branch.
    if (__builtin_expect(test_clock_ != nullptr, 0)) {
      int64_t own_ns = 0;
      r.ts += test_clock_->Advance(static_cast<uint8_t>(kind), flags, &own_ns);
      ts->virtual_own_ns += own_ns;
    }
    r.value = value;
    r.name = name;
    r.category = category;
    r.domain = domain;
    r.kind = static_cast<uint8_t>(kind);
    r.flags = flags;
    r.reserved = 0;
    if (!ts->buffer->TryPush(r, privileged, counted) && !RetryInScratch(ts, r, privileged)) return false;
    // Every half ring (every overflow chunk), the flush thread is woken
    // rather than left to its interval: one eventfd write per (ring / 2) records.
    if (__builtin_expect(ts->buffer->AtHalfMark(), 0)) ctx_.Wake();
    return true;
  }
  // ---- The fast lanes ----
  // What the NVTX handlers try before the full path (Collector::RangePush,
  // RangePop, behind a CostSampler): no call and no frame, the same records
  // and depth bookkeeping as the full path, for the common cases only:
  // armed and not watching (or neither), events stamped by the TSC, the
  // ring with room short of its half mark, a tracked depth. A lane returns
  // true when it did the call (its depth in *depth), false when the caller
  // must take the full path (nothing was done). A lane times nothing: its
  // caller counts ts->sample_countdown down and takes the full path for the
  // timed call, whose CostSampler times the same lane. `hot`: the process's
  // hot byte (kHot* above), read once per call.
  //
  // A push: while neither armed nor watching, the depth alone (its pop is
  // not recorded); while armed alone, recorded, with what `attr(RangeAttr*)`
  // resolves inline (false: it cannot, e.g. a name not in the cache).
  template <typename AttrFn>
  RLSCOPE_HOT static bool FastPush(uint8_t hot, ThreadState* ts, uint32_t domain, AttrFn attr, int* depth_out) {
    const int depth = ts->depth;
    if (depth >= ThreadState::kTrackedDepth) return false;
    if (hot == kHotArmed) {
      RangeAttr at;
      if (!attr(&at) ||
          !ts->buffer->TryPushFast(FastRecord(EventKind::kRangePush, at.name, domain, at.category, at.value, at.flags),
                                   /*privileged=*/false)) {
        return false;
      }
      ts->open[depth] = ThreadState::kOpenRecorded | ThreadState::OpenVia(at.flags);
    } else if ((hot & (kHotArmedOrWatching | kHotOff)) == 0) {
      ts->open[depth] = 0;
    } else {
      return false;
    }
    ts->depth = depth + 1;
    *depth_out = depth;
    return true;
  }
  // A pop while not watching: recorded when its push was (RangePop's rule);
  // `flags` as RangePop's.
  RLSCOPE_HOT static bool FastPop(uint8_t hot, ThreadState* ts, uint32_t domain, uint8_t flags, int* depth_out) {
    const int depth = ts->depth - 1;
    if ((hot & (kHotWatching | kHotOff | kHotSlowClock)) != 0 ||
        static_cast<unsigned>(depth) >= ThreadState::kTrackedDepth) {
      return false;
    }
    const uint8_t open = ts->open[depth];
    if (open != 0) {
      if ((open & ThreadState::kOpenDropped) != 0) return false;
      if (flags == kFlagNone) flags = ThreadState::PopFlagsOf(open);
      if (!ts->buffer->TryPushFast(FastRecord(EventKind::kRangePop, 0, domain, 0, 0, flags), /*privileged=*/true)) {
        return false;
      }
    }
    ts->depth = depth;
    *depth_out = depth;
    return true;
  }
  // An event stamped now by the TSC (the lanes' clock: kHotSlowClock is
  // clear), as the four words of its EventRecord (stored as such).
  RLSCOPE_HOT static std::array<uint64_t, 4> FastRecord(EventKind kind, uint32_t name, uint32_t domain,
                                                        uint32_t category, uint64_t value, uint8_t flags) {
    static_assert(offsetof(EventRecord, value) == 8 && offsetof(EventRecord, name) == 16 &&
                  offsetof(EventRecord, category) == 20 && offsetof(EventRecord, domain) == 24 &&
                  offsetof(EventRecord, kind) == 28 && offsetof(EventRecord, flags) == 29 &&
                  offsetof(EventRecord, reserved) == 30 && std::endian::native == std::endian::little);
    return {ReadTicks(ClockSource::kTsc), value, name | (uint64_t{category} << 32),
            domain | (uint64_t{static_cast<uint8_t>(kind)} << 32) | (uint64_t{flags} << 40)};
  }

  // A full scratch ring (CostSampling::ScratchScope: start-up calibration,
  // never shipped) is emptied by its own thread, which nothing else reads,
  // and takes the event: nothing in it is lost, so no open is dropped and
  // no close is counted (a calibration of 100k+ events filled one). False
  // for a real ring.
  static bool RetryInScratch(ThreadState* ts, const EventRecord& r, bool privileged) {
    if (__builtin_expect(ts->scratch == nullptr || ts->buffer != ts->scratch.get(), 1)) return false;
    ts->scratch->Drain([](const EventRecord*, size_t) {});
    return ts->buffer->TryPush(r, privileged, false);
  }
  // An event not recorded (a thread over the budget, the close of a dropped
  // open): counted as dropped.
  void CountDropped() { overflow_dropped_.fetch_add(1, std::memory_order_relaxed); }
  // A start/end range's id. Relaxed: ids only need to be unique, not
  // ordered with anything.
  uint64_t NextRangeId() { return next_range_id_.fetch_add(1, std::memory_order_relaxed); }

  // The calling thread's state, or null (not registered, or exiting).
  static ThreadState* Current() { return tls_state_; }
  // Registers the calling thread (its first event): nullptr when the
  // per-process buffer budget is used up or recording closed (counted). The
  // budget is shared with the rings' overflow, which gives it back once
  // drained: a thread refused is tried again at its next event.
  ThreadState* Register();
  // No thread registers from now on (exit).
  void Close() { closed_.store(true, std::memory_order_relaxed); }

  void NameThread(int64_t tid, const std::string& name);
  void NameCategory(uint32_t domain, uint32_t category, const std::string& name);

  // Flush thread. Calls fn on each registered entry, under the registry's
  // lock (fn must not register threads or take it again).
  void ForEachThread(const std::function<void(ThreadEntry&)>& fn);
  // Flush thread: the rings' sizes now, as this flush's event blocks.
  void SnapshotRings(Outgoing* out);
  // Flush thread, after everything this flush ships was interned: names new
  // since the last flush (strings, threads, categories).
  void TakeMetadata(Metadata* out);
  // Every name shipped so far (strings, threads, categories), for a batch
  // that re-sends them all (Link's preamble).
  void AllNames(wire::Batch* batch);
  // Flush thread: frees the rings of threads that exited and are fully
  // drained; `release` is called on each before it goes (its timer).
  void RetireExitedThreads(const std::function<void(ThreadEntry&)>& release);
  // Events recorded (cost samples apart) and dropped, registered threads.
  struct Counts {
    uint64_t written = 0, dropped = 0, threads = 0;
  };
  Counts Count();
  // Overflow statistics (ThreadBuffer): the most overflow bytes in use at
  // once, process-wide, and the overflow episodes started. Any thread.
  int64_t overflow_peak_bytes() const { return budget_.overflow_peak_bytes(); }
  uint64_t overflow_episodes() const { return budget_.overflow_episodes(); }

  // Test only (RLSCOPE_TEST_LATE_FLUSH_EVENTS=N, tests/test_drops.py): the
  // flush thread calls this before each flush; it returns once the process
  // has recorded N events more than when it last returned (the first time:
  // N), or when `stopping` says so (asked every millisecond). A flush thread
  // that gets no core for a while, made deterministic: it drains once per N
  // events. Unset or 0: returns at once.
  void WaitLateFlushForTesting(const std::function<bool()>& stopping);

 private:
  friend struct ThreadExitHook;
  std::string ThreadName(int64_t tid);  // explicit (NVTX) or the kernel's; caller holds meta_mu_

  CollectorContext& ctx_;
  // Copies of the context's, for the hot path (no indirection).
  const ClockSource clock_source_;
  TestClock* const test_clock_;
  // initial-exec: one load on the hot path (a dlopen'ed library may use a few
  // bytes of the static TLS surplus that glibc keeps for this); constinit:
  // no TLS wrapper call is needed to read it from another file.
  static constinit thread_local ThreadState* tls_state_ __attribute__((tls_model("initial-exec")));
  static thread_local bool tls_exiting_;  // set by the thread-exit hook: never re-register

  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> next_range_id_{1};
  // Events of threads over budget, and closes not recorded because their
  // open was dropped.
  std::atomic<uint64_t> overflow_dropped_{0};

  // buffers.max_mb: the rings' reservations and their overflow chunks.
  // Declared before threads_: it outlives every ring.
  MemoryBudget budget_;
  uint64_t late_flush_events_ = 0;  // WaitLateFlushForTesting's N; flush thread
  uint64_t late_flush_until_ = 0;   // its next target; flush thread

  std::mutex registry_mu_;  // guards threads_, retired_*
  std::vector<std::unique_ptr<ThreadEntry>> threads_;
  uint64_t retired_dropped_ = 0;  // drops of threads already removed
  uint64_t retired_written_ = 0;  // records of threads already removed

  std::mutex meta_mu_;                           // guards thread_names_, renamed_threads_, categories_
  std::map<int64_t, std::string> thread_names_;  // explicit (NVTX) names
  std::vector<int64_t> renamed_threads_;
  std::vector<wire::CategoryName> categories_;
  size_t categories_sent_ = 0;
  uint32_t next_string_id_ = 1;  // flush thread: strings below it were shipped
};

}  // namespace rlscope
