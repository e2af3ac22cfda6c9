// One collector's events turned into spans and instants (records.h), on its
// own clock, with the names and identity it sent.
//
// Pure data structure: fed decoded wire batches in arrival order (one
// handler per event kind), no sockets, no threads. Push/pop ranges nest per
// (thread, domain); start/end ranges are matched by id and may end on
// another thread, in either arrival order. Its clock against the
// aggregator's is a value the aggregator sets (SetClock), fitting it from
// the probes the batches carry (clock_fit.h).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aggregator/chunk_queue.h"
#include "aggregator/records.h"
#include "native/wire.h"

namespace rlscope {

class ProcessTimeline {
 public:
  // Longest string kept from the wire (names, labels, host): a longer one is
  // cut there and counted (truncated_strings), so a hostile or broken
  // collector cannot hold megabytes per name until the run ends.
  static constexpr size_t kMaxStringBytes = 4096;
  static constexpr size_t kMaxArmEdges = 4096;  // two per selected step: thousands of steps
  static constexpr size_t kMaxDevices = 64;     // GPU memory totals kept for at most this many devices
  explicit ProcessTimeline(wire::Hello hello) : hello_(std::move(hello)) { BoundIdentity(); }

  // Appends a batch (all but its clock probes). With `edges` (the run's
  // controller), its "step" ranges are numbered when they open (payload,
  // else 1, 2, 3...) and reported.
  void Add(const wire::Batch& batch, StepEdges* edges);
  void Bye(const wire::Bye& bye);
  // A hello that arrives after the process's first batch replaces the
  // placeholder identity it was filed under.
  void Identify(const wire::Hello& hello) {
    hello_ = hello;
    BoundIdentity();
  }
  uint64_t truncated_strings() const { return truncated_strings_; }
  // A resumed run's controller (Aggregator::Resume): its "step" ranges that
  // began before `done_before_ns` (its clock) were written already and are
  // not steps again; the next unnumbered one is `next_number`.
  void ContinueSteps(int64_t next_number, int64_t done_before_ns) {
    next_auto_step_ = next_number;
    steps_done_before_ns_ = done_before_ns;
  }

  // Completed spans and instants overlapping [begin, end), plus still-open
  // spans that began before `end` (marked open), appended to the outputs.
  // The completed spans come thread by thread (threads in the order they
  // first closed one, each's in completion order), so a step's spans need
  // no merge of its batches' runs to be put in thread order (SortSlice).
  // With `second_core`, a large output's fresh pages are mapped by two
  // threads (prefault.h).
  void Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, std::vector<Instant>* instants,
           bool second_core = false) const;
  // GPU records in the step: CPU-side ones (API calls, syncs, overhead)
  // overlapping [begin, end); device-side ones (kernels, copies, sets) whose
  // launching API call began in it, or, launch unknown, that overlap it.
  void CutGpu(int64_t begin_ns, int64_t end_ns, std::vector<GpuRecord>* out) const;
  // Every recorded event in [begin, end], per thread, in recording order
  // (the step's closing event paid its cost inside the step).
  void CutCosts(int64_t begin_ns, int64_t end_ns, std::map<int64_t, std::vector<CostMark>>* out) const;
  // The cost samples recorded in [begin, end], all threads.
  void CutSamples(int64_t begin_ns, int64_t end_ns, std::vector<CostSample>* out) const;
  // The CPU samples (attribution.h) recorded in [begin, end), all threads.
  void CutCpuSamples(int64_t begin_ns, int64_t end_ns, std::vector<CpuSample>* out) const;
  // Off-CPU samples in [begin, end); process CPU points in it and the
  // nearest one either side (for interpolation at the edges).
  void CutOffCpu(int64_t begin_ns, int64_t end_ns, std::vector<OffCpuSample>* out) const;
  void CutProcessCpu(int64_t begin_ns, int64_t end_ns, std::vector<ProcessCpuPoint>* out) const;
  // Memory levels in the step: the level at `begin` (the last point at or
  // before it, when there is one) and each point after it up to `end`.
  // Resident memory, and the GPU memory allocated per device (device memory
  // only; 0 at `begin` when its first allocation came after; a device with
  // none yet is absent). None for a process gone before `begin`.
  void CutMemory(int64_t begin_ns, int64_t end_ns, std::vector<MemoryPoint>* rss,
                 std::map<uint32_t, std::vector<MemoryPoint>>* gpu_allocated) const;
  uint64_t cpu_samples_received() const { return cpu_samples_received_; }
  // Every cost sample received so far, per kind.
  const KindSamples& sample_totals() const { return sample_totals_; }
  // A measured call longer than this was interrupted (the thread was
  // preempted, or took a signal, inside it): not the profiler's cost, left
  // out of the costs and counted. Page faults, a wake-up's syscall and cache
  // misses stay far below it.
  static constexpr uint64_t kInterruptedSamplePs = 20'000'000;  // 20 us
  uint64_t interrupted_samples() const { return interrupted_samples_; }
  // CPU time the collector's own flush thread used in [begin, end] (its
  // clock), from the running totals its batches carry (Batch.profiler_cpu_ns),
  // interpolated; -1 when it sent none.
  int64_t ProfilerCpuNs(int64_t begin_ns, int64_t end_ns) const;
  // How much of [begin, end] (its clock) this process did not record while
  // it lived (from its start to its last flush once it said goodbye), by the
  // arming edges it reported (wire.h Batch::arming; before its first edge it
  // was not armed): -1 when it reports none (a trigger other than the
  // controller's, or an older collector) or its first batch did not come
  // here (a restarted aggregator: the edge that armed it is not known).
  int64_t UnarmedNs(int64_t begin_ns, int64_t end_ns) const;
  // Forgets completed spans and instants that no step beginning at or after
  // `ns` can contain: those ending before `ns`, or at `ns` having begun earlier.
  void DiscardBefore(int64_t ns);
  // Where this collector may forget its spool up to after a step ending at
  // `end_ns` was written (collector clock): the latest time R <= end_ns such
  // that every range ending at or after R (or still open) began at or after
  // R, so a replay of the events from R on holds the open of every close in
  // it, and everything before R belongs to written steps.
  int64_t ReleasePoint(int64_t end_ns) const;
  // A resumed run: this process's events before `ns` (its ReleasePoint when
  // the earlier aggregator last released it) are in written steps; its
  // replay may start earlier (a message spans the point), and they are left
  // out rather than matched against opens it no longer has.
  void SkipBefore(int64_t ns) { skip_before_ns_ = ns; }

