// A mostly idle worker for scale runs (bench/scale_bench.py, tests/test_scale.py):
// only the official NVTX3 headers, as a user's program. Every --period-ms it
// records one push/pop range "work" around --range-us of spinning, until
// --stop-file exists or --max-s passed; then it writes the number of ranges
// it recorded to --report (one line) and exits.
//
//   scale_worker --stop-file F --report R [--period-ms 5] [--range-us 50] [--max-s 300]
#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  std::string stop_file, report;
  double period_ms = 5, range_us = 50, max_s = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stop-file"))
      stop_file = argv[i + 1];
    else if (!std::strcmp(argv[i], "--report"))
      report = argv[i + 1];
    else if (!std::strcmp(argv[i], "--period-ms"))
      period_ms = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--range-us"))
      range_us = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-s"))
      max_s = std::atof(argv[i + 1]);
  }
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(max_s * 1000));
  long ranges = 0;
  while (Clock::now() < end && (stop_file.empty() || access(stop_file.c_str(), F_OK) != 0)) {
    nvtxRangePushA("work");
    const auto until = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(range_us));
    while (Clock::now() < until) {
    }
    nvtxRangePop();
    ++ranges;
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(period_ms * 1000)));
  }
  if (!report.empty()) {
    if (FILE* f = std::fopen(report.c_str(), "w")) {
      std::fprintf(f, "%ld\n", ranges);
      std::fclose(f);
    }
  }
  return 0;
}
