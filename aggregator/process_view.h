// What a cut step keeps of each of its processes (ProcessSlice::process):
// values taken when the step is cut, so the step's data model holds no
// pointer into the timelines it was cut from. Its names are the timeline's
// own ProcessNames, shared and immutable: a timeline that changes its names
// while a step holds them changes a copy (ProcessTimeline, copy on write).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "aggregator/process_names.h"
#include "aggregator/records.h"

namespace rlscope {

class ProcessView {
 public:
  // The cumulative counts and state of the process when it was viewed
  // (ProcessTimeline's accessors of the same names say what each is).
  struct Counts {
    uint64_t events_received = 0, dropped = 0, unmatched = 0;
    uint64_t interrupted_samples = 0, cpu_samples_received = 0, events_recorded = 0;
    bool said_bye = false, lost = false;
  };

  ProcessView(std::shared_ptr<const ProcessNames> names, const ClockEstimate& clock, bool controller, Counts counts)
      : names_(std::move(names)), clock_(clock), controller_(controller), counts_(counts) {}

  const wire::Hello& hello() const { return names_->hello(); }
  const CalibratedCosts& calibrated_costs() const { return names_->calibrated_costs(); }
  const wire::Identity& identity() const { return names_->identity(); }
  const char* String(uint32_t id) const { return names_->String(id); }  // "" for 0 or unknown
  std::string ThreadName(int64_t tid) const { return names_->ThreadName(tid); }
  std::string CategoryName(uint32_t domain, uint32_t category) const { return names_->CategoryName(domain, category); }
  // The run's controller (ProcessTimeline::is_controller).
  bool is_controller() const { return controller_; }
  // Its clock against the aggregator's when the step was cut.
  const ClockEstimate& clock() const { return clock_; }
  uint64_t events_received() const { return counts_.events_received; }
  uint64_t dropped() const { return counts_.dropped; }
  uint64_t unmatched() const { return counts_.unmatched; }
  uint64_t interrupted_samples() const { return counts_.interrupted_samples; }
  uint64_t cpu_samples_received() const { return counts_.cpu_samples_received; }
  uint64_t events_recorded() const { return counts_.events_recorded; }
  bool said_bye() const { return counts_.said_bye; }
  bool lost() const { return counts_.lost; }
  uint64_t truncated_strings() const { return names_->truncated_strings(); }
  const std::map<int64_t, std::string>& thread_names() const { return names_->thread_names(); }

 private:
  std::shared_ptr<const ProcessNames> names_;
  ClockEstimate clock_;
  bool controller_ = false;
  Counts counts_;
};

// The label a process's track gets in traces, also used in summaries: "host /
// name (role, rank R) / pid P", or for a Ray process "node IP [node id
// prefix] / actor class (rank R) / pid P".
std::string ProcessLabel(const ProcessView& p);
// The process's name as outputs show it: its Ray actor's class once the
// collector learnt it (labels.actor_class), else the name it said hello
// with (its command line's; a Ray worker's title when it started, such as
// "ray::IDLE", before it became an actor).
std::string ProcessName(const ProcessView& p);

}  // namespace rlscope
