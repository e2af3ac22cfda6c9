// Always on (config always_on): whether a step that `steps` did not choose
// is written in full anyway, decided once it is cut and corrected. The
// collectors keep every step's records until it is written
// (release.h), so the step that went wrong is itself written in full.
//
// A step is written in full when its time (corrected when correction is
// on) is above always_on.slower_than x the median of the recent eligible
// steps and above that median by always_on.min_slower_ms, or when a
// process's resident or GPU memory rose always_on.memory_jump_mb within it.
// Not eligible, neither to trigger nor as anyone's baseline: the run's first
// always_on.warmup_steps recorded steps and steps chosen up front (they
// record at the full sampling rate). A full write must not trigger the next
// step: a step's time is taken less the time it overlapped the aggregator's
// full writes (WroteFull), the most they can have slowed it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "aggregator/step_profile.h"
#include "native/config.h"

namespace rlscope {

class StepTriggers {
 public:
  // Fewest eligible steps before a step can be called slow.
  static constexpr size_t kMinBaseline = 3;

  // `step`: cut and corrected; `chosen`: `steps` selects it. "" when it
  // stays figures only (or is chosen), else why it is written in full.
  std::string Decide(const StepProfile& step, bool chosen, const Config::AlwaysOn& config);
  // A step was written in full from `begin_ns` to `end_ns` (aggregator clock).
  void WroteFull(int64_t begin_ns, int64_t end_ns);

 private:
  static constexpr size_t kWritesKept = 64;
  int64_t seen_ = 0;                                // recorded steps decided so far
  std::deque<int64_t> recent_;                      // eligible steps' times, newest last
  std::deque<std::pair<int64_t, int64_t>> writes_;  // the last full writes, newest last
};

}  // namespace rlscope
