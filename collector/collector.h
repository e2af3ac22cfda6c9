// The per-process collector: the root object owned by the injection entry
// points (NVTX, the C ABI, the Python module all reach the same instance).
//
// Threads: any application thread records through the inline hot path below
// into its own ThreadBuffer; the collector's flush thread (flush_thread.cc)
// drains buffers and hands each flush to its Transport (transport.h), the
// only code that touches ZeroMQ, which converts ticks to nanoseconds, encodes
// and sends batches. Nothing here blocks or allocates on the hot path except
// the first event of a thread (buffer registration).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "native/clock.h"
#include "native/config.h"
#include "native/event.h"
#include "native/gpu_record.h"
#include "native/string_table.h"
#include "native/thread_buffer.h"
#include "native/wire.h"
#include "collector/cpu_sampler.h"
#include "collector/rlscope_collector.h"
#include "collector/test_clock.h"
#include "collector/transport.h"

// The hot path is inlined into each entry point (NVTX handlers, the C ABI,
// the Python fast path): a call with nine arguments spills and reloads more
// than the record itself costs (tests: the instruction count per pair in
// bench/nvtx_pair_bench under callgrind).
#define RLSCOPE_HOT inline __attribute__((always_inline))

namespace rlscope {

// One recording thread's state, reached through a thread_local pointer.
struct ThreadState {
  ThreadBuffer* buffer = nullptr;  // owned by the collector's registry
  NameCache names;
  int depth = 0;           // open push/pop ranges, returned to NVTX callers
  uint64_t recorded_mask = 0;  // bit d: the push at depth d was recorded (so its pop is)
  uint64_t dropped_mask = 0;   // bit d: the push at depth d was dropped (so its pop is, counted)
  int step_depth = -1;     // depth of this thread's open "step" push (controller), -1 none
  int trigger_depth = -1;  // depth of its open nvtx:<name> trigger push, -1 none
  // In-place cost sampling (CostSampler): calls left until the next timed
  // one; the thread's own virtual costs so far (test clock only).
  uint32_t sample_countdown = 1;
  uint32_t sample_rng = 0x9E3779B9;  // xorshift32: the gaps between timed calls vary
  int64_t virtual_own_ns = 0;
  // Collector::ScratchScope: the thread's own ring while `buffer` is a
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
  // Push/pop pairing through recorded_mask; 64 levels deep at most.
  void SetRecorded(int d, bool recorded) {
    if (d < 64) recorded_mask = recorded ? recorded_mask | (uint64_t{1} << d) : recorded_mask & ~(uint64_t{1} << d);
  }
  // Whether the push at depth d was recorded; deeper, `deeper`.
  bool WasRecorded(int d, bool deeper) const { return d < 64 ? ((recorded_mask >> d) & 1) != 0 : deeper; }
  void SetDropped(int d, bool dropped) {
    if (d < 64) dropped_mask = dropped ? dropped_mask | (uint64_t{1} << d) : dropped_mask & ~(uint64_t{1} << d);
  }
  bool WasDropped(int d) const { return d < 64 && ((dropped_mask >> d) & 1) != 0; }
};

// What opens and closes a process's capture (config `capture_range`).
enum class Trigger : uint8_t {
  kController,       // the controller's selected steps (workers: windows from the aggregator)
  kApi,              // rlscope_ray.start()/stop()
  kNvtxRange,        // a range named `nvtx:<name>` in this process
  kCudaProfilerApi,  // cuProfilerStart/Stop, through CUPTI callbacks (cupti_trigger.cc)
};

class Collector {
 public:
  // The process's collector, or nullptr when none runs. Acquire pairs with the
  // release in Start(): a non-null pointer is fully constructed.
  static Collector* Instance() { return instance_.load(std::memory_order_acquire); }
  // Creates and starts the collector from the environment once per process.
  // Returns the instance or nullptr (profiling off, or a setup error reported).
  static Collector* Start();

