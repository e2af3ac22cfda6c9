#include "aggregator/chrome_trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "aggregator/attribution.h"
#include "aggregator/json_writer.h"
#include "aggregator/run_json.h"
#include "aggregator/summary_json.h"
#include "native/names.h"

namespace rlscope {
namespace {

int64_t SortIndex(const ProcessTimeline& p) {
  if (p.is_controller()) return 0;
  return p.identity().rank >= 0 ? 1 + p.identity().rank : 1000000;
}

bool MakeDirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
    if (i < path.size()) cur.push_back(path[i]);
  }
  return true;
}

// GPU stream tracks get thread ids of their own, far above real tids.
int64_t StreamTrack(const GpuRecord& g) {
  return (int64_t{1} << 40) + static_cast<int64_t>(g.device) * 1000000 + g.stream;
}

// A sampled thread's category track: beside the thread (same sort index,
// a larger id).
int64_t SampleTrack(int64_t tid) { return (int64_t{1} << 42) + tid; }
int64_t OffCpuTrack(int64_t tid) { return (int64_t{1} << 43) + tid; }

// A track's metadata: its name and sort index (`kind`: "process" or
// "thread"; a process track's tid is 0).
void WriteTrack(JsonWriter& w, const char* kind, int64_t pid, int64_t tid, const std::string& name,
                int64_t sort_index) {
  w.Newline().BeginObject().Key("ph").String("M").Key("name").String(std::string(kind) + "_name");
  w.Key("pid").Int(pid).Key("tid").Int(tid);
  w.Key("args").BeginObject().Key("name").String(name).EndObject();
  w.EndObject();
  w.Newline().BeginObject().Key("ph").String("M").Key("name").String(std::string(kind) + "_sort_index");
  w.Key("pid").Int(pid).Key("tid").Int(tid);
  w.Key("args").BeginObject().Key("sort_index").Int(sort_index).EndObject();
  w.EndObject();
}

// CPU samples of one process (attribution.h): per sampled thread a track of
// its own, one slice per run of samples in one category, each sample's CPU
// time placed just before it (after the thread's previous sample); `where`
// is what most of the run's samples were in: the Python module for python
// and simulator samples, the shared object's file name for the others;
// `frames_unread` (when any) how many of them had a Python frame the
// sampler could not read. The slices are clipped to the step's bounds
// [begin_ns, end_ns].
// Each recording thread's off-CPU samples (thread_states.h) on a track of
// its own: one slice per run of looks with the same reason.
void WriteOffCpu(JsonWriter& w, const ProcessSlice& slice, int64_t pid, int64_t begin_ns, int64_t end_ns) {
  const ProcessTimeline& p = *slice.process;
  std::map<int64_t, std::vector<const OffCpuSample*>> by_tid;
  for (const OffCpuSample& o : slice.off_cpu) by_tid[o.tid].push_back(&o);
  for (const auto& [tid, list] : by_tid) {
    const int64_t track = OffCpuTrack(tid);
    WriteTrack(w, "thread", pid, track, p.ThreadName(tid) + " \u00b7 off CPU (sampled)", tid == p.identity().pid ? 0 : tid);
    size_t i = 0;
    while (i < list.size()) {
      const uint8_t reason = list[i]->reason;
      const int64_t begin = std::max(begin_ns, list[i]->ts_ns - list[i]->weight_ns);
      int64_t end = list[i]->ts_ns, off_ns = 0;
      int looks = 0;
      // A run: the same reason, each look starting where the one before ended.
      for (; i < list.size() && list[i]->reason == reason && list[i]->ts_ns - list[i]->weight_ns <= end + 1000000; ++i) {
        end = list[i]->ts_ns;
        off_ns += list[i]->weight_ns;
        ++looks;
      }
      w.Newline().BeginObject().Key("ph").String("X");
      w.Key("name").String(std::string("off CPU: ") + OffCpuReasonName(reason));
      w.Key("cat").String(names::kCatOffCpu).Key("pid").Int(pid).Key("tid").Int(track);
      w.Key("ts").Micros(begin).Key("dur").Micros(std::max<int64_t>(0, std::min(end, end_ns) - begin));
      w.Key("args").BeginObject().Key("looks").Int(looks).Key("off_cpu_ms").Double(off_ns / 1e6).EndObject();
      w.EndObject();
    }
  }
}

