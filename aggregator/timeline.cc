#include "aggregator/timeline.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "aggregator/prefault.h"
#include "native/names.h"
#include "native/steps.h"

namespace rlscope {

namespace {

// A range opened by event `e` on thread `tid` (push or start).
Span SpanOpenedBy(int64_t tid, const wire::Event& e) {
  Span s;
  s.begin_ns = e.ts_ns;
  s.tid = s.end_tid = tid;
  s.name = e.name;
  s.domain = e.domain;
  s.category = e.category;
  return s;
}

}  // namespace

void ProcessTimeline::Add(const wire::Batch& batch, StepEdges* steps) {
  AddNamesAndProgress(batch);
  AddGpu(batch);
  for (const auto& block : batch.threads) AddThreadEvents(block, steps);
}

void ProcessTimeline::AddNamesAndProgress(const wire::Batch& batch) {
  for (const auto& [id, s] : batch.strings) {
    if (s == names::kStep) step_name_id_ = id;
    if (s == names::kCalibration) calibration_name_ = id;
    if (s == names::kStepNumber) step_number_name_ = id;
    strings_[id] = Bounded(s);
  }
  for (const auto& [tid, name] : batch.thread_names) thread_names_[tid] = Bounded(name);
  for (const auto& c : batch.categories) categories_[{c.domain, c.category}] = Bounded(c.name);
  watermark_ns_ = std::max(watermark_ns_, batch.watermark_ns);
  dropped_ = std::max(dropped_, batch.dropped);
  last_ack_ = std::max(last_ack_, batch.ack);
  if (batch.profiler_cpu_ns >= 0 && batch.watermark_ns != 0 &&
      (cpu_points_.empty() || batch.watermark_ns > cpu_points_.back().first)) {
    cpu_points_.emplace_back(batch.watermark_ns, batch.profiler_cpu_ns);
  }
  for (const wire::MemorySample& m : batch.memory) {
    if (rss_.empty() || m.ts_ns > rss_.back().ts_ns) rss_.push_back({m.ts_ns, m.rss_bytes});
  }
  // Its edges tell the whole story only when its first batch came here (a
  // restarted aggregator sees a replay from its release point on, not the
  // edge that armed it at start).
  if (batch.seq == 0) saw_first_batch_ = true;
  reports_arming_ = reports_arming_ || batch.reports_arming;
  for (const wire::ArmEdge& e : batch.arming) {
    if (!arming_.empty() && (e.ts_ns < arming_.back().ts_ns || e.armed == arming_.back().armed)) continue;  // had it
    if (arming_.size() >= kMaxArmEdges) arming_.pop_front();
    arming_.push_back(e);
  }
}

void ProcessTimeline::AddGpu(const wire::Batch& batch) {
  for (const GpuRecord& g : batch.gpu) {
    const auto kind = static_cast<GpuKind>(g.kind);
    if (kind == GpuKind::kMemory) {  // a running total (after an aggregator restart, from what was replayed)
      AddGpuMemory(g);
      continue;
    }
    if (g.end_ns < skip_before_ns_) continue;  // a resumed run's replay: written already
    if ((kind == GpuKind::kRuntimeApi || kind == GpuKind::kDriverApi) && g.correlation != 0) {
      launches_.emplace(g.correlation, g.start_ns);  // the runtime call, when both levels are traced
    }
    gpu_.push_back(g);
  }
  events_received_ += batch.gpu.size();
}

void ProcessTimeline::AddGpuMemory(const GpuRecord& g) {
  if (MemoryKind(g.subkind) != kMemoryKindDevice) return;  // pinned, managed...: not the GPU's own memory
  const uint32_t op = MemoryOperation(g.subkind);
  if (op != kMemoryAllocation && op != kMemoryRelease) return;
  if (gpu_allocated_.size() >= kMaxDevices && gpu_allocated_.count(g.device) == 0) return;  // a broken collector's
  std::deque<MemoryPoint>& points = gpu_allocated_[g.device];
  const int64_t before = points.empty() ? 0 : points.back().bytes;
  // At most 2^48 bytes each (256 TiB): no sum overflows.
  const int64_t bytes = static_cast<int64_t>(std::min<uint64_t>(g.bytes, uint64_t{1} << 48));
  const int64_t delta = op == kMemoryAllocation ? bytes : -bytes;
  // Allocated before tracing began, released after: the total stays >= 0.
  const int64_t after = std::clamp<int64_t>(before + delta, 0, int64_t{1} << 56);
  const int64_t ts = points.empty() ? g.start_ns : std::max(g.start_ns, points.back().ts_ns);
  if (!points.empty() && points.back().ts_ns == ts) {
    points.back().bytes = after;
  } else {
    points.push_back({ts, after});
  }
}

void ProcessTimeline::AddThreadEvents(const wire::ThreadEvents& block, StepEdges* steps) {
  events_received_ += block.events.size();
  auto& marks = cost_marks_[block.tid];
  const size_t before = marks.size();
  bool samples = false;
  bool after_calibration = false;  // the event before was rlscope_ray's start-up calibration
  for (const auto& e : block.events) {
    if (e.ts_ns < skip_before_ns_) continue;  // a resumed run's replay: written already
    const bool calibration = AddEvent(block.tid, e, after_calibration, steps);
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
  // Samples come in a block of their own, after the events they fell
  // among: merged into recording order by time (after marks of the same
  // time), in one pass over the marks they overtake.
  if (samples) {
    const auto by_time = [](const CostMark& a, const CostMark& b) { return a.ts_ns < b.ts_ns; };
    const auto mid = marks.begin() + static_cast<std::ptrdiff_t>(before);
    std::stable_sort(mid, marks.end(), by_time);
    std::inplace_merge(std::upper_bound(marks.begin(), mid, *mid, by_time), mid, marks.end(), by_time);
  }
}

bool ProcessTimeline::AddEvent(int64_t tid, const wire::Event& e, bool after_calibration, StepEdges* steps) {
  // Events of rlscope_ray's start-up calibration (named
  // "rlscope.calibration") are matched as usual, then left out.
  const bool calibration = calibration_name_ != 0 && e.name == calibration_name_;
  switch (static_cast<EventKind>(e.kind)) {
    case EventKind::kRangePush: OnPush(tid, e, steps); break;
    case EventKind::kRangePop: return OnPop(tid, e, calibration, steps);
    case EventKind::kRangeStart: OnStart(tid, e, steps); break;
    case EventKind::kRangeEnd: return OnEnd(tid, e, calibration, steps);
    case EventKind::kCostSample: OnCostSample(e, after_calibration); break;
    case EventKind::kCpuSample: OnCpuSample(tid, e); break;
    case EventKind::kOffCpuSample:
    case EventKind::kProcessCpu: OnOffCpu(e); break;
    case EventKind::kMark:
      if (!calibration) OnMark(tid, e);
      break;
  }
  return calibration;
}

void ProcessTimeline::OnPush(int64_t tid, const wire::Event& e, StepEdges* steps) {
  auto& stack = stacks_[{tid, e.domain}];
  Span s = SpanOpenedBy(tid, e);
  s.payload = e.value;
  s.has_payload = (e.flags & kFlagHasPayload) != 0;
  s.payload_signed = (e.flags & kFlagPayloadSigned) != 0;
  s.depth = static_cast<uint16_t>(std::min<size_t>(stack.size(), UINT16_MAX));
  Open(s, s.has_payload, steps);
  stack.push_back(s);
}

bool ProcessTimeline::OnPop(int64_t tid, const wire::Event& e, bool calibration, StepEdges* steps) {
  auto it = stacks_.find({tid, e.domain});
  if (it == stacks_.end() || it->second.empty()) {
    ++unmatched_;
    return calibration;
  }
  Span s = it->second.back();
  it->second.pop_back();
  if (calibration_name_ != 0 && s.name == calibration_name_) return true;
  s.end_ns = e.ts_ns;
  Close(s, steps);
  return false;
}

void ProcessTimeline::OnStart(int64_t tid, const wire::Event& e, StepEdges* steps) {
  Span s = SpanOpenedBy(tid, e);
  s.range_id = e.value;
  s.async = true;
  Open(s, false, steps);  // a start's value is its id, not a payload
  if (auto early = early_ends_.find(e.value); early != early_ends_.end()) {
    s.end_ns = early->second.first;
    s.end_tid = early->second.second;
    early_ends_.erase(early);
    Close(s, steps);
  } else {
    open_async_[e.value] = s;
  }
}

bool ProcessTimeline::OnEnd(int64_t tid, const wire::Event& e, bool calibration, StepEdges* steps) {
  auto it = open_async_.find(e.value);
  if (it == open_async_.end()) {
    // The start may still be in flight from another thread's buffer.
    early_ends_[e.value] = {e.ts_ns, tid};
    return calibration;
  }
  Span s = it->second;
  open_async_.erase(it);
  if (calibration_name_ != 0 && s.name == calibration_name_) return true;
  s.end_ns = e.ts_ns;
  s.end_tid = tid;
  Close(s, steps);
  return false;
}

void ProcessTimeline::OnCostSample(const wire::Event& e, bool after_calibration) {
  // Not a span or an instant, nor one of the process's events
  // (events_received): a measured cost (0: not measurable), and, as a mark,
  // an event that cost something itself. (After one of the start-up
  // calibration's events: a loop, not the run.)
  --events_received_;
  if (e.value > kInterruptedSamplePs) {
    ++interrupted_samples_;
  } else if (e.value != 0 && e.category < sample_totals_.size() && !after_calibration) {
    cost_samples_.push_back({e.ts_ns, static_cast<uint8_t>(e.category), e.flags, e.value});
    sample_totals_[e.category].Add(static_cast<double>(e.value));
  }
}

void ProcessTimeline::OnCpuSample(int64_t tid, const wire::Event& e) {
  // Not a span, an instant or one of the process's events: where the thread
  // ran (attribution.h), and, as a mark, an event that cost its thread
  // something (the sampler's signal).
  --events_received_;
  ++cpu_samples_received_;
  CpuSample s{
      e.ts_ns, tid, e.name, e.category, static_cast<int64_t>(e.domain) * 1000, 0, (e.flags & kFlagFrameUnread) != 0};
  if ((e.flags & kFlagNativeStack) != 0 && e.value <= UINT32_MAX) s.stack = static_cast<uint32_t>(e.value);
  s.profiler_thread = (e.flags & kFlagProfilerThread) != 0;
  cpu_samples_.push_back(s);
}

void ProcessTimeline::OnOffCpu(const wire::Event& e) {
  // Not one of the process's events: what its flush thread saw of the others.
  --events_received_;
  if (e.kind == static_cast<uint8_t>(EventKind::kProcessCpu)) {
    if (process_cpu_.empty() || e.ts_ns > process_cpu_.back().ts_ns) {
      process_cpu_.push_back({e.ts_ns, static_cast<int64_t>(std::min<uint64_t>(e.value, INT64_MAX))});
    }
    return;
  }
  if (e.category >= static_cast<uint32_t>(kOffCpuReasons)) return;  // a reason this aggregator does not know
  off_cpu_.push_back({e.ts_ns, static_cast<int64_t>(std::min<uint64_t>(e.value, INT64_MAX)),
                      static_cast<uint8_t>(e.category), static_cast<int64_t>(e.domain) * 1000});
}

void ProcessTimeline::OnMark(int64_t tid, const wire::Event& e) {
  if (step_number_name_ != 0 && e.name == step_number_name_) {
    announced_step_ = static_cast<int64_t>(e.value);  // numbers the step range that follows
    return;
  }
  Instant i;
  i.ts_ns = e.ts_ns;
  i.tid = tid;
  i.name = e.name;
  i.domain = e.domain;
  i.category = e.category;
  i.payload = e.value;
  i.has_payload = (e.flags & kFlagHasPayload) != 0;
  i.payload_signed = (e.flags & kFlagPayloadSigned) != 0;
  instants_.push_back(i);
}

std::string ProcessTimeline::Bounded(std::string s) {
  if (s.size() <= kMaxStringBytes) return s;
  ++truncated_strings_;
  const size_t cut = s.size();
  s.resize(kMaxStringBytes);
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();  // whole UTF-8 chars
  if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
  s += "...[" + std::to_string(cut) + " bytes]";
  return s;
}

void ProcessTimeline::BoundIdentity() {
  wire::Identity& id = hello_.identity;
  id.host = Bounded(std::move(id.host));
  id.name = Bounded(std::move(id.name));
  id.role = Bounded(std::move(id.role));
  std::map<std::string, std::string> labels;
  for (auto& [k, v] : id.labels) labels[Bounded(k)] = Bounded(v);
  id.labels = std::move(labels);
  if (hello_.config.size() > 65536) {  // our own YAML is a few KB: this one is read as none
    hello_.config.clear();
    ++truncated_strings_;
  }
}

void ProcessTimeline::Open(Span& span, bool has_payload, StepEdges* edges) {
  if (edges == nullptr || !is_controller() || step_name_id_ == 0 || span.name != step_name_id_) return;
  if (span.begin_ns < steps_done_before_ns_) {  // replayed, written already (ContinueSteps)
    announced_step_ = -1;
    return;
  }
  span.step = announced_step_ >= 0 ? announced_step_ : steps::Number(has_payload, span.payload, next_auto_step_);
  announced_step_ = -1;
  next_auto_step_ = span.step + 1;
  edges->begun.push_back({span.step, span.begin_ns, 0});
}

void ProcessTimeline::Close(Span span, StepEdges* edges) {
  if (span.end_ns < span.begin_ns) span.end_ns = span.begin_ns;
  if (span.step >= 0 && edges != nullptr) edges->closed.push_back({span.step, span.begin_ns, span.end_ns});
  done_.push_back(span);
  if (done_tids_.empty() || done_tids_[last_done_] != span.tid) {
    last_done_ = DoneThread(span.tid, last_done_);
    if (last_done_ == done_tids_.size()) {
      done_tids_.push_back(span.tid);
      done_counts_.push_back(0);
    }
  }
  ++done_counts_[last_done_];
}

size_t ProcessTimeline::DoneThread(int64_t tid, size_t hint) const {
  if (hint < done_tids_.size() && done_tids_[hint] == tid) return hint;
  return static_cast<size_t>(std::find(done_tids_.begin(), done_tids_.end(), tid) - done_tids_.begin());
}

void ProcessTimeline::Bye(const wire::Bye& bye) {
  said_bye_ = true;
  events_recorded_ = bye.events;
  dropped_ = std::max(dropped_, bye.dropped);
  unmatched_ += early_ends_.size();
  early_ends_.clear();
}

void ProcessTimeline::Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, std::vector<Instant>* instants,
                          bool second_core) const {
  auto in_step = [&](const Span& s) {
    return (s.begin_ns < end_ns && s.end_ns > begin_ns) ||
           (s.begin_ns == s.end_ns && s.begin_ns >= begin_ns && s.begin_ns < end_ns);
  };
  const size_t base = spans->size();
  if (done_tids_.size() <= 1) {  // one thread closed them all: in order as they are
    spans->reserve(base + done_.size() + open_async_.size() + stacks_.size());
    // Mostly filled: done_ holds what ended after the last step written.
    PrefaultCapacity(spans, second_core);
    for (const Span& s : done_) {
      if (in_step(s)) spans->push_back(s);
    }
  } else {
    // Each thread's spans placed after room for all of the threads' before
    // it (done_tids_ order, done_counts_), then the room they left closed up.
    std::vector<size_t> first(done_tids_.size()), at(done_tids_.size());
    size_t next = base;
    for (size_t i = 0; i < at.size(); ++i) {
      first[i] = at[i] = next;
      next += done_counts_[i];
    }
    spans->reserve(next + open_async_.size() + stacks_.size());
    PrefaultCapacity(spans, second_core);
    spans->resize(next);
    size_t t = 0;  // done_tids_ index of the span before
    for (const Span& s : done_) {
      if (!in_step(s)) continue;
      t = DoneThread(s.tid, t);  // every tid in done_ is in done_tids_
      (*spans)[at[t]++] = s;
    }
    size_t to = base;
    for (size_t i = 0; i < at.size(); ++i) {
      if (to != first[i]) std::move(spans->begin() + first[i], spans->begin() + at[i], spans->begin() + to);
      to += at[i] - first[i];
    }
    spans->resize(to);
  }
  auto add_open = [&](Span s) {
    if (s.begin_ns >= end_ns) return;
    s.open = true;
    s.end_ns = end_ns;
    spans->push_back(s);
  };
  for (const auto& [key, stack] : stacks_) {
    for (const Span& s : stack) add_open(s);
  }
  for (const auto& [id, s] : open_async_) add_open(s);
  for (const Instant& i : instants_) {
    if (i.ts_ns >= begin_ns && i.ts_ns < end_ns) instants->push_back(i);
  }
}

int64_t ProcessTimeline::ReleasePoint(int64_t end_ns) const {
  int64_t open = INT64_MAX;
  for (const auto& [key, stack] : stacks_) {
    if (!stack.empty()) open = std::min(open, stack.front().begin_ns);
  }
  for (const auto& [id, s] : open_async_) open = std::min(open, s.begin_ns);
  int64_t r = std::min(end_ns, open);
  // Moving R back to a range's begin can bring ranges ending between the
  // two into play: repeat until none does (as deep as the ranges nest).
  while (true) {
    int64_t earliest = r;
    for (const Span& s : done_) {
      if (s.end_ns >= r && s.begin_ns < earliest) earliest = s.begin_ns;
    }
    if (earliest >= r) return r;
    r = earliest;
  }
}

namespace {
bool OnDevice(const GpuRecord& g) {
  const auto kind = static_cast<GpuKind>(g.kind);
  return kind == GpuKind::kKernel || kind == GpuKind::kMemcpy || kind == GpuKind::kMemset;
}
}  // namespace

void ProcessTimeline::CutGpu(int64_t begin_ns, int64_t end_ns, std::vector<GpuRecord>* out) const {
  for (const GpuRecord& g : gpu_) {
    bool in = g.start_ns < end_ns && (g.end_ns > begin_ns || (g.end_ns == g.start_ns && g.start_ns >= begin_ns));
    if (OnDevice(g) && g.correlation != 0) {
      auto it = launches_.find(g.correlation);
      if (it != launches_.end()) in = it->second >= begin_ns && it->second < end_ns;
    }
    if (in) out->push_back(g);
  }
}

void ProcessTimeline::CutCosts(int64_t begin_ns, int64_t end_ns, std::map<int64_t, std::vector<CostMark>>* out) const {
  for (const auto& [tid, marks] : cost_marks_) {
    std::vector<CostMark>* dst = nullptr;
    for (const CostMark& m : marks) {
      if (m.ts_ns < begin_ns || m.ts_ns > end_ns) continue;
      if (dst == nullptr) {
        dst = &(*out)[tid];
        dst->reserve(dst->size() + marks.size());
      }
      dst->push_back(m);
    }
  }
}

void ProcessTimeline::CutCpuSamples(int64_t begin_ns, int64_t end_ns, std::vector<CpuSample>* out) const {
  for (const CpuSample& s : cpu_samples_) {
    if (s.ts_ns >= begin_ns && s.ts_ns < end_ns) out->push_back(s);
  }
}

void ProcessTimeline::CutOffCpu(int64_t begin_ns, int64_t end_ns, std::vector<OffCpuSample>* out) const {
  for (const OffCpuSample& s : off_cpu_) {
    if (s.ts_ns >= begin_ns && s.ts_ns < end_ns) out->push_back(s);
  }
}

void ProcessTimeline::CutProcessCpu(int64_t begin_ns, int64_t end_ns, std::vector<ProcessCpuPoint>* out) const {
  auto first = std::lower_bound(process_cpu_.begin(), process_cpu_.end(), begin_ns,
                                [](const ProcessCpuPoint& p, int64_t t) { return p.ts_ns < t; });
  if (first != process_cpu_.begin()) --first;  // the one before the step, for its start
  for (auto it = first; it != process_cpu_.end(); ++it) {
    out->push_back(*it);
    if (it->ts_ns >= end_ns) break;  // the one after, for its end
  }
}

namespace {

// The level at `begin` (the last point at or before it) and every point
// after it up to `end`.
void CutLevels(const std::deque<MemoryPoint>& points, int64_t begin_ns, int64_t end_ns, std::vector<MemoryPoint>* out) {
  auto first = std::upper_bound(points.begin(), points.end(), begin_ns,
                                [](int64_t t, const MemoryPoint& p) { return t < p.ts_ns; });
  if (first != points.begin()) --first;
  for (auto it = first; it != points.end() && it->ts_ns <= end_ns; ++it) out->push_back(*it);
}

}  // namespace

void ProcessTimeline::CutMemory(int64_t begin_ns, int64_t end_ns, std::vector<MemoryPoint>* rss,
                                std::map<uint32_t, std::vector<MemoryPoint>>* gpu_allocated) const {
  // Gone before the step (its goodbye came, its last reading before the
  // begin): it has no memory in it.
  if (said_bye_ && (rss_.empty() || rss_.back().ts_ns < begin_ns)) return;
  CutLevels(rss_, begin_ns, end_ns, rss);
  for (const auto& [device, points] : gpu_allocated_) {
    if (points.empty() || points.front().ts_ns > end_ns) continue;  // nothing allocated yet
    std::vector<MemoryPoint>& out = (*gpu_allocated)[device];
    // Its first allocation is in the step: none was allocated at its begin.
    if (points.front().ts_ns > begin_ns) out.push_back({begin_ns, 0});
    CutLevels(points, begin_ns, end_ns, &out);
  }
}

void ProcessTimeline::CutSamples(int64_t begin_ns, int64_t end_ns, std::vector<CostSample>* out) const {
  for (const CostSample& s : cost_samples_) {
    if (s.ts_ns >= begin_ns && s.ts_ns <= end_ns) out->push_back(s);
  }
}

int64_t ProcessTimeline::UnarmedNs(int64_t begin_ns, int64_t end_ns) const {
  if (!reports_arming_ || !saw_first_batch_) return -1;
  // Only while it lived: from its start to its last flush once it said goodbye.
  begin_ns = std::max(begin_ns, hello_.start_ns);
  if (said_bye_) end_ns = std::min(end_ns, watermark_ns_);
  if (end_ns <= begin_ns) return 0;
  // The state at `begin`: the last edge at or before it (none: not armed,
  // or, the oldest forgotten, the opposite of the oldest kept).
  auto it = std::upper_bound(arming_.begin(), arming_.end(), begin_ns,
                             [](int64_t t, const wire::ArmEdge& e) { return t < e.ts_ns; });
  bool armed = it != arming_.begin()                                ? std::prev(it)->armed
               : arming_.size() >= kMaxArmEdges && !arming_.empty() ? !arming_.front().armed
                                                                    : false;
  int64_t unarmed = 0, from = begin_ns;
  for (; it != arming_.end() && it->ts_ns < end_ns; ++it) {
    if (!armed) unarmed += it->ts_ns - from;
    armed = it->armed;
    from = it->ts_ns;
  }
  if (!armed) unarmed += end_ns - from;
  return unarmed;
}

int64_t ProcessTimeline::ProfilerCpuNs(int64_t begin_ns, int64_t end_ns) const {
  if (cpu_points_.empty()) return -1;
  auto at = [&](int64_t t) -> double {  // the running total at t, linear between points
    if (t <= cpu_points_.front().first) return static_cast<double>(cpu_points_.front().second);
    if (t >= cpu_points_.back().first) return static_cast<double>(cpu_points_.back().second);
    auto hi = std::lower_bound(cpu_points_.begin(), cpu_points_.end(), t,
                               [](const std::pair<int64_t, int64_t>& p, int64_t v) { return p.first < v; });
    auto lo = std::prev(hi);
    const double f = static_cast<double>(t - lo->first) / static_cast<double>(hi->first - lo->first);
    return static_cast<double>(lo->second) + f * static_cast<double>(hi->second - lo->second);
  };
  return std::max<int64_t>(0, std::llround(at(end_ns) - at(begin_ns)));
}

void ProcessTimeline::DiscardBefore(int64_t ns) {
  while (cpu_points_.size() > 1 && cpu_points_[1].first < ns) cpu_points_.pop_front();
  while (!cost_samples_.empty() && cost_samples_.front().ts_ns < ns) cost_samples_.pop_front();
  while (!off_cpu_.empty() && off_cpu_.front().ts_ns < ns) off_cpu_.pop_front();
  while (process_cpu_.size() > 1 && process_cpu_[1].ts_ns < ns) process_cpu_.pop_front();
  while (rss_.size() > 1 && rss_[1].ts_ns < ns) rss_.pop_front();  // the level at `ns` stays
  for (auto& [device, points] : gpu_allocated_) {
    while (points.size() > 1 && points[1].ts_ns < ns) points.pop_front();
  }
  // Threads' samples arrive in blocks of their own, not in one time order.
  cpu_samples_.erase(
      std::remove_if(cpu_samples_.begin(), cpu_samples_.end(), [ns](const CpuSample& s) { return s.ts_ns < ns; }),
      cpu_samples_.end());
  for (auto it = cost_marks_.begin(); it != cost_marks_.end();) {
    auto& marks = it->second;
    while (!marks.empty() && marks.front().ts_ns < ns) marks.pop_front();
    it = marks.empty() ? cost_marks_.erase(it) : std::next(it);
  }
  // A device record goes with its launch; anything else once it ended.
  gpu_.erase(std::remove_if(gpu_.begin(), gpu_.end(),
                            [&](const GpuRecord& g) {
                              if (OnDevice(g) && g.correlation != 0) {
                                auto it = launches_.find(g.correlation);
                                if (it != launches_.end()) return it->second < ns;
                              }
                              return g.end_ns < ns;
                            }),
             gpu_.end());
  for (auto it = launches_.begin(); it != launches_.end();) {
    // Kept a little longer than its step: its kernel may still be in flight.
    it = it->second < ns - 60000000000LL ? launches_.erase(it) : std::next(it);
  }
  // A step beginning at `ns` still takes what is exactly at `ns` (Cut is
  // [begin, end)): instants and zero-length spans there are kept.
  done_.erase(std::remove_if(done_.begin(), done_.end(),
                             [ns](const Span& s) { return s.end_ns < ns || (s.end_ns == ns && s.begin_ns < ns); }),
              done_.end());
  if (done_.empty()) {
    done_tids_.clear();
    done_counts_.clear();
    last_done_ = 0;
  } else {
    std::fill(done_counts_.begin(), done_counts_.end(), 0);
    size_t t = 0;
    for (const Span& s : done_) {
      t = DoneThread(s.tid, t);
      ++done_counts_[t];
    }
  }
  // An end whose start never came (dropped, or recorded before a window) is
  // counted and forgotten once the step it fell in is behind us.
  for (auto it = early_ends_.begin(); it != early_ends_.end();) {
    if (it->second.first < ns) {
      ++unmatched_;
      it = early_ends_.erase(it);
    } else {
      ++it;
    }
  }
  instants_.erase(std::remove_if(instants_.begin(), instants_.end(), [ns](const Instant& i) { return i.ts_ns < ns; }),
                  instants_.end());
}

const char* ProcessTimeline::String(uint32_t id) const {
  auto it = strings_.find(id);
  return it == strings_.end() ? "" : it->second.c_str();
}

std::string ProcessTimeline::ThreadName(int64_t tid) const {
  auto it = thread_names_.find(tid);
  return it == thread_names_.end() ? "thread " + std::to_string(tid) : it->second;
}

std::string ProcessTimeline::CategoryName(uint32_t domain, uint32_t category) const {
  auto it = categories_.find({domain, category});
  return it == categories_.end() ? std::string() : it->second;
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
