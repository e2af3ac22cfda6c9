#include "aggregator/clocks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace rlscope {

int64_t AllowedClockBoundNs(const Config& config, int64_t step_ns) {
  const double relative = config.clock.max_bound_fraction * static_cast<double>(std::max<int64_t>(0, step_ns));
  return std::max<int64_t>(config.clock.max_bound_us * 1000, static_cast<int64_t>(std::floor(relative)));
}

ClockFitness FitnessOf(const ClockEstimate& clock, int64_t allowed_ns) {
  switch (clock.basis) {
    case ClockBasis::kSameClock: return ClockFitness::kGood;
    case ClockBasis::kProbesOff: return ClockFitness::kExempt;
    case ClockBasis::kNone: return ClockFitness::kNone;
    case ClockBasis::kProbes: break;
  }
  return clock.bound_ns >= 0 && clock.bound_ns <= allowed_ns ? ClockFitness::kGood : ClockFitness::kTooWide;
}

Clocks::Clocks(std::string domain) : domain_(std::move(domain)) {}

void Clocks::Update(ProcessTimeline* p, const std::vector<wire::ProbeSample>& probes, bool probes_off) {
  fits_[p->hello().session].Add(probes);
  Place(p, !probes.empty(), probes_off);
}

void Clocks::AddCausality(ProcessTimeline* p, const std::vector<OffsetBound>& bounds, bool probes_off) {
  fits_[p->hello().session].AddBounds(bounds);
  Place(p, !bounds.empty(), probes_off);
}

void Clocks::Place(ProcessTimeline* p, bool moved, bool probes_off) {
  ClockEstimate e = fits_[p->hello().session].estimate();  // its probes counted whichever basis is used
  if (SameClock(p->hello())) {
    // The aggregator's own clock: exact. (Its probes still say what the
    // probe path would have stated: the fit's bound, kept apart.)
    const int64_t probes_seen = e.probes, bursts = e.bursts, outliers = e.outlier_bursts;
    e = ClockEstimate{};
    e.basis = ClockBasis::kSameClock;
    e.bound_ns = 0;
    e.probes = probes_seen, e.bursts = bursts, e.outlier_bursts = outliers;
  } else if (!e.valid() && probes_off) {
    e.basis = ClockBasis::kProbesOff;
  }
  const bool refit = e.basis == ClockBasis::kProbes && moved;
  p->SetClock(e);
  // Steps wait for it again once its bound has halved (or it has one at all).
  if (p->clock_waived() && (e.basis == ClockBasis::kSameClock ||
                            (e.valid() && (p->waived_bound_ns() < 0 || 2 * e.bound_ns <= p->waived_bound_ns())))) {
    p->UnwaiveClock();
  }
  if (refit) Check(*p, e);
}

void Clocks::Written(const StepProfile& step) {
  const int64_t middle = step.begin_ns + (step.end_ns - step.begin_ns) / 2;
  for (const ProcessSlice& slice : step.processes) {
    const ClockEstimate& e = slice.process->clock();
    if (e.basis != ClockBasis::kProbes) continue;
    std::deque<Use>& uses = uses_[slice.process->hello().session];
    uses.push_back({step.step, e.FromAggregator(middle), middle, e.bound_ns});
    if (uses.size() > kUsesKept) uses.pop_front();
  }
}

void Clocks::Check(const ProcessTimeline& p, const ClockEstimate& now) {
  auto it = uses_.find(p.hello().session);
  if (it == uses_.end()) return;
  std::deque<Use>& uses = it->second;
  for (auto u = uses.begin(); u != uses.end();) {
    // The truth is within now.bound_ns of now's placement: the step's was
    // off by at least the difference less that.
    const int64_t off_by = std::llabs(now.ToAggregator(u->collector_ns) - u->aggregator_ns) - now.bound_ns;
    if (off_by <= u->bound_ns) {
      ++u;
      continue;
    }
    ++revisions_total_;
    if (revisions_.size() < kRevisionsKept) revisions_.push_back({u->step, ProcessLabel(p), off_by, u->bound_ns});
    u = uses.erase(u);  // said once
  }
}

void Clocks::AskForBursts(const std::vector<uint64_t>& holders, int64_t now_ns, AggregatorContext* context) {
  for (uint64_t session : holders) {
    auto [it, fresh] = asked_ns_.try_emplace(session, now_ns);
    if (!fresh && now_ns - it->second < kProbeRequestEveryNs) continue;
    it->second = now_ns;
    ++probe_requests_;
    wire::Control ask;
    ask.probe = true;
    context->Send(session, ask);
  }
}

}  // namespace rlscope
