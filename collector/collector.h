// The per-process collector: the root object owned by the injection entry
// points (NVTX, the C ABI, the Python module and CUDA's injection all reach
// the same instance through Instance()). It composes the collector's units
// over one CollectorContext (context.h), each with one job:
//
//   unit           file                   job
//   Recording      recording.h            the hot path, threads and their rings, names
//   Arming         arming.h               when to record: selection, triggers, steps, windows, role
//   CostSampling   cost_sampling.h        what recording costs: in-place samples, start-up calibration
//   CpuSampling    cpu_sampling.h         CPU-time sampling of every thread (cpu_sampler.h), off-CPU looks
//   GpuQueue       gpu_queue.h            GPU records from CUPTI (gpu_activity.h) on their way out
//   Link           link.h                 identity, Hello, the Transport (transport.h) and spool
//
// and the flush thread (flush_thread.cc), which runs their Start / Flush /
// Stop hooks in the order that file states. Everything a unit needs of
// another is passed to it at construction; nothing inside the collector
// reaches Instance(). Nothing here blocks or allocates on the hot path
// except the first event of a thread (its registration).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collector/arming.h"
#include "collector/context.h"
#include "collector/cost_sampling.h"
#include "collector/cpu_sampling.h"
#include "collector/environment.h"
#include "collector/gpu_queue.h"
#include "collector/link.h"
#include "collector/memory_sampler.h"
#include "collector/recording.h"
#include "collector/rlscope_collector.h"

namespace rlscope {

class Collector {
 public:
  // The process's collector, or nullptr when none runs. Acquire pairs with the
  // release in Start(): a non-null pointer is fully constructed.
  static Collector* Instance() { return instance_.load(std::memory_order_acquire); }
  // Creates and starts the collector from the environment once per process.
  // Returns the instance or nullptr (profiling off, or a setup error reported).
  static Collector* Start();