void WriteCpuSamples(JsonWriter& w, const ProcessSlice& slice, int64_t pid, int64_t begin_ns, int64_t end_ns) {
  const ProcessTimeline& p = *slice.process;
  std::map<int64_t, std::vector<const CpuSample*>> by_tid;
  for (const CpuSample& c : slice.cpu_samples) by_tid[c.tid].push_back(&c);
  for (const auto& [tid, list] : by_tid) {
    const int64_t track = SampleTrack(tid);
    WriteTrack(w, "thread", pid, track, p.ThreadName(tid) + " \u00b7 CPU (sampled)", tid == p.identity().pid ? 0 : tid);
    struct Run {
      int64_t begin = 0, end = 0, cpu_ns = 0;
      int samples = 0, unread = 0;
      uint8_t category = 0;
      std::map<std::string, int> where;
    } run;
    auto flush = [&] {
      if (run.samples == 0) return;
      std::string where;
      int most = 0;
      for (const auto& [name, n] : run.where) {
        if (n > most) most = n, where = name;
      }
      w.Newline().BeginObject().Key("ph").String("X");
      w.Key("name").String(CpuCategoryName(static_cast<CpuCategory>(run.category)));
      w.Key("cat").String(names::kCatCpuSamples).Key("pid").Int(pid).Key("tid").Int(track);
      w.Key("ts").Micros(run.begin).Key("dur").Micros(run.end - run.begin);
      w.Key("args").BeginObject().Key("samples").Int(run.samples).Key("cpu_ms").Double(run.cpu_ns / 1e6);
      if (!where.empty()) w.Key("where").String(where);
      if (run.unread > 0) w.Key("frames_unread").Int(run.unread);
      w.EndObject().EndObject();
      run = Run{};
    };
    int64_t previous = INT64_MIN;
    for (const CpuSample* c : list) {
      const int64_t begin = std::max(previous, c->ts_ns - c->weight_ns);
      previous = c->ts_ns;
      // One run while the category holds and the thread kept running.
      if (run.samples > 0 && (c->category != run.category || begin > run.end + c->weight_ns / 2)) flush();
      if (run.samples == 0) run.begin = std::max(begin, begin_ns), run.category = c->category;
      run.end = std::min(c->ts_ns, end_ns);
      run.cpu_ns += c->weight_ns;
      ++run.samples;
      run.unread += c->frame_unread ? 1 : 0;
      // Python and the simulator are told by the frame's module, the rest
      // by the shared object (libc under Ray's worker loop is "other").
      std::string object = p.String(c->object);
      if (const size_t slash = object.rfind('/'); slash != std::string::npos) object = object.substr(slash + 1);
      const std::string module = p.String(c->module);
      const auto category = static_cast<CpuCategory>(c->category);
      const bool by_module = category == CpuCategory::kPython || category == CpuCategory::kSimulator;
      std::string name = by_module ? (module.empty() ? object : module) : (object.empty() ? module : object);
      if (!name.empty()) ++run.where[name];
    }
    flush();
  }
}

const char* MemcpyKindName(uint32_t kind) {
  switch (kind) {  // CUpti_ActivityMemcpyKind
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "HtoA";
    case 4: return "AtoH";
    case 5: return "AtoA";
    case 6: return "AtoD";
    case 7: return "DtoA";
    case 8: return "DtoD";
    case 9: return "HtoH";
    case 10: return "PtoP";
    default: return "unknown";
  }
}

const char* SyncTypeName(uint32_t type) {
  switch (type) {  // CUpti_ActivitySynchronizationType
    case 1: return "event synchronize";
    case 2: return "stream wait event";
    case 3: return "stream synchronize";
    case 4: return "context synchronize";
    default: return "synchronize";
  }
}

bool OnDevice(const GpuRecord& g) {
  const auto kind = static_cast<GpuKind>(g.kind);
  return kind == GpuKind::kKernel || kind == GpuKind::kMemcpy || kind == GpuKind::kMemset;
}