  // Hot path: relaxed is enough for "armed", a hint read once per event; the
  // flush barrier, not this flag, orders data with the aggregator.
  bool armed() const { return armed_.load(std::memory_order_relaxed); }
  // True when disarmed events must still be looked at: a controller finding
  // its "step" ranges (always recorded: they number the steps), or an
  // nvtx:<name> trigger. Constant after start.
  // Whether a range's name must be resolved now: it may be recorded, or it
  // may be a step or trigger range. Disarmed, non-watching threads only count
  // depth, never look at names.
  bool needs_names() const { return watching() || armed(); }

  // The range entry points shared by NVTX handlers and the C ABI. A range is
  // recorded when it opens armed (or opens/closes a step or trigger range);
  // its close is recorded exactly when its open was, whatever the arming by
  // then, so pairs never mismatch: push/pop through a per-depth bit, start/end
  // through kRecordedRangeBit in the id handed to the caller. They return what
  // NVTX returns to its caller (the depth; -1 for a pop with nothing open).
  // A dropped open is counted, and so is its close, which is not recorded
  // either (pairs stay whole): kDroppedRangeBit in a start's handle.
  static constexpr uint64_t kRecordedRangeBit = uint64_t{1} << 63;
  static constexpr uint64_t kDroppedRangeBit = uint64_t{1} << 62;
  RLSCOPE_HOT int RangePush(ThreadState* ts, uint32_t name, uint32_t domain, uint32_t category, uint64_t payload,
                            uint8_t flags) {
    const bool special = watching() && OnRangeOpen(ts, name, flags, payload, false, 0);
    const bool attempted = special || armed();
    const bool recorded =
        attempted && Record(ts, EventKind::kRangePush, name, domain, category, payload, flags, special);
    const int depth = ts->depth++;
    ts->SetRecorded(depth, recorded);
    ts->SetDropped(depth, attempted && !recorded);
    return depth;
  }
  RLSCOPE_HOT int RangePop(ThreadState* ts, uint32_t domain) {
    if (ts->depth == 0) return -1;  // nothing open on this thread (or opened before it was tracked)
    const int depth = --ts->depth;
    const bool special = watching() && OnRangeClose(ts, false, 0);
    const bool pushed = ts->WasRecorded(depth, armed());
    if (special || pushed) {
      Record(ts, EventKind::kRangePop, 0, domain, 0, 0, kFlagNone, /*privileged=*/true);
    } else if (ts->WasDropped(depth)) {
      overflow_dropped_.fetch_add(1, std::memory_order_relaxed);  // the close of a dropped open
    }
    return depth;
  }
  RLSCOPE_HOT uint64_t RangeStart(ThreadState* ts, uint32_t name, uint32_t domain, uint32_t category,
                                  uint64_t payload, uint8_t flags) {
    // Disarmed and not watching: no id is needed (NVTX's own no-op returns 0
    // too), so the shared counter is not touched.
    if (!watching() && !armed()) return 0;
    const uint64_t id = NextRangeId();
    const bool special = watching() && OnRangeOpen(ts, name, flags, payload, true, id);
    if (!special && !armed()) return id;
    // Dropped: the handle says so, and its end is not recorded either.
    if (!Record(ts, EventKind::kRangeStart, name, domain, category, id, flags, special)) return id | kDroppedRangeBit;
    return id | kRecordedRangeBit;
  }
  // `handle` is what RangeStart returned.
  RLSCOPE_HOT void RangeEnd(ThreadState* ts, uint32_t domain, uint64_t handle) {
    const uint64_t id = handle & ~(kRecordedRangeBit | kDroppedRangeBit);
    const bool special = watching() && OnRangeClose(ts, true, id);
    if (special || (handle & kRecordedRangeBit) != 0) {
      Record(ts, EventKind::kRangeEnd, 0, domain, 0, id, kFlagNone, /*privileged=*/true);
    } else if ((handle & kDroppedRangeBit) != 0) {
      overflow_dropped_.fetch_add(1, std::memory_order_relaxed);  // the end of a dropped start
    }
  }

