#include "aggregator/clock_fit.h"

#include <algorithm>
#include <cmath>

namespace rlscope {
namespace {

constexpr int64_t kBurstGapNs = 200000000;  // 200 ms
constexpr size_t kMaxSamples = 4096;
constexpr size_t kMaxBursts = 64;                 // recent history only: drift changes slowly
constexpr int64_t kMinDriftSpanNs = 10000000000;  // shorter spans give noise, not drift
constexpr size_t kMaxBounds = 4096;               // causality bounds kept (AddBounds)
constexpr int64_t kMaxBoundAgeNs = 10000000000;   // and used: those within 10 s of the estimate's ref_ns
// A burst is an outlier above kOutlierFactor x the usual half round trip
// plus kOutlierSlackNs (so that microseconds of jitter on a fast path are not).
constexpr double kOutlierFactor = 4.0;
constexpr double kOutlierSlackNs = 20000.0;
constexpr size_t kUsualBursts = 16;  // the usual round trip: of the most recent bursts

int64_t Rtt(const wire::ProbeSample& s) { return (s.t4 - s.t1) - (s.t3 - s.t2); }
double Offset(const wire::ProbeSample& s) {
  return (static_cast<double>(s.t2 - s.t1) + static_cast<double>(s.t3 - s.t4)) / 2.0;
}

}  // namespace

void ClockFit::AddBounds(const std::vector<OffsetBound>& bounds) {
  if (bounds.empty()) return;
  bounds_.insert(bounds_.end(), bounds.begin(), bounds.end());
  if (bounds_.size() > kMaxBounds) bounds_.erase(bounds_.begin(), bounds_.end() - kMaxBounds);
  Refit();
}

void ClockFit::Tighten(ClockEstimate* e) {
  e->causality_bounds = 0;
  e->causality_tightened = false;
  e->causality_conflict = false;
  // Each bound, moved to ref_ns along the fitted drift; only those of the
  // last kMaxBoundAgeNs (the drift's error grows with the distance).
  double lo = -1e300, hi = 1e300;
  for (const OffsetBound& c : bounds_) {
    if (std::llabs(c.x_ns - e->ref_ns) > kMaxBoundAgeNs) continue;
    const double shift = e->drift * static_cast<double>(e->ref_ns - c.x_ns);
    lo = std::max(lo, static_cast<double>(c.lo_ns) + shift);
    hi = std::min(hi, static_cast<double>(c.hi_ns) + shift);
    ++e->causality_bounds;
  }
  if (e->causality_bounds == 0) return;
  const double p_lo = static_cast<double>(e->offset_ns - e->bound_ns),
               p_hi = static_cast<double>(e->offset_ns + e->bound_ns);
  const double t_lo = std::max(lo, p_lo), t_hi = std::min(hi, p_hi);
  if (t_lo > t_hi) {
    e->causality_conflict = true;  // the probes and the calls disagree: the probes stand, said
    return;
  }
  const int64_t bound = static_cast<int64_t>(std::ceil((t_hi - t_lo) / 2)) + 1;
  if (bound >= e->bound_ns) return;  // no tighter than the probes
  e->offset_ns = static_cast<int64_t>(std::llround((t_lo + t_hi) / 2));
  e->bound_ns = bound;
  e->causality_tightened = true;
}

void ClockFit::Add(const std::vector<wire::ProbeSample>& samples) {
  if (samples.empty()) return;
  for (const auto& s : samples) {
    if (Rtt(s) >= 0 && s.t4 >= s.t1) samples_.push_back(s);  // a negative round trip is corrupt
  }
  estimate_.probes += static_cast<int64_t>(samples.size());
  if (samples_.size() > kMaxSamples) samples_.erase(samples_.begin(), samples_.end() - kMaxSamples);
  Refit();
}

namespace {

struct Point {
  double x, y, e;  // collector time, offset, rtt/2
};

// The estimate from `points` (by collector time; not empty), over `base`.
ClockEstimate FitPoints(const std::vector<Point>& points, ClockEstimate e) {
  e.basis = ClockBasis::kProbes;
  e.bursts = static_cast<int64_t>(points.size());
  const double x0 = points.back().x;
  double a = points.back().y, b = 0;
  const bool fit_drift = points.size() >= 2 && points.back().x - points.front().x >= kMinDriftSpanNs;
  if (!fit_drift) {
    // No drift yet: the offset lies in every burst's [y - e, y + e]. Where
    // they intersect, take its middle (the bound is then half its width);
    // where they do not, the burst with the shortest round trip.
    double lo = -1e300, hi = 1e300;
    for (const Point& p : points) lo = std::max(lo, p.y - p.e), hi = std::min(hi, p.y + p.e);
    if (lo <= hi) {
      e.offset_ns = static_cast<int64_t>(std::llround((lo + hi) / 2));
      e.drift = 0;
      e.ref_ns = static_cast<int64_t>(x0);
      e.bound_ns = static_cast<int64_t>(std::ceil((hi - lo) / 2)) + 1;
      return e;
    }
    const Point* best = &points.front();
    for (const Point& p : points) best = p.e < best->e ? &p : best;
    a = best->y;
  }
  if (fit_drift) {
    // Least squares of y = a + b (x - x0), each burst weighted by 1 / e^2
    // (a tight round trip says more).
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const Point& p : points) {
      const double w = 1.0 / std::max(1.0, p.e * p.e);
      const double dx = p.x - x0;
      sw += w, sx += w * dx, sy += w * p.y, sxx += w * dx * dx, sxy += w * dx * p.y;
    }
    const double det = sw * sxx - sx * sx;
    if (det > 0) {
      b = (sw * sxy - sx * sy) / det;
      a = (sy - b * sx) / sw;
    }
  }
  // The bound: the worst, over the tighter half of the bursts (their half
  // round trip at most the median's), of how far the fit may be from the
  // truth there (half round trip plus residual). The fit weighs the wider
  // bursts little; so does the bound, which reflects the best ones, not a
  // moment of load (the drift fit's only: the intersection above is exact).
  std::vector<double> kept_e;
  for (const Point& p : points) kept_e.push_back(p.e);
  std::sort(kept_e.begin(), kept_e.end());
  const double tight_e = fit_drift ? kept_e[(kept_e.size() - 1) / 2] : kept_e.back();
  double bound = 0;
  for (const Point& p : points) {
    if (p.e <= tight_e) bound = std::max(bound, p.e + std::fabs(p.y - (a + b * (p.x - x0))));
  }
  e.offset_ns = static_cast<int64_t>(std::llround(a));
  e.drift = b;
  e.ref_ns = static_cast<int64_t>(x0);
  e.bound_ns = static_cast<int64_t>(std::ceil(bound));
  return e;
}

}  // namespace