  // The range entry points shared by NVTX handlers and the C ABI. A range is
  // recorded when it opens armed (or opens/closes a step or trigger range; a
  // start also in a calibration's scratch scope, into its scratch ring);
  // its close is recorded exactly when its open was, whatever the arming by
  // then, so pairs never mismatch: push/pop through a per-depth bit, start/end
  // through kRecordedRangeBit in the id handed to the caller. They return what
  // NVTX returns to its caller (the depth; -1 for a pop with nothing open).
  // A dropped open is counted, and so is its close, which is not recorded
  // either (pairs stay whole): kDroppedRangeBit in a start's handle.
  static constexpr uint64_t kRecordedRangeBit = rlscope::kRecordedRangeBit;
  static constexpr uint64_t kDroppedRangeBit = rlscope::kDroppedRangeBit;
  static constexpr uint64_t kViaNvtxExRangeBit = rlscope::kViaNvtxExRangeBit;
  RLSCOPE_HOT int RangePush(ThreadState* ts, uint32_t name, uint32_t domain, uint32_t category, uint64_t payload,
                            uint8_t flags) {
    const int opens = arming_.watching() ? arming_.OnRangeOpen(ts, name, flags, payload, false, 0) : 0;
    const bool special = opens != 0;
    const bool attempted = special || armed();
    const bool recorded =
        attempted && recording_.Record(ts, EventKind::kRangePush, name, domain, category, payload, flags, special);
    if (special) arming_.AfterOpen(opens);
    const int depth = ts->depth++;
    ts->SetOpen(depth, recorded ? (ThreadState::kOpenRecorded | ThreadState::OpenVia(flags))
                                : (attempted ? ThreadState::kOpenDropped : 0));
    return depth;
  }
  // `flags`: the closing call's entry point (kFlagViaNvtxFast,
  // kFlagViaNvtxAnnotate, event.h), carried instead of what its push's bit
  // says; none: the push's (kFlagViaNvtxEx or none).
  RLSCOPE_HOT int RangePop(ThreadState* ts, uint32_t domain, uint8_t flags = kFlagNone) {
    if (ts->depth == 0) return -1;  // nothing open on this thread (or opened before it was tracked)
    const int depth = --ts->depth;
    const int closes = arming_.watching() ? arming_.OnRangeClose(ts, false, 0) : 0;
    // Deeper than the mask: recorded when armed now (the bit is not kept).
    const bool pushed = ts->WasRecorded(depth, armed());
    if (closes != 0 || pushed) {
      recording_.Record(ts, EventKind::kRangePop, 0, domain, 0, 0, flags != kFlagNone ? flags : ts->PopFlags(depth),
                        /*privileged=*/true);
    } else if (ts->WasDropped(depth)) {
      recording_.CountDropped();  // the close of a dropped open
    }
    if (closes != 0) arming_.AfterClose(closes);
    return depth;
  }
  RLSCOPE_HOT uint64_t RangeStart(ThreadState* ts, uint32_t name, uint32_t domain, uint32_t category, uint64_t payload,
                                  uint8_t flags) {
    // Disarmed and not watching: no id is needed (NVTX's own no-op returns 0
    // too), so the shared counter is not touched. A thread in a calibration's
    // scratch scope (ScratchScope) records as if armed, into a ring nothing
    // ships: its loops pay what a start and its end pay in a selected step
    // (the recorded handle's shape, the end's record: calibrated disarmed, a
    // start/end pair read 12-18 ns less than armed).
    const bool records = armed() || ts->calibrating;
    if (!arming_.watching() && !records) return 0;
    const uint64_t id = recording_.NextRangeId();
    const int opens = arming_.watching() ? arming_.OnRangeOpen(ts, name, flags, payload, true, id) : 0;
    const bool special = opens != 0;
    if (!special && !records) return id;
    // Dropped: the handle says so, and its end is not recorded either.
    const bool recorded = recording_.Record(ts, EventKind::kRangeStart, name, domain, category, id, flags, special);
    if (special) arming_.AfterOpen(opens);
    if (!recorded) return id | kDroppedRangeBit;
    return id | kRecordedRangeBit | ((flags & kFlagViaNvtxEx) != 0 ? kViaNvtxExRangeBit : 0);
  }
  // `handle` is what RangeStart returned; `flags` as RangePop's.
  RLSCOPE_HOT void RangeEnd(ThreadState* ts, uint32_t domain, uint64_t handle, uint8_t flags = kFlagNone) {
    const uint64_t id = handle & ~kRangeHandleBits;
    const int closes = arming_.watching() ? arming_.OnRangeClose(ts, true, id) : 0;
    if (closes != 0 || (handle & kRecordedRangeBit) != 0) {
      if (flags == kFlagNone && (handle & kViaNvtxExRangeBit) != 0) flags = kFlagViaNvtxEx;
      recording_.Record(ts, EventKind::kRangeEnd, 0, domain, 0, id, flags, /*privileged=*/true);
    } else if ((handle & kDroppedRangeBit) != 0) {
      recording_.CountDropped();  // the end of a dropped start
    }
    if (closes != 0) arming_.AfterClose(closes);
  }
  // A mark, or any one event (Recording::Record).
  RLSCOPE_HOT bool Record(ThreadState* ts, EventKind kind, uint32_t name, uint32_t domain, uint32_t category,
                          uint64_t value, uint8_t flags) {
    return recording_.Record(ts, kind, name, domain, category, value, flags);
  }

  // The process's hot byte (Arming::hot()), which the fast lanes
  // (Recording::FastPush, FastPop) take, read once per call.
  static uint8_t Hot() { return Arming::hot(); }

