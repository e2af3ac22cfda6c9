// Overhead correction of a whole cut step, across its processes, over one
// Corrector per process (correction.h: the per-thread model and its costs).
//
// Across processes (waits): a controller's sub-task window that waits on
// Ray actor calls (verl: dispatch, ray.get, then on), or on anything else
// the user links by a key (a queue, a pipe, a collective:
// rlscope_ray.waited(key) in the controller once the wait is over, and
// rlscope_ray.range(name, link=key) around the work in the other process),
// ends when the last of them is done. Once the workers are corrected that call finishes earlier,
// and so does the window: the controller's thread gets a wait mark where
// the last awaited work ended, costing the difference, so its "ray.got"
// marks, the window's end and everything after on that thread move earlier
// too. Only results the controller got in the window count (their keys link
// the two sides); a worker busy on its own is not waited for. Each step says
// which waits were linked (StepProfile::waits): a result whose key no
// profiled process's range carries leaves the wait uncorrected.
//
// And the other way (calls): a worker that waited idle for a call starts
// it when the call arrives, so its overhead from before the wait does not
// make the call start earlier; the controller's overhead before the submit
// does. At the begin of each call it executed (its method range, keyed like
// the controller's submit), the worker's thread is re-anchored: its shift
// there becomes the controller's shift at the submit, or less when the
// thread was busy until just before (it cannot start before it was free).
// So a corrected call never starts before its corrected submit.
//
// And work nothing links (idle threads): a worker woken by something the
// profile does not see (a pipe from the controller, a queue, a timer) and
// idle until then for longer than the shift it carries would have waited
// that much longer without the profiler: its past overhead does not move
// what it does next. Where no call is known to have started it, a top-level
// range after such a gap is re-anchored at the least of its thread's shift
// and the controller's at that time (the step's reference, and the one
// waker every process shares): its own past no longer makes it start
// before the controller's work that likely woke it, and it is never shifted
// more than either. A range after a gap of busy, unannotated work is
// shifted less than its thread paid: the step's corrected figures are the
// controller's and do not change.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "aggregator/correction.h"
#include "aggregator/records.h"
#include "aggregator/step_profile.h"

namespace rlscope {

// A controller window that waits on workers: raw times, aggregator clock;
// `tid` is the thread that closed it (where its wait mark goes, at the
// latest end of its awaited work).
struct WaitWindow {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t tid = 0;
  std::string capture;  // the sub-task occurrence ("gen", "gen_2")
};

// What a worker did last, of what a window waited for, before correction:
// when it ended (clipped to the window), on which thread, for which call.
struct LastWork {
  int64_t end_ns = INT64_MIN;  // INT64_MIN: nothing awaited in the window
  int64_t tid = 0;
  uint64_t key = 0;
};

// Which window (index into sorted, disjoint `windows`) got each awaited
// call's result: `got` maps a call's key to when the controller got it
// (its "ray.got" mark, session.py), raw.
std::map<uint64_t, size_t> AwaitedIn(const std::map<uint64_t, int64_t>& got, const std::vector<WaitWindow>& windows);

// Per window, a worker's last awaited work: its spans whose payload is an
// awaited call's key (the Ray method wrapper's range, ray_worker.py), raw.
std::vector<LastWork> LastWorkIn(const std::vector<Span>& spans, const std::map<uint64_t, size_t>& awaited,
                                 const std::vector<WaitWindow>& windows);

// A worker's last awaited work in a window; `anchored`: its call was
// re-anchored at the controller's submit (Corrector::Reanchor).
struct AwaitedWork {
  const Corrector* worker = nullptr;  // nullptr: the worker paid nothing
  LastWork last;
  bool anchored = false;
};

// How much longer the controller waited in a window than its own
// correction explains: its corrected time when the last awaited work ended
// (raw T, T - controller_shift_ns(T)) minus the latest corrected end of the
// awaited work, never negative. A re-anchored call's work ends at
// L - its thread's shift there; any other is taken to have begun the window
// in step with the controller: L - (controller_shift_ns(window begin) +
// what its thread paid in the window). `controller_shift_ns(t)`: the
// controller's shift at raw t on the window's thread, with the waits of
// earlier windows.
int64_t WaitShrinkNs(const std::vector<AwaitedWork>& work, int64_t window_begin_ns,
                     const std::function<int64_t(int64_t)>& controller_shift_ns);

// Overhead correction of a cut step (its slices' cost inputs, cut with it
// and consumed here: ProcessSlice::cost_marks): the workers' costs first, then the
// controller with its waits on them (its windows: the occurrences of
// `subtasks`, occurrences.h), then the workers with their calls re-anchored at
// the controller's corrected submits. Costs are each process's Hello costs
// times `scale`. Every slice gets its Overhead (step_profile.h), the step
// `corrected`, `correction_scale` and `corrected_end_ns` (the controller's
// step range's corrected end), and every time is held to that end. With
// `second_core`, work that reads the step apart runs side by side (the
// workers' charges beside the calls' list; half the workers' times moved
// beside the others'): the same result.
void CorrectStep(StepProfile* step, const std::vector<std::string>& subtasks, double scale, bool second_core = false);

}  // namespace rlscope