void ClockFit::Refit() {
  if (samples_.empty()) return;
  std::vector<wire::ProbeSample> sorted = samples_;
  std::sort(sorted.begin(), sorted.end(),
            [](const wire::ProbeSample& a, const wire::ProbeSample& b) { return a.t1 < b.t1; });
  std::vector<Point> points;
  const wire::ProbeSample* best = nullptr;
  int64_t last_t1 = 0;
  auto close_burst = [&] {
    if (best != nullptr) {
      points.push_back(
          {static_cast<double>(best->t1 + best->t4) / 2.0, Offset(*best), static_cast<double>(Rtt(*best)) / 2.0});
    }
    best = nullptr;
  };
  for (const auto& s : sorted) {
    if (best != nullptr && s.t1 - last_t1 > kBurstGapNs) close_burst();
    if (best == nullptr || Rtt(s) < Rtt(*best)) best = &s;
    last_t1 = s.t1;
  }
  close_burst();
  if (points.size() > kMaxBursts) points.erase(points.begin(), points.end() - kMaxBursts);

  // A burst whose best round trip is far above the usual one (the lower
  // median of the last kUsualBursts bursts') is evidence of a slow path, not
  // of the clock: left out of the fit, unless it contradicts the fit (its
  // interval outside the fit's there), when every burst is fitted.
  std::vector<double> recent;
  for (size_t i = points.size() > kUsualBursts ? points.size() - kUsualBursts : 0; i < points.size(); ++i) {
    recent.push_back(points[i].e);
  }
  std::sort(recent.begin(), recent.end());
  const double outlier_above = kOutlierFactor * recent[(recent.size() - 1) / 2] + kOutlierSlackNs;
  std::vector<Point> kept, outliers;
  for (const Point& p : points) (p.e > outlier_above ? outliers : kept).push_back(p);
  ClockEstimate e = FitPoints(kept, estimate_);
  e.outlier_bursts = static_cast<int64_t>(outliers.size());
  for (const Point& o : outliers) {
    const double fitted = static_cast<double>(e.offset_ns) + e.drift * (o.x - static_cast<double>(e.ref_ns));
    if (std::fabs(o.y - fitted) > o.e + static_cast<double>(e.bound_ns)) {
      e = FitPoints(points, estimate_);
      e.outlier_bursts = 0;
      break;
    }
  }
  Tighten(&e);
  estimate_ = e;
}

}  // namespace rlscope