  // Records one event into `ts`, the calling thread's state. Returns false
  // when dropped (ring full, counted unless `counted` is false: a cost
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
    if (!ts->buffer->TryPush(r, privileged, counted)) return false;
    // Every half ring, the flush thread is woken rather than left to its
    // interval: one eventfd write per (ring / 2) records.
    if (__builtin_expect(ts->buffer->AtHalfMark(), 0)) Wake();
    return true;
  }

  // In-place cost sampling: now, on the clock a CostSampler times with
  // (event ticks; a thread's own virtual ns under test costs).
  uint64_t SampleClock(const ThreadState* ts) const {
    return __builtin_expect(test_clock_ != nullptr, 0) ? static_cast<uint64_t>(ts->virtual_own_ns)
                                                       : ReadTicks(clock_source_);
  }
  // Calls between timed ones on a thread (correction.sample_every; 0 off).
  uint32_t sample_every() const { return sample_every_.load(std::memory_order_relaxed); }
  // After a timed call that recorded one event (the ring's last): its cost,
  // `ticks` less what timing it took (the clock read's own, measured at
  // start-up), as a kCostSample event right after it.
  void RecordCostSample(ThreadState* ts, uint64_t ticks) {
    const uint8_t kind = ts->buffer->last().kind, flags = ts->buffer->last().flags;
    const uint64_t timer = timer_ticks_.load(std::memory_order_relaxed);
    ticks = ticks > timer ? ticks - timer : 0;
    // Uncounted: the process's events (Stats, the ring's written()) are what
    // it recorded, not these; in a scratch scope they are not shipped at all.
    Record(ts, EventKind::kCostSample, 0, 0, kind, ticks, flags, /*privileged=*/false, /*counted=*/false);
  }

  // The calling thread's state when it has one or may get one now: while
  // armed or watching it registers the thread; disarmed it only returns an
  // existing state (so depths stay right) and never allocates.
  ThreadState* TrackedThread() {
    if (armed() || watching()) return CurrentThread();
    return tls_state_;
  }

  // The calling thread's state or null, never registering: for the CPU
  // sampler's signal handler (an initial-exec TLS read is async-signal-safe).
  static ThreadState* SignalThreadState() { return tls_state_; }

  // The calling thread's state; registers the thread on its first event.
  // nullptr when the per-process buffer budget is used up (counted as drops).
  ThreadState* CurrentThread() {
    ThreadState* ts = tls_state_;
    return ts != nullptr ? ts : RegisterThread();
  }

  uint32_t Intern(std::string_view s) { return strings_.Intern(s); }
  uint64_t NextRangeId() {
    // Relaxed: ids only need to be unique, not ordered with anything.
    return next_range_id_.fetch_add(1, std::memory_order_relaxed);
  }

  void NameThread(int64_t tid, const std::string& name);
  void NameCategory(uint32_t domain, uint32_t category, const std::string& name);

  // Opens/closes the capture of the api, nvtx:<name> and cudaProfilerApi
  // triggers (no effect on the controller trigger's windows).
  void SetCaptureActive(bool active);
  Trigger trigger() const { return trigger_; }
  // Wakes the flush thread and waits until what was recorded before the call
  // was sent (or timeout). Returns true when done in time.
  bool Flush(int timeout_ms);
  // Final flush, goodbye, socket close (bounded by flush.exit_timeout_ms).
  void Shutdown();
  void Stats(rlscope_stats_t* out);
  void SamplerStats(rlscope_sampler_stats_t* out) const;
  // pthread_atfork child handler: the child gets no collector (see .cc).
  static void DetachInForkedChild();
  // pthread_atfork parent handler: one line at the first fork, and the count
  // as the identity label forked_children (re-sent with the Hello).
  void CountFork();

