// The run's clocks: each process's estimate against the aggregator's clock,
// whether it can place the process's events in a step, the probe bursts the
// aggregator asks for, and the steps a later estimate shows were placed off.
//
// A step is cut on the aggregator's clock: a process's events are moved
// onto it with its estimate (records.h ClockEstimate), which is only as good
// as its bound. A process that reads the aggregator's own CLOCK_MONOTONIC
// (the same Hello.clock_domain) is exact, without probes; one whose probes
// the run turned off (clock.probe_interval_ms 0) is taken as it is, by
// choice; any other is fitted from its probes (clock_fit.h). A step allows a
// bound of max(clock.max_bound_us, clock.max_bound_fraction x the step's
// duration). A process with no estimate yet, or one wider than the step
// allows, holds the step (step_scheduler.h): the aggregator asks it for a
// probe burst (Control.probe, at most every kProbeRequestEveryNs) until the
// estimate is good or flush.step_grace_ms runs out, and then the step is
// written marked (reason clock_unaligned, the process named under
// clock_warnings): never placed by a guess silently. A process whose clock
// so held a step through the whole grace holds no later one (each is
// marked, not held: ProcessTimeline::WaiveClock, said once in the run's
// notes) until its bound has halved, so a path that cannot give the bound
// costs one grace, not one per step.
//
// Each step written with a fitted estimate is remembered (the last
// kUsesKept per process); an estimate fitted later that proves one of them
// off by more than the bound it stated, beyond both bounds, is a revision
// (run.json clock_revisions: which step, which process, by how much).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "aggregator/clock_fit.h"
#include "aggregator/context.h"
#include "aggregator/records.h"
#include "aggregator/step_profile.h"
#include "aggregator/timeline.h"
#include "native/config.h"
#include "native/wire.h"

namespace rlscope {

// The largest bound a step of `step_ns` allows (config clock.max_bound_*).
int64_t AllowedClockBoundNs(const Config& config, int64_t step_ns);

ClockFitness FitnessOf(const ClockEstimate& clock, int64_t allowed_ns);

// A step waits for this fitness (until the grace runs out).
inline bool HoldsStep(ClockFitness fitness) {
  return fitness == ClockFitness::kNone || fitness == ClockFitness::kTooWide;
}

class Clocks {
 public:
  static constexpr int64_t kProbeRequestEveryNs = 200000000;  // a burst takes milliseconds, a loaded one more
  static constexpr size_t kUsesKept = 64;                     // steps remembered per process
  static constexpr size_t kRevisionsKept = 1000;              // in run.json; counted beyond

  // `domain`: the aggregator's own clock (native/clock.h ClockDomain).
  explicit Clocks(std::string domain);
  // Whether a process that said `hello` reads the aggregator's own clock
  // (its times are placed exactly; Control.same_clock tells it so).
  bool SameClock(const wire::Hello& hello) const { return !domain_.empty() && hello.clock_domain == domain_; }

  // Places `p`'s clock after its hello or a batch's probes (`probes`, any):
  // exact on the aggregator's own clock, else fitted, else none (or, with
  // `probes_off`, none sought). A refit checks the steps written before it.
  void Update(ProcessTimeline* p, const std::vector<wire::ProbeSample>& probes, bool probes_off);
  // What a step's Ray calls prove of `p`'s clock (ray_calls.h
  // CausalOffsetBounds): the estimate tightens where they are tighter than
  // the probes (ClockFit::AddBounds), for the steps cut after.
  void AddCausality(ProcessTimeline* p, const std::vector<OffsetBound>& bounds, bool probes_off);
  // A step was written: each process's estimate in it, to check later.
  void Written(const StepProfile& step);
  // Asks each of `holders` (sessions) for a probe burst, at most every
  // kProbeRequestEveryNs each.
  void AskForBursts(const std::vector<uint64_t>& holders, int64_t now_ns, AggregatorContext* context);

  uint64_t probe_requests() const { return probe_requests_; }
  const std::vector<ClockRevision>& revisions() const { return revisions_; }
  uint64_t revisions_total() const { return revisions_total_; }

 private:
  // Places `p`'s clock from its fit (see Update); `refit`: the fit moved.
  void Place(ProcessTimeline* p, bool refit, bool probes_off);
  struct Use {
    int64_t step, collector_ns, aggregator_ns, bound_ns;
  };
  void Check(const ProcessTimeline& p, const ClockEstimate& now);

  const std::string domain_;
  std::map<uint64_t, ClockFit> fits_;  // by session
  std::map<uint64_t, std::deque<Use>> uses_;
  std::map<uint64_t, int64_t> asked_ns_;
  uint64_t probe_requests_ = 0;
  std::vector<ClockRevision> revisions_;
  uint64_t revisions_total_ = 0;
};

}  // namespace rlscope