  bool armed() const { return arming_.armed(); }
  // Whether a range's name must be resolved now: it may be recorded, or it
  // may be a step or trigger range. Disarmed, non-watching threads only count
  // depth, never look at names.
  bool needs_names() const { return arming_.watching() || armed(); }
  // The same for a start on thread `ts`: also in a calibration's scratch
  // scope, where starts record as if armed (RangeStart).
  bool start_needs_names(const ThreadState* ts) const { return needs_names() || ts->calibrating; }
  // The calling thread's state when it has one or may get one now: while
  // armed or watching it registers the thread; disarmed it only returns an
  // existing state (so depths stay right) and never allocates.
  ThreadState* TrackedThread() {
    if (armed() || arming_.watching()) return CurrentThread();
    return Recording::Current();
  }
  // The calling thread's state; registers the thread on its first event.
  // nullptr when the per-process buffer budget is used up (counted as drops).
  ThreadState* CurrentThread() {
    ThreadState* ts = Recording::Current();
    return ts != nullptr ? ts : RegisterThread();
  }
  uint32_t Intern(std::string_view s) { return context_.strings.Intern(s); }
  void NameThread(int64_t tid, const std::string& name) { recording_.NameThread(tid, name); }
  void NameCategory(uint32_t domain, uint32_t category, const std::string& name) {
    recording_.NameCategory(domain, category, name);
  }

  // This process's own config (context.h).
  const Config& config() const { return context_.own.config; }
  bool selected() const { return arming_.selected(); }
  Trigger trigger() const { return arming_.trigger(); }
  void SetCaptureActive(bool active) { arming_.SetCaptureActive(active); }
  // Makes this process the run's controller, unless it is one or the
  // aggregator already named another (then false): the process whose steps
  // drive the run claims the role itself (rlscope_ray.step, the verl
  // plugin), so no one has to mark it. Says hello again with the role and
  // its own config's keys; the aggregator takes the first claimant.
  bool ClaimController();
  // The number of the next step range that carries none (verl's
  // global_steps, a resumed run's 201), announced to the aggregator with the
  // step when it is not the number it would derive itself. n >= 0.
  void SetNextStep(int64_t n) { arming_.SetNextStep(n); }
  void ReportExpected(std::vector<std::map<std::string, std::string>> processes) {
    link_.ReportExpected(std::move(processes));
  }

  // Labels and costs in the Hello (link.h).
  void SetLabel(const std::string& key, const std::string& value) { link_.SetLabel(key, value); }
  void SetCost(const std::string& key, double ns) { link_.SetCost(key, ns); }
  double Cost(const std::string& key) { return link_.Cost(key); }
  void AddOwnThread(int64_t tid) { context_.AddOwnThread(tid); }
  // Measures and sets the recording costs (CostSampling::Calibrate); the
  // Hello carries them.
  std::map<std::string, double> Calibrate();
  // The calling thread records into a scratch ring (CostSampling::
  // ScratchScope), registered first if it never recorded (disarmed too: a
  // calibration must take the path its calls take once tracked); false when
  // it has no state (over the buffer budget).
  bool ScratchScope(bool on);
  // The test clock (test_clock.h): ns it advanced so far; -1 without one.
  int64_t TestClockNs() const { return context_.TestClockNs(); }

  // GPU activity (gpu_activity.cc): records from CUPTI's buffer callbacks.
  void AddGpuRecords(std::vector<GpuRecord>&& records) { gpu_.Add(std::move(records)); }
  bool WasArmedDuring(int64_t begin_ns, int64_t end_ns) const { return arming_.WasArmedDuring(begin_ns, end_ns); }
  void SetGpuFlushHook(void (*hook)()) { gpu_.SetFlushHook(hook); }

  // Wakes the flush thread and waits until what was recorded before the call
  // was sent (or timeout). Returns true when done in time.
  bool Flush(int timeout_ms);
  // Final flush, goodbye, socket close (bounded by flush.exit_timeout_ms).
  void Shutdown();
  void Stats(rlscope_stats_t* out);
  void SamplerStats(rlscope_sampler_stats_t* out) const { cpu_.Stats(out); }
  // pthread_atfork child handler: the child gets no collector (see .cc).
  static void DetachInForkedChild();
  // pthread_atfork parent handler: one line at the first fork, and the count
  // as the identity label forked_children (re-sent with the Hello).
  void CountFork();

 private:
  explicit Collector(CollectorSettings settings);
  ThreadState* RegisterThread();
  // A Control from the aggregator (flush thread): the link's part, then the
  // role, the window and the run's config to the units they concern.
  void ApplyControl(const wire::Control& control);
  // Adopts the run keys of the run's config (Control.run_config): the steps
  // that arm a controller, whether this process is selected, correction's
  // and CPU sampling's settings. Flush thread.
  void AdoptRunConfig(const std::string& yaml);
  // Control.role "worker": records as a worker from now on. Flush thread.
  void BecomeWorker();