  // Adds or replaces an identity label; the flush thread re-sends Hello.
  void SetLabel(const std::string& key, const std::string& value);
  // Sets a calibrated cost (ns per event; keys in wire.h Hello::costs); the
  // flush thread re-sends Hello. Used by rlscope_ray's Python calibration.
  // Ignored under test costs (test_clock.h), which are fixed.
  void SetCost(const std::string& key, double ns);
  double Cost(const std::string& key) {  // -1 when unknown
    std::lock_guard<std::mutex> lock(meta_mu_);
    auto it = costs_.find(key);
    return it == costs_.end() ? -1 : it->second;
  }
  // Measures this collector's own cost per recorded event, per record kind,
  // on the calling thread: back to back through the recording code an NVTX
  // handler runs, into a scratch buffer that is never shipped; best of
  // several rounds, minus an empty loop. About a millisecond. Sets the
  // "push", "pop", "start", "end", "mark" costs and returns them. Under test
  // costs (test_clock.h) it measures nothing and returns those.
  std::map<std::string, double> Calibrate();
  // On: the calling thread records into a scratch ring of its own ring's
  // size (at least 65,536 records) that the flush thread never reads, until
  // off: a calibration loop (rlscope_ray/calibration.py) pays recording's
  // real costs, cost samples included, and ships nothing. Off restores the
  // thread's ring; what the scratch ring holds is discarded. Returns false
  // when the thread has no state (over the buffer budget) or is already
  // in (on) or out (off) of a scope, or is disarmed and has never recorded
  // (it records nothing then).
  bool ScratchScope(bool on);
  // The test clock (test_clock.h): ns it advanced so far; -1 without one.
  int64_t TestClockNs() const { return test_clock_ != nullptr ? test_clock_->Now() : -1; }
  // Makes this process the run's controller, unless it is one or the
  // aggregator already named another (then false): the process whose steps
  // drive the run claims the role itself (rlscope_ray.step, the verl
  // plugin), so no one has to mark it. Re-sends Hello with the role and its
  // own config's keys; the aggregator takes the first claimant.
  bool ClaimController();
  // The number of the next step range that carries none (verl's
  // global_steps, a resumed run's 201). Announced to the aggregator with the
  // step (a `rlscope.step_number` mark) when it is not the number it would
  // derive itself. n >= 0.
  void SetNextStep(int64_t n);
  // Queues the controller's list of processes that should connect.
  void ReportExpected(std::vector<std::map<std::string, std::string>> processes);

  // GPU activity (gpu_activity.cc). Records come from CUPTI's buffer
  // callbacks, off the application's hot path; they are queued (bounded by
  // buffers.max_mb, overflow counted as drops) and shipped by the flush thread.
  void AddGpuRecords(std::vector<GpuRecord>&& records);
  // True when this process was armed at some time in [begin_ns, end_ns]
  // (collector clock): GPU records outside every window are dropped.
  bool WasArmedDuring(int64_t begin_ns, int64_t end_ns) const;
  // Called on the flush thread at each window close and at exit, before the
  // final drain, so CUPTI's buffered records make it into the batches.
  void SetGpuFlushHook(void (*hook)());

  // This process's own config. Its run keys (config.h) are the run's only
  // once the aggregator sent the run's config: use selected() and the steps
  // below, never config().steps/ranks.
  const Config& config() const { return config_; }
  // This rank/role is profiled under the run's config (an unselected one
  // never arms); its own config's until the aggregator sends the run's.
  bool selected() const { return selected_.load(std::memory_order_relaxed); }

