#include "aggregator/correction.h"

#include <algorithm>
#include <cmath>

#include "native/event.h"

namespace rlscope {

namespace {
int64_t Ps(double ns) { return static_cast<int64_t>(std::llround(ns * 1000.0)); }
}  // namespace

CostModel::CostModel(const std::map<std::string, double>& costs, double scale) {
  auto get = [&](const char* key) {
    auto it = costs.find(key);
    if (it == costs.end()) return 0.0;
    costs_ns_[key] = it->second * scale;
    return it->second * scale;
  };
  own_ps_[static_cast<int>(EventKind::kRangePush)] = Ps(get("push"));
  own_ps_[static_cast<int>(EventKind::kRangePop)] = Ps(get("pop"));
  own_ps_[static_cast<int>(EventKind::kRangeStart)] = Ps(get("start"));
  own_ps_[static_cast<int>(EventKind::kRangeEnd)] = Ps(get("end"));
  own_ps_[static_cast<int>(EventKind::kMark)] = Ps(get("mark"));
  // Caller-side costs of a whole pair, charged on its opening event.
  nvtx_ex_ps_[static_cast<int>(EventKind::kRangePush)] = Ps(get("py_nvtx_push"));
  nvtx_ex_ps_[static_cast<int>(EventKind::kRangeStart)] = Ps(get("py_nvtx_start"));
  nvtx_ex_ps_[static_cast<int>(EventKind::kMark)] = Ps(get("py_nvtx_mark"));
}

int64_t CostModel::CostPs(uint8_t kind, uint8_t flags) const {
  if (kind >= kKinds) return 0;
  int64_t ps = own_ps_[kind];
  if ((flags & kFlagViaNvtxEx) != 0) ps += nvtx_ex_ps_[kind];
  return ps;
}

Corrector::Corrector(const std::map<int64_t, std::vector<CostMark>>& marks, const CostModel& model,
                     int64_t begin_ns)
    : begin_ns_(begin_ns) {
  int64_t total_ps = 0, waits_ps = 0;
  for (const auto& [tid, list] : marks) {
    Thread t;
    std::vector<CostMark> sorted;
    sorted.reserve(list.size());
    for (const CostMark& m : list) {
      if (m.ts_ns > begin_ns) sorted.push_back(m);  // the step's own begin is the anchor
    }
    // Recording order is time order on one thread, except for clock-fit
    // rounding; keep it stable.
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const CostMark& a, const CostMark& b) { return a.ts_ns < b.ts_ns; });
    t.ts.reserve(sorted.size());
    t.cum_ps.reserve(sorted.size());
    int64_t cum = 0;
    for (const CostMark& m : sorted) {
      if (m.kind == 0) {
        cum += m.wait_ps;
        waits_ps += m.wait_ps;
      } else {
        cum += model.CostPs(m.kind, m.flags);
        ++events_;
      }
      t.ts.push_back(m.ts_ns);
      t.cum_ps.push_back(cum);
    }
    total_ps += cum;
    tids_.push_back(tid);
    threads_.emplace(tid, std::move(t));
  }
  total_ns_ = total_ps / 1000;
  waits_ns_ = waits_ps / 1000;
}

int64_t Corrector::CostPs(const Thread& th, int64_t t, bool before) {
  // Events at or before t (strictly before, with `before`).
  const auto end = before ? std::lower_bound(th.ts.begin(), th.ts.end(), t)
                          : std::upper_bound(th.ts.begin(), th.ts.end(), t);
  const size_t n = static_cast<size_t>(end - th.ts.begin());
  return n == 0 ? 0 : th.cum_ps[n - 1];
}

int64_t Corrector::CostPs(int64_t tid, int64_t t) const {
  auto it = threads_.find(tid);
  return it == threads_.end() ? 0 : CostPs(it->second, t, false);
}

int64_t Corrector::ShiftPs(const Thread& th, int64_t t) const {
  auto a = std::upper_bound(th.anchors.begin(), th.anchors.end(), t,
                            [](int64_t v, const std::pair<int64_t, int64_t>& x) { return v < x.first; });
  if (a == th.anchors.begin()) return CostPs(th, t, false);
  --a;  // the last re-anchoring at or before t
  return a->second + CostPs(th, t, false) - CostPs(th, a->first, true);
}

