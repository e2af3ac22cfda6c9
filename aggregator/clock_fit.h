// Estimating one collector's clock against the aggregator's, from
// four-timestamp probes (wire::ProbeSample), as NTP does.
//
// Per sample: round trip rtt = (t4 - t1) - (t3 - t2); offset (aggregator
// minus collector) = ((t2 - t1) + (t3 - t4)) / 2, within +-rtt/2 whatever the
// path asymmetry. Samples closer than 200 ms form a burst, of which the
// shortest round trip counts. Until bursts span 10 s (shorter spans would
// read microseconds of noise as tens of ppm of drift) the offset is the middle
// of the intersection of every burst's [offset - rtt/2, offset + rtt/2], and
// the bound half its width; after that, offset + drift by weighted least
// squares (1 / (rtt/2)^2), the bound being the worst, over the tighter half
// of the bursts (rtt/2 at most the median's), of rtt/2 plus the residual.
// A burst whose best round trip is above 4x the usual one (the lower median
// of the last 16 bursts') plus 20 us is an outlier: counted
// (ClockEstimate::outlier_bursts), not fitted, unless one contradicts the
// fit (its interval outside the fit's there): then every burst is fitted.
#pragma once

#include <cstdint>
#include <vector>

#include "aggregator/records.h"
#include "native/wire.h"

namespace rlscope {

// The estimator: fed every probe sample of one collector, it refits the
// estimate (records.h ClockEstimate, which converts times) after each.
class ClockFit {
 public:
  void Add(const std::vector<wire::ProbeSample>& samples);
  // One-sided bounds the profile itself proves (ray_calls.h
  // CausalOffsetBounds): where they are tighter than the probes, the
  // estimate is the middle of both intervals' intersection, its bound half
  // its width (causality_tightened); where they contradict the probes, the
  // probes stand (causality_conflict). Bounds within 10 s of the estimate.
  void AddBounds(const std::vector<OffsetBound>& bounds);
  const ClockEstimate& estimate() const { return estimate_; }

 private:
  void Refit();
  void Tighten(ClockEstimate* e);
  std::vector<OffsetBound> bounds_;         // AddBounds, the most recent
  std::vector<wire::ProbeSample> samples_;  // the most recent, bounded
  ClockEstimate estimate_;
};

}  // namespace rlscope
