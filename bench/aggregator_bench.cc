// Aggregator throughput: wire frames in (as collectors send them), step
// trace.json + summary.json out, on the cores taskset gives it. Also reports
// bytes per event on the wire.
//
//   aggregator_bench [--events N] [--threads T] [--workers W] [--out DIR] [--ranges-only]
// --threads: recording threads in the synthetic worker; --workers: the
// aggregator's threads encoding trace.json (default: the cores it may use,
// AvailableCores, at most kMaxTraceWorkers), reported as "workers".
// The default is what a collector at the default config sends (the
// production path): a Hello with its calibrated costs of every record kind
// (correction on), a measured cost sample after one call in 64 on each
// thread (correction.sample_every), each thread's CPU samples at 1 kHz with
// their native stacks and Python modules, and every 20 ms (a flush) the
// flush thread's off-CPU looks at two waiting threads, the process's CPU
// time and its resident memory; written as the daemon writes by default
// (trace.json and trace.pftrace). --ranges-only: the ranges alone, no
// costs (correction has nothing to remove), trace.json alone: the figure
// this bench quoted before, beside it.
// Prints one JSON line: events (every record), range_events (push and pop),
// formats (the step's files), frames, wire_bytes, bytes_per_event,
// seconds (decode -> trace.json written), events_per_s, cpu_seconds (the
// process's CPU time over the same span, all threads: on a busy machine
// wall time also counts others' turns on the core), trace_bytes, and the
// collector side's encoding: encode_ns_per_event (the batches' events
// through wire::BatchWriter, as the flush thread encodes them) beside
// packer_ns_per_event (the same events packed field by field with msgpack-c's
// packer, the reference); and the step's trace encoded once more in each
// format, outside the end-to-end time: json_encode_s / json_bytes beside
// pftrace_encode_s / pftrace_bytes (perfetto_trace.h).
#include <msgpack.hpp>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/aggregator.h"
#include "aggregator/chrome_trace.h"
#include "aggregator/outputs.h"
#include "aggregator/perfetto_trace.h"
#include "aggregator/step_cut.h"
#include "native/wire.h"

namespace {
// A /proc/self/status field in kB (VmRSS: now, VmHWM: the peak so far); -1 if absent.
long StatusKb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, key, std::strlen(key)) == 0) kb = std::strtol(line + std::strlen(key), nullptr, 10);
  }
  std::fclose(f);
  return kb;
}
using namespace rlscope;

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The exporter the daemon runs (trace.json), then each format's encoding of
// the same step on its own, timed.
class EncodingTimer : public StepExporter {
 public:
  EncodingTimer(const std::string& out, const std::vector<std::string>& formats, int workers)
      : files_(MakeStepFiles(out, formats, workers)) {}
  bool ExportStep(const StepProfile& step) noexcept override {
    const auto e = std::chrono::steady_clock::now();
    const bool ok = files_->ExportStep(step);
    export_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - e).count();
    const double cpu_a = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
    const auto a = std::chrono::steady_clock::now();
    std::map<uint64_t, int64_t> pids;
    for (const ProcessSlice& slice : step.processes)
      pids[slice.process->hello().session] = slice.process->identity().pid;
    json_bytes += StepTraceJson(step, pids).size();
    const auto b = std::chrono::steady_clock::now();
    pftrace = StepTracePerfetto(step, pids);
    const auto c = std::chrono::steady_clock::now();
    extra_cpu_s += CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - cpu_a;
    pftrace_bytes += pftrace.size();
    json_s += std::chrono::duration<double>(b - a).count();
    pftrace_s += std::chrono::duration<double>(c - b).count();
    return ok;
  }
  bool ExportRun(const RunInfo& run) noexcept override { return files_->ExportRun(run); }
  double json_s = 0, pftrace_s = 0;
  double export_s = 0;     // the daemon's exporter (trace.json and summary.json), inside the timed span
  double extra_cpu_s = 0;  // CPU time of the two encodings above (not the aggregator's)
  size_t json_bytes = 0, pftrace_bytes = 0;
  std::string pftrace;  // the last step's, written beside its trace.json after the timing

 private:
  std::unique_ptr<StepFiles> files_;
};
}  // namespace

