// golden_test: what the aggregator writes for a fixed input, byte for byte.
//
// A run of three fake collectors (tests/cpp/fake_collector.h) covering what
// the outputs carry: a controller with three steps and its sub-tasks (a
// start/end "gen", a push/pop "update_actor"), Ray calls and a keyed wait,
// two workers on two hosts (one with its clock 5 ms ahead, aligned by
// probes), nested, async and cross-thread ranges, memory levels, measured costs, CPU samples
// in Python, a simulator module and native code (one frame unread), GPU
// launches, kernels and copies, drops, and an expected process that never
// connected. It goes through the real aggregator and the real exporter into
// a temporary directory, whose every file must equal its copy in
// tests/golden/ (run.json, step_<N>/trace.json, trace.pftrace and
// summary.json; tests/test_perfetto_trace.py reads the two traces back).
//
// A change that means to change the outputs regenerates them:
//   RLSCOPE_UPDATE_GOLDEN=1 build/py/tests/cpp/golden_test
// and the diff of tests/golden/ is reviewed with it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "aggregator/aggregator.h"
#include "aggregator/chrome_trace.h"
#include "aggregator/outputs.h"
#include "native/config.h"
#include "tests/cpp/fake_collector.h"

#ifndef RLSCOPE_GOLDEN_DIR
#error "RLSCOPE_GOLDEN_DIR: the source tree's tests/golden"
#endif

