#include "native/clock.h"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include <sys/stat.h>

namespace rlscope {

std::string ClockDomain() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!std::getline(in, boot) || boot.empty()) return "";
  struct stat st {};
  // A kernel without time namespaces (before 5.6) has one clock per boot.
  if (stat("/proc/self/ns/time", &st) != 0) return errno == ENOENT ? boot + ":none" : "";
  return boot + ":" + std::to_string(static_cast<unsigned long long>(st.st_ino));
}

bool TscIsInvariant() {
#if defined(__x86_64__)
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
    }
  }
#endif
  return false;
}

void TickConverter::Sample() {
  if (source_ == ClockSource::kMonotonic) return;
  // Bracket the monotonic read between two tick reads; keep the tightest of a
  // few tries so a preemption does not skew the pair.
  uint64_t best_ticks = 0;
  int64_t best_ns = 0;
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    uint64_t t0 = ReadTicks(source_);
    int64_t ns = MonotonicNs();
    uint64_t t1 = ReadTicks(source_);
    if (t1 - t0 < best_width) {
      best_width = t1 - t0;
      best_ticks = t0 + (t1 - t0) / 2;
      best_ns = ns;
    }
  }
  if (!have_first_) {
    have_first_ = true;
    first_ticks_ = best_ticks;
    first_ns_ = best_ns;
    // Until a baseline exists, assume ~1 tick/ns; replaced within one flush.
    ns_per_tick_ = 1.0;
  } else if (best_ticks > first_ticks_ + 1000000) {
    ns_per_tick_ = static_cast<double>(best_ns - first_ns_) / static_cast<double>(best_ticks - first_ticks_);
    rate_known_ = true;
  }
  last_ticks_ = best_ticks;
  last_ns_ = best_ns;
}

uint64_t TickConverter::DurationPs(uint64_t ticks) const {
  if (source_ == ClockSource::kMonotonic) return ticks * 1000;
  if (!rate_known_) return 0;
  return static_cast<uint64_t>(std::llround(static_cast<double>(ticks) * ns_per_tick_ * 1000.0));
}

int64_t TickConverter::ToNs(uint64_t ticks) const {
  if (source_ == ClockSource::kMonotonic) return static_cast<int64_t>(ticks);
  int64_t dt = static_cast<int64_t>(ticks - last_ticks_);
  return last_ns_ + static_cast<int64_t>(static_cast<double>(dt) * ns_per_tick_);
}

}  // namespace rlscope
