#include "aggregator/timeline.h"

#include <algorithm>

#include "native/event.h"
#include "native/names.h"

namespace rlscope {

void ProcessTimeline::Add(const wire::Batch& batch, StepEdges* edges) {
  names_.Add(batch);
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
    }
    after_calibration = calibration;
  }
  if (samples) RecordStores::MergeSampleMarks(&marks, before);
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

std::string ProcessName(const ProcessTimeline& p) {
  const wire::Identity& id = p.identity();
  auto it = id.labels.find("actor_class");
  if (it != id.labels.end() && !it->second.empty()) return it->second;
  // A process a profiled actor started (collector/children.h).
  it = id.labels.find(names::kLabelParentActor);
  return it != id.labels.end() && !it->second.empty() ? it->second + " child: " + id.name : id.name;
}

std::string ProcessLabel(const ProcessTimeline& p) {
  const wire::Identity& id = p.identity();
  auto label_of = [&](const char* key) {
    auto it = id.labels.find(key);
    return it == id.labels.end() ? std::string() : it->second;
  };
  const std::string node_ip = label_of("node_ip");
  if (node_ip.empty()) {  // not a Ray process: host / name (role, rank R) / pid P
    std::string label = id.host + " / " + ProcessName(p) + " (" + id.role;
    if (id.rank >= 0) label += ", rank " + std::to_string(id.rank);
    return label + ") / pid " + std::to_string(id.pid);
  }
  // A Ray process: node 10.0.0.2 [node id prefix] / Learner (rank 0) / pid 4242
  std::string label = "node " + node_ip;
  const std::string node_id = label_of("node_id");
  if (!node_id.empty()) label += " [" + node_id.substr(0, 8) + "]";
  label += " / " + ProcessName(p);
  if (id.role == "controller")
    label += " (controller)";
  else if (id.rank >= 0)
    label += " (rank " + std::to_string(id.rank) + ")";
  return label + " / pid " + std::to_string(id.pid);
}

}  // namespace rlscope
