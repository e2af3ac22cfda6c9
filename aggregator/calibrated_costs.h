// The start-up calibration's costs (a Hello's `costs`, by key: "push",
// "py_range_push", "py_range_push_spread", ...) looked up once per process,
// by event kind and entry point. A cost model is made per process and step
// (correction.h, CostModel): its fifty lookups by string key were a few
// percent of an always-on aggregator's CPU. Kept with the process's names
// (process_names.h), made when it says hello.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "native/event.h"

namespace rlscope {

// The key of an event kind's own cost in Hello::costs ("push", ... "sample",
// "cpu_sample"; "" for the flush thread's looks, which cost nothing).
const char* CostKey(uint8_t kind);
// The key of a caller side's (kCallerKeyPrefix[caller] + CostKey(kind)).
const std::string& CallerCostKey(int caller, uint8_t kind);

struct CalibratedCosts {
  static constexpr int kKinds = 8;  // EventKind values 1..7, as CostTable::kKinds
  CalibratedCosts() = default;
  explicit CalibratedCosts(const std::map<std::string, double>& costs);
  std::optional<double> own[kKinds];         // CostKey(kind)
  std::optional<double> cpu_sample_handler;  // "cpu_sample_handler"
  // kCallerKeyPrefix[caller] + CostKey(kind), and its "_spread".
  std::optional<double> caller[kCallers][kKinds];
  std::optional<double> caller_spread[kCallers][kKinds];
};

}  // namespace rlscope
