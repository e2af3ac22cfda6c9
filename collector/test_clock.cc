#include "collector/test_clock.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>

#include "native/names.h"

namespace rlscope {

namespace {

// Which costs charge which events (the keys of Hello::costs, wire.h): a
// kind's own cost ("push"), or a caller side ("py_nvtx_push", "py_fast_pop",
// "py_annotate_push": kCallerKeyPrefix + the kind's key).
struct Kind {
  const char* name;
  EventKind kind;
};
constexpr Kind kKinds[] = {
    {"push", EventKind::kRangePush},       {"pop", EventKind::kRangePop}, {"start", EventKind::kRangeStart},
    {"end", EventKind::kRangeEnd},         {"mark", EventKind::kMark},    {"sample", EventKind::kCostSample},
    {"cpu_sample", EventKind::kCpuSample},
};
constexpr int kRangeKinds = 5;  // the first five: what a caller side can charge

// The kind and caller of `key`; false when it names none. A caller side
// has a prefix (kCallerKeyPrefix) and a range kind; an own cost none.
bool ParseKey(const std::string& key, EventKind* kind, int* caller) {
  for (int c = kCallers - 1; c >= 0; --c) {
    const std::string prefix = kCallerKeyPrefix[c];  // "" last
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const int kinds = c == 0 ? static_cast<int>(std::size(kKinds)) : kRangeKinds;
    for (int k = 0; k < kinds; ++k) {
      if (key.compare(prefix.size(), std::string::npos, kKinds[k].name) == 0) {
        *kind = kKinds[k].kind;
        *caller = c;
        return true;
      }
    }
  }
  return false;
}

std::runtime_error Bad(const std::string& what) {
  return std::runtime_error(std::string(names::kEnvTestCosts) + ": " + what);
}

// A `key=factor` item's factor: above `lo` (or at it, `lo_ok`) and at most
// `hi`; else an error that says `range`.
double FactorOf(const std::string& item, const std::string& value, double lo, bool lo_ok, double hi,
                const char* range) {
  char* stop = nullptr;
  const double f = std::strtod(value.c_str(), &stop);
  if (value.empty() || *stop != '\0' || !(lo_ok ? f >= lo : f > lo) || f > hi) {
    throw Bad("'" + item + "': " + range);
  }
  return f;
}

}  // namespace

std::unique_ptr<TestClock> TestClock::FromEnvironment() {
  const char* spec = std::getenv(names::kEnvTestCosts);
  if (spec == nullptr || *spec == '\0') return nullptr;
  std::unique_ptr<TestClock> clock(new TestClock());
  const std::string text = spec;
  double calibrated = 1.0, spread_factor = 0.0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw Bad("'" + item + "' is not key=ns");
    const std::string key = item.substr(0, eq);
    std::string value = item.substr(eq + 1);
    if (key == "calibrated") {
      calibrated = FactorOf(item, value, 0, false, 100, "calibrated is a factor in (0, 100]");
      continue;
    }
    if (key == "spread") {
      spread_factor = FactorOf(item, value, 0, true, 1, "spread is a factor in [0, 1]");
      continue;
    }
    std::string jitter;
    if (const size_t tilde = value.find('~'); tilde != std::string::npos) {
      jitter = value.substr(tilde + 1);
      value.resize(tilde);
    }
    EventKind kind_of_key = EventKind::kRangePush;
    int caller = 0;
    if (!ParseKey(key, &kind_of_key, &caller)) throw Bad("unknown key '" + key + "'");
    char* stop = nullptr;
    const long long ns = std::strtoll(value.c_str(), &stop, 10);
    if (value.empty() || *stop != '\0' || ns < 0 || ns > 1000000000) {
      throw Bad("'" + item + "': the cost is an integer number of ns in [0, 1e9]");
    }
    long long spread = 0;
    if (!jitter.empty() || item.find('~') != std::string::npos) {
      spread = std::strtoll(jitter.c_str(), &stop, 10);
      if (jitter.empty() || *stop != '\0' || spread < 0 || spread > ns) {
        throw Bad("'" + item + "': the spread after ~ is an integer number of ns in [0, the cost]");
      }
    }
    const int kind = static_cast<int>(kind_of_key);
    clock->ns_[caller][kind] = ns;
    clock->jitter_ns_[caller][kind] = spread;
    clock->costs_[key] = static_cast<double>(ns);
  }
  for (auto& [key, ns] : clock->costs_) ns *= calibrated;
  if (spread_factor > 0) {
    std::map<std::string, double> spreads;
    for (const auto& [key, ns] : clock->costs_) {
      if (key.rfind("py_", 0) == 0) spreads[key + "_spread"] = ns * spread_factor;
    }
    clock->costs_.insert(spreads.begin(), spreads.end());
  }
  if (const char* path = std::getenv(names::kEnvTestClock); path != nullptr && *path != '\0') {
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, sizeof(int64_t)) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) close(fd);
      throw std::runtime_error(std::string(names::kEnvTestClock) + "=" + path + ": " + why);
    }
    void* m = mmap(nullptr, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) throw std::runtime_error(std::string(names::kEnvTestClock) + "=" + path + ": mmap failed");
    static_assert(std::atomic<int64_t>::is_always_lock_free, "a shared clock needs a lock-free atomic");
    clock->mapping_ = m;
    clock->clock_ = static_cast<std::atomic<int64_t>*>(m);
  }
  return clock;
}

TestClock::~TestClock() {
  if (mapping_ != nullptr) munmap(mapping_, sizeof(int64_t));
}

}  // namespace rlscope
