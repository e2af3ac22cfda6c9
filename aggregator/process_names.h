// A process's identity (its Hello) and the names its batches define: string
// ids (NVTX range and mark names, objects and modules of CPU samples), its
// threads' names, NVTX categories. Each string is kept to kMaxStringBytes,
// so a hostile or broken collector cannot hold megabytes per name until
// the run ends. One of ProcessTimeline's parts (timeline.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "aggregator/calibrated_costs.h"
#include "native/wire.h"

namespace rlscope {

class ProcessNames {
 public:
  // Longest string kept from the wire (names, labels, host): a longer one is
  // cut there and counted (truncated_strings).
  static constexpr size_t kMaxStringBytes = 4096;
  explicit ProcessNames(wire::Hello hello) : hello_(std::move(hello)), costs_(hello_.costs) { BoundIdentity(); }

  // A hello that arrives after the process's first batch replaces the
  // placeholder identity it was filed under.
  void Identify(const wire::Hello& hello);
  // The names a batch defines (strings, thread names, categories).
  void Add(const wire::Batch& batch);

  const wire::Hello& hello() const { return hello_; }
  // The hello's costs by kind and entry point (calibrated_costs.h).
  const CalibratedCosts& calibrated_costs() const { return costs_; }
  const wire::Identity& identity() const { return hello_.identity; }
  const char* String(uint32_t id) const;  // "" for 0 or unknown
  std::string ThreadName(int64_t tid) const;
  std::string CategoryName(uint32_t domain, uint32_t category) const;
  const std::map<int64_t, std::string>& thread_names() const { return thread_names_; }
  uint64_t truncated_strings() const { return truncated_strings_; }

 private:
  // Cuts `s` to kMaxStringBytes (counted); returns it.
  std::string Bounded(std::string s);
  void BoundIdentity();

  wire::Hello hello_;
  CalibratedCosts costs_;  // of hello_
  std::unordered_map<uint32_t, std::string> strings_;
  std::map<int64_t, std::string> thread_names_;
  std::map<std::pair<uint32_t, uint32_t>, std::string> categories_;
  uint64_t truncated_strings_ = 0;
};

}  // namespace rlscope