 private:
  // `own_keys`: the keys RLSCOPE_CONFIG set (a run whose config decides
  // otherwise on one of them says so; a controller sends them to the
  // aggregator, where its run keys become the run's).
  Collector(Config config, KeySet own_keys, std::string endpoint, wire::Identity identity,
            std::unique_ptr<TestClock> test_clock);
  ThreadState* RegisterThread();
  void UpdateArmed();
  // Slow paths of the watching processes (see watching_). Return true when
  // the range opens/closes a step or a trigger range (it is then recorded
  // whatever the arming).
  bool OnRangeOpen(ThreadState* ts, uint32_t name, uint8_t flags, uint64_t payload, bool async,
                   uint64_t range_id);
  bool OnRangeClose(ThreadState* ts, bool async, uint64_t range_id);
  // Wakes the flush thread (an eventfd write): flush requests, shutdown, and
  // the controller's step edges, which workers wait for.
  void Wake();
  void ApplyControl(const wire::Control& control);
  // Adopts the run keys of the run's config (Control.run_config): the steps
  // that arm a controller, whether this process is selected. Flush thread.
  void AdoptRunConfig(const std::string& yaml);
  // Control.role "worker": records as a worker from now on. Flush thread.
  void BecomeWorker();
  bool is_controller() const { return is_controller_.load(std::memory_order_relaxed); }
  // Whether the controller records step `n` / before step `n` (steps.h).
  bool StepArmedDuring(int64_t n) const;
  bool StepArmedBefore(int64_t n) const;

  struct ThreadEntry {
    std::unique_ptr<ThreadBuffer> buffer;
    std::unique_ptr<ThreadState> state;
    std::atomic<bool> exited{false};  // set by the thread's TLS destructor
    bool name_sent = false;
    SampledThread sampled;  // its CPU-time timer and sample ring (flush thread)
  };

  // The flush thread (flush_thread.cc); all but FlushLoop are its steps.
  void FlushLoop();
  // Sends Hello (first time, after SetLabel, and again when an aggregator
  // asks: Control.hello) and a pending Expected list; once a hello is queued
  // the transport may send batches (after a Control.hello: the spool's
  // replay, led by MakePreamble).
  void SendControl();
  // A batch with every name this collector has shipped (strings, threads,
  // categories): an aggregator that restarted knows none of them, and the
  // spool's replay uses them.
  std::string MakePreamble();
  // The Hello it sends: identity, selection, costs (defined in collector.cc,
  // beside SetLabel and SetCost). Caller holds meta_mu_.
  wire::Hello MakeHello() const;
  // One flush: ReconcileSampling, Snapshot, the transport sends,
  // RetireExitedThreads.
  void DrainAndSend();
  // Brings every thread's CPU-time timer in line with the arming (on while
  // armed with cpu.sampling_hz > 0), setting the sampler up the first time;
  // says in the cpu_sampling label how it runs or why not. `stop`: exit,
  // every timer deleted.
  void ReconcileSampling(bool stop);
  // What this flush sends: the rings' sizes now, the queued GPU records, the
  // metadata those events need, the drop total, the ack owed.
  Outgoing Snapshot();
  // Names new since the last flush (strings, threads, categories) into *out.
  void CollectMetadata(const std::vector<ThreadEntry*>& entries, Metadata* out);
  // Frees the buffers of threads that exited and are fully drained.
  void RetireExitedThreads();
  // One stderr line when the aggregator has not answered for 5 s, and one
  // when drops start (`dropped`: the process's total so far).
  void SayTrouble(uint64_t dropped);

  static std::atomic<Collector*> instance_;
  // initial-exec: one load on the hot path (a dlopen'ed library may use a few
  // bytes of the static TLS surplus that glibc keeps for this); constinit:
  // no TLS wrapper call is needed to read it from another file.
  static constinit thread_local ThreadState* tls_state_ __attribute__((tls_model("initial-exec")));
  static thread_local bool tls_over_budget_;
  static thread_local bool tls_exiting_;  // set by the thread-exit hook: never re-register

