// Processes the controller expected (wire::Expected: Ray actors whose
// runtime_env asks for profiling) that have not connected, each with why,
// as far as the aggregator can tell.
//
// A collector connects a moment after its actor is up (its flush thread
// calibrates, then says hello; on a loaded host that can be a step or two
// later): steps wait for an expected process within a grace counted from
// when it was first expected, so a step is not written listing a process
// as "not profiled" that is only starting, while one whose setup failed
// holds the run's steps once, for that grace, and never again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "aggregator/context.h"
#include "aggregator/step_profile.h"

namespace rlscope {

// Those of `expected` no process in `processes` is (by actor id, else by
// pid and node), each with a "reason" unless the reporter gave one. Pure.
std::vector<ExpectedProcess> NotProfiled(const std::vector<ExpectedProcess>& expected, const ProcessMap& processes);

// The controller's latest expected list, and when each of its processes
// was first expected.
class ExpectedList {
 public:
  void Set(const std::vector<ExpectedProcess>& processes, int64_t now_ns);
  const std::vector<ExpectedProcess>& processes() const { return processes_; }
  // A process connected or changed its identity (a hello): who is missing
  // is looked at again.
  void ProcessesChanged() { stale_ = true; }
  // True while a process of the list that has not connected was first
  // expected less than `wait_ns` before `now_ns`. `processes` unchanged
  // since the last call unless ProcessesChanged says so.
  bool Awaiting(const ProcessMap& processes, int64_t now_ns, int64_t wait_ns) const;

 private:
  // The actor id, else the pid and node: NotProfiled's identity.
  static std::string KeyOf(const ExpectedProcess& e);

  std::vector<ExpectedProcess> processes_;
  std::map<std::string, int64_t> since_ns_;  // by KeyOf; kept across lists (an entry that comes back keeps its time)
  // When each process of the list missing at the last look was first
  // expected; looked at again when stale_.
  mutable std::vector<int64_t> missing_since_ns_;
  mutable bool stale_ = true;
};

}  // namespace rlscope
