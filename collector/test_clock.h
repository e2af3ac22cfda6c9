// Test-only virtual event costs: overhead correction made exactly testable.
//
// With RLSCOPE_TEST_COSTS="push=2000,pop=1000,py_nvtx_push=5000,..." (keys as
// in Hello::costs, wire.h; ns per event) every recorded event costs its
// process a known, virtual amount instead of a measured one: the collector
// adds it to a virtual clock and stamps the event at real time plus that
// clock, as if the recording had really taken that long, and advertises
// exactly these costs in its Hello (start-up calibration is off).
// `push=2000~500`: each push costs a different amount, uniform in
// [1500, 2500] (a fixed pseudo-random sequence): costs that vary.
// `calibrated=0.7`: the Hello advertises the costs times 0.7, as a start-up
// calibration that under-estimates them would. `spread=0.3`: it also
// advertises each caller-side key's `<key>_spread` as 0.3 times its
// advertised cost, as a calibration whose rounds scattered would.
// `sample=N`: what recording a cost sample costs (EventKind::kCostSample; default 0), `cpu_sample=N` what
// a CPU sample costs its thread (EventKind::kCpuSample, cpu_sampler.h). In-place cost
// sampling reads the thread's own virtual costs (OwnNs): the handler's
// part, not the caller-side py_nvtx_* / py_fast_* / py_annotate_* / py_range_* part, which
// comes before it. The rule is the correction model's (aggregator/
// correction.h): the cost is spent just before the event's timestamp; an
// event's own cost by kind, plus the caller side of its side of the pair for
// the entry point its flags name (CallerOf, event.h). It is written here on its own, not
// shared with the aggregator, so that an end-to-end test compares two
// independent computations.
//
// RLSCOPE_TEST_CLOCK names a file holding the virtual clock (8 bytes,
// created when missing) that every process of a test shares: an event in one
// process then delays everything after it in all of them, as a real cost
// paid by a worker delays the controller waiting on it. Without it the clock
// is the process's own. Tests read the clock (rlscope_test_clock_ns) around
// a step: the corrected step must equal the raw one minus what the clock
// advanced in between, to the nanosecond before rounding.
//
// Never set in production: the timestamps are shifted on purpose.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "native/event.h"

namespace rlscope {

class TestClock {
 public:
  // From RLSCOPE_TEST_COSTS and RLSCOPE_TEST_CLOCK: nullptr when the costs
  // are unset; throws std::runtime_error naming the bad part of either.
  static std::unique_ptr<TestClock> FromEnvironment();
  ~TestClock();

  // Any thread: advances the clock by what an event of `kind` with `flags`
  // costs and returns the clock after it (ns, added to the event's time);
  // `*own_ns` gets the handler's part of it (without the caller side).
  int64_t Advance(uint8_t kind, uint8_t flags, int64_t* own_ns) {
    int64_t own = 0, caller = 0;
    if (kind < kKinds) {
      own = Draw(ns_[0][kind], jitter_ns_[0][kind]);
      if (const int c = static_cast<int>(CallerOf(flags)); c != 0) caller = Draw(ns_[c][kind], jitter_ns_[c][kind]);
    }
    *own_ns = own;
    // Relaxed: the clock only has to add up; each event's stamp is its own.
    return clock_->fetch_add(own + caller, std::memory_order_relaxed) + own + caller;
  }
  int64_t Now() const { return clock_->load(std::memory_order_relaxed); }
  // The advertised costs (the Hello's), ns per event.
  const std::map<std::string, double>& costs() const { return costs_; }

 private:
  TestClock() = default;
  // `base` +- up to `jitter`, uniform, from a fixed sequence.
  int64_t Draw(int64_t base, int64_t jitter) {
    if (jitter == 0) return base;
    uint64_t z = draws_.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull + 1;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return base - jitter + static_cast<int64_t>(z % static_cast<uint64_t>(2 * jitter + 1));
  }
  static constexpr int kKinds = 8;  // EventKind values 1..7
  // [caller][kind]: caller 0 (Caller::kNone) is the kind's own cost; the
  // others the caller side of an event with that caller's flag (event.h).
  int64_t ns_[kCallers][kKinds] = {};
  int64_t jitter_ns_[kCallers][kKinds] = {};
  std::atomic<uint64_t> draws_{0};
  std::map<std::string, double> costs_;
  std::atomic<int64_t> local_{0};
  std::atomic<int64_t>* clock_ = &local_;  // local_, or the shared file's mapping
  void* mapping_ = nullptr;
};

}  // namespace rlscope