// The default mix's records beside the ranges (see the top of the file).
constexpr int kCostSampleEvery = 64;       // correction.sample_every
constexpr int kEventsPerCpuSample = 1000;  // 1 kHz of CPU time, an event each microsecond
constexpr int64_t kFlushNs = 20000000;     // flush.interval_ms
constexpr uint32_t kStackId = 66, kLibId = 67, kModuleId = 68;

// A thread's CPU samples for its events [done, done + n): one each
// kEventsPerCpuSample events, in a block of their own as the collector sends them.
wire::ThreadEvents CpuSamples(int64_t tid, int64_t t0, int64_t done, int64_t n, int t) {
  wire::ThreadEvents te{tid, {}};
  for (int64_t i = done + kEventsPerCpuSample - done % kEventsPerCpuSample; i < done + n; i += kEventsPerCpuSample) {
    te.events.push_back({t0 + i * 1000 + t + 300, kStackId, kLibId, 1000, kModuleId,
                         static_cast<uint8_t>(EventKind::kCpuSample), kFlagNativeStack});
  }
  return te;
}

// The flush thread's looks over [from_ns, to_ns): each flush, the process's
// CPU time and two waiting threads (a poll, a lock) for the interval.
wire::ThreadEvents FlushLooks(int64_t from_ns, int64_t to_ns, std::vector<wire::MemorySample>* memory) {
  wire::ThreadEvents te{99, {}};
  for (int64_t ts = (from_ns / kFlushNs + 1) * kFlushNs; ts < to_ns; ts += kFlushNs) {
    te.events.push_back({ts, static_cast<uint64_t>(ts / 2), 0, 0, 0, static_cast<uint8_t>(EventKind::kProcessCpu), 0});
    te.events.push_back({ts, 90, 0, static_cast<uint32_t>(kFlushNs / 1000), static_cast<uint32_t>(OffCpuReason::kPoll),
                         static_cast<uint8_t>(EventKind::kOffCpuSample), 0});
    te.events.push_back({ts, 91, 0, static_cast<uint32_t>(kFlushNs / 1000), static_cast<uint32_t>(OffCpuReason::kLock),
                         static_cast<uint8_t>(EventKind::kOffCpuSample), 0});
    memory->push_back({ts, (512 << 20) + (ts / kFlushNs % 7) * (1 << 20)});
  }
  return te;
}

