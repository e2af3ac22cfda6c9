// nvtx_pair_bench: ns per nvtxRangePushA + nvtxRangePop pair, measured through
// the official NVTX3 C API, so whatever tool NVTX_INJECTION64_PATH names (or
// none) is what gets measured. NVTX reads that variable once per process: run
// one configuration per process (bench/run_bench.py does).
//
// Method: tool loading is excluded (nvtxInitialize + one warm-up pair before
// timing). Pairs are timed in chunks; between chunks the thread sleeps outside
// the timed region so a recording tool's flush thread can drain its ring and
// nothing is dropped (--busy-gaps: it spins instead, so the core never
// idles between chunks). Reports the median and the min over chunks. On a
// quiet 2-core machine the collector records at 25.4-26.6 ns/pair against
// 19.0 for an rdtsc recorder, gaps or none (--sleep-ms 0 or 30); on a loaded
// one both move, the collector more (47-54 beside hundreds of busy
// processes): compare rows of the same run only.
//
// Output: one line of JSON on stdout:
//   {"ns_per_pair_median":..,"ns_per_pair_min":..,"pairs":..,"threads":..,
//    "events_recorded":..,"dropped":..,"batches_sent":..,"batches_dropped":..}
// The last four come from the rlscope collector's rlscope_collector_stats()
// when the collector is the loaded tool, else null. This program does not
// link the collector: it looks the symbol up at run time.
#include <dlfcn.h>
#include <time.h>

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Mirrors rlscope_stats_t in collector/rlscope_collector.h (a C ABI struct);
// kept local so this program depends on NVTX only.
struct CollectorStats {
  uint64_t events;
  uint64_t dropped;
  uint64_t batches_sent;
  uint64_t batches_dropped;
  uint64_t threads;
};
using CollectorStatsFn = void (*)(CollectorStats*);
// Exported by the bench's baseline tools (bench/counting_tool.cc): events the
// calling thread handled.
using ToolEventsFn = uint64_t (*)();

struct Options {
  int64_t pairs = 2 * 1024 * 1024;  // per thread
  int64_t chunk = 8192;             // pairs per timed chunk
  int64_t sleep_ms = 30;            // idle gap between chunks (not timed)
  int64_t threads = 1;
  int64_t warmup_pairs = 0;  // untimed, back to back, before timing
  bool busy_gaps = false;    // spin through the gaps instead of sleeping
};

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--pairs N] [--chunk N] [--sleep-ms N] [--thread-count N]\n"
               "          [--warmup-pairs N] [--busy-gaps]\n"
               "  --pairs N         push+pop pairs per thread (default 2097152)\n"
               "  --chunk N         pairs per timed chunk (default 8192)\n"
               "  --sleep-ms N      untimed sleep between chunks (default 30)\n"
               "  --thread-count N  threads running the loop concurrently (default 1)\n"
               "  --warmup-pairs N  untimed pairs first, without pauses (default 0); set it\n"
               "                    to the tool's ring capacity in pairs so the timed part\n"
               "                    does not pay first-touch page faults of the ring\n"
               "  --busy-gaps       spin through the gaps between chunks instead of sleeping\n",
               argv0);
}

bool ParseInt(const char* s, int64_t min, int64_t* out) {
  if (s == nullptr) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min) return false;
  *out = v;
  return true;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    int64_t* dst = nullptr;
    int64_t min = 1;
    if (a == "--busy-gaps") {
      o->busy_gaps = true;
      continue;
    }
    if (a == "--pairs") {
      dst = &o->pairs;
    } else if (a == "--chunk") {
      dst = &o->chunk;
    } else if (a == "--sleep-ms") {
      dst = &o->sleep_ms;
      min = 0;
    } else if (a == "--thread-count") {
      dst = &o->threads;
    } else if (a == "--warmup-pairs") {
      dst = &o->warmup_pairs;
      min = 0;
    } else {
      return false;
    }
    if (!ParseInt(v, min, dst)) return false;
    ++i;
  }
  return true;
}

void* FindToolSymbol(const char* name);

