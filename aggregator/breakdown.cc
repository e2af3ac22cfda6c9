#include "aggregator/breakdown.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "aggregator/lanes.h"
#include "aggregator/sorting.h"
#include "aggregator/step_profile.h"
#include "aggregator/occurrences.h"
#include "native/names.h"

namespace rlscope {

Overlap ResourceOverlap(const std::vector<Interval>& cpu, const std::vector<Interval>& gpu, int64_t lo, int64_t hi) {
  Overlap o;
  if (hi <= lo) return o;
  // Sweep the edges of both unions; between two edges the state is constant.
  const std::vector<Interval> c = UnionClipped(cpu, lo, hi), g = UnionClipped(gpu, lo, hi);
  // (time, +-1 cpu / +-2 gpu), sorted: each union's edges are in order
  // already (disjoint, sorted), so a merge sorts them (values, no ties to order).
  std::vector<std::pair<int64_t, int>> cpu_edges, gpu_edges, edges;
  cpu_edges.reserve(2 * c.size());
  gpu_edges.reserve(2 * g.size());
  for (const Interval& i : c) cpu_edges.push_back({i.begin, 1}), cpu_edges.push_back({i.end, -1});
  for (const Interval& i : g) gpu_edges.push_back({i.begin, 2}), gpu_edges.push_back({i.end, -2});
  edges.resize(cpu_edges.size() + gpu_edges.size());
  std::merge(cpu_edges.begin(), cpu_edges.end(), gpu_edges.begin(), gpu_edges.end(), edges.begin());
  if (!std::is_sorted(edges.begin(), edges.end())) std::sort(edges.begin(), edges.end());
  int64_t t = lo;
  int cpu_on = 0, gpu_on = 0;
  auto account = [&](int64_t until) {
    const int64_t d = until - t;
    if (d <= 0) return;
    if (cpu_on && gpu_on)
      o.cpu_gpu += d;
    else if (cpu_on)
      o.cpu_only += d;
    else if (gpu_on)
      o.gpu_only += d;
    else
      o.idle += d;
  };
  for (const auto& [at, delta] : edges) {
    account(at);
    t = std::max(t, at);
    if (delta == 1 || delta == -1)
      cpu_on += delta;
    else
      gpu_on += delta / 2;
  }
  account(hi);
  return o;
}

double NaiveUtilization(const std::vector<Interval>& gpu, int64_t lo, int64_t hi, int64_t sample_ns) {
  if (hi <= lo || sample_ns <= 0) return 0;
  const int64_t bins = (hi - lo + sample_ns - 1) / sample_ns;
  std::set<int64_t> touched;
  for (const Interval& i : UnionClipped(gpu, lo, hi)) {
    for (int64_t b = (i.begin - lo) / sample_ns; b <= (i.end - 1 - lo) / sample_ns; ++b) touched.insert(b);
  }
  return static_cast<double>(touched.size()) / static_cast<double>(bins);
}

namespace {

bool OnDevice(const GpuRecord& g) {
  const auto k = static_cast<GpuKind>(g.kind);
  return k == GpuKind::kKernel || k == GpuKind::kMemcpy || k == GpuKind::kMemset;
}

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The members of sorted, disjoint `v` that overlap [lo, hi), unclipped:
// a binary search, so per-window sweeps cost what the window holds.
std::vector<Interval> Overlapping(const std::vector<Interval>& v, int64_t lo, int64_t hi) {
  auto first = std::lower_bound(v.begin(), v.end(), lo, [](const Interval& i, int64_t t) { return i.end <= t; });
  auto last = first;
  while (last != v.end() && last->begin < hi) ++last;
  return {first, last};
}

// A controller sub-task occurrence: its corrected and raw bounds.
struct Window {
  std::string name;
  int occurrence = 0;
  int64_t begin = 0, end = 0;
  int64_t raw_begin = 0, raw_end = 0;
  const Span* span = nullptr;
};

// Per process: CPU busy (minus sync waits) and GPU busy intervals. Sorted
// and disjoint (UnionClipped to the step), so Overlapping() can cut a window
// out of them. And for attribution: the sampled CPU time on the wall clock,
// the CUDA API calls (any thread), and what one sample cost (ns).
struct Busy {
  std::vector<Interval> cpu, gpu;
  std::vector<Interval> sampled, api;
  double sample_cost_ns = 0;
  // Where each CPU sample's weight begins (SampleStarts), index for index;
  // the sampling period (the slice's smallest weight: one timer period; a
  // step in which every sample of the process came late reads a longer
  // one, and spreads less); and how far before a sample its weight reaches
  // at most.
  std::vector<int64_t> sample_from_ns;
  // The category of each sample's thread's previous sample (its own for a
  // thread's first): what a window before the one a sample landed in
  // counts its late part as. The thread ran that time between the two
  // samples, and a window edge is where code changes: at the edge between
  // two sub-tasks a steady thread's late part is the earlier one's code,
  // and a thread that ran in bursts while it waited (polling, then
  // computing in the next sub-task) last ran what its previous sample saw.
  std::vector<uint8_t> sample_before_category;
  int64_t sample_period_ns = 0;
  int64_t sample_reach_ns = 0;
  // The step: a window over all of it (the step's own row) counts its
  // samples' late parts with what they stood for before the step's begin,
  // as its last stretch is counted in the next step's first samples (the
  // slice holds none after its end): its two edges balance, as they did
  // when every sample counted whole where it landed. A sub-task's window
  // counts only what lies in it.
  int64_t step_begin_ns = 0, step_end_ns = 0;