  const wire::Hello& hello() const { return hello_; }
  const wire::Identity& identity() const { return hello_.identity; }
  // The role a process claims, and whether the aggregator took it as the
  // run's controller: the first to claim it (a child that inherited
  // RLSCOPE_ROLE=controller is not), whose steps every process is cut to.
  bool claims_controller() const { return hello_.identity.role == "controller"; }
  bool is_controller() const { return controller_; }
  void set_controller() { controller_ = true; }
  const char* String(uint32_t id) const;  // "" for 0 or unknown
  std::string ThreadName(int64_t tid) const;
  std::string CategoryName(uint32_t domain, uint32_t category) const;
  int64_t watermark_ns() const { return watermark_ns_; }
  bool said_bye() const { return said_bye_; }
  // What the process said it recorded, in its goodbye (0 before one): with
  // events_received() and dropped(), every event is accounted for.
  uint64_t events_recorded() const { return events_recorded_; }
  // Gone without a goodbye (silent past AggregatorStats::kSilentAfterNs when
  // a step it had not flushed was written): later steps neither wait for it
  // nor show it, and its ranges still open end at its last flush.
  bool lost() const { return lost_; }
  void set_lost() { lost_ = true; }
  uint64_t events_received() const {
    return events_received_;
  }  // recorded events and GPU records (not cost or CPU samples)
  uint64_t dropped() const { return dropped_; }
  uint64_t unmatched() const { return unmatched_; }
  uint64_t last_ack() const { return last_ack_; }
  // This collector's clock against the aggregator's, as the aggregator last
  // fitted it (clock_fit.h). Times in the timeline stay on the collector's
  // clock; the aggregator converts.
  const ClockEstimate& clock() const { return clock_; }
  void SetClock(const ClockEstimate& clock) { clock_ = clock; }
  // Aggregator time of the last message from this process (the daemon's clock).
  int64_t last_seen_ns() const { return last_seen_ns_; }
  void Touch(int64_t now_ns) { last_seen_ns_ = now_ns; }
  const std::map<int64_t, std::string>& thread_names() const { return thread_names_; }
  size_t buffered_spans() const { return done_.size() + instants_.size() + gpu_.size(); }

 private:
  // Add, in parts: names, watermark, drops, acks and the flush thread's
  // CPU; GPU records; one thread's events, each applied by AddEvent, whose
  // handlers (one per event kind) say whether the event belongs to the
  // start-up calibration (left out of the cost marks).
  void AddNamesAndProgress(const wire::Batch& batch);
  void AddGpu(const wire::Batch& batch);
  void AddGpuMemory(const GpuRecord& g);  // a kMemory record: the device's running total
  void AddThreadEvents(const wire::ThreadEvents& block, StepEdges* steps);
  bool AddEvent(int64_t tid, const wire::Event& e, bool after_calibration, StepEdges* steps);
  void OnPush(int64_t tid, const wire::Event& e, StepEdges* steps);
  bool OnPop(int64_t tid, const wire::Event& e, bool calibration, StepEdges* steps);
  void OnStart(int64_t tid, const wire::Event& e, StepEdges* steps);
  bool OnEnd(int64_t tid, const wire::Event& e, bool calibration, StepEdges* steps);
  void OnCostSample(const wire::Event& e, bool after_calibration);
  void OnCpuSample(int64_t tid, const wire::Event& e);
  void OnOffCpu(const wire::Event& e);
  void OnMark(int64_t tid, const wire::Event& e);
  void Open(Span& span, bool has_payload, StepEdges* edges);
  void Close(Span span, StepEdges* edges);

