// The aggregator's plain records: what a collector's events become (spans,
// instants, cost marks and samples, CPU samples), a controller's step edges,
// and a collector's clock against the aggregator's. Values only: neither this
// header nor what it includes holds an algorithm. The timeline (timeline.h)
// makes them, clock_fit.h fits the clock; the analyses and exporters read
// them (step_profile.h).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rlscope {

struct Span {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t tid = 0;      // thread that opened it
  int64_t end_tid = 0;  // thread that closed it (start/end ranges)
  uint64_t payload = 0;
  uint64_t range_id = 0;  // start/end ranges only
  uint32_t name = 0;
  uint32_t domain = 0;
  uint32_t category = 0;
  uint16_t depth = 0;  // nesting depth on its (thread, domain) stack
  bool has_payload = false;
  bool payload_signed = false;  // an int64 payload (kFlagPayloadSigned)
  bool async = false;           // a start/end range
  bool open = false;            // not closed (yet) when cut
  bool clipped_begin = false;   // began before the step; begin_ns is the step's
  bool clipped_end = false;     // ended after the step (or open); end_ns is the step's
  int64_t step = -1;            // a controller's "step" range: its step number
  // Before overhead correction (correction.h); equal to begin/end when none applied.
  int64_t raw_begin_ns = 0;
  int64_t raw_end_ns = 0;
};

// One recorded event of a thread, kept for overhead correction: when it was
// recorded and what it cost (by kind and entry point, costed by CostModel).
// kind 0 is no event but a wait mark: the controller's wait on workers'
// overhead (correction.h, waits), which costs `wait_ps`.
struct CostMark {
  int64_t ts_ns = 0;
  uint8_t kind = 0;   // EventKind; 0: a wait
  uint8_t flags = 0;  // EventFlags
  int64_t wait_ps = 0;
};

// A recording call's cost, measured in place by the collector (one call in
// correction.sample_every per thread; EventKind::kCostSample).
struct CostSample {
  int64_t ts_ns = 0;  // when it was recorded (right after the measured event)
  uint8_t kind = 0;   // the measured event's EventKind
  uint8_t flags = 0;  // its EventFlags
  uint64_t ps = 0;    // what the call cost its thread
};

// Sums of measured costs of one event kind: enough for a mean and its
// sampling variance.
struct SampleStats {
  uint64_t n = 0;
  double sum_ps = 0, sum_sq_ps2 = 0;
  void Add(double ps) {
    ++n;
    sum_ps += ps;
    sum_sq_ps2 += ps * ps;
  }
  double mean_ps() const { return n == 0 ? 0 : sum_ps / static_cast<double>(n); }
  // The samples' variance (n - 1), ps^2; 0 below two samples.
  double var_ps2() const {
    if (n < 2) return 0;
    const double m = mean_ps();
    return std::max(0.0, (sum_sq_ps2 - static_cast<double>(n) * m * m) / static_cast<double>(n - 1));
  }
};

// Per EventKind value (index 1..7): a process's cost samples.
using KindSamples = std::array<SampleStats, 8>;

// Per EventKind value: a recording call's usual cost in place, ps (0 not
// known yet): RecordStores::UsualCosts.
using KindCosts = std::array<double, 8>;

// A step's in-place recording costs against the run's usual ones (the
// correction's speed ratio, correction.h CostModel), per EventKind value:
// the clipped mean of the step's cost samples of that kind (ClippedMean),
// its standard error, how many; and the run's usual cost. Not the mean: a
// few samples of up to 2 us (a page fault, the flush thread on the ring's
// cache lines) among hundreds of 10 ns ones double a step's mean without
// the process running any slower. Not a median: the samples come in whole
// clock ticks (10 ns on this project's machines, where most calls take
// one), so a median stays put while the process runs 1.5x slower, and
// then jumps; the mean follows the share of calls that take two or three.
struct SpeedSamples {
  KindCosts step_mean_ps{}, step_se_ps{}, usual_ps{};
  std::array<uint64_t, 8> step_n{};
};

// The CPU sampler's signal handler, timed in place (wire.h
// Batch::cpu_handler_*): the run's totals, whose ratio is the mean a sample,
// and one figure a flush (the mean of its new samples), whose spread
// stands for the mean's.
struct HandlerStats {
  int64_t samples = 0;
  int64_t ps = 0;
  SampleStats per_flush;
};

struct Instant {
  int64_t ts_ns = 0;
  int64_t tid = 0;
  uint64_t payload = 0;
  uint32_t name = 0;
  uint32_t domain = 0;
  uint32_t category = 0;
  bool has_payload = false;
  bool payload_signed = false;  // an int64 payload (kFlagPayloadSigned)
};