  const Config config_;
  const std::unique_ptr<TestClock> test_clock_;  // test-only virtual costs; nullptr in production
  StringTable strings_;  // before the ids interned into it at construction
  const std::string endpoint_;
  const uint64_t session_;
  const ClockSource clock_source_;
  const int owner_pid_;
  const int64_t start_ns_;
  const KeySet own_keys_;  // the keys RLSCOPE_CONFIG set
  std::string hello_config_;  // Hello.config: a controller's own keys as YAML, "" for others (meta_mu_)
  std::atomic<bool> selected_;  // rank and role are profiled under the run's config (selected())
  // Starts as RLSCOPE_ROLE says; set by ClaimController; cleared when the
  // aggregator says another process is the run's controller (Control.role,
  // flush thread), which also sets demoted_ (no claim after that).
  std::atomic<bool> is_controller_;
  std::atomic<bool> demoted_{false};
  const Trigger trigger_;
  // Whether disarmed ranges are looked at (needs_names): a controller, or an
  // nvtx:<name> trigger. Set once more by ClaimController; relaxed: a range
  // opened while it flips is simply not a step.
  std::atomic<bool> watching_;
  bool watching() const { return watching_.load(std::memory_order_relaxed); }
  const uint32_t step_name_id_;     // interned "step"
  const uint32_t step_number_name_id_;  // interned "rlscope.step_number"
  const uint32_t trigger_name_id_;  // interned <name> of nvtx:<name>, 0 otherwise
  const int wake_fd_;               // eventfd; -1 when unavailable (then polls on the interval)

  mutable std::mutex arm_mu_;  // serialises UpdateArmed: the last edge wins, never a stale one;
                       // guards armed_intervals_, steps_
  IntSelection steps_;         // the run's `steps` (own config's until the run's arrives)
  std::string run_config_;     // the last run config adopted (flush thread)
  // Armed periods [begin, end] (end INT64_MAX while armed), newest last;
  // bounded: the oldest are forgotten.
  std::vector<std::pair<int64_t, int64_t>> armed_intervals_;
  std::atomic<bool> armed_{false};
  std::atomic<uint32_t> sample_every_{0};  // correction.sample_every (0 when correction is off)
  std::atomic<int64_t> sampling_hz_{0};     // the run's cpu.sampling_hz (AdoptRunConfig)
  std::atomic<uint64_t> timer_ticks_{0};   // a clock read's own cost, ticks (Calibrate; 0 under test costs)
  std::atomic<bool> capture_active_{false};  // api / nvtx / cudaProfilerApi triggers
  std::atomic<bool> window_open_{false};     // controller trigger: inside a selected step
  std::atomic<int64_t> next_step_{1};        // controller: number of the next unnumbered step
  std::atomic<int64_t> derived_next_step_{1};  // what the aggregator numbers it without an announcement
  std::atomic<bool> in_step_{false};         // controller: a step range is open
  std::atomic<uint64_t> step_range_id_{0};     // controller's open start/end "step" range
  std::atomic<uint64_t> trigger_range_id_{0};  // open start/end trigger range
  std::atomic<uint64_t> next_range_id_{1};
  // Events of threads over budget, and closes not recorded because their
  // open was dropped.
  std::atomic<uint64_t> overflow_dropped_{0};
  std::atomic<uint64_t> forks_{0};             // children forked (CountFork)
  // Flush thread only: a Control was received; SayTrouble's lines were said;
  // an aggregator asked for a hello (Control.hello: it restarted).
  bool heard_from_aggregator_ = false, said_unreachable_ = false, said_dropping_ = false;
  bool rehello_ = false;
  bool refused_ = false;  // the aggregator refused its hello (wrong secret): sends nothing more
  uint64_t hellos_again_ = 0;  // times it said hello again (a restarted aggregator)
  const std::string secret_;   // RLSCOPE_SECRET: Hello.secret

  std::mutex registry_mu_;  // guards threads_, bytes_reserved_
  std::vector<std::unique_ptr<ThreadEntry>> threads_;
  size_t bytes_reserved_ = 0;
  uint64_t retired_dropped_ = 0;   // drops of threads already removed
  uint64_t retired_written_ = 0;   // records of threads already removed

