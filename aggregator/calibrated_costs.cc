#include "aggregator/calibrated_costs.h"

namespace rlscope {

namespace {
// The caller-side cost keys (kCallerKeyPrefix + CostKey) and their
// "_spread"s, built once.
struct CallerKeys {
  std::string key[kCallers][CalibratedCosts::kKinds], spread[kCallers][CalibratedCosts::kKinds];
  CallerKeys() {
    for (int caller = 1; caller < kCallers; ++caller) {
      for (uint8_t kind = 1; kind < CalibratedCosts::kKinds; ++kind) {
        key[caller][kind] = std::string(kCallerKeyPrefix[caller]) + CostKey(kind);
        spread[caller][kind] = key[caller][kind] + "_spread";
      }
    }
  }
};

const CallerKeys& TheCallerKeys() {
  static const CallerKeys keys;
  return keys;
}
}  // namespace

const char* CostKey(uint8_t kind) {
  switch (static_cast<EventKind>(kind)) {
    case EventKind::kRangePush: return "push";
    case EventKind::kRangePop: return "pop";
    case EventKind::kRangeStart: return "start";
    case EventKind::kRangeEnd: return "end";
    case EventKind::kMark: return "mark";
    case EventKind::kCostSample: return "sample";
    case EventKind::kCpuSample: return "cpu_sample";
    case EventKind::kOffCpuSample:
    case EventKind::kProcessCpu: return "";  // the flush thread's looks: no cost charged
  }
  return "";
}

const std::string& CallerCostKey(int caller, uint8_t kind) { return TheCallerKeys().key[caller][kind]; }

CalibratedCosts::CalibratedCosts(const std::map<std::string, double>& costs) {
  auto get = [&](const std::string& key) -> std::optional<double> {
    auto it = costs.find(key);
    return it == costs.end() ? std::nullopt : std::optional<double>(it->second);
  };
  for (uint8_t kind = 1; kind < kKinds; ++kind) {
    own[kind] = get(CostKey(kind));
    for (int c = 1; c < kCallers; ++c) {
      caller[c][kind] = get(TheCallerKeys().key[c][kind]);
      caller_spread[c][kind] = get(TheCallerKeys().spread[c][kind]);
    }
  }
  cpu_sample_handler = get("cpu_sample_handler");
}

}  // namespace rlscope