namespace rlscope {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1000000;
constexpr int kSteps = 3;

const char kConfig[] = "attribution: {simulator: [rlscope_test_sim]}\nclock: {max_bound_us: 50}\n";
const std::map<std::string, double> kCosts = {{"push", 200}, {"pop", 150},  {"start", 220},
                                              {"end", 160},  {"mark", 100}, {"cpu_sample", 1000}};
const char kPython[] = "/usr/lib/libpython3.11.so.1.0";
const char kTorch[] = "/venv/site-packages/torch/lib/libtorch_cpu.so";
const char kLibc[] = "/lib/x86_64-linux-gnu/libc.so.6";

// The controller's step `n`: [n * 100 ms, n * 100 ms + 80 ms) on thread 1.
void ControllerStep(FakeCollector& ctl, int n) {
  const int64_t t = n * 100 * kMs;
  ctl.Push(1, t, "step", static_cast<uint64_t>(n));
  ctl.Start(1, t + 5 * kMs, "gen", 1000 + n);
  ctl.Mark(1, t + 5 * kMs + 1000, "ray.submit", 0).Mark(1, t + 5 * kMs + 2000, "ray.task", 10 * n + 1);
  ctl.Mark(1, t + 34 * kMs, "ray.got", 10 * n + 1);
  ctl.End(1, t + 35 * kMs, 1000 + n);
  ctl.Push(1, t + 40 * kMs, "update_actor");
  ctl.Mark(1, t + 40 * kMs + 1000, "ray.submit", 0).Mark(1, t + 40 * kMs + 2000, "ray.task", 10 * n + 2);
  ctl.Mark(1, t + 74 * kMs, "ray.got", 10 * n + 2);
  ctl.Mark(1, t + 74 * kMs + 500, "rlscope.waited", 7700 + n);
  ctl.Pop(1, t + 75 * kMs);
  ctl.Pop(1, t + 80 * kMs);
  for (int ms = 2; ms < 80; ms += 4) ctl.Sample(1, t + ms * kMs, kPython, "verl.trainer.ppo", 4000);
}

// A worker's part of step `n`, `shift` ns later on its own clock.
void WorkerStep(FakeCollector& w, int n, int64_t shift, bool simulator) {
  const int64_t t = n * 100 * kMs + shift;
  w.Push(7, t + 6 * kMs, "generate", 10 * n + 1);
  for (int i = 0; i < 4; ++i) {  // measured costs: enough of each kind for the step's own
    const int64_t at = t + (10 + 2 * i) * kMs;
    w.Push(7, at, "forward").CostSample(7, at + 300, EventKind::kRangePush, 180000 + 1000 * i);
    w.Pop(7, at + kMs).CostSample(7, at + kMs + 300, EventKind::kRangePop, 130000 + 2000 * i);
  }
  w.Pop(7, t + 33 * kMs);
  w.Push(7, t + 41 * kMs, "update", 10 * n + 2);
  w.Push(7, t + 45 * kMs, "backward", std::nullopt).Pop(7, t + 60 * kMs);
  w.Push(7, t + 61 * kMs, "produce", 7700 + n).Pop(7, t + 70 * kMs);
  w.Pop(7, t + 73 * kMs);
  w.Start(8, t + 8 * kMs, "prefetch", 500 + n).End(9, t + 30 * kMs, 500 + n);  // ends on another thread
  w.Mark(8, t + 9 * kMs, "batch_ready");
  for (int ms = 7; ms < 73; ms += 3) {
    const bool sim = simulator && ms > 40;
    w.Sample(7, t + ms * kMs, sim ? kPython : kTorch, sim ? "rlscope_test_sim.env" : "verl.workers.actor", 3000,
             /*unread=*/ms == 31);
  }
  // Every thread: a pool thread (11) that records nothing, in libc called by
  // libtorch; the flush thread (5), the profiler's, looks at thread 7 off CPU
  // between its sub-tasks and reads the process's CPU time.
  for (int ms = 10; ms < 30; ms += 4) {
    w.StackSample(11, t + ms * kMs, kLibc, std::string(kTorch) + "\n" + kPython, "", 4000);
  }
  w.StackSample(5, t + 50 * kMs, kLibc, "", "", 1000, /*profiler=*/true);
  w.OffCpu(5, t + 36 * kMs, 7, OffCpuReason::kPoll, 3000).OffCpu(5, t + 40 * kMs, 7, OffCpuReason::kGil, 4000);
  for (int ms = 0; ms <= 100; ms += 20) w.ProcessCpu(5, t + ms * kMs, (n * 100 + ms) * kMs / 2);
}

// Its GPU work in step `n`: a launch, its kernel and a copy, on its clock.
void WorkerGpu(wire::Batch* b, int n, int64_t shift, uint32_t kernel_name, uint32_t api_name) {
  const int64_t t = n * 100 * kMs + shift;
  GpuRecord launch;
  launch.kind = static_cast<uint8_t>(GpuKind::kRuntimeApi);
  launch.start_ns = t + 11 * kMs;
  launch.end_ns = t + 11 * kMs + 8000;
  launch.correlation = static_cast<uint32_t>(n);
  launch.tid = 7;
  launch.name = api_name;
  GpuRecord kernel;
  kernel.kind = static_cast<uint8_t>(GpuKind::kKernel);
  kernel.start_ns = t + 12 * kMs;
  kernel.end_ns = t + 18 * kMs;
  kernel.correlation = static_cast<uint32_t>(n);
  kernel.name = kernel_name;
  kernel.stream = 7;
  kernel.grid[0] = 128;
  kernel.block[0] = 256;
  GpuRecord copy;
  copy.kind = static_cast<uint8_t>(GpuKind::kMemcpy);
  copy.subkind = 1;
  copy.start_ns = t + 19 * kMs;
  copy.end_ns = t + 20 * kMs;
  copy.bytes = 1 << 20;
  copy.stream = 7;
  b->gpu.insert(b->gpu.end(), {launch, kernel, copy});
}

// Its memory in step `n`: resident memory each 20 ms (2 MiB more a step, a
// 6 MiB peak at 40 ms), and in step 2 a device allocation of 256 MiB, 64 MiB
// of it released; a pinned allocation, not the GPU's memory, is left out.
void WorkerMemory(wire::Batch* b, int n) {
  const int64_t t = n * 100 * kMs;
  for (int ms = 0; ms < 100; ms += 20) {
    b->memory.push_back({t + ms * kMs, (int64_t{512} + 2 * n + (ms == 40 ? 6 : 0)) << 20});
  }
  if (n != 2) return;
  GpuRecord alloc;
  alloc.kind = static_cast<uint8_t>(GpuKind::kMemory);
  alloc.subkind = kMemoryAllocation | kMemoryKindDevice << 8;
  alloc.start_ns = alloc.end_ns = t + 10 * kMs;
  alloc.bytes = uint64_t{256} << 20;
  GpuRecord release = alloc;
  release.subkind = kMemoryRelease | kMemoryKindDevice << 8;
  release.start_ns = release.end_ns = t + 30 * kMs;
  release.bytes = uint64_t{64} << 20;
  GpuRecord pinned = alloc;
  pinned.subkind = kMemoryAllocation | 2 << 8;
  b->gpu.insert(b->gpu.end(), {alloc, release, pinned});
}

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs the scenario into `out` with the real exporter; `beside`: each
// step's breakdown on a thread of its own while its trace is written.
void RunScenario(const fs::path& out, bool beside) {
  ConfigResult parsed = ParseConfig(kConfig, "golden.yaml");
  ASSERT_TRUE(parsed.ok());
  const auto exporter = MakeStepFiles(out.string(), parsed.config.output.formats, 1);  // as the daemon does
  Aggregator agg(parsed.config, exporter.get());
  agg.set_second_core(beside);
  FakeCollector ctl(1, "controller", -1, 100, "node0", "TaskRunner");
  FakeCollector w0(2, "worker", 0, 200, "node0", "ActorRolloutRefWorker");
  w0.Label("actor_id", "a0").Label("class_name", "ActorRolloutRefWorker");
  FakeCollector w1(3, "worker", 1, 300, "node1", "ActorRolloutRefWorker");
  w1.OtherClock("node1-boot:1");  // another host: placed by its probes
  for (FakeCollector* c : {&ctl, &w0, &w1}) {
    c->Costs(kCosts);
    agg.OnMessage(c->Hello(), 0);
  }
  wire::Expected expected;
  expected.session = 1;
  expected.processes = {{{"actor_id", "a0"}, {"class_name", "ActorRolloutRefWorker"}, {"pid", "200"}},
                        {{"actor_id", "a9"}, {"class_name", "Critic"}, {"node_id", "n2"}}};
  agg.OnMessage(expected, 0);
  w0.ThreadName(7, "MainThread").ThreadName(8, "prefetcher");
  w1.ThreadName(7, "MainThread");
  const int64_t ahead = 5 * kMs;  // w1's clock reads 5 ms more than the aggregator's
  for (int n = 1; n <= kSteps; ++n) {
    ControllerStep(ctl, n);
    WorkerStep(w0, n, 0, false);
    WorkerStep(w1, n, ahead + 200000, true);
    const int64_t now = (n * 100 + 90) * kMs;
    wire::Batch b0 = w0.Flush(now);
    b0.strings.emplace_back(900, "ampere_sgemm_128x64_nn");
    b0.strings.emplace_back(901, "cudaLaunchKernel");
    WorkerGpu(&b0, n, 0, 900, 901);
    WorkerMemory(&b0, n);
    b0.dropped = 3 * static_cast<uint64_t>(n);
    wire::Batch b1 = w1.Flush(now + ahead);
    b1.probes = {{1000 + ahead, 2000, 2000, 3000 + ahead}};  // 1 us each way: offset -5 ms
    agg.OnMessage(b0, now);
    agg.OnMessage(b1, now);
    agg.OnMessage(ctl.Flush(now), now);
    agg.Tick(now);
  }
  const int64_t end = (kSteps + 1) * 100 * kMs;
  for (FakeCollector* c : {&w0, &w1, &ctl}) agg.OnMessage(c->Bye(), end);
  agg.Finish(end);
}

std::set<std::string> Files(const fs::path& root) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), root).string());
  }
  return out;
}

