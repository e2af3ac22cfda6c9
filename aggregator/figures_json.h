// A step's figures: one line of figures.jsonl (always on, docs/always_on.md),
// the compact form of its summary.json that every written or figures-only
// step gets. The same keys as summary.json where they mean the same (the run
// database reads both with one function), fewer of them (the tables' and
// attributions' numbers to four significant digits, an attribution only
// what is not zero); about 2 KB per process on the PPO demo. No I/O.
#pragma once

#include <string>

#include "aggregator/step_profile.h"

namespace rlscope {

// Most ranges and kernels listed per process (by total time), most
// sub-tasks (by time; the rest counted in subtasks_omitted), and the
// longest name kept: the rest are what a full trace is for.
inline constexpr size_t kFiguresTopRanges = 8, kFiguresTopKernels = 5, kFiguresSubtasks = 16, kFiguresNameChars = 96;

// The step's line of figures.jsonl, newline included.
std::string StepFiguresJson(const StepProfile& step);

}  // namespace rlscope