  // The part of sample i a window [lo, hi) counts (SampleNsIn).
  int64_t SampleIn(const CpuSample& c, size_t i, int64_t lo, int64_t hi) const {
    const bool whole_step = lo <= step_begin_ns && hi >= step_end_ns;
    return SampleNsIn(c, sample_from_ns[i], sample_period_ns, whole_step ? INT64_MIN / 2 : lo, hi);
  }
};

// Worker busy time per sub-task name: name -> process index -> ns.
using PerRank = std::map<std::string, std::map<int, int64_t>>;

// The controller's sub-task windows, in time order, numbered per name.
std::vector<Window> SubtaskWindows(const StepProfile& profile, const ProcessSlice* controller,
                                   const std::vector<std::string>& subtasks) {
  std::vector<Window> windows;
  if (controller == nullptr) return windows;
  auto add = [&](const Span& s) {
    const std::string name = controller->process->String(s.name);
    if (!name.empty()) windows.push_back({name, 0, s.begin_ns, s.end_ns, s.raw_begin_ns, s.raw_end_ns, &s});
  };
  if (subtasks.empty()) {
    for (const Span* s : StepChildren(*controller, profile.step)) add(*s);  // the one rule (occurrences.h)
  } else {
    const std::set<std::string> wanted(subtasks.begin(), subtasks.end());
    for (const Span& s : controller->spans) {
      if (s.step < 0 && wanted.count(controller->process->String(s.name)) != 0) add(s);
    }
  }
  std::sort(windows.begin(), windows.end(), [](const Window& x, const Window& y) { return x.begin < y.begin; });
  std::map<std::string, int> seen;
  for (Window& w : windows) w.occurrence = ++seen[w.name];
  return windows;
}

// Sub-task names, in order of first occurrence.
std::vector<std::string> NamesInOrder(const std::vector<Window>& windows) {
  std::vector<std::string> names;
  std::set<std::string> named;
  for (const Window& w : windows) {
    if (named.insert(w.name).second) names.push_back(w.name);
  }
  return names;
}

std::vector<Busy> BusyIntervals(const StepProfile& profile, const ProcessSlice* controller,
                                const std::vector<Window>& windows, int64_t step_begin, int64_t step_end) {
  std::unordered_set<const Span*> window_spans;
  for (const Window& w : windows) window_spans.insert(w.span);
  std::vector<Busy> busy(profile.processes.size());
  for (size_t p = 0; p < profile.processes.size(); ++p) {
    const ProcessSlice& s = profile.processes[p];
    std::vector<Interval> cpu, waits;
    for (const Span& sp : s.spans) {
      if (sp.step >= 0) continue;
      if (&s == controller && window_spans.count(&sp) != 0) continue;  // the controller waits in its windows
      cpu.push_back({sp.begin_ns, sp.end_ns});
    }
    for (const GpuRecord& g : s.gpu) {
      if (OnDevice(g))
        busy[p].gpu.push_back({g.start_ns, g.end_ns});
      else if (static_cast<GpuKind>(g.kind) == GpuKind::kSync)
        waits.push_back({g.start_ns, g.end_ns});
    }
    busy[p].cpu = Subtract(UnionClipped(cpu, step_begin, step_end), UnionClipped(waits, step_begin, step_end));
    busy[p].gpu = UnionClipped(busy[p].gpu, step_begin, step_end);
    std::vector<Interval> api;
    for (const GpuRecord& g : s.gpu) {
      const auto k = static_cast<GpuKind>(g.kind);
      if (k == GpuKind::kRuntimeApi || k == GpuKind::kDriverApi) api.push_back({g.start_ns, g.end_ns});
    }
    busy[p].api = UnionClipped(api, step_begin, step_end);
    busy[p].sampled = UnionClipped(SampledCpuIntervals(s.cpu_samples), step_begin, step_end);
    busy[p].sample_from_ns = SampleStarts(s.cpu_samples);
    busy[p].step_begin_ns = step_begin;
    busy[p].step_end_ns = step_end;
    busy[p].sample_before_category.reserve(s.cpu_samples.size());
    std::unordered_map<int64_t, uint8_t> last_category;  // tid -> its previous sample's
    for (size_t i = 0; i < s.cpu_samples.size(); ++i) {
      const CpuSample& c = s.cpu_samples[i];
      auto [it, first] = last_category.emplace(c.tid, c.category);
      busy[p].sample_before_category.push_back(it->second);
      it->second = c.category;
      if (c.weight_ns > 0 && (busy[p].sample_period_ns == 0 || c.weight_ns < busy[p].sample_period_ns))
        busy[p].sample_period_ns = c.weight_ns;
      busy[p].sample_reach_ns = std::max(busy[p].sample_reach_ns, c.ts_ns - busy[p].sample_from_ns[i]);
    }
    // The sampler's own cost per sample: what the correction charged (its
    // handler's time in place, CostModel), else the start-up figure.
    constexpr int kCpuSample = static_cast<int>(EventKind::kCpuSample);
    if (s.overhead && s.overhead->costs.own_source[kCpuSample] != CostSource::kNone) {
      busy[p].sample_cost_ns = s.overhead->costs.own_ns[kCpuSample];
    } else if (auto h = s.process->hello().costs.find("cpu_sample"); h != s.process->hello().costs.end()) {
      busy[p].sample_cost_ns = h->second;
    }
  }
  return busy;
}

// The process's CPU time at `t`, linear between its points; false outside them.
bool ProcessCpuAt(const std::vector<ProcessCpuPoint>& points, int64_t t, double* cpu_ns) {
  auto hi = std::lower_bound(points.begin(), points.end(), t,
                             [](const ProcessCpuPoint& p, int64_t v) { return p.ts_ns < v; });
  if (hi == points.end()) return false;
  if (hi->ts_ns == t) {
    *cpu_ns = static_cast<double>(hi->cpu_ns);
    return true;
  }
  if (hi == points.begin()) return false;
  const auto lo = std::prev(hi);
  const double f = static_cast<double>(t - lo->ts_ns) / static_cast<double>(hi->ts_ns - lo->ts_ns);
  *cpu_ns = static_cast<double>(lo->cpu_ns) + f * static_cast<double>(hi->cpu_ns - lo->cpu_ns);
  return true;
}

// Off-CPU time per reason in [lo, hi), and the coverage: the CPU samples'
// time against the process's CPU time over the part of the window its CPU
// points cover (the first is taken at the window's first flush).
void OffCpuAndCoverage(const ProcessSlice& s, const Busy& busy, int64_t lo, int64_t hi, Attribution* a) {
  for (const OffCpuSample& o : s.off_cpu) {
    if (o.ts_ns < lo || o.ts_ns >= hi) continue;
    a->off_ns[std::min<int>(o.reason, kOffCpuReasons - 1)] += o.WeightSince(lo);  // a wait's share since lo
    ++a->off_samples;
  }
  std::set<int64_t> threads;
  for (const CpuSample& c : s.cpu_samples) {
    if (c.ts_ns >= lo && c.ts_ns < hi) threads.insert(c.tid);
  }
  a->threads = static_cast<int>(threads.size());
  const auto& points = s.process_cpu;
  if (points.size() < 2) return;
  const int64_t from = std::max(lo, points.front().ts_ns), to = std::min(hi, points.back().ts_ns);
  double cpu_from = 0, cpu_to = 0;
  if (to <= from || !ProcessCpuAt(points, from, &cpu_from) || !ProcessCpuAt(points, to, &cpu_to)) return;
  a->process_cpu_ns = std::max<int64_t>(0, std::llround(cpu_to - cpu_from));
  a->covered_cpu_ns = 0;
  for (size_t i = 0; i < s.cpu_samples.size(); ++i) {
    a->covered_cpu_ns += busy.SampleIn(s.cpu_samples[i], i, from, to);
  }
}

// Where process `s`'s CPU time in [lo, hi) went (attribution.h).
Attribution AttributeWindow(const ProcessSlice& s, const Busy& busy, int64_t lo, int64_t hi) {
  Attribution a;
  const auto& samples = s.cpu_samples;
  // The samples whose weight reaches into the window: from the first in it
  // to the last whose weight began before its end. `samples` counts those
  // that landed in it (their handlers ran there).
  const size_t first = static_cast<size_t>(
      std::lower_bound(samples.begin(), samples.end(), lo, [](const CpuSample& c, int64_t t) { return c.ts_ns < t; }) -
      samples.begin());
  for (size_t i = first; i < samples.size() && samples[i].ts_ns < hi + busy.sample_reach_ns; ++i) {
    const CpuSample& c = samples[i];
    const int64_t w = busy.SampleIn(c, i, lo, hi);
    if (c.ts_ns < hi) ++a.samples;
    if (w <= 0) continue;
    const uint8_t category = c.ts_ns < hi ? c.category : busy.sample_before_category[i];  // a later one's late part
    a.ns[std::min<size_t>(category, kCpuCategories - 1)] += w;
    a.weight_sq_ns2 += static_cast<double>(w) * static_cast<double>(w);
    a.max_weight_ns = std::max(a.max_weight_ns, w);
  }
  // The sampler's own signals ran on the thread's CPU clock too, so their
  // time is in the weights, spread over what the samples landed in: taken
  // back from the job's categories in proportion, and given to the profiler.
  const size_t profiler = static_cast<size_t>(CpuCategory::kProfiler);
  const int64_t job = a.job_cpu_ns();
  const int64_t own = std::min<int64_t>(job, std::llround(busy.sample_cost_ns * static_cast<double>(a.samples)));
  if (own > 0 && job > 0) {
    int64_t taken = 0;
    for (size_t c = 0; c < kCpuCategories; ++c) {
      if (c == profiler) continue;
      const int64_t t =
          static_cast<int64_t>(static_cast<double>(a.ns[c]) * static_cast<double>(own) / static_cast<double>(job));
      a.ns[c] -= t;
      taken += t;
    }
    a.ns[profiler] += taken;
  }
  const std::vector<Interval> gpu = Overlapping(busy.gpu, lo, hi);
  a.gpu_ns = TotalLength(UnionClipped(gpu, lo, hi));
  std::vector<Interval> on = Overlapping(busy.sampled, lo, hi);
  on.insert(on.end(), gpu.begin(), gpu.end());
  a.idle_ns = std::max<int64_t>(0, (hi - lo) - TotalLength(UnionClipped(on, lo, hi)));
  if (!busy.api.empty()) a.cuda_api_wall_ns = TotalLength(UnionClipped(Overlapping(busy.api, lo, hi), lo, hi));
  OffCpuAndCoverage(s, busy, lo, hi, &a);
  return a;
}

Overlap OverlapIn(const Busy& busy, int64_t lo, int64_t hi) {
  return ResourceOverlap(Overlapping(busy.cpu, lo, hi), Overlapping(busy.gpu, lo, hi), lo, hi);
}

// Profiler time removed from the process in raw [from, to].
int64_t RemovedNs(const ProcessSlice& s, int64_t raw_from, int64_t raw_to) {
  return s.overhead ? s.overhead->RemovedNs(raw_from, raw_to) : 0;
}

// Rows: the whole step, then each sub-task name (its occurrences summed),
// each per process.
std::vector<BreakdownRow> Rows(const StepProfile& profile, const std::vector<Busy>& busy,
                               const std::vector<Window>& windows, const std::vector<std::string>& names,
                               int64_t step_begin, int64_t step_end) {
  std::vector<BreakdownRow> rows;
  for (size_t p = 0; p < profile.processes.size(); ++p) {
    BreakdownRow row;
    row.subtask = names::kStep;
    row.occurrences = 1;
    row.process = static_cast<int>(p);
    row.window_ns = step_end - step_begin;
    row.overlap = ResourceOverlap(busy[p].cpu, busy[p].gpu, step_begin, step_end);
    row.overhead_ns = RemovedNs(profile.processes[p], profile.begin_ns, profile.end_ns);
    row.attribution = AttributeWindow(profile.processes[p], busy[p], step_begin, step_end);
    rows.push_back(row);
  }
  for (const std::string& name : names) {
    for (size_t p = 0; p < profile.processes.size(); ++p) {
      BreakdownRow row;
      row.subtask = name;
      row.process = static_cast<int>(p);
      for (const Window& w : windows) {
        if (w.name != name) continue;
        ++row.occurrences;
        row.window_ns += w.end - w.begin;
        const Overlap o = OverlapIn(busy[p], w.begin, w.end);
        row.overlap.cpu_only += o.cpu_only;
        row.overlap.gpu_only += o.gpu_only;
        row.overlap.cpu_gpu += o.cpu_gpu;
        row.overlap.idle += o.idle;
        row.overhead_ns += RemovedNs(profile.processes[p], w.raw_begin, w.raw_end);
        row.attribution.Add(AttributeWindow(profile.processes[p], busy[p], w.begin, w.end));
      }
      rows.push_back(row);
    }
  }
  return rows;
}

// One segment per window: each worker's busy time in it, the one whose busy
// time ended last, and the median; adds each worker's time to `per_rank`.
std::vector<CriticalSegment> CriticalPath(const StepProfile& profile, const ProcessSlice* controller,
                                          const std::vector<Busy>& busy, const std::vector<Window>& windows,
                                          int64_t step_begin, PerRank* per_rank) {
  std::vector<CriticalSegment> path;
  for (const Window& w : windows) {
    CriticalSegment seg;
    seg.subtask = w.name;
    seg.occurrence = w.occurrence;
    seg.begin_ns = w.begin - step_begin;
    seg.duration_ns = w.end - w.begin;
    std::vector<int64_t> durations;
    int64_t latest = INT64_MIN;
    for (size_t p = 0; p < profile.processes.size(); ++p) {
      if (&profile.processes[p] == controller) continue;
      // Its work in the window: whatever it was busy with (CPU or GPU)
      // while the controller waited; its Ray methods rarely carry the
      // controller's sub-task names (generate_sequences under "gen").
      std::vector<Interval> work = Overlapping(busy[p].cpu, w.begin, w.end);
      const std::vector<Interval> gpu = Overlapping(busy[p].gpu, w.begin, w.end);
      work.insert(work.end(), gpu.begin(), gpu.end());
      if (work.empty()) continue;
      const std::vector<Interval> merged = UnionClipped(work, w.begin, w.end);
      if (merged.empty()) continue;
      const int64_t end = merged.back().end;
      const int64_t ns = TotalLength(merged);
      durations.push_back(ns);
      (*per_rank)[w.name][static_cast<int>(p)] += ns;
      // Ties (both busy up to the window's end) go to the longer busy time.
      if (end > latest || (end == latest && ns > seg.critical_ns)) {
        latest = end, seg.critical = static_cast<int>(p), seg.critical_ns = ns;
      }
    }
    seg.median_ns = Median(durations);
    path.push_back(seg);
  }
  return path;
}

// Step time inside some window (windows in time order, may nest or overlap).
int64_t CoveredNs(const std::vector<Window>& windows, int64_t step_begin) {
  int64_t covered = 0;
  int64_t last_end = step_begin;
  for (const Window& w : windows) {
    covered += std::max<int64_t>(0, w.end - std::max(w.begin, last_end));
    last_end = std::max(last_end, w.end);
  }
  return covered;
}

// Keeps the longest kMaxCriticalSegments segments (they make the path), in
// time order, and counts the rest.
void KeepLongestSegments(StepAnalysis* a) {
  if (a->critical_path.size() <= kMaxCriticalSegments) return;
  std::stable_sort(a->critical_path.begin(), a->critical_path.end(),
                   [](const CriticalSegment& x, const CriticalSegment& y) { return x.duration_ns > y.duration_ns; });
  a->segments_omitted = static_cast<int64_t>(a->critical_path.size() - kMaxCriticalSegments);
  a->critical_path.resize(kMaxCriticalSegments);
  std::stable_sort(a->critical_path.begin(), a->critical_path.end(),
                   [](const CriticalSegment& x, const CriticalSegment& y) { return x.begin_ns < y.begin_ns; });
}

// Sub-tasks that two or more workers were busy in: slowest, median, fastest.
std::vector<Straggler> Stragglers(const std::vector<std::string>& names, const PerRank& per_rank) {
  std::vector<Straggler> out;
  for (const std::string& name : names) {
    const auto it = per_rank.find(name);
    if (it == per_rank.end() || it->second.size() < 2) continue;
    const std::map<int, int64_t>& ranks = it->second;
    Straggler st;
    st.subtask = name;
    st.ranks = static_cast<int>(ranks.size());
    std::vector<int64_t> v;
    st.fastest_ns = INT64_MAX;
    for (const auto& [index, ns] : ranks) {
      v.push_back(ns);
      if (ns > st.slowest_ns || st.slowest < 0) st.slowest_ns = ns, st.slowest = index;
      st.fastest_ns = std::min(st.fastest_ns, ns);
    }
    st.median_ns = Median(v);
    out.push_back(st);
  }
  return out;
}

std::vector<GpuUtilization> GpuUtilizations(const std::vector<Busy>& busy, int64_t step_begin, int64_t step_end) {
  const int64_t step_ns = step_end - step_begin;
  std::vector<GpuUtilization> out;
  for (size_t p = 0; p < busy.size(); ++p) {
    if (busy[p].gpu.empty()) continue;
    GpuUtilization u;
    u.process = static_cast<int>(p);
    u.busy_ns = TotalLength(busy[p].gpu);
    u.busy_fraction = step_ns > 0 ? static_cast<double>(u.busy_ns) / step_ns : 0;
    u.naive_fraction = NaiveUtilization(busy[p].gpu, step_begin, step_end, kNaiveSampleNs);
    out.push_back(u);
  }
  return out;
}

}  // namespace

std::vector<int64_t> SampleStarts(const std::vector<CpuSample>& samples) {
  std::vector<int64_t> out;
  out.reserve(samples.size());
  std::unordered_map<int64_t, int64_t> previous;  // tid -> its last sample's time
  for (const CpuSample& s : samples) {
    auto [it, first] = previous.emplace(s.tid, INT64_MIN);
    out.push_back(std::max(it->second, s.ts_ns - s.weight_ns));
    it->second = s.ts_ns;
  }
  return out;
}

std::vector<Interval> SampledCpuIntervals(const std::vector<CpuSample>& samples) {
  std::vector<Interval> out;
  out.reserve(samples.size());
  const std::vector<int64_t> starts = SampleStarts(samples);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (starts[i] < samples[i].ts_ns) out.push_back({starts[i], samples[i].ts_ns});
  }
  return out;
}