// The run's id is new each run (Aggregator::NewRunId): written as zeros
// before a comparison. False (a failure said) when run.json has none.
bool ZeroRunId(const fs::path& path) {
  std::string run_json = ReadAll(path);
  const std::string key = "\"run_id\":\"";
  const size_t at = run_json.find(key);
  if (at == std::string::npos || run_json.compare(at + key.size() + 16, 1, "\"") != 0) {
    ADD_FAILURE() << path << " has no 16-digit run_id";
    return false;
  }
  run_json.replace(at + key.size(), 16, std::string(16, '0'));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << run_json;
  return true;
}

class Golden : public ::testing::TestWithParam<bool> {};

TEST_P(Golden, TraceSummaryAndRunJsonAreByteForByteTheSame) {
  const fs::path golden = RLSCOPE_GOLDEN_DIR;
  char tmpl[] = "/tmp/rlscope_golden_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path out = tmpl;
  RunScenario(out, GetParam());
  ASSERT_TRUE(ZeroRunId(out / "run.json"));
  const std::set<std::string> written = Files(out);
  ASSERT_EQ(written.size(), 2u + 3u * kSteps)
      << "run.json, figures.jsonl and per step a trace in each format and a summary";
  if (std::getenv("RLSCOPE_UPDATE_GOLDEN") != nullptr) {
    fs::remove_all(golden);
    for (const std::string& f : written) {
      fs::create_directories((golden / f).parent_path());
      fs::copy_file(out / f, golden / f);
    }
    fs::remove_all(out);
    GTEST_SKIP() << "tests/golden rewritten: review its diff (nothing was compared)";
  }
  EXPECT_EQ(Files(golden), written);
  for (const std::string& f : written) {
    EXPECT_TRUE(ReadAll(out / f) == ReadAll(golden / f))
        << f << " differs from tests/golden/" << f << " (RLSCOPE_UPDATE_GOLDEN=1 rewrites it)";
  }
  fs::remove_all(out);
}