  // The flush thread (flush_thread.cc).
  void FlushLoop();
  // One flush: every unit's Flush hook in order, the batches sent (none when
  // there is nothing to send and no heartbeat is due). True when it was busy
  // (flush_thread.cc: the next comes at the interval, else later).
  bool FlushOnce(bool stop, bool window_closed);
  // Armed and using more than 1/kBusyCpuShare of a core (flush_thread.cc).
  bool ProcessAtWork(int64_t mono_ns);
  // The longest wait between flushes that found nothing (flush_thread.cc).
  int64_t IdleWaitCapNs(int64_t interval_ns) const;
  // A flush that carried fewer of the host's records than this (and nothing
  // else that makes it busy) is not: the next waits longer. About where a
  // flush's fixed cost (a wake-up, a batch, a send) equals its records'.
  static constexpr size_t kBusyRecords = 1024;
  // Armed, a process that used more than 1/kBusyCpuShare of a core since
  // the last flush is busy too (its new threads are found at the interval).
  static constexpr int64_t kBusyCpuShare = 20;
  static constexpr int64_t kBusyCpuGapNs = 100'000'000;
  static constexpr int64_t kIdleWaitNs = 1'000'000'000;
  // Always on, in steps not chosen up front: the interval is this many
  // times flush.interval_ms (flush_thread.cc): 800 ms by default, under the
  // heartbeat (kHeartbeatNs) and the aggregator's once-a-second release of
  // figures-only steps.
  static constexpr int64_t kFiguresIntervalFactor = 40;
  // A batch at least this often, even with nothing in it: the aggregator's
  // watermark and its sign of life (a third of the silence after which it
  // stops waiting for a process, AggregatorStats::kSilentAfterNs).
  static constexpr int64_t kHeartbeatNs = 1'000'000'000;
  // Resident memory that moved this much since the last batch carried it
  // makes a batch of its own.
  static constexpr int64_t kMemoryMovedBytes = 1 << 20;
  // Clock probe bursts when no events were flushed in the last
  // kEventsRecentNs and the process is not watching, or when the aggregator
  // reads the process's own clock: this many times clock.probe_interval_ms
  // apart (flush_thread.cc).
  static constexpr int64_t kIdleProbeFactor = 10;
  static constexpr int64_t kEventsRecentNs = 2'000'000'000;
  // Events recorded, and dropped before the transport (rings, over budget,
  // GPU records when `gpu`).
  std::pair<uint64_t, uint64_t> Totals(bool gpu);

  friend class CostSampler;
  // CostSampling::RecordCostSample for CostSampler, out of line: the sampler
  // then keeps the Collector itself, not a pointer into it, per call.
  void RecordCostSample(ThreadState* ts, uint64_t ticks);
  static std::atomic<Collector*> instance_;

  // The units, in construction order: each takes only those above it.
  CollectorContext context_;
  Recording recording_{context_};
  Arming arming_;
  Link link_;
  CostSampling costs_{context_, recording_};
  CpuSampling cpu_;
  MemorySampler memory_;  // flush thread: the process's resident memory, each flush
  GpuQueue gpu_{context_};

  std::string run_config_;                        // the last run config adopted (flush thread)
  std::atomic<uint64_t> forks_{0};                // children forked (CountFork)
  uint64_t overflow_said_ = 0;                    // flush thread: ring overflow episodes in the label (FlushOnce)
  int64_t wait_ns_ = 0;                           // flush thread: the wait before the next flush (FlushLoop)
  int64_t last_batch_ns_ = 0;                     // flush thread: when a batch last went out (FlushOnce; MonotonicNs)
  uint64_t dropped_sent_ = 0;                     // flush thread: the drop count the last batch carried
  int64_t events_flushed_ns_ = INT64_MIN / 2;     // flush thread: when a flush last took the host's events
  int64_t cpu_seen_ns_ = 0, cpu_seen_at_ns_ = 0;  // flush thread: the process's CPU time (but its own) when last judged
  bool working_ = false;                          // flush thread: the last judgement of that CPU time (kBusyCpuShare)
  int64_t rss_sent_ = -1;                         // flush thread: the resident memory the last batch carried