int64_t Corrector::ShiftNs(int64_t tid, int64_t t) const {
  auto it = threads_.find(tid);
  return it == threads_.end() ? 0 : ShiftPs(it->second, t) / 1000;
}

bool Corrector::Reanchor(int64_t tid, int64_t begin_ns, int64_t caller_shift_ns) {
  auto it = threads_.find(tid);
  if (it == threads_.end()) return false;  // paid nothing in the step: nothing moves
  Thread& th = it->second;
  if (!th.anchors.empty() && begin_ns <= th.anchors.back().first) return false;  // not in time order
  // The thread was free from its last event before `begin_ns` (or the
  // step's begin) on: the call, with what its first events cost before
  // `begin_ns`, cannot start before that event, corrected.
  const auto prev = std::lower_bound(th.ts.begin(), th.ts.end(), begin_ns);
  const int64_t free_ns = prev == th.ts.begin() ? begin_ns_ : *(prev - 1);
  const int64_t free_shift_ps = prev == th.ts.begin() ? 0 : ShiftPs(th, free_ns);
  const int64_t at_begin_ps = CostPs(th, begin_ns, false) - CostPs(th, begin_ns, true);
  const int64_t base_ps =
      std::min(caller_shift_ns * 1000, (begin_ns - free_ns) * 1000 + free_shift_ps - at_begin_ps);
  th.anchors.emplace_back(begin_ns, std::max<int64_t>(0, base_ps));
  return true;
}

std::map<uint64_t, size_t> AwaitedIn(const std::map<uint64_t, int64_t>& got, const std::vector<WaitWindow>& windows) {
  std::map<uint64_t, size_t> out;
  for (const auto& [key, ts] : got) {
    // The first window ending after ts; it holds ts if it began before.
    auto it = std::upper_bound(windows.begin(), windows.end(), ts,
                               [](int64_t t, const WaitWindow& w) { return t < w.end_ns; });
    if (it != windows.end() && it->begin_ns <= ts) out.emplace(key, static_cast<size_t>(it - windows.begin()));
  }
  return out;
}

std::vector<LastWork> LastWorkIn(const std::vector<Span>& spans, const std::map<uint64_t, size_t>& awaited,
                                 const std::vector<WaitWindow>& windows) {
  std::vector<LastWork> last(windows.size());
  for (const Span& s : spans) {
    if (!s.has_payload || s.step >= 0) continue;
    auto it = awaited.find(s.payload);
    if (it == awaited.end()) continue;
    const int64_t end = std::min(s.end_ns, windows[it->second].end_ns);
    LastWork& l = last[it->second];
    if (end > l.end_ns) l = {end, s.end_tid, s.payload};
  }
  return last;
}

int64_t WaitShrinkNs(const std::vector<AwaitedWork>& work, int64_t window_begin_ns,
                     const std::function<int64_t(int64_t)>& controller_shift_ns) {
  int64_t raw = INT64_MIN, corrected = INT64_MIN;
  for (const AwaitedWork& w : work) {
    const LastWork& l = w.last;
    if (l.end_ns == INT64_MIN) continue;
    int64_t shift = 0;
    if (w.anchored && w.worker != nullptr) {
      shift = w.worker->ShiftNs(l.tid, l.end_ns);
    } else {
      // Only what its thread paid inside the window delays this window's end
      // (earlier windows got their own marks).
      shift = controller_shift_ns(window_begin_ns) +
              (w.worker == nullptr ? 0 : std::max<int64_t>(0, w.worker->RemovedNs(l.tid, window_begin_ns, l.end_ns)));
    }
    raw = std::max(raw, l.end_ns);
    corrected = std::max(corrected, l.end_ns - shift);
  }
  return raw == INT64_MIN ? 0 : std::max<int64_t>(0, raw - controller_shift_ns(raw) - corrected);
}

}  // namespace rlscope