// Frames decoded ahead on a second core (Aggregator::OnFrames) write what
// the same frames taken one by one (OnFrame) write, byte for byte: two
// steps of a controller and a three-thread worker, in frames of a few
// thousand events, a truncated frame among them (counted alike). `after`
// comes for each frame in order, with OnFrame's session; each frame's time
// is read in its turn.
TEST(OnFrames, DecodingAheadWritesWhatTakingOneByOneWrites) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector w(2, "worker", 0, 200);
  w.Costs(kCosts);
  std::vector<std::string> frames = {wire::Encode(ctl.Hello()), wire::Encode(w.Hello())};
  for (int step = 1; step <= 2; ++step) {
    const int64_t t = step * 100 * kMs;
    ctl.Push(1, t, "step", static_cast<uint64_t>(step));
    for (int chunk = 0; chunk < 10; ++chunk) {
      for (int64_t tid = 7; tid <= 9; ++tid) {
        for (int i = 0; i < 2000; ++i) {
          const int64_t ts = t + 1000 + (chunk * 2000 + i) * 2000 + tid;
          w.Push(tid, ts, i % 2 == 0 ? "update_actor" : "generate").Pop(tid, ts + 900);
        }
      }
      frames.push_back(wire::Encode(w.Flush(t + (chunk + 1) * 4 * kMs)));
      if (step == 1 && chunk == 4) frames.push_back(frames.back().substr(0, frames.back().size() / 2));
    }
    ctl.Pop(1, t + 90 * kMs);
    frames.push_back(wire::Encode(ctl.Flush(t + 95 * kMs)));
    frames.push_back(wire::Encode(w.Flush(t + 95 * kMs)));
  }
  size_t bytes = 0;
  for (const std::string& f : frames) bytes += f.size();
  ASSERT_GE(bytes, Aggregator::kDecodeAheadFrom);
  std::vector<fs::path> outs;
  std::vector<std::vector<uint64_t>> sessions(2);
  for (int ahead = 0; ahead < 2; ++ahead) {
    char tmpl[] = "/tmp/rlscope_onframes_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    outs.emplace_back(tmpl);
    const auto exporter = MakeStepFiles(outs.back().string(), {"json"}, 1);
    Aggregator agg(Config{}, exporter.get());
    agg.set_second_core(ahead == 1);
    int64_t now = 0;
    if (ahead == 1) {
      std::vector<Aggregator::Received> received;
      for (const std::string& f : frames) received.push_back({f, "peer"});
      agg.OnFrames(
          received, [&] { return now += kMs; },
          [&](size_t i, uint64_t session) {
            EXPECT_EQ(i, sessions[1].size());
            sessions[1].push_back(session);
          });
    } else {
      for (const std::string& f : frames) sessions[0].push_back(agg.OnFrame(f.data(), f.size(), now += kMs, "peer"));
    }
    EXPECT_EQ(agg.stats().decode_errors, 1u);
    agg.Tick(now);
    agg.Finish(now + kMs);
    EXPECT_EQ(agg.stats().steps_written, 2u);
  }
  EXPECT_EQ(sessions[0], sessions[1]);
  for (const fs::path& out : outs) ZeroRunId(out / "run.json");
  const std::set<std::string> written = Files(outs[0]);
  EXPECT_EQ(Files(outs[1]), written);
  for (const std::string& f : written) EXPECT_TRUE(ReadAll(outs[0] / f) == ReadAll(outs[1] / f)) << f << " differs";
  for (const fs::path& out : outs) fs::remove_all(out);
}

// The breakdown computed in line, and beside the trace's export.
INSTANTIATE_TEST_SUITE_P(AnalysisThread, Golden, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Beside" : "InLine"; });

}  // namespace
}  // namespace rlscope
