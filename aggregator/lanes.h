// A step's lanes: what the report's timeline picture draws (summary.json
// `timeline`, docs/summary_format.md). One lane per process: the
// controller's sub-task windows, a worker's outermost ranges on each thread;
// and one GPU lane per process whose GPU was busy (kernels, copies, sets,
// merged). Each box says which sub-task window it began in and whether it is
// the critical path's (its process ended last in that window). Pure; no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/intervals.h"
#include "aggregator/step_analysis.h"

namespace rlscope {

// A lane holds at most this many boxes: the longest (the rest counted).
inline constexpr size_t kMaxLaneBoxes = 256;

struct LaneBox {
  int64_t begin_ns = 0;  // from the step's begin (corrected)
  int64_t duration_ns = 0;
  std::string name;
  int subtask = -1;       // index into StepLanes::subtasks of the window it began in; -1 none
  bool critical = false;  // on the critical path
};

struct Lane {
  int process = -1;            // index into StepProfile::processes
  bool gpu = false;            // its GPU's busy time, else its ranges
  std::vector<LaneBox> boxes;  // by begin
  size_t omitted = 0;          // shorter boxes left out (kMaxLaneBoxes)
};

struct StepLanes {
  std::vector<std::string> subtasks;  // names in order of first occurrence
  std::vector<Lane> lanes;            // the controller's first, then node by node (LaneOrder), by rank, pid
};

class ProcessView;
// The node a process's lane is grouped under: its Ray node's IP and the
// first 8 digits of its id ("192.0.2.2 [a0ada472]"), else what it has of
// them, else its host.
std::string NodeOf(const ProcessView& p);

// A controller sub-task window, as the breakdown found it (corrected).
struct LaneWindow {
  std::string name;
  int64_t begin_ns = 0, end_ns = 0;
};

// `windows`: the controller's sub-task windows in time order; `gpu_busy`: per
// process, its GPU busy intervals (sorted, disjoint); `critical`: the
// critical path (step_analysis.h), whose segments are the windows'.
StepLanes BuildLanes(const StepProfile& profile, const std::vector<LaneWindow>& windows,
                     const std::vector<std::vector<Interval>>& gpu_busy, const std::vector<CriticalSegment>& critical);

}  // namespace rlscope
