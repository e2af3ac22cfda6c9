// The release protocol and resume (docs/wire_format.md).
//
// Release: after step s was written or skipped, every collector may forget
// what it spooled before the step's end (Control.release_ns), but no later
// than the begin of a range that ends at or after it, or is still open (a
// replay holds its open), unless that began before the previous step's end;
// none for a collector whose clock is not fitted yet (the time would be
// wrong). The controller keeps a step until the next one is written. The
// points are in run.json before any collector hears of them.
//
// Resume: a restarted aggregator takes the run up from run.json
// (ResumePoint, run_json.h): a process's replay leaves out what it was
// released before, the controller's role stays with the session that held
// it, and its steps up to the last done are not numbered or written again.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "aggregator/context.h"
#include "aggregator/records.h"
#include "aggregator/run_json.h"
#include "aggregator/step_scheduler.h"

namespace rlscope {

class ReleaseTracker {
 public:
  // Takes up where a previous aggregator of the run left it.
  void Resume(const ResumePoint& point);
  // What Resume took up (last_step -1: none), with `resumes` counting this
  // aggregator too once it resumed.
  const ResumePoint& resumed() const { return resumed_; }
  // A process first seen: a resumed run's replay of it leaves out what it
  // was released before the restart.
  void Seen(uint64_t session, ProcessTimeline* p);
  // Whether `session` may become the run's controller while none is: a
  // resumed run's role is the session that held it before the restart.
  bool MayControl(uint64_t session) const {
    return resumed_.controller_session == 0 || session == resumed_.controller_session;
  }
  // `p` became the run's controller: a resumed run's replayed steps up to
  // its last are neither numbered nor written again.
  void ControllerBack(uint64_t session, ProcessTimeline* p) const;
  // Step `step` was written or skipped: the run's resume point moves to it,
  // and each collector's release point (returned as Control messages, to
  // send once run.json holds the points).
  std::vector<Outgoing> Done(const PendingStep& step, const ProcessMap& processes);
  // The last release_ns `session` was sent (its clock); 0 none.
  int64_t released_ns(uint64_t session) const;
  int64_t last_step() const { return last_step_; }
  int64_t controller_resume_ns() const { return controller_resume_ns_; }

 private:
  ResumePoint resumed_;
  int64_t last_step_ = -1;                   // highest step written or skipped
  int64_t controller_resume_ns_ = 0;         // its end on the controller's clock
  int64_t released_end_ns_ = INT64_MIN;      // the last step released (its end, aggregator clock)
  std::map<uint64_t, int64_t> released_ns_;  // session -> the last release_ns sent (its clock)
};

}  // namespace rlscope
