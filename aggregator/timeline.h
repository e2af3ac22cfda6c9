// One collector's events turned into spans and instants (records.h), on its
// own clock, with the names and identity it sent.
//
// Pure data structure: fed decoded wire batches in arrival order, no
// sockets, no threads. A facade over parts with one job each: the identity
// and names (process_names.h), range pairing (range_pairing.h) into the
// completed spans (span_store.h), the stores of every other record
// (record_stores.h); here, what a batch says of the process's progress
// (watermark, drops, acks, goodbye) and which part each event goes to. Its
// clock against the aggregator's is a value the aggregator sets (SetClock),
// fitting it from the probes the batches carry (clock_fit.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/process_names.h"
#include "aggregator/process_view.h"
#include "aggregator/range_pairing.h"
#include "aggregator/record_stores.h"
#include "aggregator/records.h"
#include "aggregator/span_store.h"
#include "native/wire.h"

namespace rlscope {

class ProcessTimeline {
 public:
  explicit ProcessTimeline(wire::Hello hello)
      : names_(std::make_shared<ProcessNames>(std::move(hello))), pairing_(&spans_) {}
  // Its parts point at each other: a timeline stays where it was made.
  ProcessTimeline(const ProcessTimeline&) = delete;
  ProcessTimeline& operator=(const ProcessTimeline&) = delete;

  // Appends a batch (all but its clock probes). With `edges` (the run's
  // controller), its "step" ranges are numbered when they open (payload,
  // else 1, 2, 3...) and reported.
  void Add(const wire::Batch& batch, StepEdges* edges);
  void Bye(const wire::Bye& bye);
  // A hello that arrives after the process's first batch replaces the
  // placeholder identity it was filed under.
  void Identify(const wire::Hello& hello) { Names().Identify(hello); }
  uint64_t truncated_strings() const { return names_->truncated_strings(); }
  // What a step cut now keeps of the process (process_view.h).
  ProcessView View() const;
  // A resumed run's controller (Aggregator::Resume): its "step" ranges that
  // began before `done_before_ns` (its clock) were written already and are
  // not steps again; the next unnumbered one is `next_number`.
  void ContinueSteps(int64_t next_number, int64_t done_before_ns) {
    pairing_.ContinueSteps(next_number, done_before_ns);
  }

  // Completed spans and instants overlapping [begin, end), plus still-open
  // spans that began before `end` (marked open), appended to the outputs.
  // The completed spans come thread by thread (span_store.h). With
  // `second_core`, a large output's fresh pages are mapped by two threads
  // (prefault.h).
  void Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, std::vector<Instant>* instants,
           bool second_core = false) const;
  // GPU records in the step: CPU-side ones (API calls, syncs, overhead)
  // overlapping [begin, end); device-side ones (kernels, copies, sets) whose
  // launching API call began in it, or, launch unknown, that overlap it.
  void CutGpu(int64_t begin_ns, int64_t end_ns, std::vector<GpuRecord>* out) const {
    stores_.CutGpu(begin_ns, end_ns, out);
  }
  // Every recorded event in [begin, end], per thread, in time order
  // (the step's closing event paid its cost inside the step).
  void CutCosts(int64_t begin_ns, int64_t end_ns, std::map<int64_t, std::vector<CostMark>>* out) const {
    stores_.CutCosts(begin_ns, end_ns, out);
  }
  // The cost samples recorded in [begin, end], all threads.
  void CutSamples(int64_t begin_ns, int64_t end_ns, std::vector<CostSample>* out) const {
    stores_.CutSamples(begin_ns, end_ns, out);
  }
  // The CPU samples (attribution.h) recorded in [begin, end), all threads.
  void CutCpuSamples(int64_t begin_ns, int64_t end_ns, std::vector<CpuSample>* out) const {
    stores_.CutCpuSamples(begin_ns, end_ns, out);
  }
  // Off-CPU samples in [begin, end); process CPU points in it and the
  // nearest one either side (for interpolation at the edges).
  void CutOffCpu(int64_t begin_ns, int64_t end_ns, std::vector<OffCpuSample>* out) const {
    stores_.CutOffCpu(begin_ns, end_ns, out);
  }
  void CutProcessCpu(int64_t begin_ns, int64_t end_ns, std::vector<ProcessCpuPoint>* out) const {
    stores_.CutProcessCpu(begin_ns, end_ns, out);
  }
  // The recording threads' run-queue waits in [begin, end) (RecordStores).
  int64_t RunQueueWaitNs(int64_t begin_ns, int64_t end_ns) const { return stores_.RunQueueWaitNs(begin_ns, end_ns); }
  // Memory levels in the step: the level at `begin` (the last point at or
  // before it, when there is one) and each point after it up to `end`.
  // Resident memory, and the GPU memory allocated per device (device memory
  // only; 0 at `begin` when its first allocation came after; a device with
  // none yet is absent). None for a process gone before `begin`.
  void CutMemory(int64_t begin_ns, int64_t end_ns, std::vector<MemoryPoint>* rss,
                 std::map<uint32_t, std::vector<MemoryPoint>>* gpu_allocated) const {
    stores_.CutMemory(begin_ns, end_ns, said_bye_, rss, gpu_allocated);
  }
  uint64_t cpu_samples_received() const { return stores_.cpu_samples_received(); }
  // Every cost sample received so far, per kind.
  const KindSamples& sample_totals() const { return stores_.sample_totals(); }
  KindCosts usual_costs() const { return stores_.UsualCosts(); }  // RecordStores::UsualCosts
  const HandlerStats& cpu_handler() const { return stores_.cpu_handler(); }
  // Measured calls interrupted (RecordStores::kInterruptedSamplePs): left out of the costs, counted.
  uint64_t interrupted_samples() const { return stores_.interrupted_samples(); }
  // CPU time the collector's own flush thread used in [begin, end] (its
  // clock), from the running totals its batches carry (Batch.profiler_cpu_ns),
  // interpolated; -1 when it sent none.
  int64_t ProfilerCpuNs(int64_t begin_ns, int64_t end_ns) const { return stores_.ProfilerCpuNs(begin_ns, end_ns); }
  bool RunsOnRecordingThreads() const { return stores_.RunsOnRecordingThreads(); }
  // How much of [begin, end] (its clock) this process did not record while
  // it lived (from its start to its last flush once it said goodbye), by the
  // arming edges it reported (wire.h Batch::arming; before its first edge it
  // was not armed): -1 when it reports none (a trigger other than the
  // controller's, or an older collector) or its first batch did not come
  // here (a restarted aggregator: the edge that armed it is not known).
  int64_t UnarmedNs(int64_t begin_ns, int64_t end_ns) const {
    return stores_.UnarmedNs(begin_ns, end_ns, names_->hello().start_ns, said_bye_ ? watermark_ns_ : INT64_MAX);
  }
  // Whether it recorded for some of [begin, end] (its clock) while it lived:
  // 1, 0, or -1 where UnarmedNs is -1.
  int ArmedDuring(int64_t begin_ns, int64_t end_ns) const {
    return stores_.ArmedDuring(begin_ns, end_ns, names_->hello().start_ns, said_bye_ ? watermark_ns_ : INT64_MAX);
  }
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

