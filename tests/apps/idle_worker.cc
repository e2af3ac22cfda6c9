// An idle worker: an actor waiting for work, as most of a node's Ray workers
// are. Only the official NVTX3 headers, as a user's program. One NVTX mark
// at start loads the collector (NVTX_INJECTION64_PATH); then it wakes every
// --period-ms and does nothing else (no NVTX) until --stop-file exists or
// --max-s passed; with --range-us N > 0, each wake-up is one push/pop range
// "work" around N us of spinning instead (a worker that works a little, as
// tests/apps/scale_worker.cc). Over its last --measure-s seconds (after --settle-s) it
// measures its own CPU time (every thread's: the collector's too), each of
// its other threads' wake-ups (voluntary context switches, the kernel's
// count, by thread name) and, when the call counter (call_counter.c) is
// preloaded, the calls it counted; it writes one JSON line to --report.
//
//   idle_worker --report R [--stop-file F] [--period-ms 5] [--range-us 0]
//               [--settle-s 1] [--measure-s 3] [--max-s 300]
#include <dirent.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>

namespace {

int64_t Ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The preloaded call counter's counts (call_counter.c), or false.
constexpr int kCounts = 8;
bool Counts(uint64_t* out) {
  using Snapshot = int (*)(uint64_t*, int);
  auto snapshot = reinterpret_cast<Snapshot>(dlsym(RTLD_DEFAULT, "rlscope_test_call_counts"));
  return snapshot != nullptr && snapshot(out, kCounts) == kCounts;
}

// Voluntary context switches (each a wait that ended: a wake-up) of every
// thread but the calling one, by thread name.
std::map<std::string, uint64_t> WakeUps() {
  std::map<std::string, uint64_t> out;
  const std::string self = std::to_string(gettid());
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || self == e->d_name) continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    std::string name, line;
    std::getline(std::ifstream(base + "/comm"), name);
    std::ifstream status(base + "/status");
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) out[name] += std::strtoull(line.c_str() + 24, nullptr, 10);
    }
  }
  closedir(dir);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string stop_file, report;
  double period_ms = 5, range_us = 0, settle_s = 1, measure_s = 3, max_s = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stop-file"))
      stop_file = argv[i + 1];
    else if (!std::strcmp(argv[i], "--report"))
      report = argv[i + 1];
    else if (!std::strcmp(argv[i], "--period-ms"))
      period_ms = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--range-us"))
      range_us = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--settle-s"))
      settle_s = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--measure-s"))
      measure_s = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-s"))
      max_s = std::atof(argv[i + 1]);
  }
  nvtxMarkA("idle_worker started");
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto measure_at = start + std::chrono::milliseconds(static_cast<int64_t>(settle_s * 1000));
  const auto end = measure_at + std::chrono::milliseconds(static_cast<int64_t>(measure_s * 1000));
  const auto hard_end = start + std::chrono::milliseconds(static_cast<int64_t>(max_s * 1000));
  bool measuring = false;
  int64_t wall0 = 0, cpu0 = 0;
  uint64_t counts0[kCounts] = {}, counts1[kCounts] = {};
  std::map<std::string, uint64_t> wakeups0;
  bool counted = false;
  while (Clock::now() < hard_end && (stop_file.empty() || access(stop_file.c_str(), F_OK) != 0)) {
    const auto now = Clock::now();
    if (!measuring && now >= measure_at) {
      measuring = true;
      wakeups0 = WakeUps();  // before the counts: its own /proc reads are not counted
      counted = Counts(counts0);
      wall0 = Ns(CLOCK_MONOTONIC);
      cpu0 = Ns(CLOCK_PROCESS_CPUTIME_ID);
    }
    if (measuring && now >= end) break;
    if (range_us > 0) {
      nvtxRangePushA("work");
      const auto until = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(range_us));
      while (Clock::now() < until) {
      }
      nvtxRangePop();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(period_ms * 1000)));
  }
  const int64_t cpu = Ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0, wall = Ns(CLOCK_MONOTONIC) - wall0;
  counted = counted && Counts(counts1);
  const std::map<std::string, uint64_t> wakeups1 = WakeUps();
  if (!report.empty()) {
    if (FILE* f = std::fopen(report.c_str(), "w")) {
      std::fprintf(f, "{\"measured\": %s, \"wall_ns\": %lld, \"cpu_ns\": %lld", measuring ? "true" : "false",
                   static_cast<long long>(wall), static_cast<long long>(cpu));
      std::fprintf(f, ", \"wakeups\": {");
      bool first = true;
      for (const auto& [name, n] : wakeups1) {  // threads that lived through the measurement
        auto it = wakeups0.find(name);
        if (it == wakeups0.end()) continue;
        std::fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", name.c_str(),
                     static_cast<unsigned long long>(n - it->second));
        first = false;
      }
      std::fprintf(f, "}");
      if (counted) {
        static const char* const kNames[kCounts] = {"poll",          "epoll_wait", "proc_opens",    "opens",
                                                    "timer_settime", "send",       "eventfd_write", "reserved"};
        std::fprintf(f, ", \"calls\": {");
        for (int i = 0; i < kCounts; ++i) {
          std::fprintf(f, "%s\"%s\": %llu", i ? ", " : "", kNames[i],
                       static_cast<unsigned long long>(counts1[i] - counts0[i]));
        }
        std::fprintf(f, "}");
      }
      std::fprintf(f, "}\n");
      std::fclose(f);
    }
  }
  return 0;
}
