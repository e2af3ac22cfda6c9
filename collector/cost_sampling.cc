#include "collector/cost_sampling.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "native/names.h"

namespace rlscope {

CostSampling::CostSampling(CollectorContext& ctx, Recording& recording)
    : ctx_(ctx), recording_(recording), clock_source_(ctx.clock_source), test_clock_(ctx.test_clock.get()) {
  SetSampleEvery(ctx.own.config);
}

void CostSampling::SetSampleEvery(const Config& config) {
  // None while correction is off.
  sample_every_.store(config.correction.enabled ? static_cast<uint32_t>(config.correction.sample_every) : 0,
                      std::memory_order_relaxed);
}

void CostSampling::RecordCostSample(ThreadState* ts, uint64_t ticks) {
  const uint8_t kind = ts->buffer->last().kind, flags = ts->buffer->last().flags;
  const uint64_t timer = timer_ticks_.load(std::memory_order_relaxed);
  ticks = ticks > timer ? ticks - timer : 0;
  // Uncounted: the process's events (Stats, the ring's written()) are what
  // it recorded, not these; in a scratch scope they are not shipped at all.
  recording_.Record(ts, EventKind::kCostSample, 0, 0, kind, ticks, flags, /*privileged=*/false, /*counted=*/false);
}

std::map<std::string, double> CostSampling::Calibrate() {
  if (test_clock_ != nullptr) return test_clock_->costs();
  constexpr int kEvents = 2048, kRounds = 7;
  // As large as a real ring: the early wake-up every half ring (Record) is
  // paid as often per event as it is when recording.
  ThreadBuffer scratch(0, std::max<size_t>(kEvents, static_cast<size_t>(ctx_.own.config.buffers.per_thread_kb) * 1024 /
                                                        sizeof(EventRecord)));
  ThreadState state(&ctx_.strings);
  state.buffer = &scratch;
  const char* const kName = names::kCalibration;
  auto drain = [&] { scratch.Drain([](const EventRecord*, size_t) {}); };
  // ns per iteration of `body`, best of kRounds.
  auto best_ns = [&](auto&& body) {
    double best = 1e18;
    for (int r = 0; r < kRounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kEvents; ++i) {
        body(i);
        asm volatile("" ::: "memory");
      }
      const auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / kEvents);
      drain();
    }
    return best;
  };
  const double empty = best_ns([](int) {});
  // What timing a call adds to what it measures (CostSampler): two clock
  // reads with nothing between, the median of many.
  {
    std::vector<uint64_t> d(1001);
    for (uint64_t& v : d) {
      const uint64_t t0 = ReadTicks(clock_source_);
      v = ReadTicks(clock_source_) - t0;
    }
    std::nth_element(d.begin(), d.begin() + 500, d.end());
    timer_ticks_.store(d[500], std::memory_order_relaxed);
  }
  // Each body is what a recorded event of that kind costs in its handler:
  // the name lookup, the depth bookkeeping, the record. Pushes and pops as
  // an NVTX handler makes them: its fast lane (Recording::FastPush, FastPop)
  // where it takes the call, else the full path; nested at most
  // kTrackedDepth deep, as real nesting is.
  Recording& rec = recording_;
  const uint8_t hot = kHotArmed | (clock_source_ != ClockSource::kTsc ? kHotSlowClock : 0);
  const double push = best_ns([&](int) {
    if (state.depth == ThreadState::kTrackedDepth) state.depth = 0;
    int depth;
    if (Recording::FastPush(
            hot, &state, 0, [&](RangeAttr* at) { return state.names.Hit(kName, &at->name); }, &depth)) {
      return;
    }
    rec.Record(&state, EventKind::kRangePush, state.names.Lookup(kName), 0, 0, 0, kFlagNone);
    state.SetOpen(state.depth++, ThreadState::kOpenRecorded);
  });
  const double pop = best_ns([&](int) {
    if (state.depth == 0) state.depth = ThreadState::kTrackedDepth;  // every level was pushed recorded above
    if (int depth; Recording::FastPop(hot, &state, 0, kFlagNone, &depth)) return;
    --state.depth;
    if (state.WasRecorded(state.depth, false)) rec.Record(&state, EventKind::kRangePop, 0, 0, 0, 0, kFlagNone);
  });
  const double start = best_ns([&](int) {
    const uint32_t name = state.names.Lookup(kName);
    rec.Record(&state, EventKind::kRangeStart, name, 0, 0, rec.NextRangeId(), kFlagNone);
  });
  const double end = best_ns([&](int i) {
    rec.Record(&state, EventKind::kRangeEnd, 0, 0, 0, static_cast<uint64_t>(i) | kRecordedRangeBit, kFlagNone);
  });
  const double mark =
      best_ns([&](int) { rec.Record(&state, EventKind::kMark, state.names.Lookup(kName), 0, 0, 0, kFlagNone); });
  // A cost sample: the timed call's two clock reads and the sample's record.
  const double sample = best_ns([&](int) {
    volatile uint64_t t0 = ReadTicks(clock_source_);
    RecordCostSample(&state, ReadTicks(clock_source_) - t0);
  });
  std::map<std::string, double> out = {{"push", push - empty}, {"pop", pop - empty},   {"start", start - empty},
                                       {"end", end - empty},   {"mark", mark - empty}, {"sample", sample - empty}};
  for (auto& [k, v] : out) v = std::max(0.0, v);
  return out;
}

bool CostSampling::ScratchScope(ThreadState* ts, bool on) {
  if ((ts->scratch != nullptr) == on) return false;
  if (on) {
    ts->scratch = std::make_unique<ThreadBuffer>(ts->buffer->tid(), std::max<size_t>(ts->buffer->capacity(), 65536));
    ts->real_buffer = ts->buffer;
    ts->buffer = ts->scratch.get();
    ts->calibrating = true;
  } else {
    ts->calibrating = false;
    ts->buffer = ts->real_buffer;
    ts->real_buffer = nullptr;
    ts->scratch.reset();
  }
  return true;
}

}  // namespace rlscope
