#include "aggregator/release.h"

#include <algorithm>

namespace rlscope {

void ReleaseTracker::Resume(const ResumePoint& point) {
  resumed_ = point;
  ++resumed_.resumes;
  last_step_ = point.last_step;
  controller_resume_ns_ = point.controller_ns;
}

void ReleaseTracker::Seen(uint64_t session, ProcessTimeline* p) {
  if (auto r = resumed_.released.find(session); r != resumed_.released.end()) {
    p->SkipBefore(r->second);
    released_ns_[session] = r->second;
  }
}

void ReleaseTracker::ControllerBack(uint64_t session, ProcessTimeline* p) const {
  if (resumed_.last_step >= 0 && session == resumed_.controller_session) {
    p->ContinueSteps(resumed_.last_step + 1, resumed_.controller_ns);
  }
}

int64_t ReleaseTracker::released_ns(uint64_t session) const {
  auto r = released_ns_.find(session);
  return r != released_ns_.end() ? r->second : 0;
}

std::vector<Outgoing> ReleaseTracker::Done(const PendingStep& step, const ProcessMap& processes) {
  const StepSpan& s = step.span;
  last_step_ = std::max(last_step_, s.number);
  controller_resume_ns_ = step.controller_end_ns;
  std::vector<Outgoing> out;
  for (const auto& [session, p] : processes) {
    const ClockEstimate& clock = p->clock();
    // Without a fit, another host's times cannot be placed (it releases at
    // a later step, or keeps what it spooled until its spool is full).
    if (!clock.valid()) continue;
    int64_t release = p->ReleasePoint(clock.FromAggregator(s.end_ns));
    // A range open since before the previous step's end (a whole-run range)
    // does not hold the spool for ever: a restart loses only its open.
    if (released_end_ns_ != INT64_MIN) release = std::max(release, clock.FromAggregator(released_end_ns_));
    int64_t& last = released_ns_[session];
    if (release == 0 || release <= last) continue;
    last = release;
    wire::Control c;
    c.release_ns = release;
    out.push_back({session, wire::Encode(c), ""});
  }
  released_end_ns_ = s.end_ns;
  return out;
}

}  // namespace rlscope
