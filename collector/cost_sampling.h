// What recording costs the process, measured: in place, one call in
// correction.sample_every on every thread (CostSampler in collector.h, a
// kCostSample event after the call it timed), and at start-up, per record kind, on the
// calling thread into a scratch ring (Calibrate). The aggregator's overhead
// correction (aggregator/correction.h) removes these costs.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "collector/context.h"
#include "collector/recording.h"
#include "native/config.h"

namespace rlscope {

class CostSampling {
 public:
  CostSampling(CollectorContext& ctx, Recording& recording);

  // Calls between timed ones on a thread (correction.sample_every; 0 off).
  uint32_t sample_every() const { return sample_every_.load(std::memory_order_relaxed); }
  // From a config (the process's own at start, the run's once it came).
  void SetSampleEvery(const Config& config);
  // Now, on the clock a CostSampler times with (event ticks; a thread's own
  // virtual ns under test costs).
  uint64_t SampleClock(const ThreadState* ts) const {
    return __builtin_expect(test_clock_ != nullptr, 0) ? static_cast<uint64_t>(ts->virtual_own_ns)
                                                       : ReadTicks(clock_source_);
  }
  // After a timed call that recorded one event (the ring's last): its cost,
  // `ticks` less what timing it took (the clock read's own, measured at
  // start-up), as a kCostSample event right after it.
  void RecordCostSample(ThreadState* ts, uint64_t ticks);

  // Measures this collector's own cost per recorded event, per record kind,
  // on the calling thread: back to back through the recording code an NVTX
  // handler runs, into a scratch buffer that is never shipped; best of
  // several rounds, minus an empty loop. About a millisecond. Returns the
  // "push", "pop", "start", "end", "mark" and "sample" costs (ns). Under
  // test costs (test_clock.h) it measures nothing and returns those.
  std::map<std::string, double> Calibrate();
  // On: `ts` records into a scratch ring of its own ring's size (at least
  // 65,536 records) that the flush thread never reads, until off: a
  // calibration loop (rlscope_ray/calibration.py) pays recording's real
  // costs, cost samples included, and ships nothing. Off restores the
  // thread's ring; what the scratch ring holds is discarded. False when it
  // is already in (on) or out (off) of a scope. The calling thread's own.
  static bool ScratchScope(ThreadState* ts, bool on);

 private:
  CollectorContext& ctx_;
  Recording& recording_;
  const ClockSource clock_source_;
  TestClock* const test_clock_;
  std::atomic<uint32_t> sample_every_{0};
  std::atomic<uint64_t> timer_ticks_{0};  // a clock read's own cost, ticks (Calibrate; 0 under test costs)
};

}  // namespace rlscope