// A span that is a training step on a controller.
struct StepSpan {
  int64_t number = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

// The controller's step edges found in one batch (end_ns is 0 for begun).
struct StepEdges {
  std::vector<StepSpan> begun;
  std::vector<StepSpan> closed;
};

// One CPU sample as the analyses see it (timeline.h keeps them per process;
// attribution.h classifies them).
struct CpuSample {
  int64_t ts_ns = 0;
  int64_t tid = 0;
  uint32_t object = 0;           // string id of the shared object's path, 0 unknown
  uint32_t module = 0;           // string id of the Python frame's module, 0 none
  int64_t weight_ns = 0;         // thread CPU time it stands for
  uint8_t category = 0;          // CpuCategory (attribution.h), set by ClassifyStepSamples
  bool frame_unread = false;     // its Python frame could not be read (kFlagFrameUnread): module 0
  uint32_t stack = 0;            // string id of its callers' objects, '\n'-joined outwards (kFlagNativeStack), 0 none
  bool profiler_thread = false;  // a thread the collector runs (kFlagProfilerThread)
};

// One off-CPU sample (collector/thread_states.h): thread `tid` was not
// running, for `reason` (OffCpuReason), for the `weight_ns` before ts_ns.
// cpu_wait: `weight_ns` of run-queue wait over the `interval_ns` before ts_ns
// (since the thread's run delay was read before; 0 when not known).
struct OffCpuSample {
  int64_t ts_ns = 0;
  int64_t tid = 0;
  uint8_t reason = 0;
  int64_t weight_ns = 0;
  int64_t interval_ns = 0;
  // What of `weight_ns` falls at or after `from_ns` (<= ts_ns): all of it,
  // but for a cpu_wait with its interval, whose wait is spread evenly over
  // the interval (a window's first reading covers the gap before it).
  int64_t WeightSince(int64_t from_ns) const {
    if (interval_ns <= 0) return weight_ns;
    const double part =
        static_cast<double>(std::clamp<int64_t>(ts_ns - from_ns, 0, interval_ns)) / static_cast<double>(interval_ns);
    return static_cast<int64_t>(static_cast<double>(std::min(weight_ns, interval_ns)) * part);
  }
};

// The process's CPU time (every thread's) at ts_ns (kProcessCpu).
struct ProcessCpuPoint {
  int64_t ts_ns = 0;
  int64_t cpu_ns = 0;
};

// A memory level from ts_ns on: a process's resident bytes (wire.h
// Batch::memory), or its GPU memory allocated on one device (the running
// total of its kMemory records, gpu_record.h).
struct MemoryPoint {
  int64_t ts_ns = 0;
  int64_t bytes = 0;
};

// Where a process's clock estimate comes from.
enum class ClockBasis : uint8_t {
  kNone = 0,       // no estimate yet: its times are taken as they are, unaligned
  kProbes = 1,     // fitted from its clock probes (ClockFit)
  kSameClock = 2,  // it reads the aggregator's own CLOCK_MONOTONIC (Hello.clock_domain): exact, no probes needed
  kProbesOff = 3,  // none sought: the run's clock.probe_interval_ms is 0 (times taken as they are, by choice)
};
// "none", "probes", "same_clock", "probes_off" (summary.json, run.json, the database).
inline const char* ClockBasisName(ClockBasis basis) {
  switch (basis) {
    case ClockBasis::kProbes: return "probes";
    case ClockBasis::kSameClock: return "same_clock";
    case ClockBasis::kProbesOff: return "probes_off";
    case ClockBasis::kNone: break;
  }
  return "none";
}

// What the profile itself proves of a worker's clock (ray_calls.h
// CausalOffsetBounds): at collector time x_ns its offset (aggregator minus
// collector) was at least lo_ns and at most hi_ns.
struct OffsetBound {
  int64_t x_ns = 0;
  int64_t lo_ns = INT64_MIN / 2, hi_ns = INT64_MAX / 2;
};

// Whether a process's clock could place its events in a step (clocks.h).
enum class ClockFitness : uint8_t {
  kGood = 0,     // exact, or fitted within the bound the step allows
  kExempt = 1,   // no estimate sought (kProbesOff): times as recorded
  kNone = 2,     // no estimate yet: times as recorded, unaligned
  kTooWide = 3,  // an estimate whose bound is above what the step allows
};
// "good", "exempt", "none", "too_wide" (summary.json clock.fitness).
inline const char* ClockFitnessName(ClockFitness fitness) {
  switch (fitness) {
    case ClockFitness::kExempt: return "exempt";
    case ClockFitness::kNone: return "none";
    case ClockFitness::kTooWide: return "too_wide";
    case ClockFitness::kGood: break;
  }
  return "good";
}

// A collector's clock against the aggregator's, as ClockFit (clock_fit.h)
// last estimated it from probes, or exact (kSameClock); the conversions are
// exact inverses.
struct ClockEstimate {
  ClockBasis basis = ClockBasis::kNone;
  int64_t offset_ns = 0;  // aggregator - collector, at ref_ns
  double drift = 0;       // d(offset)/d(collector time), e.g. 1e-6 = 1 ppm
  int64_t ref_ns = 0;     // collector time the offset refers to
  int64_t bound_ns = -1;  // stated error bound; -1 unknown
  int64_t probes = 0;     // samples received
  int64_t bursts = 0;     // bursts used
  // Bursts whose best round trip was far above the process's usual one
  // (its flush thread descheduled, a loaded path): kept as evidence, not fitted.
  int64_t outlier_bursts = 0;
  // Causality bounds (OffsetBound) used; whether they made the estimate
  // tighter than its probes alone; whether they contradicted the probes.
  int64_t causality_bounds = 0;
  bool causality_tightened = false;
  bool causality_conflict = false;

  // An estimate to convert times with (fitted, or exact); false: none (times
  // taken as they are).
  bool valid() const { return basis == ClockBasis::kProbes || basis == ClockBasis::kSameClock; }
  // Collector time -> aggregator time.
  int64_t ToAggregator(int64_t collector_ns) const {
    if (!valid()) return collector_ns;
    const double dx = static_cast<double>(collector_ns - ref_ns);
    return collector_ns + offset_ns + static_cast<int64_t>(std::llround(drift * dx));
  }
  // Aggregator time -> collector time.
  int64_t FromAggregator(int64_t aggregator_ns) const {
    if (!valid()) return aggregator_ns;
    // agg = c + off + d (c - ref)  =>  c = (agg - off + d ref) / (1 + d)
    const double c =
        (static_cast<double>(aggregator_ns - offset_ns) + drift * static_cast<double>(ref_ns)) / (1.0 + drift);
    return static_cast<int64_t>(std::llround(c));
  }
};

}  // namespace rlscope