  const wire::Hello& hello() const { return names_->hello(); }
  const wire::Identity& identity() const { return names_->identity(); }
  // The role a process claims, and whether the aggregator took it as the
  // run's controller: the first to claim it (a child that inherited
  // RLSCOPE_ROLE=controller is not), whose steps every process is cut to.
  bool claims_controller() const { return identity().role == "controller"; }
  bool is_controller() const { return controller_; }
  void set_controller() { controller_ = true; }
  const char* String(uint32_t id) const { return names_->String(id); }  // "" for 0 or unknown
  std::string ThreadName(int64_t tid) const { return names_->ThreadName(tid); }
  std::string CategoryName(uint32_t domain, uint32_t category) const { return names_->CategoryName(domain, category); }
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
  // Its clock held a step through the whole grace and never came good
  // (clocks.h): later steps do not wait for it (they are marked) until its
  // bound improves. waived_bound_ns: its bound then (-1: no estimate).
  bool clock_waived() const { return clock_waived_; }
  int64_t waived_bound_ns() const { return waived_bound_ns_; }
  void WaiveClock(int64_t bound_ns) { clock_waived_ = true, waived_bound_ns_ = bound_ns; }
  void UnwaiveClock() { clock_waived_ = false; }
  uint64_t events_received() const {
    return events_received_;
  }  // recorded events and GPU records (not cost or CPU samples)
  uint64_t dropped() const { return dropped_; }
  uint64_t unmatched() const { return pairing_.unmatched(); }
  uint64_t last_ack() const { return last_ack_; }
  // This collector's clock against the aggregator's, as the aggregator last
  // fitted it (clock_fit.h). Times in the timeline stay on the collector's
  // clock; the aggregator converts.
  const ClockEstimate& clock() const { return clock_; }
  void SetClock(const ClockEstimate& clock) { clock_ = clock; }
  // Aggregator time of the last message from this process (the daemon's clock).
  int64_t last_seen_ns() const { return last_seen_ns_; }
  void Touch(int64_t now_ns) { last_seen_ns_ = now_ns; }
  const std::map<int64_t, std::string>& thread_names() const { return names_->thread_names(); }
  size_t buffered_spans() const { return spans_.size() + stores_.buffered(); }

 private:
  // One thread's events: each to the part that keeps its kind, and its cost
  // mark (what recording it cost the thread) in time order.
  void AddThreadEvents(const wire::ThreadEvents& block, StepEdges* edges);
  // One event; whether it belongs to the start-up calibration (left out of
  // the cost marks).
  bool AddEvent(int64_t tid, const wire::Event& e, bool after_calibration, StepEdges* edges);

  // Its names, before a change copied when a step's view holds them.
  ProcessNames& Names();

  std::shared_ptr<ProcessNames> names_;  // identity and names (shared with steps' views)
  SpanStore spans_;                      // completed spans
  RangePairing pairing_;                 // range events into spans_ (declared after it)
  RecordStores stores_;                  // everything else
  int64_t watermark_ns_ = 0;
  uint64_t events_received_ = 0;
  uint64_t dropped_ = 0;
  uint64_t last_ack_ = 0;  // highest flush-barrier token acknowledged
  int64_t last_seen_ns_ = 0;
  int64_t skip_before_ns_ = INT64_MIN;  // SkipBefore
  ClockEstimate clock_;
  bool said_bye_ = false;
  uint64_t events_recorded_ = 0;
  bool lost_ = false;
  bool clock_waived_ = false;
  int64_t waived_bound_ns_ = -1;
  bool controller_ = false;
};

// ProcessLabel and ProcessName (process_view.h) of the process as it is now.
inline std::string ProcessLabel(const ProcessTimeline& p) { return ProcessLabel(p.View()); }
inline std::string ProcessName(const ProcessTimeline& p) { return ProcessName(p.View()); }

}  // namespace rlscope
