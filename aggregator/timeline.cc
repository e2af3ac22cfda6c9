#include "aggregator/timeline.h"

#include <algorithm>
#include <memory>

#include "native/event.h"
#include "native/names.h"

namespace rlscope {

ProcessNames& ProcessTimeline::Names() {
  if (names_.use_count() > 1) names_ = std::make_shared<ProcessNames>(*names_);  // a step holds these
  return *names_;
}

ProcessView ProcessTimeline::View() const {
  return ProcessView(names_, clock_, controller_,
                     {events_received_, dropped_, pairing_.unmatched(), stores_.interrupted_samples(),
                      stores_.cpu_samples_received(), events_recorded_, said_bye_, lost_});
}

void ProcessTimeline::Add(const wire::Batch& batch, StepEdges* edges) {
  if (!batch.strings.empty() || !batch.thread_names.empty() || !batch.categories.empty()) Names().Add(batch);
  pairing_.NoteNames(batch);
  watermark_ns_ = std::max(watermark_ns_, batch.watermark_ns);
  dropped_ = std::max(dropped_, batch.dropped);
  last_ack_ = std::max(last_ack_, batch.ack);
  stores_.AddProgress(batch);
  stores_.AddGpu(batch, skip_before_ns_);
  events_received_ += batch.gpu.size();
  // Only the run's controller's "step" ranges are steps.
  StepEdges* steps = controller_ ? edges : nullptr;
  for (const auto& block : batch.threads) AddThreadEvents(block, steps);
}

void ProcessTimeline::AddThreadEvents(const wire::ThreadEvents& block, StepEdges* edges) {
  events_received_ += block.events.size();
  ChunkQueue<CostMark>& marks = stores_.MarksOf(block.tid);
  const size_t before = marks.size();
  bool samples = false;
  bool after_calibration = false;  // the event before was rlscope_ray's start-up calibration
  bool recording = false;           // the block holds an event the thread recorded (noted once)
  for (const auto& e : block.events) {
    if (e.ts_ns < skip_before_ns_) continue;  // a resumed run's replay: written already
    const bool calibration = AddEvent(block.tid, e, after_calibration, edges);
    if (e.kind == static_cast<uint8_t>(EventKind::kOffCpuSample) ||
        e.kind == static_cast<uint8_t>(EventKind::kProcessCpu)) {
      continue;  // the flush thread's looks at other threads: no cost to its own timeline
    } else if (e.kind == static_cast<uint8_t>(EventKind::kCpuSample)) {
      marks.push_back(CostMark{e.ts_ns, e.kind, e.flags, 0});
      samples = true;
    } else if (!calibration) {
      marks.push_back({e.ts_ns, e.kind, e.flags});
      if (!recording) stores_.NoteRecordingThread(block.tid);
      recording = true;
    }
    after_calibration = calibration;
  }
  // In time order (RecordStores::CutCosts searches it): a block's CPU
  // samples among its events, and a block that begins before the last one
  // ended (a sample taken after the flush thread read the event rings
  // comes a flush before events recorded just before it).
  if (samples || (before > 0 && before < marks.size() && marks[before].ts_ns < marks[before - 1].ts_ns)) {
    RecordStores::MergeMarksFrom(&marks, before);
  }
}

bool ProcessTimeline::AddEvent(int64_t tid, const wire::Event& e, bool after_calibration, StepEdges* edges) {
  const bool calibration = pairing_.IsCalibration(e.name);
  switch (static_cast<EventKind>(e.kind)) {
    case EventKind::kRangePush: pairing_.OnPush(tid, e, edges); break;
    case EventKind::kRangePop: return pairing_.OnPop(tid, e, calibration, edges);
    case EventKind::kRangeStart: pairing_.OnStart(tid, e, edges); break;
    case EventKind::kRangeEnd: return pairing_.OnEnd(tid, e, calibration, edges);
    // Samples and looks are not spans, instants or the process's own events
    // (events_received): a measured cost; where a thread ran (attribution.h),
    // which as a mark cost its thread the sampler's signal; what the flush
    // thread saw of the others.
    case EventKind::kCostSample:
      --events_received_;
      stores_.AddCostSample(e, after_calibration);
      break;
    case EventKind::kCpuSample:
      --events_received_;
      stores_.AddCpuSample(tid, e);
      break;
    case EventKind::kOffCpuSample:
    case EventKind::kProcessCpu:
      --events_received_;
      stores_.AddOffCpu(e);
      break;
    case EventKind::kMark:
      if (!calibration && !pairing_.TakeStepNumber(e)) stores_.AddInstant(tid, e);
      break;
  }
  return calibration;
}

void ProcessTimeline::Bye(const wire::Bye& bye) {
  said_bye_ = true;
  events_recorded_ = bye.events;
  dropped_ = std::max(dropped_, bye.dropped);
  pairing_.Bye();
}

void ProcessTimeline::Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, std::vector<Instant>* instants,
                          bool second_core) const {
  spans_.Cut(begin_ns, end_ns, spans, pairing_.open_count(), second_core);
  pairing_.AddOpen(end_ns, spans);
  stores_.CutInstants(begin_ns, end_ns, instants);
}

int64_t ProcessTimeline::ReleasePoint(int64_t end_ns) const {
  int64_t r = std::min(end_ns, pairing_.EarliestOpenNs());
  // Moving R back to a range's begin can bring ranges ending between the
  // two into play: repeat until none does (as deep as the ranges nest).
  while (true) {
    const int64_t earliest = spans_.EarliestBeginEndingFrom(r);
    if (earliest >= r) return r;
    r = earliest;
  }
}

void ProcessTimeline::DiscardBefore(int64_t ns) {
  stores_.DiscardBefore(ns);
  spans_.DiscardBefore(ns);
  pairing_.DiscardBefore(ns);
}

}  // namespace rlscope
