#include "aggregator/step_trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aggregator/attribution.h"
#include "aggregator/ray_calls.h"
#include "aggregator/run_json.h"
#include "native/names.h"

namespace rlscope {

int64_t StreamTrackId(uint32_t device, uint32_t stream) {
  return (int64_t{1} << 40) + static_cast<int64_t>(device) * 1000000 + stream;
}
int64_t SampleTrackId(int64_t tid) { return (int64_t{1} << 42) + tid; }
int64_t OffCpuTrackId(int64_t tid) { return (int64_t{1} << 43) + tid; }

namespace {

// The k-th flow of one origin (a launch, a Ray call): the first keeps the
// origin's own id, later ones are spread from it.
uint64_t FlowId(uint64_t origin, uint64_t k) { return origin + k * 0xbf58476d1ce4e5b9ull; }

int64_t SortIndex(const ProcessView& p) {
  if (p.is_controller()) return 0;
  return p.identity().rank >= 0 ? 1 + p.identity().rank : 1000000;
}

// A thread track's sort index: the main thread first, then by tid.
int64_t ThreadSort(const ProcessView& p, int64_t tid) { return tid == p.identity().pid ? 0 : tid; }

// Each recording thread's off-CPU samples (thread_states.h) on a track of
// its own: one slice per run of looks with the same reason, clipped to the
// step's bounds [begin_ns, end_ns] and to the end of the run before it.
void OffCpuEvents(TraceSink* sink, const ProcessSlice& slice, int64_t pid, int64_t begin_ns, int64_t end_ns) {
  const ProcessView& p = *slice.process;
  std::map<int64_t, std::vector<const OffCpuSample*>> by_tid;
  for (const OffCpuSample& o : slice.off_cpu) by_tid[o.tid].push_back(&o);
  for (const auto& [tid, list] : by_tid) {
    const int64_t track = OffCpuTrackId(tid);
    sink->Thread(pid, track, p.ThreadName(tid) + " \u00b7 off CPU (sampled)", ThreadSort(p, tid));
    size_t i = 0;
    int64_t last_end = begin_ns;  // runs do not overlap: a look began after the one before it
    while (i < list.size()) {
      const uint8_t reason = list[i]->reason;
      // A run-queue wait's share in the step (its reading may cover a gap before it).
      auto weight = [&](size_t k) { return list[k]->WeightSince(begin_ns); };
      const int64_t begin = std::max(last_end, list[i]->ts_ns - weight(i));
      int64_t end = list[i]->ts_ns, off_ns = 0;
      int looks = 0;
      // A run: the same reason, each look starting where the one before ended.
      for (; i < list.size() && list[i]->reason == reason && list[i]->ts_ns - weight(i) <= end + 1000000; ++i) {
        end = list[i]->ts_ns;
        off_ns += weight(i);
        ++looks;
      }
      const std::string name = std::string("off CPU: ") + OffCpuReasonName(reason);
      last_end = std::max(begin, std::min(end, end_ns));
      sink->Slice(pid, track, name, names::kCatOffCpu, begin, last_end,
                  TraceArgs().Int("looks", looks).Double("off_cpu_ms", off_ns / 1e6));
    }
  }
}

// A run of one thread's CPU samples in one category.
struct SampleRun {
  int64_t begin = 0, end = 0, cpu_ns = 0;
  int samples = 0, unread = 0;
  uint8_t category = 0;
  std::map<std::string, int> where;
};

// How many of `intervals` are open over time, as counter values: one at
// each time the number changes (an interval [b, e) counts from b to e).
void ConcurrencyCounter(TraceSink* sink, int64_t pid, const std::string& name,
                        const std::vector<std::pair<int64_t, int64_t>>& intervals) {
  std::map<int64_t, int> delta;
  for (const auto& [b, e] : intervals) {
    if (e <= b) continue;
    ++delta[b];
    --delta[e];
  }
  int open = 0;
  for (const auto& [ts, d] : delta) {
    if (d == 0) continue;
    open += d;
    sink->Counter(pid, name, ts, open);
  }
}

void FlushRun(TraceSink* sink, int64_t pid, int64_t track, SampleRun* run,
              std::map<uint8_t, std::vector<std::pair<int64_t, int64_t>>>* by_category) {
  if (run->samples == 0) return;
  (*by_category)[run->category].emplace_back(run->begin, run->end);
  std::string where;
  int most = 0;
  for (const auto& [name, n] : run->where) {
    if (n > most) most = n, where = name;
  }
  TraceArgs args;
  args.Int("samples", run->samples).Double("cpu_ms", run->cpu_ns / 1e6);
  if (!where.empty()) args.String("where", where);
  if (run->unread > 0) args.Int("frames_unread", run->unread);
  sink->Slice(pid, track, CpuCategoryName(static_cast<CpuCategory>(run->category)), names::kCatCpuSamples, run->begin,
              run->end, args);
  *run = SampleRun{};
}

// What a sample was in: the Python module for python and simulator samples,
// the shared object's file name for the others (libc under Ray's worker
// loop is "other").
std::string SampleWhere(const ProcessView& p, const CpuSample& c) {
  std::string object = p.String(c.object);
  if (const size_t slash = object.rfind('/'); slash != std::string::npos) object = object.substr(slash + 1);
  const std::string module = p.String(c.module);
  const auto category = static_cast<CpuCategory>(c.category);
  const bool by_module = category == CpuCategory::kPython || category == CpuCategory::kSimulator;
  return by_module ? (module.empty() ? object : module) : (object.empty() ? module : object);
}

// CPU samples of one process (attribution.h): per sampled thread a track of
// its own, one slice per run of samples in one category, each sample's CPU
// time placed just before it (after the thread's previous sample); `where`
// is what most of the run's samples were in; `frames_unread` (when any) how
// many of them had a Python frame the sampler could not read. The slices
// are clipped to the step's bounds [begin_ns, end_ns]. Per category a
// counter of how many of the process's sampled threads ran in it.
void CpuSampleEvents(TraceSink* sink, const ProcessSlice& slice, int64_t pid, int64_t begin_ns, int64_t end_ns) {
  const ProcessView& p = *slice.process;
  std::map<int64_t, std::vector<const CpuSample*>> by_tid;
  for (const CpuSample& c : slice.cpu_samples) by_tid[c.tid].push_back(&c);
  std::map<uint8_t, std::vector<std::pair<int64_t, int64_t>>> by_category;  // the runs, for the counters
  for (const auto& [tid, list] : by_tid) {
    const int64_t track = SampleTrackId(tid);
    sink->Thread(pid, track, p.ThreadName(tid) + " \u00b7 CPU (sampled)", ThreadSort(p, tid));
    SampleRun run;
    int64_t previous = INT64_MIN;
    for (const CpuSample* c : list) {
      const int64_t begin = std::max(previous, c->ts_ns - c->weight_ns);
      previous = c->ts_ns;
      // One run while the category holds and the thread kept running.
      if (run.samples > 0 && (c->category != run.category || begin > run.end + c->weight_ns / 2)) {
        FlushRun(sink, pid, track, &run, &by_category);
      }
      if (run.samples == 0) run.begin = std::max(begin, begin_ns), run.category = c->category;
      run.end = std::min(c->ts_ns, end_ns);
      run.cpu_ns += c->weight_ns;
      ++run.samples;
      run.unread += c->frame_unread ? 1 : 0;
      const std::string where = SampleWhere(p, *c);
      if (!where.empty()) ++run.where[where];
    }
    FlushRun(sink, pid, track, &run, &by_category);
  }
  for (const auto& [category, runs] : by_category) {
    ConcurrencyCounter(sink, pid, std::string("CPU threads: ") + CpuCategoryName(static_cast<CpuCategory>(category)),
                       runs);
  }
}

// The name of `i` in `names` (indexed by a CUPTI enum's value), else `other`.
template <size_t N>
const char* EnumName(const char* const (&names)[N], uint32_t i, const char* other) {
  return i < N && names[i] != nullptr ? names[i] : other;
}

const char* MemcpyKindName(uint32_t kind) {  // CUpti_ActivityMemcpyKind
  static constexpr const char* kNames[] = {nullptr, "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                           "AtoD",  "DtoA", "DtoD", "HtoH", "PtoP"};
  return EnumName(kNames, kind, "unknown");
}

const char* SyncTypeName(uint32_t type) {  // CUpti_ActivitySynchronizationType
  static constexpr const char* kNames[] = {nullptr, "event synchronize", "stream wait event", "stream synchronize",
                                           "context synchronize"};
  return EnumName(kNames, type, "synchronize");
}

bool OnDevice(const GpuRecord& g) {
  const auto kind = static_cast<GpuKind>(g.kind);
  return kind == GpuKind::kKernel || kind == GpuKind::kMemcpy || kind == GpuKind::kMemset;
}

// A GPU record's name and category in the trace.
std::pair<std::string, const char*> GpuName(const ProcessView& p, const GpuRecord& g) {
  std::string name = p.String(g.name);
  const char* cat = names::kCatKernel;
  switch (static_cast<GpuKind>(g.kind)) {
    case GpuKind::kKernel: cat = names::kCatKernel; break;
    case GpuKind::kMemcpy:
      cat = names::kCatMemcpy;
      name = std::string("Memcpy ") + MemcpyKindName(g.subkind);
      break;
    case GpuKind::kMemset:
      cat = names::kCatMemset;
      name = "Memset";
      break;
    case GpuKind::kRuntimeApi:
    case GpuKind::kDriverApi: cat = names::kCatCudaApi; break;
    case GpuKind::kSync:
      cat = names::kCatCudaSync;
      name = std::string("Sync: ") + SyncTypeName(g.subkind);
      break;
    case GpuKind::kOverhead: cat = names::kCatCuptiOverhead; break;
    case GpuKind::kMemory: break;  // never a record here: a level (ProcessTimeline::AddGpu)
  }
  if (name.empty()) name = "(unnamed)";
  return {name, cat};
}

TraceArgs GpuArgs(const GpuRecord& g) {
  const auto kind = static_cast<GpuKind>(g.kind);
  TraceArgs args;
  if (g.correlation != 0) args.Uint("correlation", g.correlation);
  if (OnDevice(g)) args.Uint("device", g.device).Uint("stream", g.stream);
  if (kind == GpuKind::kKernel) {
    args.Ints3("grid", {g.grid[0], g.grid[1], g.grid[2]}).Ints3("block", {g.block[0], g.block[1], g.block[2]});
  }
  if (kind == GpuKind::kMemcpy || kind == GpuKind::kMemset) {
    args.Uint("bytes", g.bytes);
    if (g.end_ns > g.start_ns) {
      args.Double("bandwidth_GBps", static_cast<double>(g.bytes) / static_cast<double>(g.end_ns - g.start_ns));
    }
  }
  return args;
}

// The GPU tracks of one process: one per (device, stream) its kernels,
// copies and sets ran on; the CPU threads its API calls, syncs and CUPTI
// overhead were on go into `cpu_tids`.
void GpuTracks(TraceSink* sink, const ProcessSlice& slice, int64_t pid, std::set<int64_t>* cpu_tids) {
  std::set<int64_t> streams;
  for (const GpuRecord& g : slice.gpu) {
    if (OnDevice(g)) {
      const int64_t track = StreamTrackId(g.device, g.stream);
      if (streams.insert(track).second) {
        sink->Thread(pid, track, "stream " + std::to_string(g.stream) + " (GPU " + std::to_string(g.device) + ")",
                     track);
      }
    } else if (g.tid != 0) {
      cpu_tids->insert(g.tid);
    }
  }
}

// GPU activity of one process on those tracks, a flow arrow from each
// launch to what it launched, and per device a counter of the work running
// on it (kernels, copies and sets at once: its streams busy).
void GpuEvents(TraceSink* sink, const ProcessSlice& slice, int64_t pid) {
  const ProcessView& p = *slice.process;
  std::map<uint32_t, const GpuRecord*> launch;  // correlation -> API call
  for (const GpuRecord& g : slice.gpu) {
    const auto kind = static_cast<GpuKind>(g.kind);
    if ((kind == GpuKind::kRuntimeApi || kind == GpuKind::kDriverApi) && g.correlation != 0) {
      launch.emplace(g.correlation, &g);
    }
  }
  std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> by_device;  // device work, for the counters
  for (const GpuRecord& g : slice.gpu) {
    if (OnDevice(g)) by_device[g.device].emplace_back(g.start_ns, g.end_ns);
  }
  for (const auto& [device, work] : by_device) {
    ConcurrencyCounter(sink, pid, "GPU " + std::to_string(device) + " busy streams", work);
  }
  std::map<uint32_t, uint64_t> launched;  // correlation -> device records so far (a graph launch has several)
  for (const GpuRecord& g : slice.gpu) {
    const auto [name, cat] = GpuName(p, g);
    const int64_t tid = OnDevice(g) ? StreamTrackId(g.device, g.stream) : g.tid;
    sink->Slice(pid, tid, name, cat, g.start_ns, g.end_ns, GpuArgs(g));
    if (OnDevice(g) && g.correlation != 0) {
      auto it = launch.find(g.correlation);
      if (it != launch.end() && it->second->tid != 0) {
        // A correlation id is the process's own: the flow's, one per launched
        // record, is unique in the trace.
        const uint64_t id = FlowId((static_cast<uint64_t>(pid) << 32) ^ g.correlation, launched[g.correlation]++);
        sink->FlowStart(pid, id, "launch", names::kCatLaunch, it->second->tid, it->second->start_ns);
        sink->FlowEnd(pid, id, "launch", names::kCatLaunch, tid, g.start_ns);
      }
    }
  }
}

// An integer payload as it was given: an int64 one (kFlagPayloadSigned) signed.
void PayloadArg(TraceArgs* args, uint64_t payload, bool is_signed) {
  if (is_signed)
    args->Int("payload", static_cast<int64_t>(payload));
  else
    args->Uint("payload", payload);
}

// An event's category (0: none), by its name where the domain named it;
// `storage` keeps the name alive while the args are.
void CategoryArg(TraceArgs* args, const ProcessView& p, uint32_t domain, uint32_t category, std::string* storage) {
  if (category == 0) return;
  *storage = p.CategoryName(domain, category);
  if (storage->empty())
    args->Uint("category", category);
  else
    args->String("category", *storage);
}

// A push/pop range as a slice, a start/end range as an async range; its
// args: payload, category, how it was cut; its raw times where overhead
// correction moved it.
void SpanEvent(TraceSink* sink, const ProcessView& p, const Span& s, int64_t pid) {
  const char* raw_name = p.String(s.name);
  const std::string_view name = *raw_name ? raw_name : "(unnamed)";
  const std::string_view cat = s.domain != 0 ? p.String(s.domain) : "nvtx";
  TraceArgs args;
  std::string category;
  if (s.has_payload) PayloadArg(&args, s.payload, s.payload_signed);
  CategoryArg(&args, p, s.domain, s.category, &category);
  if (s.clipped_begin) args.Bool("clipped_begin", true);
  if (s.clipped_end) args.Bool("clipped_end", true);
  if (s.open) args.Bool("open", true);
  if (s.async && !s.open) args.Int("end_tid", s.end_tid);
  const RawTimes raw{s.raw_begin_ns, s.raw_end_ns};
  const bool moved = s.raw_begin_ns != s.begin_ns || s.raw_end_ns != s.end_ns;
  if (s.async) {
    sink->Async(pid, s.tid, name, std::string(cat) + ".async", s.range_id, s.begin_ns, s.end_ns, args,
                moved ? &raw : nullptr);
  } else {
    sink->Slice(pid, s.tid, name, cat, s.begin_ns, s.end_ns, args, moved ? &raw : nullptr);
  }
}

void InstantEvent(TraceSink* sink, const ProcessView& p, const Instant& i, int64_t pid) {
  const char* name = p.String(i.name);
  TraceArgs args;
  std::string category;
  if (i.has_payload) PayloadArg(&args, i.payload, i.payload_signed);
  CategoryArg(&args, p, i.domain, i.category, &category);
  sink->Instant(pid, i.tid, *name ? name : "(unnamed)", i.domain != 0 ? p.String(i.domain) : "nvtx", i.ts_ns, args);
}

// The process's Ray identity from its collector's labels (ray_worker.py).
std::vector<std::string> RayLabels(const ProcessView& p) {
  static const char* const kKeys[] = {"actor_class", "actor_name", "actor_id", "job_id",
                                      "node_id",     "node_ip",    "worker_id"};
  std::vector<std::string> out;
  for (const char* key : kKeys) {
    auto it = p.identity().labels.find(key);
    if (it != p.identity().labels.end() && !it->second.empty()) out.push_back(std::string(key) + "=" + it->second);
  }
  return out;
}

// Ray calls the step shows on both sides: the controller's submit (its
// "ray.submit" mark, ray_calls.h) and a worker's execution (its method
// range carrying the call's key, not a start/end range): per key, how many
// executions (one, unless a key is reused). The walk gives each its flow,
// in step order.
std::map<uint64_t, int> CallsSeenOnBothSides(const StepProfile& step) {
  std::map<uint64_t, std::pair<int64_t, int64_t>> submits;
  std::map<uint64_t, int> both;
  for (const ProcessSlice& slice : step.processes) {
    if (slice.process->is_controller()) submits.merge(RaySubmits(slice));
  }
  for (const ProcessSlice& slice : step.processes) {
    if (slice.process->is_controller()) continue;
    for (const Span& s : slice.spans) {
      if (s.has_payload && !s.clipped_begin && !s.async && submits.count(s.payload) != 0) ++both[s.payload];
    }
  }
  return both;
}

// A flow from each such submit to each execution of it (`seen`: per key,
// the executions given theirs so far).
void RayCallFlows(TraceSink* sink, const ProcessSlice& slice, int64_t pid, const std::map<uint64_t, int>& calls,
                  std::map<uint64_t, int>* seen) {
  const uint64_t salt = 0x9e3779b97f4a7c15ull;  // apart from launch flows' ids
  if (slice.process->is_controller()) {
    for (const auto& [key, at] : RaySubmits(slice)) {
      auto it = calls.find(key);
      for (int k = 0; it != calls.end() && k < it->second; ++k) {
        sink->FlowStart(pid, FlowId(key ^ salt, k), "ray.call", names::kCatRayCall, at.second, at.first);
      }
    }
    return;
  }
  for (const Span& s : slice.spans) {
    if (s.has_payload && !s.clipped_begin && !s.async && calls.count(s.payload) != 0) {
      sink->FlowEnd(pid, FlowId(s.payload ^ salt, (*seen)[s.payload]++), "ray.call", names::kCatRayCall, s.tid,
                    s.begin_ns);
    }
  }
}

// Memory counter tracks: the process's resident memory and, per device, the
// GPU memory it has allocated, in MiB to 0.1 (the JSON's 6 significant
// digits then hold the value the Perfetto trace holds); the level at the
// step's begin is put at the begin (a level from before the step is not
// outside it), and nothing after its end.
void MemoryCounters(TraceSink* sink, const ProcessSlice& slice, int64_t pid, int64_t begin_ns, int64_t end_ns) {
  auto series = [&](const std::string& name, const std::vector<MemoryPoint>& points) {
    for (const MemoryPoint& m : points) {
      if (m.ts_ns > end_ns) break;
      sink->Counter(pid, name, std::max(m.ts_ns, begin_ns),
                    std::round(static_cast<double>(m.bytes) / (1 << 20) * 10) / 10);
    }
  };
  series("Memory: RSS (MiB)", slice.rss);
  for (const auto& [device, points] : slice.gpu_allocated) {
    series("GPU " + std::to_string(device) + " memory allocated (MiB)", points);
  }
}

// One process's tracks and events: its GPU work, its threads' ranges, CPU
// samples and marks.
void ProcessEvents(TraceSink* sink, const StepProfile& step, const ProcessSlice& slice, int64_t pid,
                   const std::map<uint64_t, int>& calls, std::map<uint64_t, int>* seen) {
  const ProcessView& p = *slice.process;
  sink->Process(pid, ProcessLabel(p), SortIndex(p), RayLabels(p));
  std::set<int64_t> tids;
  for (const Span& s : slice.spans) tids.insert(s.tid);
  for (const Instant& i : slice.instants) tids.insert(i.tid);
  GpuTracks(sink, slice, pid, &tids);
  for (int64_t tid : tids) sink->Thread(pid, tid, p.ThreadName(tid), ThreadSort(p, tid));
  GpuEvents(sink, slice, pid);
  sink->ForEach(slice.spans.size(), [&](TraceSink* to, size_t i) { SpanEvent(to, p, slice.spans[i], pid); });
  CpuSampleEvents(sink, slice, pid, step.begin_ns, step.end_ns);
  OffCpuEvents(sink, slice, pid, step.begin_ns, step.end_ns);
  for (const Instant& i : slice.instants) InstantEvent(sink, p, i, pid);
  RayCallFlows(sink, slice, pid, calls, seen);
  MemoryCounters(sink, slice, pid, step.begin_ns, step.end_ns);
}

}  // namespace

void StepTraceEvents(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids, TraceSink* sink) {
  const auto calls = CallsSeenOnBothSides(step);
  std::map<uint64_t, int> seen;
  for (const ProcessSlice& slice : step.processes) {
    ProcessEvents(sink, step, slice, trace_pids.at(slice.process->hello().session), calls, &seen);
  }
}

}  // namespace rlscope
