#include "aggregator/figures_json.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aggregator/breakdown.h"
#include "aggregator/json_writer.h"
#include "aggregator/process_json.h"
#include "native/gpu_record.h"

namespace rlscope {
namespace {

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
double Mb(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Figures to four significant digits (0.01 % of the value): enough for a
// step's figures, and a third of summary.json's bytes.
void G4(JsonWriter& w, double v) {
  char buf[32];  // as printf's "%.4g"
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general, 4);
  w.Number(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

std::string Shortened(std::string name) {
  if (name.size() > kFiguresNameChars) name.resize(kFiguresNameChars);
  return name;
}

// [[name, ms, count], ...]: the `limit` names with the most time, most first.
struct Total {
  int64_t ns = 0;
  int64_t count = 0;
};
void WriteTop(JsonWriter& w, const char* key, const std::map<std::string, Total>& totals, size_t limit) {
  std::vector<std::pair<std::string, Total>> top(totals.begin(), totals.end());
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.second.ns != b.second.ns ? a.second.ns > b.second.ns : a.first < b.first;
  });
  if (top.size() > limit) top.resize(limit);
  w.Key(key).BeginArray();
  for (const auto& [name, t] : top) {
    w.BeginArray().String(name);
    G4(w, Ms(t.ns));
    w.Int(t.count).EndArray();
  }
  w.EndArray();
}

// Memory: resident (and GPU allocated, summed over devices) at the step's
// end, its change and peak over the step's beginning; null without samples.
void WriteMemory(JsonWriter& w, const ProcessSlice& slice) {
  w.Key("memory");
  if (slice.rss.empty()) {
    w.Null();
    return;
  }
  int64_t peak = 0;
  for (const MemoryPoint& m : slice.rss) peak = std::max(peak, m.bytes);
  w.BeginObject();
  w.Key("rss_end_mb").Double(Mb(slice.rss.back().bytes));
  w.Key("rss_change_mb").Double(Mb(slice.rss.back().bytes - slice.rss.front().bytes));
  w.Key("rss_rise_mb").Double(Mb(peak - slice.rss.front().bytes));
  int64_t gpu_end = 0, gpu_change = 0;
  bool gpu = false;
  for (const auto& [device, points] : slice.gpu_allocated) {
    if (points.empty()) continue;
    gpu = true;
    gpu_end += points.back().bytes;
    gpu_change += points.back().bytes - points.front().bytes;
  }
  if (gpu) w.Key("gpu_end_mb").Double(Mb(gpu_end)).Key("gpu_change_mb").Double(Mb(gpu_change));
  w.EndObject();
}

void WriteProcess(JsonWriter& w, const ProcessSlice& slice) {
  const ProcessView& p = *slice.process;
  const wire::Identity& id = p.identity();
  w.BeginObject();
  w.Key("session").String(HexSession(p.hello().session));
  w.Key("label").String(ProcessLabel(p));
  w.Key("host").String(id.host).Key("pid").Int(id.pid).Key("rank").IntOrNull(id.rank).Key("role").String(id.role);
  w.Key("spans").Uint(slice.spans.size()).Key("instants").Uint(slice.instants.size());
  w.Key("gpu_records").Uint(slice.gpu.size()).Key("cpu_samples").Uint(slice.cpu_samples.size());
  w.Key("events_received_total").Uint(p.events_received()).Key("dropped_total").Uint(p.dropped());
  w.Key("clock_fitness").String(ClockFitnessName(slice.clock_fitness));
  w.Key("clock").BeginObject().Key("bound_ns").IntOrNull(p.clock().bound_ns);
  w.Key("basis").String(ClockBasisName(p.clock().basis)).EndObject();
  if (slice.overhead) {
    const Overhead& o = *slice.overhead;
    w.Key("overhead").BeginObject();
    w.Key("subtracted_ms").Double(Ms(o.total_ns)).Key("uncertainty_ms").Double(Ms(o.uncertainty_ns));
    w.Key("events").Uint(o.events);
    w.Key("profiler_thread_ms").DoubleOrNull(slice.profiler_cpu_ns >= 0, Ms(slice.profiler_cpu_ns));
    w.EndObject();
  }
  WriteMemory(w, slice);
  // Summed by name id first (a step has a few names, each many times),
  // then by shortened name.
  std::unordered_map<uint32_t, Total> range_ids, kernel_ids;
  for (const Span& s : slice.spans) {
    Total& t = range_ids[s.name];
    t.ns += s.end_ns - s.begin_ns;
    ++t.count;
  }
  for (const GpuRecord& g : slice.gpu) {
    if (g.kind != static_cast<uint8_t>(GpuKind::kKernel)) continue;
    Total& t = kernel_ids[g.name];
    t.ns += g.end_ns - g.start_ns;
    ++t.count;
  }
  auto by_name = [&p](const std::unordered_map<uint32_t, Total>& ids) {
    std::map<std::string, Total> out;
    for (const auto& [id, total] : ids) {
      Total& t = out[Shortened(p.String(id))];
      t.ns += total.ns;
      t.count += total.count;
    }
    return out;
  };
  WriteTop(w, "ranges", by_name(range_ids), kFiguresTopRanges);
  if (!kernel_ids.empty()) WriteTop(w, "kernels", by_name(kernel_ids), kFiguresTopKernels);
  w.EndObject();
}

// A breakdown row's attribution: the categories' CPU time, GPU and idle
// time and off-CPU time by reason, each only where not zero.
void WriteAttribution(JsonWriter& w, const Attribution& a) {
  if (a.samples == 0 && a.off_samples == 0) {
    w.Null();
    return;
  }
  w.BeginObject();
  G4(w.Key("cpu_ms"), Ms(a.cpu_ns()));
  static const std::vector<std::string> keys = [] {  // "<category>_ms", made once
    std::vector<std::string> k;
    for (size_t c = 0; c < kCpuCategories; ++c)
      k.push_back(std::string(CpuCategoryName(static_cast<CpuCategory>(c))) + "_ms");
    return k;
  }();
  for (size_t c = 0; c < kCpuCategories; ++c) {
    if (a.ns[c] != 0) G4(w.Key(keys[c]), Ms(a.ns[c]));
  }
  if (a.gpu_ns != 0) G4(w.Key("gpu_ms"), Ms(a.gpu_ns));
  if (a.idle_ns != 0) G4(w.Key("idle_ms"), Ms(a.idle_ns));
  if (a.off_cpu_ns() != 0) {
    w.Key("off_cpu_ms").BeginObject();
    for (int r = 0; r < kOffCpuReasons; ++r) {
      if (a.off_ns[r] != 0) G4(w.Key(OffCpuReasonName(r)), Ms(a.off_ns[r]));
    }
    w.EndObject();
  }
  w.EndObject();
}

// A table as {"columns": [...], "rows": [[...], ...]}: the names once.
void BeginTable(JsonWriter& w, const char* key, std::initializer_list<const char*> columns) {
  w.Key(key).BeginObject().Key("columns").BeginArray();
  for (const char* c : columns) w.String(c);
  w.EndArray().Key("rows").BeginArray();
}
void EndTable(JsonWriter& w) { w.EndArray().EndObject(); }

// The sub-tasks a line keeps: the kFiguresSubtasks with the most time in
// the step (their breakdown rows' windows summed), and the whole step's row.
std::set<std::string> KeptSubtasks(const StepAnalysis& a, size_t* omitted) {
  std::map<std::string, int64_t> time;
  for (const BreakdownRow& r : a.rows) time[r.subtask] += r.window_ns;
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [name, ns] : time) {
    if (name != "step") order.emplace_back(-ns, name);
  }
  std::sort(order.begin(), order.end());
  std::set<std::string> kept = {"step"};
  for (size_t i = 0; i < order.size() && i < kFiguresSubtasks; ++i) kept.insert(order[i].second);
  *omitted = order.size() > kFiguresSubtasks ? order.size() - kFiguresSubtasks : 0;
  return kept;
}

// breakdown, stragglers and critical_path of summary.json, as tables whose
// `process` is an index into the line's processes; the critical path per
// sub-task over its occurrences (their times summed; the critical process
// the one critical for the most time).
void WriteAnalysis(JsonWriter& w, const StepAnalysis& a) {
  size_t omitted = 0;
  const std::set<std::string> kept = KeptSubtasks(a, &omitted);
  w.Key("subtasks_omitted").Uint(omitted);
  BeginTable(w, "subtasks",
             {"subtask", "occurrences", "process", "window_ms", "cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms", "idle_ms",
              "overhead_ms", "attribution"});
  for (const BreakdownRow& r : a.rows) {
    if (kept.count(r.subtask) == 0) continue;
    w.BeginArray().String(r.subtask).Int(r.occurrences).Int(r.process);
    G4(w, Ms(r.window_ns));
    G4(w, Ms(r.overlap.cpu_only));
    G4(w, Ms(r.overlap.gpu_only));
    G4(w, Ms(r.overlap.cpu_gpu));
    G4(w, Ms(r.overlap.idle));
    G4(w, Ms(r.overhead_ns));
    WriteAttribution(w, r.attribution);
    w.EndArray();
  }
  EndTable(w);
  BeginTable(w, "stragglers", {"subtask", "ranks", "slowest_process", "slowest_ms", "median_ms", "fastest_ms"});
  for (const Straggler& s : a.stragglers) {
    if (kept.count(s.subtask) == 0) continue;
    w.BeginArray().String(s.subtask).Int(s.ranks).Int(s.slowest);
    G4(w, Ms(s.slowest_ns));
    G4(w, Ms(s.median_ns));
    G4(w, Ms(s.fastest_ns));
    w.EndArray();
  }
  EndTable(w);
  struct Path {
    int occurrences = 0;
    int64_t begin_ns = -1, duration_ns = 0, critical_ns = 0, median_ns = 0;
    std::map<int, int64_t> critical;  // process -> its critical time
  };
  std::vector<std::string> order;  // first occurrence order
  std::map<std::string, Path> paths;
  for (const CriticalSegment& c : a.critical_path) {
    if (kept.count(c.subtask) == 0) continue;
    Path& p = paths[c.subtask];
    if (p.occurrences++ == 0) {
      order.push_back(c.subtask);
      p.begin_ns = c.begin_ns;
    }
    p.duration_ns += c.duration_ns;
    p.critical_ns += c.critical_ns;
    p.median_ns += c.median_ns;
    p.critical[c.critical] += c.critical_ns;
  }
  BeginTable(w, "critical_path",
             {"subtask", "occurrences", "begin_ms", "duration_ms", "critical_process", "critical_ms", "median_ms"});
  for (const std::string& name : order) {
    const Path& p = paths[name];
    const auto most = std::max_element(p.critical.begin(), p.critical.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    w.BeginArray().String(name).Int(p.occurrences);
    G4(w, Ms(p.begin_ns));
    G4(w, Ms(p.duration_ns));
    w.Int(most->first);
    G4(w, Ms(p.critical_ns));
    G4(w, Ms(p.median_ns));
    w.EndArray();
  }
  EndTable(w);
}

}  // namespace

std::string StepFiguresJson(const StepProfile& step) {
  std::string out;
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("step").Int(step.step);
  w.Key("detail").String(step.figures_only ? "figures" : "full");
  w.Key("trigger");
  if (step.trigger.empty()) {
    w.Null();
  } else {
    w.String(step.trigger);
  }
  w.Key("begin_ns").Int(step.begin_ns).Key("end_ns").Int(step.end_ns);
  w.Key("duration_ms").Double(Ms(step.end_ns - step.begin_ns));
  w.Key("reason").String(step.reason);
  w.Key("correction").BeginObject().Key("enabled").Bool(step.corrected);
  w.Key("duration_ms").Double(Ms((step.corrected ? step.corrected_end_ns : step.end_ns) - step.begin_ns));
  w.Key("subtracted_ms").Double(step.corrected ? Ms(step.end_ns - step.corrected_end_ns) : 0.0);
  w.Key("uncertainty_ms").Double(Ms(step.correction_uncertainty_ns));
  w.Key("systematic_ms").Double(Ms(step.correction_systematic_ns));
  w.EndObject();
  uint64_t spans = 0, instants = 0, dropped = 0;
  int late = 0, lost = 0;
  for (const ProcessSlice& slice : step.processes) {
    spans += slice.spans.size();
    instants += slice.instants.size();
    dropped += slice.process->dropped();
    late += slice.late ? 1 : 0;
    lost += slice.lost ? 1 : 0;
  }
  w.Key("totals").BeginObject().Key("processes").Uint(step.processes.size()).Key("spans").Uint(spans);
  w.Key("instants").Uint(instants).Key("dropped").Uint(dropped).EndObject();
  w.Key("late").Int(late).Key("lost").Int(lost).Key("not_profiled").Uint(step.not_profiled.size());
  w.Key("processes").BeginArray();
  for (const ProcessSlice& slice : step.processes) WriteProcess(w, slice);
  w.EndArray();
  if (const StepAnalysis* analysis = step.analysis.Get()) WriteAnalysis(w, *analysis);
  w.EndObject();
  out.push_back('\n');
  return out;
}

}  // namespace rlscope