int main(int argc, char** argv) {
  int64_t events = 2000000;
  bool ranges_only = false;  // --ranges-only: no costs, no samples, looks or memory; trace.json alone
  int threads = 4;
  int workers = std::min(AvailableCores(), kMaxTraceWorkers);
  std::string out = "/tmp/rlscope_aggregator_bench";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--events") && i + 1 < argc) events = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--ranges-only"))
      ranges_only = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--workers") && i + 1 < argc)
      workers = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
  }
  // One controller process holding one step; one worker process with
  // `threads` threads of nested push/pop pairs (names from 64 interned
  // strings, ~1 us apart), shipped in batches of 64k events as the collector does.
  const uint64_t kCtrl = 1, kWorker = 2;
  const int64_t t0 = 1000000000;
  std::vector<std::string> frames;
  wire::Hello ch{kCtrl, {"bench", 1, -1, "controller", "ctrl", {}}, "monotonic", t0};
  wire::Hello wh{kWorker, {"bench", 2, 0, "worker", "worker", {}}, "monotonic", t0};
  if (!ranges_only) {
    // A start-up calibration's figures on this project's machines (ns per
    // event): every range moves, its raw times in its args.
    wh.costs = {{"push", 42}, {"pop", 38}, {"start", 61}, {"end", 55}, {"mark", 33}};
    ch.costs = wh.costs;
  }
  frames.push_back(wire::Encode(ch));
  frames.push_back(wire::Encode(wh));
  std::vector<std::pair<uint32_t, std::string>> strings;
  for (uint32_t id = 1; id <= 64; ++id) strings.emplace_back(id, "subtask_" + std::to_string(id));
  strings.emplace_back(65, "step");
  strings.emplace_back(kStackId, "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\n/usr/lib/x86_64-linux-gnu/libc.so.6");
  strings.emplace_back(kLibId, "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0");
  strings.emplace_back(kModuleId, "worker");
  const int64_t per_thread = events / threads;
  const int64_t span_ns = per_thread * 1000 + 1000000;
  {
    wire::Batch b;
    b.session = kCtrl;
    b.strings = {{1, "step"}};
    b.watermark_ns = t0 + span_ns + 2;
    wire::ThreadEvents te{1, {}};
    te.events.push_back({t0 - 1, 0, 1, 0, 0, static_cast<uint8_t>(EventKind::kRangePush), 0});
    te.events.push_back({t0 + span_ns + 1, 0, 0, 0, 0, static_cast<uint8_t>(EventKind::kRangePop), 0});
    b.threads.push_back(te);
    frames.push_back(wire::Encode(b));
  }
  uint64_t seq = 0;
  size_t wire_events = 0;  // every record: ranges, and in the default mix cost samples, CPU samples, looks
  int64_t range_events = 0;
  double encode_s = 0, packer_s = 0;
  size_t packer_bytes = 0;
  for (int64_t done = 0; done < per_thread;) {
    const int64_t n = std::min<int64_t>(per_thread - done, 65536 / threads) & ~int64_t{1};
    if (n <= 0) break;
    wire::Batch b;
    b.session = kWorker;
    b.seq = seq++;
    if (seq == 1) b.strings = strings;
    for (int t = 0; t < threads; ++t) {
      wire::ThreadEvents te{100 + t, {}};
      for (int64_t i = done; i < done + n; i += 2) {
        const int64_t ts = t0 + i * 1000 + t;
        const uint32_t name = static_cast<uint32_t>(1 + (i / 2) % 64);
        te.events.push_back({ts, 0, name, 0, 0, static_cast<uint8_t>(EventKind::kRangePush), 0});
        if (!ranges_only && (i / 2) % (kCostSampleEvery / 2) == 0) {  // the push just before, timed (ps)
          te.events.push_back({ts + 1, 44000, 0, 0, static_cast<uint32_t>(EventKind::kRangePush),
                               static_cast<uint8_t>(EventKind::kCostSample), 0});
        }
        te.events.push_back({ts + 700, 0, 0, 0, 0, static_cast<uint8_t>(EventKind::kRangePop), 0});
      }
      wire_events += te.events.size();
      range_events += n;
      b.threads.push_back(std::move(te));
      if (!ranges_only) {
        b.threads.push_back(CpuSamples(100 + t, t0, done, n, t));
        wire_events += b.threads.back().events.size();
      }
    }
    if (!ranges_only) {
      b.threads.push_back(FlushLooks(t0 + done * 1000, t0 + (done + n) * 1000, &b.memory));
      wire_events += b.threads.back().events.size();
    }
    done += n;
    b.watermark_ns = t0 + done * 1000;
    frames.push_back(wire::Encode(b));
    // The batch's events encoded as the flush thread does (BatchWriter),
    // and packed field by field with msgpack-c's packer: fresh buffers
    // each, in alternating order (the one after may find warm memory).
    auto ours = [&] {
      const auto a = std::chrono::steady_clock::now();
      wire::BatchWriter w;
      w.Begin(b.session, b.seq, b.watermark_ns, 0);
      w.BeginThreads(b.threads.size());
      for (const wire::ThreadEvents& te : b.threads) {
        w.BeginThread(te.tid, te.events.size());
        for (const wire::Event& e : te.events) w.AddEvent(e);
      }
      encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    };
    auto packer = [&] {
      const auto a = std::chrono::steady_clock::now();
      msgpack::sbuffer ref;
      msgpack::packer<msgpack::sbuffer> pk(ref);
      for (const wire::ThreadEvents& te : b.threads) {
        int64_t prev = 0;
        for (const wire::Event& e : te.events) {
          pk.pack_uint8(e.kind);
          pk.pack_int64(e.ts_ns - prev);
          prev = e.ts_ns;
          pk.pack_uint32(e.name);
          pk.pack_uint32(e.domain);
          pk.pack_uint32(e.category);
          pk.pack_uint64(e.value);
          pk.pack_uint8(e.flags);
        }
      }
      packer_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      packer_bytes += ref.size();
    };
    if (seq % 2 == 0) {
      ours();
      packer();
    } else {
      packer();
      ours();
    }
  }
  {
    wire::Batch b;  // final watermark past the step
    b.session = kWorker;
    b.seq = seq++;
    b.watermark_ns = t0 + span_ns + 10;
    frames.push_back(wire::Encode(b));
  }
  size_t wire_bytes = 0;
  for (const auto& f : frames) wire_bytes += f.size();

  Config config;
  if (ranges_only) config.output.formats = {"json"};
  EncodingTimer exporter(out, config.output.formats, workers);
  Aggregator agg(config, &exporter);
  std::string formats;
  for (const std::string& f : config.output.formats) formats += (formats.empty() ? "" : ",") + f;
  const long rss_before_kb = StatusKb("VmRSS:");  // the frames, built above, are not the aggregator's
  const double cpu_start = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Aggregator::Received> received;  // as the daemon hands what it drained (OnFrames)
  for (const auto& f : frames) received.push_back({f, ""});
  agg.OnFrames(
      received, [] { return int64_t{0}; }, [](size_t, uint64_t) {});
  const auto framed = std::chrono::steady_clock::now();
  agg.Tick(0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
                         exporter.json_s - exporter.pftrace_s;
  const double cpu_seconds = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start - exporter.extra_cpu_s;
  // Beside trace.json, for the bench's look at opening each (run_bench.py).
  if (FILE* f = std::fopen((out + "/step_1/trace.pftrace").c_str(), "wb")) {
    std::fwrite(exporter.pftrace.data(), 1, exporter.pftrace.size(), f);
    std::fclose(f);
  }
  FILE* tf = std::fopen((out + "/step_1/trace.json").c_str(), "rb");
  long trace_bytes = -1;
  if (tf != nullptr) {
    std::fseek(tf, 0, SEEK_END);
    trace_bytes = std::ftell(tf);
    std::fclose(tf);
  }
  std::printf(
      "{\"events\": %zu, \"frames\": %zu, \"wire_bytes\": %zu, \"bytes_per_event\": %.2f, "
      "\"seconds\": %.4f, \"events_per_s\": %.0f, \"cpu_seconds\": %.4f, \"steps_written\": %llu, \"trace_bytes\": "
      "%ld, "
      "\"encode_ns_per_event\": %.2f, \"packer_ns_per_event\": %.2f, \"packer_bytes\": %zu, "
      "\"aggregator_peak_mb\": %.1f, \"json_encode_s\": %.4f, \"json_bytes\": %zu, \"pftrace_encode_s\": %.4f, "
      "\"pftrace_bytes\": %zu, \"workers\": %d, \"frames_s\": %.4f, \"export_s\": %.4f, \"range_events\": %lld, "
      "\"formats\": \"%s\"}\n",
      wire_events, frames.size(), wire_bytes, static_cast<double>(wire_bytes) / wire_events, seconds,
      wire_events / seconds, cpu_seconds, static_cast<unsigned long long>(agg.stats().steps_written), trace_bytes,
      encode_s * 1e9 / wire_events, packer_s * 1e9 / wire_events, packer_bytes,
      static_cast<double>(StatusKb("VmHWM:") - rss_before_kb) / 1024, exporter.json_s, exporter.json_bytes,
      exporter.pftrace_s, exporter.pftrace_bytes, workers, std::chrono::duration<double>(framed - start).count(),
      exporter.export_s, static_cast<long long>(range_events), formats.c_str());
  return agg.stats().steps_written == 1 ? 0 : 1;
}