// GPU activity of one process: kernels, copies and sets on one track per
// (device, stream); API calls, syncs and CUPTI overhead on the CPU thread that
// made them; a flow arrow from each launch to what it launched.
void WriteGpu(JsonWriter& w, const ProcessSlice& slice, int64_t pid, std::set<int64_t>* cpu_tids) {
  const ProcessTimeline& p = *slice.process;
  std::set<int64_t> streams;
  std::map<uint32_t, const GpuRecord*> launch;  // correlation -> API call
  for (const GpuRecord& g : slice.gpu) {
    if (OnDevice(g)) {
      if (streams.insert(StreamTrack(g)).second) {
        const std::string name = "stream " + std::to_string(g.stream) + " (GPU " + std::to_string(g.device) + ")";
        WriteTrack(w, "thread", pid, StreamTrack(g), name, StreamTrack(g));
      }
    } else if (g.tid != 0) {
      cpu_tids->insert(g.tid);
    }
    const auto kind = static_cast<GpuKind>(g.kind);
    if ((kind == GpuKind::kRuntimeApi || kind == GpuKind::kDriverApi) && g.correlation != 0) {
      launch.emplace(g.correlation, &g);
    }
  }
  for (const GpuRecord& g : slice.gpu) {
    const auto kind = static_cast<GpuKind>(g.kind);
    std::string name = p.String(g.name);
    const char* cat = names::kCatKernel;
    switch (kind) {
      case GpuKind::kKernel: cat = names::kCatKernel; break;
      case GpuKind::kMemcpy: cat = names::kCatMemcpy; name = std::string("Memcpy ") + MemcpyKindName(g.subkind); break;
      case GpuKind::kMemset: cat = names::kCatMemset; name = "Memset"; break;
      case GpuKind::kRuntimeApi:
      case GpuKind::kDriverApi: cat = names::kCatCudaApi; break;
      case GpuKind::kSync: cat = names::kCatCudaSync; name = std::string("Sync: ") + SyncTypeName(g.subkind); break;
      case GpuKind::kOverhead: cat = names::kCatCuptiOverhead; break;
    }
    if (name.empty()) name = "(unnamed)";
    const int64_t tid = OnDevice(g) ? StreamTrack(g) : (g.tid != 0 ? g.tid : 0);
    w.Newline().BeginObject().Key("ph").String("X").Key("name").String(name).Key("cat").String(cat);
    w.Key("pid").Int(pid).Key("tid").Int(tid);
    w.Key("ts").Micros(g.start_ns).Key("dur").Micros(g.end_ns - g.start_ns);
    w.Key("args").BeginObject();
    if (g.correlation != 0) w.Key("correlation").Uint(g.correlation);
    if (OnDevice(g)) w.Key("device").Uint(g.device).Key("stream").Uint(g.stream);
    if (kind == GpuKind::kKernel) {
      w.Key("grid").BeginArray().Int(g.grid[0]).Int(g.grid[1]).Int(g.grid[2]).EndArray();
      w.Key("block").BeginArray().Int(g.block[0]).Int(g.block[1]).Int(g.block[2]).EndArray();
    }
    if (kind == GpuKind::kMemcpy || kind == GpuKind::kMemset) {
      w.Key("bytes").Uint(g.bytes);
      if (g.end_ns > g.start_ns) {
        w.Key("bandwidth_GBps").Double(static_cast<double>(g.bytes) / static_cast<double>(g.end_ns - g.start_ns));
      }
    }
    w.EndObject();
    w.EndObject();
    // launch -> kernel/copy/set: "s" on the API call, "f" (bound to the
    // enclosing slice) on the device record.
    if (OnDevice(g) && g.correlation != 0) {
      auto it = launch.find(g.correlation);
      if (it != launch.end() && it->second->tid != 0) {
        const std::string id = std::to_string(pid) + "." + std::to_string(g.correlation);
        w.Newline().BeginObject().Key("ph").String("s").Key("name").String("launch").Key("cat").String(names::kCatLaunch);
        w.Key("id").String(id).Key("pid").Int(pid).Key("tid").Int(it->second->tid);
        w.Key("ts").Micros(it->second->start_ns).EndObject();
        w.Newline().BeginObject().Key("ph").String("f").Key("bp").String("e").Key("name").String("launch");
        w.Key("cat").String(names::kCatLaunch).Key("id").String(id).Key("pid").Int(pid).Key("tid").Int(tid);
        w.Key("ts").Micros(g.start_ns).EndObject();
      }
    }
  }
}

}  // namespace

ChromeTraceExporter::ChromeTraceExporter(std::string out_dir) : out_dir_(std::move(out_dir)) {}