  wire::Hello hello_;
  std::unordered_map<uint32_t, std::string> strings_;
  std::map<int64_t, std::string> thread_names_;
  std::map<std::pair<uint32_t, uint32_t>, std::string> categories_;
  std::map<std::pair<int64_t, uint32_t>, std::vector<Span>> stacks_;      // (tid, domain)
  std::unordered_map<uint64_t, Span> open_async_;                         // by range id
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> early_ends_;  // id -> (ts, tid)
  ChunkQueue<Span> done_;                                                 // completed, in completion order
  // The threads that closed what done_ holds (some may have none left in
  // it), in order of first sight, and how many of done_ each closed;
  // cleared when done_ empties.
  std::vector<int64_t> done_tids_;
  std::vector<size_t> done_counts_;
  size_t last_done_ = 0;  // done_tids_ index of the last span closed
  // done_tids_' index of `tid` (its size when absent), `hint` tried first.
  size_t DoneThread(int64_t tid, size_t hint) const;
  ChunkQueue<Instant> instants_;                        // in arrival order
  ChunkQueue<GpuRecord> gpu_;                           // in arrival order
  std::map<int64_t, ChunkQueue<CostMark>> cost_marks_;  // per thread, in recording order
  ChunkQueue<CostSample> cost_samples_;                 // in arrival order
  ChunkQueue<CpuSample> cpu_samples_;                   // in arrival order
  ChunkQueue<OffCpuSample> off_cpu_;                    // in arrival order (one flush thread: by time)
  std::deque<ProcessCpuPoint> process_cpu_;             // by time
  uint64_t cpu_samples_received_ = 0;
  KindSamples sample_totals_;
  uint64_t interrupted_samples_ = 0;
  std::deque<std::pair<int64_t, int64_t>> cpu_points_;         // (watermark, flush thread CPU so far)
  std::deque<MemoryPoint> rss_;                                // by time
  std::map<uint32_t, std::deque<MemoryPoint>> gpu_allocated_;  // per device, by time
  bool reports_arming_ = false;
  bool saw_first_batch_ = false;                    // its batch seq 0 came here (UnarmedNs)
  std::deque<wire::ArmEdge> arming_;                // by time; bounded (kMaxArmEdges), the oldest forgotten
  uint32_t calibration_name_ = 0;                   // id of "rlscope.calibration": those events are left out
  std::unordered_map<uint32_t, int64_t> launches_;  // correlation -> API call start
  int64_t watermark_ns_ = 0;
  int64_t next_auto_step_ = 1;
  int64_t steps_done_before_ns_ = INT64_MIN;  // ContinueSteps
  int64_t skip_before_ns_ = INT64_MIN;        // SkipBefore
  uint32_t step_name_id_ = 0;                 // the id of "step" in this process, once known
  uint32_t step_number_name_ = 0;             // the id of "rlscope.step_number": numbers the next step, not an instant
  int64_t announced_step_ = -1;               // the number it announced, until that step opens
  uint64_t events_received_ = 0;
  uint64_t dropped_ = 0;
  uint64_t unmatched_ = 0;  // pops on an empty stack, ends of unknown ids
  uint64_t last_ack_ = 0;   // highest flush-barrier token acknowledged
  int64_t last_seen_ns_ = 0;
  ClockEstimate clock_;
  bool said_bye_ = false;
  uint64_t events_recorded_ = 0;
  bool lost_ = false;
  uint64_t truncated_strings_ = 0;
  // Cuts `s` to kMaxStringBytes (counted); returns it.
  std::string Bounded(std::string s);
  void BoundIdentity();
  bool controller_ = false;
};

// The label a process's track gets in traces, also used in summaries: "host /
// name (role, rank R) / pid P", or for a Ray process "node IP [node id
// prefix] / actor class (rank R) / pid P".
std::string ProcessLabel(const ProcessTimeline& p);
// The process's name as outputs show it: its Ray actor's class once the
// collector learnt it (labels.actor_class), else the name it said hello
// with (its command line's; a Ray worker's title when it started, such as
// "ray::IDLE", before it became an actor).
std::string ProcessName(const ProcessTimeline& p);

}  // namespace rlscope
