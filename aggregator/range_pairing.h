// Range pairing: a process's range events matched into spans. Push/pop
// ranges nest per (thread, domain); start/end ranges are matched by id and
// may end on another thread, in either arrival order (an end whose start is
// still in flight waits for it). Closed spans go to the process's
// SpanStore. The controller's "step" ranges are numbered as they open (the
// number a "rlscope.step_number" mark announced, else the payload, else 1,
// 2, 3...) and reported as step edges. Events of rlscope_ray's start-up
// calibration ("rlscope.calibration") are matched as usual, then left out.
// One of ProcessTimeline's parts (timeline.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aggregator/records.h"
#include "aggregator/span_store.h"
#include "native/wire.h"

namespace rlscope {

class RangePairing {
 public:
  explicit RangePairing(SpanStore* done) : done_(done) {}

  // The ids of the names pairing knows ("step", the calibration's, the
  // step number's), from a batch's strings.
  void NoteNames(const wire::Batch& batch);
  // Whether `name` is the start-up calibration's.
  bool IsCalibration(uint32_t name) const { return calibration_name_ != 0 && name == calibration_name_; }
  // A resumed run's controller: its "step" ranges that began before
  // `done_before_ns` were written already; the next unnumbered is `next_number`.
  void ContinueSteps(int64_t next_number, int64_t done_before_ns) {
    next_auto_step_ = next_number;
    steps_done_before_ns_ = done_before_ns;
  }

  // One range event on thread `tid`. `edges`: the run's controller's step
  // edges, else nullptr (its "step" ranges are not numbered). Pop and end
  // return whether the event belongs to the calibration (a pop closing its
  // range, or `calibration`, the event's own name being it).
  void OnPush(int64_t tid, const wire::Event& e, StepEdges* edges);
  bool OnPop(int64_t tid, const wire::Event& e, bool calibration, StepEdges* edges);
  void OnStart(int64_t tid, const wire::Event& e, StepEdges* edges);
  bool OnEnd(int64_t tid, const wire::Event& e, bool calibration, StepEdges* edges);
  // A mark that announces the number of the step range to come: taken
  // (true), or not such a mark (false: an instant).
  bool TakeStepNumber(const wire::Event& e);

  // The spans still open that began before `end_ns`, marked open and ending there.
  void AddOpen(int64_t end_ns, std::vector<Span>* spans) const;
  size_t open_count() const { return open_async_.size() + stacks_.size(); }
  // The earliest begin of a span still open (INT64_MAX: none).
  int64_t EarliestOpenNs() const;
  // Ends still waiting for their start before `ns` are unmatched (dropped,
  // or recorded before a window): counted and forgotten.
  void DiscardBefore(int64_t ns);
  // The process said goodbye: every end still waiting is unmatched.
  void Bye();
  uint64_t unmatched() const { return unmatched_; }  // pops on an empty stack, ends of unknown ids

 private:
  // Numbers a controller's "step" range as it opens, and reports it.
  void Open(Span& span, bool has_payload, StepEdges* edges);
  void Close(Span span, StepEdges* edges);

  SpanStore* done_;
  std::map<std::pair<int64_t, uint32_t>, std::vector<Span>> stacks_;      // (tid, domain)
  std::unordered_map<uint64_t, Span> open_async_;                         // by range id
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> early_ends_;  // id -> (ts, tid)
  uint64_t unmatched_ = 0;
  uint32_t step_name_id_ = 0;      // the id of "step" in this process, once known
  uint32_t calibration_name_ = 0;  // the id of "rlscope.calibration"
  uint32_t step_number_name_ = 0;  // the id of "rlscope.step_number": numbers the next step, not an instant
  int64_t announced_step_ = -1;    // the number it announced, until that step opens
  int64_t next_auto_step_ = 1;
  int64_t steps_done_before_ns_ = INT64_MIN;  // ContinueSteps
};

}  // namespace rlscope