int64_t ChromeTraceExporter::TracePid(uint64_t session, int64_t pid) {
  auto it = trace_pids_.find(session);
  if (it != trace_pids_.end()) return it->second;
  std::set<int64_t> used;
  for (const auto& [s, tp] : trace_pids_) used.insert(tp);
  int64_t tp = pid;
  while (used.count(tp) != 0) tp += 10000000;  // same pid on another host
  trace_pids_[session] = tp;
  return tp;
}

namespace {

// "otherData": the step, and every process's clock against the aggregator's.
void WriteOtherData(JsonWriter& w, const StepProfile& step) {
  w.Key("otherData").BeginObject();
  w.Key("step").Int(step.step);
  if (!step.capture.empty()) w.Key("capture").String(step.capture);
  w.Key("begin_ns").Int(step.begin_ns);
  w.Key("end_ns").Int(step.end_ns);
  w.Key("reason").String(step.reason);
  w.Key("clock").String("the aggregator's CLOCK_MONOTONIC, microseconds; each collector's clock aligned to it");
  w.Key("clocks").BeginObject();
  for (const ProcessSlice& slice : step.processes) {
    w.Key(ProcessLabel(*slice.process)).BeginObject();
    const ClockEstimate& e = slice.process->clock();
    w.Key("offset_ns").Int(e.offset_ns).Key("drift_ppm").Double(e.drift * 1e6);
    w.Key("bound_ns");
    if (e.bound_ns >= 0) w.Int(e.bound_ns); else w.Null();
    w.Key("probes").Int(e.probes).EndObject();
  }
  w.EndObject();
  w.EndObject();
}

// An integer payload as it was given: an int64 one (kFlagPayloadSigned) signed.
void WritePayload(JsonWriter& w, uint64_t payload, bool is_signed) {
  w.Key("payload");
  if (is_signed) w.Int(static_cast<int64_t>(payload)); else w.Uint(payload);
}

// An event's category (0: none), by its name where the domain named it.
void WriteCategory(JsonWriter& w, const ProcessTimeline& p, uint32_t domain, uint32_t category) {
  if (category == 0) return;
  const std::string cn = p.CategoryName(domain, category);
  w.Key("category");
  if (cn.empty()) w.Uint(category); else w.String(cn);
}

// A range's args: payload, category, how it was cut, and where it was before
// overhead correction moved it.
void WriteSpanArgs(JsonWriter& w, const ProcessTimeline& p, const Span& s) {
  w.Key("args").BeginObject();
  if (s.has_payload) WritePayload(w, s.payload, s.payload_signed);
  WriteCategory(w, p, s.domain, s.category);
  if (s.clipped_begin) w.Key("clipped_begin").Bool(true);
  if (s.clipped_end) w.Key("clipped_end").Bool(true);
  if (s.open) w.Key("open").Bool(true);
  if (s.async && !s.open) w.Key("end_tid").Int(s.end_tid);
  if (s.raw_begin_ns != s.begin_ns || s.raw_end_ns != s.end_ns) {
    w.Key("raw_ts").Micros(s.raw_begin_ns).Key("raw_dur").Micros(s.raw_end_ns - s.raw_begin_ns);
  }
  w.EndObject();
}

// A push/pop range as an "X" slice; a start/end range as an async "b"/"e" pair.
void WriteSpan(JsonWriter& w, const ProcessTimeline& p, const Span& s, int64_t pid) {
  const char* name = p.String(s.name);
  const std::string cat = s.domain != 0 ? p.String(s.domain) : "nvtx";
  if (!s.async) {
    w.Newline().BeginObject().Key("ph").String("X").Key("name").String(*name ? name : "(unnamed)");
    w.Key("cat").String(cat).Key("pid").Int(pid).Key("tid").Int(s.tid);
    w.Key("ts").Micros(s.begin_ns).Key("dur").Micros(s.end_ns - s.begin_ns);
    WriteSpanArgs(w, p, s);
    w.EndObject();
    return;
  }
  for (int phase = 0; phase < 2; ++phase) {
    w.Newline().BeginObject().Key("ph").String(phase == 0 ? "b" : "e");
    w.Key("name").String(*name ? name : "(unnamed)");
    w.Key("cat").String(cat + ".async").Key("id").Uint(s.range_id);
    w.Key("pid").Int(pid).Key("tid").Int(s.tid);
    w.Key("ts").Micros(phase == 0 ? s.begin_ns : s.end_ns);
    if (phase == 0) WriteSpanArgs(w, p, s);
    w.EndObject();
  }
}

void WriteInstant(JsonWriter& w, const ProcessTimeline& p, const Instant& i, int64_t pid) {
  const char* name = p.String(i.name);
  w.Newline().BeginObject().Key("ph").String("i").Key("s").String("t");
  w.Key("name").String(*name ? name : "(unnamed)");
  w.Key("cat").String(i.domain != 0 ? p.String(i.domain) : "nvtx");
  w.Key("pid").Int(pid).Key("tid").Int(i.tid).Key("ts").Micros(i.ts_ns);
  if (i.has_payload || i.category != 0) {
    w.Key("args").BeginObject();
    if (i.has_payload) WritePayload(w, i.payload, i.payload_signed);
    WriteCategory(w, p, i.domain, i.category);
    w.EndObject();
  }
  w.EndObject();
}

// One process's tracks and events: its GPU work, its threads' ranges, CPU
// samples and marks.
void WriteProcessEvents(JsonWriter& w, const StepProfile& step, const ProcessSlice& slice, int64_t pid) {
  const ProcessTimeline& p = *slice.process;
  WriteTrack(w, "process", pid, 0, ProcessLabel(p), SortIndex(p));
  std::set<int64_t> tids;
  for (const Span& s : slice.spans) tids.insert(s.tid);
  for (const Instant& i : slice.instants) tids.insert(i.tid);
  WriteGpu(w, slice, pid, &tids);
  for (int64_t tid : tids) WriteTrack(w, "thread", pid, tid, p.ThreadName(tid), tid == p.identity().pid ? 0 : tid);
  for (const Span& s : slice.spans) WriteSpan(w, p, s, pid);
  WriteCpuSamples(w, slice, pid, step.begin_ns, step.end_ns);
  WriteOffCpu(w, slice, pid, step.begin_ns, step.end_ns);
  for (const Instant& i : slice.instants) WriteInstant(w, p, i, pid);
}

}  // namespace