  std::mutex meta_mu_;  // guards identity_, the hello/expected flags, thread_names_, categories_
  wire::Identity identity_;
  uint64_t hello_gen_ = 1, hello_sent_gen_ = 0;        // Hello (re)send when they differ
  uint64_t expected_gen_ = 0, expected_sent_gen_ = 0;  // likewise for Expected
  std::vector<std::map<std::string, std::string>> expected_;
  std::map<int64_t, std::string> thread_names_;  // explicit (NVTX) names
  std::vector<int64_t> renamed_threads_;
  std::vector<wire::CategoryName> categories_;
  size_t categories_sent_ = 0;
  std::map<std::string, double> costs_;  // calibrated ns per event (wire.h Hello::costs)

  // Flush thread control.
  std::mutex flush_mu_;
  std::condition_variable flushed_cv_;
  bool stop_ = false;
  uint64_t flush_requests_ = 0;  // bumped by Flush()
  uint64_t flushes_done_ = 0;    // requests served, set by the flush thread
  std::thread flush_thread_;
  std::atomic<bool> shut_down_{false};

  std::mutex gpu_mu_;  // guards gpu_records_
  std::vector<GpuRecord> gpu_records_;
  std::atomic<uint64_t> gpu_dropped_{0};
  std::atomic<void (*)()> gpu_flush_hook_{nullptr};

  // CPU sampling (cpu_sampler.h): set up, timers and names on the flush thread.
  CpuSampler sampler_{this, clock_source_, test_clock_.get()};
  std::string sampling_label_;     // the cpu_sampling label last set (flush thread)
  bool sampling_off_for_good_ = false;  // could not be set up, or the host took its signal
  uint64_t samples_dropped_said_ = 0;
  uint64_t frames_unread_said_ = 0;  // the cpu_frames_unread label last set (flush thread)

  // Owned by the flush thread.
  int64_t window_close_at_ns_ = 0;  // a closed window disarms at this time (slack), 0 = none
  uint64_t pending_ack_ = 0;        // flush token to acknowledge (ApplyControl); 0 = none
  TickConverter converter_;
  uint32_t next_string_id_ = 1;     // strings_ ids below it were handed to the transport
  // The socket side (its send counters are read by Stats on any thread).
  Transport transport_{config_, session_, wake_fd_};

  friend struct ThreadExitHook;
  friend class CollectorTestPeer;
};

// Times one recording call in Collector::sample_every() on the calling
// thread, from the handler's entry (its thread state known) to its exit, on
// the event clock, and records the cost as a kCostSample right after the
// event the call recorded (correction.h, measured costs): the real hot path,
// its real buffers and wake-ups. A timed call that recorded no event, or
// more than one, or that a CPU sampler's signal landed in, is no sample (a
// disarmed thread so pays one decrement per call and two clock reads per N).
class CostSampler {
 public:
  CostSampler(Collector* c, ThreadState* ts) : c_(c), ts_(ts) {
    if (__builtin_expect(--ts->sample_countdown != 0, 1)) return;
    const uint32_t every = c->sample_every();
    if (every == 0) {  // off: looked at again after 2^32 calls
      ts->sample_countdown = UINT32_MAX;
      return;
    }
    timed_ = true;
    pushed_ = ts->buffer->pushed();
    signals_ = ts->signals.load(std::memory_order_relaxed);  // relaxed: this thread's own handler writes it
    begin_ = c->SampleClock(ts);
  }
  ~CostSampler() {
    if (__builtin_expect(timed_, 0)) Finish();
  }
  CostSampler(const CostSampler&) = delete;
  CostSampler& operator=(const CostSampler&) = delete;

 private:
  void Finish() {
    const uint64_t end = c_->SampleClock(ts_);
    // The next timed call: 1 to 2N-1 calls on (N on average), not every
    // N-th, which would time the same kind of a regular pattern (a pop,
    // never a push, in a loop of pairs with N even).
    uint32_t x = ts_->sample_rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    ts_->sample_rng = x;
    const uint32_t every = c_->sample_every();
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

}  // namespace rlscope
