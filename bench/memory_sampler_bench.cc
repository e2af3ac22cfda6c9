// The memory sampler's cost (collector/memory_sampler.h): one reading of the
// process's resident memory as the flush thread takes it (a pread of
// /proc/self/statm), beside reading VmRSS from /proc/self/status the usual
// way (open, read, parse, close) and a clock_gettime, in ns per reading.
// Prints one JSON object. bench/run_bench.py (memory_section) makes the table.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "collector/memory_sampler.h"

namespace {

int64_t Now() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int64_t StatusVmRss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Median over `rounds` of the mean ns per call of `n` calls.
template <typename F>
double NsPerCall(F f, int n, int rounds) {
  std::vector<double> per;
  int64_t sink = 0;
  for (int r = 0; r < rounds; ++r) {
    const int64_t t0 = Now();
    for (int i = 0; i < n; ++i) sink += f();
    per.push_back(static_cast<double>(Now() - t0) / n);
  }
  std::sort(per.begin(), per.end());
  if (sink == 42) std::puts("");  // keep the calls
  return per[per.size() / 2];
}

}  // namespace

int main() {
  rlscope::MemorySampler sampler;
  const int64_t rss = sampler.RssBytes();
  const double ours = NsPerCall([&] { return sampler.RssBytes(); }, 20000, 7);
  const double status = NsPerCall(StatusVmRss, 2000, 7);
  const double clock = NsPerCall(Now, 200000, 7);
  std::printf(
      "{\"rss_bytes\": %lld, \"status_rss_bytes\": %lld, \"statm_pread_ns\": %.1f, "
      "\"status_read_ns\": %.1f, \"clock_gettime_ns\": %.1f}\n",
      static_cast<long long>(rss), static_cast<long long>(StatusVmRss()), ours, status, clock);
  return rss > 0 ? 0 : 1;
}