std::string StepTraceJson(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids) {
  std::string out;
  out.reserve(256 + 160 * [&] {
    size_t n = 0;
    for (const auto& p : step.processes) n += p.spans.size() + p.instants.size();
    return n;
  }());
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("displayTimeUnit").String("ns");
  WriteOtherData(w, step);
  w.Key("traceEvents").BeginArray();
  for (const ProcessSlice& slice : step.processes) {
    WriteProcessEvents(w, step, slice, trace_pids.at(slice.process->hello().session));
  }
  w.Newline().EndArray();
  w.EndObject();
  out.push_back('\n');
  return out;
}

bool ChromeTraceExporter::WriteFile(const std::string& path, const std::string& content) noexcept {
  // POSIX calls, each checked (a full disk shows at write or close): on any
  // failure the temporary file goes and what was there before stays.
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what, int fd) {
    last_error_ = what + " " + tmp + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    return false;
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot create", -1);
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write", fd);
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return fail("cannot write", -1);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("cannot rename", -1);
  return true;
}

bool ChromeTraceExporter::ExportStep(const StepProfile& step) noexcept {
  try {
    std::string dir = out_dir_ + "/step_" + std::to_string(step.step);
    if (!step.capture.empty()) dir += "/" + step.capture;
    if (!MakeDirs(dir)) {
      last_error_ = "cannot create " + dir + ": " + std::strerror(errno);
      return false;
    }
    for (const ProcessSlice& slice : step.processes) {
      TracePid(slice.process->hello().session, slice.process->identity().pid);
    }
    if (!step.summary_only && !WriteFile(dir + "/trace.json", StepTraceJson(step, trace_pids_))) return false;
    return WriteFile(dir + "/summary.json", StepSummaryJson(step));
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return false;
  }
}

bool ChromeTraceExporter::ExportRun(const RunInfo& run) noexcept {
  try {
    if (!MakeDirs(out_dir_)) {
      last_error_ = "cannot create " + out_dir_ + ": " + std::strerror(errno);
      return false;
    }
    return WriteFile(out_dir_ + "/" + kRunJsonFile, RunJson(run));
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return false;
  }
}

}  // namespace rlscope