  // The flush thread and its requests.
  std::mutex flush_mu_;
  std::condition_variable flushed_cv_;
  bool stop_ = false;            // flush_mu_
  uint64_t flush_requests_ = 0;  // bumped by Flush() (flush_mu_)
  uint64_t flushes_done_ = 0;    // requests served, set by the flush thread (flush_mu_)
  std::atomic<bool> shut_down_{false};
  std::thread flush_thread_;
};

// Times one recording call in CostSampling::sample_every() on the calling
// thread, from the handler's entry (its thread state known) to its exit, on
// the event clock, and records the cost as a kCostSample right after the
// event the call recorded (correction.h, measured costs): the real hot path,
// its real buffers and wake-ups. A timed call that recorded no event, or
// more than one, or that a CPU sampler's signal landed in, is no sample (a
// disarmed thread so pays one decrement per call and two clock reads per N).
// Part of the hot path: inlined into every entry point.
class CostSampler {
 public:
  CostSampler(Collector* c, ThreadState* ts) : c_(c), ts_(ts) {
    if (__builtin_expect(--ts->sample_countdown != 0, 1)) return;
    const uint32_t every = c->costs_.sample_every();
    if (every == 0) {  // off: looked at again after 2^32 calls
      ts->sample_countdown = UINT32_MAX;
      return;
    }
    timed_ = true;
    pushed_ = ts->buffer->pushed();
    signals_ = ts->signals.load(std::memory_order_relaxed);  // relaxed: this thread's own handler writes it
    begin_ = c->costs_.SampleClock(ts);
  }
  ~CostSampler() {
    if (__builtin_expect(timed_, 0)) Finish();
  }
  CostSampler(const CostSampler&) = delete;
  CostSampler& operator=(const CostSampler&) = delete;

 private:
  void Finish() {
    const uint64_t end = c_->costs_.SampleClock(ts_);
    // The next timed call: 1 to 2N-1 calls on (N on average), not every
    // N-th, which would time the same kind of a regular pattern (a pop,
    // never a push, in a loop of pairs with N even).
    uint32_t x = ts_->sample_rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    ts_->sample_rng = x;
    const uint32_t every = c_->costs_.sample_every();
    ts_->sample_countdown = every == 0 ? UINT32_MAX : 1 + x % (2 * every - 1);
    if (ts_->buffer->pushed() - pushed_ == 1 && ts_->signals.load(std::memory_order_relaxed) == signals_) {
      c_->RecordCostSample(ts_, end - begin_);
    }
  }
  Collector* c_;
  ThreadState* ts_;
  bool timed_ = false;
  uint32_t signals_ = 0;
  uint64_t pushed_ = 0;
  uint64_t begin_ = 0;
};

// The end of a start/end range from whichever thread ends it (NVTX's
// RangeEnd, rlscope_nvtx_end): the end of a recorded (or dropped) start is
// recorded (counted) even on a thread that never recorded (it registers);
// `flags` as Collector::RangeEnd's.
inline void EndRangeOnAnyThread(uint32_t domain, uint64_t handle, uint8_t flags = kFlagNone) {
  Collector* c = Collector::Instance();
  if (c == nullptr) return;
  const uint64_t tracked = Collector::kRecordedRangeBit | Collector::kDroppedRangeBit;
  // Neither a tracked start nor a watch that may close on it: nothing to do.
  if ((handle & tracked) == 0 && (Collector::Hot() & (kHotArmedOrWatching | kHotOff)) == 0) return;
  ThreadState* ts = (handle & tracked) != 0 ? c->CurrentThread() : c->TrackedThread();
  if (ts == nullptr) return;
  CostSampler sampler(c, ts);
  c->RangeEnd(ts, domain, handle, flags);
}

}  // namespace rlscope