int64_t SampleNsIn(const CpuSample& c, int64_t from_ns, int64_t period_ns, int64_t lo, int64_t hi) {
  const bool landed = c.ts_ns >= lo && c.ts_ns < hi;
  const int64_t in_time = period_ns > 0 ? std::min(c.weight_ns, period_ns) : c.weight_ns;
  const int64_t late = c.weight_ns - in_time;
  const int64_t late_end = c.ts_ns - in_time;  // the late part lies in [from_ns, late_end]
  int64_t ns = landed ? in_time : 0;
  if (late <= 0) return ns;
  if (late_end <= from_ns) return ns + (landed ? late : 0);  // no room before it: where it landed
  const int64_t overlap = std::min(late_end, hi) - std::max(from_ns, lo);
  if (overlap <= 0) return ns;
  if (overlap == late_end - from_ns) return ns + late;
  return ns + std::llround(static_cast<double>(late) * static_cast<double>(overlap) /
                           static_cast<double>(late_end - from_ns));
}

StepAnalysis AnalyzeStep(const StepProfile& profile, const std::vector<std::string>& subtasks, bool lanes) {
  StepAnalysis a;
  const int64_t step_begin = profile.begin_ns;
  const int64_t step_end = profile.corrected_end_ns > 0 ? profile.corrected_end_ns : profile.end_ns;
  a.step_ns = step_end - step_begin;
  const ProcessSlice* controller = nullptr;
  for (const ProcessSlice& s : profile.processes) {
    if (s.process->is_controller()) controller = &s;
  }
  const std::vector<Window> windows = SubtaskWindows(profile, controller, subtasks);
  const std::vector<std::string> names = NamesInOrder(windows);
  const std::vector<Busy> busy = BusyIntervals(profile, controller, windows, step_begin, step_end);
  a.rows = Rows(profile, busy, windows, names, step_begin, step_end);
  PerRank per_rank;
  a.critical_path = CriticalPath(profile, controller, busy, windows, step_begin, &per_rank);
  a.controller_ns = std::max<int64_t>(0, a.step_ns - CoveredNs(windows, step_begin));
  KeepLongestSegments(&a);
  a.stragglers = Stragglers(names, per_rank);
  a.gpu = GpuUtilizations(busy, step_begin, step_end);
  if (!lanes) return a;
  std::vector<LaneWindow> lane_windows;
  for (const Window& w : windows) lane_windows.push_back({w.name, w.begin, w.end});
  std::vector<std::vector<Interval>> gpu_busy;
  for (const Busy& b : busy) gpu_busy.push_back(b.gpu);
  a.lanes = std::make_shared<const StepLanes>(BuildLanes(profile, lane_windows, gpu_busy, a.critical_path));
  return a;
}

}  // namespace rlscope
