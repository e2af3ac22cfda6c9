#include "aggregator/record_stores.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "native/event.h"

namespace rlscope {
namespace {

bool OnDevice(const GpuRecord& g) {
  const auto kind = static_cast<GpuKind>(g.kind);
  return kind == GpuKind::kKernel || kind == GpuKind::kMemcpy || kind == GpuKind::kMemset;
}

// The level at `begin` (the last point at or before it) and every point
// after it up to `end`.
void CutLevels(const std::deque<MemoryPoint>& points, int64_t begin_ns, int64_t end_ns, std::vector<MemoryPoint>* out) {
  auto first = std::upper_bound(points.begin(), points.end(), begin_ns,
                                [](int64_t t, const MemoryPoint& p) { return t < p.ts_ns; });
  if (first != points.begin()) --first;
  for (auto it = first; it != points.end() && it->ts_ns <= end_ns; ++it) out->push_back(*it);
}

}  // namespace

void RecordStores::AddProgress(const wire::Batch& batch) {
  // The CPU sampler's handler, measured in place (running totals): the
  // samples since the last batch that said more, and their mean as one
  // figure. An older batch (a replay) says less and adds nothing.
  if (batch.cpu_handler_samples > cpu_handler_.samples && batch.cpu_handler_ps > cpu_handler_.ps) {
    const int64_t n = batch.cpu_handler_samples - cpu_handler_.samples, ps = batch.cpu_handler_ps - cpu_handler_.ps;
    cpu_handler_.per_flush.Add(static_cast<double>(ps) / static_cast<double>(n));
    cpu_handler_.samples = batch.cpu_handler_samples;
    cpu_handler_.ps = batch.cpu_handler_ps;
  }
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

void RecordStores::AddGpu(const wire::Batch& batch, int64_t skip_before_ns) {
  for (const GpuRecord& g : batch.gpu) {
    const auto kind = static_cast<GpuKind>(g.kind);
    if (kind == GpuKind::kMemory) {  // a running total (after an aggregator restart, from what was replayed)
      AddGpuMemory(g);
      continue;
    }
    if (g.end_ns < skip_before_ns) continue;  // a resumed run's replay: written already
    if ((kind == GpuKind::kRuntimeApi || kind == GpuKind::kDriverApi) && g.correlation != 0) {
      launches_.emplace(g.correlation, g.start_ns);  // the runtime call, when both levels are traced
    }
    gpu_.push_back(g);
  }
}

void RecordStores::AddGpuMemory(const GpuRecord& g) {
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

void RecordStores::MergeMarksFrom(ChunkQueue<CostMark>* marks, size_t from) {
  const auto by_time = [](const CostMark& a, const CostMark& b) { return a.ts_ns < b.ts_ns; };
  const auto mid = marks->begin() + static_cast<std::ptrdiff_t>(from);
  std::stable_sort(mid, marks->end(), by_time);
  std::inplace_merge(std::upper_bound(marks->begin(), mid, *mid, by_time), mid, marks->end(), by_time);
}

void RecordStores::AddInstant(int64_t tid, const wire::Event& e) {
  Instant i;
  i.ts_ns = e.ts_ns;
  i.tid = tid;
  i.name = e.name;
  i.domain = e.domain;
  i.category = e.category;
  i.payload = e.value;
  i.has_payload = (e.flags & kFlagHasPayload) != 0;
  i.payload_signed = (e.flags & kFlagPayloadSigned) != 0;
  instant_blocks_.Added(instants_.size(), i.ts_ns, i.ts_ns);
  instants_.push_back(i);
}

void RecordStores::AddCostSample(const wire::Event& e, bool after_calibration) {
  // A measured cost (0: not measurable). (After one of the start-up
  // calibration's events: a loop, not the run.)
  if (e.value > kInterruptedSamplePs) {
    ++interrupted_samples_;
  } else if (e.value != 0 && e.category >= 1 && e.category < static_cast<uint32_t>(EventKind::kCostSample) &&
             !after_calibration) {  // a recording call's kind: push ... mark
    cost_samples_.push_back({e.ts_ns, static_cast<uint8_t>(e.category), e.flags, e.value});
    sample_totals_[e.category].Add(static_cast<double>(e.value));
    std::vector<double>& chunk = speed_chunk_[e.category];
    chunk.push_back(static_cast<double>(e.value));
    if (chunk.size() == kSpeedChunk) {
      // A long run keeps one chunk in `stride`, evenly over all of it: when
      // the list is full, every other one goes and the stride doubles.
      std::vector<double>& chunks = speed_chunks_[e.category];
      uint32_t& skipped = speed_skipped_[e.category];
      if (++skipped >= speed_stride_[e.category]) {
        skipped = 0;
        if (chunks.size() == kMaxSpeedChunks) {
          for (size_t i = 0; i < chunks.size() / 2; ++i) chunks[i] = chunks[2 * i];
          chunks.resize(chunks.size() / 2);
          speed_stride_[e.category] *= 2;
        }
        chunks.push_back(ClippedMean(&chunk).first);
      }
      chunk.clear();
    }
  }
}

std::pair<double, double> ClippedMean(std::vector<double>* v) {
  if (v->empty()) return {0, 0};
  const auto mid = v->begin() + static_cast<std::ptrdiff_t>(v->size() / 2);
  std::nth_element(v->begin(), mid, v->end());
  const double cap = kCostClip * *mid;
  double sum = 0, sum_sq = 0;
  for (double x : *v) {
    const double c = std::min(x, cap);
    sum += c;
    sum_sq += c * c;
  }
  const double n = static_cast<double>(v->size()), mean = sum / n;
  const double var = v->size() > 1 ? std::max(0.0, (sum_sq - n * mean * mean) / (n - 1)) : 0;
  return {mean, std::sqrt(var / n)};
}

KindCosts RecordStores::UsualCosts() const {
  KindCosts usual{};
  std::vector<double> v;
  for (size_t kind = 1; kind < usual.size(); ++kind) {
    const std::vector<double>& chunks = speed_chunks_[kind];
    if (chunks.size() < kMinSpeedChunks) continue;
    v.assign(chunks.begin(), chunks.end());
    auto tenth = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 10);
    std::nth_element(v.begin(), tenth, v.end());
    const double limit = *tenth * kUsualBand;
    v.erase(std::remove_if(v.begin(), v.end(), [&](double x) { return x > limit; }), v.end());
    auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    usual[kind] = *mid;
  }
  return usual;
}

void RecordStores::AddCpuSample(int64_t tid, const wire::Event& e) {
  ++cpu_samples_received_;
  CpuSample s{
      e.ts_ns, tid, e.name, e.category, static_cast<int64_t>(e.domain) * 1000, 0, (e.flags & kFlagFrameUnread) != 0};
  if ((e.flags & kFlagNativeStack) != 0 && e.value <= UINT32_MAX) s.stack = static_cast<uint32_t>(e.value);
  s.profiler_thread = (e.flags & kFlagProfilerThread) != 0;
  if (!s.profiler_thread) {
    recent_cpu_.push_back({s.ts_ns, tid, s.weight_ns});
    if (recent_cpu_.size() > kRecentSamples) recent_cpu_.pop_front();
  }
  cpu_sample_blocks_.Added(cpu_samples_.size(), s.ts_ns, s.ts_ns);
  cpu_samples_.push_back(s);
}

void RecordStores::AddOffCpu(const wire::Event& e) {
  if (e.kind == static_cast<uint8_t>(EventKind::kProcessCpu)) {
    if (process_cpu_.empty() || e.ts_ns > process_cpu_.back().ts_ns) {
      process_cpu_.push_back({e.ts_ns, static_cast<int64_t>(std::min<uint64_t>(e.value, INT64_MAX))});
    }
    return;
  }
  if (e.category >= static_cast<uint32_t>(kOffCpuReasons)) return;  // a reason this aggregator does not know
  const bool cpu_wait = e.category == static_cast<uint32_t>(OffCpuReason::kCpuWait);
  // Waits on the GIL are not a thread of the program's own: another Python
  // thread that holds it shows as CPU off the recording threads, the
  // collector's (its speed watch) is the profiler's.
  if (!cpu_wait && e.category != static_cast<uint32_t>(OffCpuReason::kGil)) {
    // As many as the CPU samples kept, at most (a process that records
    // no CPU samples, or sleeps, would keep them all).
    recent_blocked_.emplace_back(e.ts_ns, static_cast<int64_t>(e.domain) * 1000);
    if (recent_blocked_.size() > kRecentSamples) recent_blocked_.pop_front();
  }
  off_cpu_.push_back({e.ts_ns, static_cast<int64_t>(std::min<uint64_t>(e.value, INT64_MAX)),
                      static_cast<uint8_t>(e.category), static_cast<int64_t>(e.domain) * 1000,
                      cpu_wait ? static_cast<int64_t>(e.name) * 1000 : 0});
}

void RecordStores::CutInstants(int64_t begin_ns, int64_t end_ns, std::vector<Instant>* out) const {
  instant_blocks_.ForEach(instants_.size(), begin_ns, end_ns, [&](size_t k, int64_t floor_ns) {
    const Instant& i = instants_[k];
    if (i.ts_ns >= begin_ns && i.ts_ns < end_ns && i.ts_ns >= floor_ns) out->push_back(i);
  });
}

void RecordStores::CutGpu(int64_t begin_ns, int64_t end_ns, std::vector<GpuRecord>* out) const {
  for (const GpuRecord& g : gpu_) {
    bool in = g.start_ns < end_ns && (g.end_ns > begin_ns || (g.end_ns == g.start_ns && g.start_ns >= begin_ns));
    if (OnDevice(g) && g.correlation != 0) {
      auto it = launches_.find(g.correlation);
      if (it != launches_.end()) in = it->second >= begin_ns && it->second < end_ns;
    }
    if (in) out->push_back(g);
  }
}

void RecordStores::CutCosts(int64_t begin_ns, int64_t end_ns, std::map<int64_t, std::vector<CostMark>>* out) const {
  // Each thread's marks are in time order (ProcessTimeline::AddThreadEvents
  // merges each block in; DiscardBefore pops them from the front): the
  // step's are found, not scanned for. A flush brings many short steps at
  // once, all cut before the next.
  const auto before = [](const CostMark& m, int64_t t) { return m.ts_ns < t; };
  for (const auto& [tid, marks] : cost_marks_) {
    auto it = std::lower_bound(marks.begin(), marks.end(), begin_ns, before);
    const auto last = std::upper_bound(it, marks.end(), end_ns,
                                       [](int64_t t, const CostMark& m) { return t < m.ts_ns; });
    if (it == last) continue;
    std::vector<CostMark>& dst = (*out)[tid];
    dst.insert(dst.end(), it, last);
  }
}

void RecordStores::CutSamples(int64_t begin_ns, int64_t end_ns, std::vector<CostSample>* out) const {
  for (const CostSample& s : cost_samples_) {
    if (s.ts_ns >= begin_ns && s.ts_ns <= end_ns) out->push_back(s);
  }
}

void RecordStores::CutCpuSamples(int64_t begin_ns, int64_t end_ns, std::vector<CpuSample>* out) const {
  cpu_sample_blocks_.ForEach(cpu_samples_.size(), begin_ns, end_ns, [&](size_t k, int64_t floor_ns) {
    const CpuSample& s = cpu_samples_[k];
    if (s.ts_ns >= begin_ns && s.ts_ns < end_ns && s.ts_ns >= floor_ns) out->push_back(s);
  });
}

void RecordStores::CutOffCpu(int64_t begin_ns, int64_t end_ns, std::vector<OffCpuSample>* out) const {
  for (const OffCpuSample& s : off_cpu_) {
    if (s.ts_ns >= begin_ns && s.ts_ns < end_ns) out->push_back(s);
  }
}

bool RecordStores::RunsOnRecordingThreads() const {
  // The recent samples only: a burst of other threads' work at start-up (a
  // thread pool's first spin) ages out. A thread's samples before its first
  // event (the main thread's start-up calibration, whose events are never
  // shipped) are judged as its own, now.
  int64_t job_ns = 0, other_ns = 0, blocked_ns = 0;
  uint64_t job_samples = 0;
  int64_t oldest_ns = INT64_MAX;  // in arrival order: the oldest is not always the first
  for (const RecentSample& r : recent_cpu_) {
    oldest_ns = std::min(oldest_ns, r.ts_ns);
    if (recording_tids_.count(r.tid) != 0) {
      job_ns += r.weight_ns;
      ++job_samples;
    } else {
      other_ns += r.weight_ns;
    }
  }
  for (const auto& [ts, weight] : recent_blocked_) {
    if (ts >= oldest_ns) blocked_ns += weight;
  }
  return job_samples >= kMinJobSamples && other_ns * kOtherShare <= job_ns + other_ns &&
         blocked_ns * kOtherShare <= job_ns + blocked_ns;
}

int64_t RecordStores::RunQueueWaitNs(int64_t begin_ns, int64_t end_ns) const {
  double wait_ns = 0;
  for (const OffCpuSample& s : off_cpu_) {
    if (s.reason != static_cast<uint8_t>(OffCpuReason::kCpuWait)) continue;
    if (s.interval_ns > 0) {
      // Its share in [begin, end): what falls after the begin less what falls after the end.
      if (s.ts_ns > begin_ns) wait_ns += static_cast<double>(s.WeightSince(begin_ns) - s.WeightSince(end_ns));
    } else if (s.ts_ns >= begin_ns && s.ts_ns < end_ns) {
      wait_ns += static_cast<double>(std::max<int64_t>(0, std::min(s.weight_ns, s.ts_ns - begin_ns)));
    }
  }
  return static_cast<int64_t>(std::llround(wait_ns));
}

void RecordStores::CutProcessCpu(int64_t begin_ns, int64_t end_ns, std::vector<ProcessCpuPoint>* out) const {
  auto first = std::lower_bound(process_cpu_.begin(), process_cpu_.end(), begin_ns,
                                [](const ProcessCpuPoint& p, int64_t t) { return p.ts_ns < t; });
  if (first != process_cpu_.begin()) --first;  // the one before the step, for its start
  for (auto it = first; it != process_cpu_.end(); ++it) {
    out->push_back(*it);
    if (it->ts_ns >= end_ns) break;  // the one after, for its end
  }
}

void RecordStores::CutMemory(int64_t begin_ns, int64_t end_ns, bool gone, std::vector<MemoryPoint>* rss,
                             std::map<uint32_t, std::vector<MemoryPoint>>* gpu_allocated) const {
  // Gone before the step (its goodbye came, its last reading before the
  // begin): it has no memory in it.
  if (gone && (rss_.empty() || rss_.back().ts_ns < begin_ns)) return;
  CutLevels(rss_, begin_ns, end_ns, rss);
  for (const auto& [device, points] : gpu_allocated_) {
    if (points.empty() || points.front().ts_ns > end_ns) continue;  // nothing allocated yet
    std::vector<MemoryPoint>& out = (*gpu_allocated)[device];
    // Its first allocation is in the step: none was allocated at its begin.
    if (points.front().ts_ns > begin_ns) out.push_back({begin_ns, 0});
    CutLevels(points, begin_ns, end_ns, &out);
  }
}

int64_t RecordStores::UnarmedNs(int64_t begin_ns, int64_t end_ns, int64_t start_ns, int64_t last_ns) const {
  if (!reports_arming_ || !saw_first_batch_) return -1;
  begin_ns = std::max(begin_ns, start_ns);
  end_ns = std::min(end_ns, last_ns);
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

int RecordStores::ArmedDuring(int64_t begin_ns, int64_t end_ns, int64_t start_ns, int64_t last_ns) const {
  // Before the oldest kept edge once some were forgotten: UnarmedNs guesses
  // the state there, which is no answer.
  if (arming_.size() >= kMaxArmEdges && std::max(begin_ns, start_ns) < arming_.front().ts_ns) return -1;
  const int64_t unarmed = UnarmedNs(begin_ns, end_ns, start_ns, last_ns);
  if (unarmed < 0) return -1;
  return unarmed < std::min(end_ns, last_ns) - std::max(begin_ns, start_ns) ? 1 : 0;
}

int64_t RecordStores::ProfilerCpuNs(int64_t begin_ns, int64_t end_ns) const {
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

template <typename T>
void RecordStores::PopForgotten(ChunkQueue<T>* queue, TimeBlocks* blocks, int64_t ns) {
  blocks->Forget(queue->size(), ns);
  while (!queue->empty() && queue->front().ts_ns < blocks->FrontFloor()) {
    queue->pop_front();
    blocks->PoppedFront();
  }
  if (queue->empty()) blocks->Clear();
}

void RecordStores::DiscardBefore(int64_t ns) {
  while (cpu_points_.size() > 1 && cpu_points_[1].first < ns) cpu_points_.pop_front();
  while (!cost_samples_.empty() && cost_samples_.front().ts_ns < ns) cost_samples_.pop_front();
  while (!off_cpu_.empty() && off_cpu_.front().ts_ns < ns) off_cpu_.pop_front();
  while (process_cpu_.size() > 1 && process_cpu_[1].ts_ns < ns) process_cpu_.pop_front();
  while (rss_.size() > 1 && rss_[1].ts_ns < ns) rss_.pop_front();  // the level at `ns` stays
  for (auto& [device, points] : gpu_allocated_) {
    while (points.size() > 1 && points[1].ts_ns < ns) points.pop_front();
  }
  // Threads' samples (and instants) arrive in blocks of their own, not in
  // one time order: those at the front go, the rest are forgotten (Cut*
  // skip them) until they reach it.
  PopForgotten(&cpu_samples_, &cpu_sample_blocks_, ns);
  PopForgotten(&instants_, &instant_blocks_, ns);
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
  // (A step beginning at `ns` still takes what is exactly at `ns`: instants are [begin, end).)
}

}  // namespace rlscope