// The timed loop of one thread: fills `ns_per_pair` with one value per chunk;
// `tool_events` gets the baseline tool's count for this thread (or stays -1).
void RunChunks(const Options& o, std::vector<double>* ns_per_pair, int64_t* tool_events) {
  // A thread's first NVTX event may register it with the tool (buffer
  // allocation): keep that out of the timing too.
  nvtxRangePushA("nvtx_pair_bench");
  nvtxRangePop();
  if (o.warmup_pairs > 0) {
    // Back to back: at most 2 * warmup_pairs events are pushed before the
    // pause, so a ring of at least that many records cannot overflow.
    for (int64_t i = 0; i < o.warmup_pairs; ++i) {
      nvtxRangePushA("nvtx_pair_bench");
      nvtxRangePop();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * o.sleep_ms + 50));
  }
  const int64_t chunks = (o.pairs + o.chunk - 1) / o.chunk;
  ns_per_pair->reserve(static_cast<size_t>(chunks));
  int64_t left = o.pairs;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t n = std::min(left, o.chunk);
    left -= n;
    const int64_t t0 = NowNs();
    for (int64_t i = 0; i < n; ++i) {
      nvtxRangePushA("nvtx_pair_bench");
      nvtxRangePop();
    }
    const int64_t t1 = NowNs();
    ns_per_pair->push_back(static_cast<double>(t1 - t0) / static_cast<double>(n));
    if (o.sleep_ms > 0 && o.busy_gaps) {
      const int64_t until = NowNs() + o.sleep_ms * 1000000;
      while (NowNs() < until) {
      }
    } else if (o.sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(o.sleep_ms));
    }
  }
  if (auto fn = reinterpret_cast<ToolEventsFn>(FindToolSymbol("rlscope_bench_tool_events"))) {
    *tool_events = static_cast<int64_t>(fn());
  }
}

// `name` from the loaded injection tool, or nullptr.
void* FindToolSymbol(const char* name) {
  void* sym = dlsym(RTLD_DEFAULT, name);
  if (sym == nullptr) {
    // NVTX dlopens the tool with RTLD_LAZY (local): look inside it directly.
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    if (path != nullptr && *path != '\0') {
      if (void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) {
        sym = dlsym(h, name);
        dlclose(h);  // drops only the reference NOLOAD took
      }
    }
  }
  return sym;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    Usage(argv[0]);
    return 2;
  }

  // Loads and initializes the injection tool (if any) now, untimed.
  nvtxInitialize(nullptr);

  const size_t nthreads = static_cast<size_t>(o.threads);
  std::vector<std::vector<double>> per_thread(nthreads);
  std::vector<int64_t> tool_events(nthreads, -1);
  if (nthreads == 1) {
    RunChunks(o, &per_thread[0], &tool_events[0]);
  } else {
    std::vector<std::thread> workers;
    for (size_t i = 0; i < nthreads; ++i) {
      workers.emplace_back([&o, &per_thread, &tool_events, i] { RunChunks(o, &per_thread[i], &tool_events[i]); });
    }
    for (auto& t : workers) t.join();
  }
  std::vector<double> all;
  for (const auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
  const double median = Median(all);
  const double min = all.empty() ? 0.0 : *std::min_element(all.begin(), all.end());

  std::string stats_json = "\"events_recorded\":null,\"dropped\":null,\"batches_sent\":null,\"batches_dropped\":null";
  if (auto stats_fn = reinterpret_cast<CollectorStatsFn>(FindToolSymbol("rlscope_collector_stats"))) {
    CollectorStats s{};
    stats_fn(&s);
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "\"events_recorded\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"batches_sent\":%" PRIu64
                  ",\"batches_dropped\":%" PRIu64,
                  s.events, s.dropped, s.batches_sent, s.batches_dropped);
    stats_json = buf;
  } else if (tool_events[0] >= 0) {
    int64_t total = 0;
    for (int64_t n : tool_events) total += n;
    stats_json = "\"events_recorded\":" + std::to_string(total) +
                 ",\"dropped\":null,\"batches_sent\":null,\"batches_dropped\":null";
  }
  std::printf("{\"ns_per_pair_median\":%.3f,\"ns_per_pair_min\":%.3f,\"pairs\":%" PRId64 ",\"threads\":%" PRId64
              ",\"warmup_pairs\":%" PRId64 ",%s}\n",
              median, min, o.pairs * o.threads, o.threads, o.warmup_pairs * o.threads, stats_json.c_str());
  std::fflush(stdout);
  return 0;
}
