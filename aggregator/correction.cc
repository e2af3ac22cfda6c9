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
                     int64_t begin_ns) {
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

int64_t Corrector::ShiftNs(int64_t tid, int64_t t) const {
  auto it = threads_.find(tid);
  if (it == threads_.end()) return 0;
  const Thread& th = it->second;
  // Events at or before t.
  const size_t n = static_cast<size_t>(std::upper_bound(th.ts.begin(), th.ts.end(), t) - th.ts.begin());
  return n == 0 ? 0 : th.cum_ps[n - 1] / 1000;
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
    if (end > l.end_ns) l = {end, s.end_tid};
  }
  return last;
}

int64_t WaitShrinkNs(const std::vector<std::pair<const Corrector*, LastWork>>& workers, int64_t window_begin_ns) {
  int64_t raw = INT64_MIN, corrected = INT64_MIN;
  for (const auto& [c, l] : workers) {
    if (l.end_ns == INT64_MIN) continue;
    // Only what its thread paid inside the window delays this window's end
    // (earlier windows got their own marks).
    const int64_t removed = c == nullptr ? 0 : std::max<int64_t>(0, c->RemovedNs(l.tid, window_begin_ns, l.end_ns));
    raw = std::max(raw, l.end_ns);
    corrected = std::max(corrected, l.end_ns - removed);
  }
  return raw == INT64_MIN ? 0 : std::max<int64_t>(0, raw - corrected);
}

}  // namespace rlscope
