// The collector's cheap clock.
//
// Hot path: ReadTicks() returns raw ticks (TSC where it is invariant, else
// CLOCK_MONOTONIC nanoseconds). Conversion to CLOCK_MONOTONIC nanoseconds is
// done later by TickConverter, which is fed (ticks, monotonic_ns) pairs by the
// flush thread. Collectors ship CLOCK_MONOTONIC ns of their host (or time
// namespace); the aggregator moves them onto its own clock with the offset it
// estimates from clock probes (aggregator/clock_fit.h).
#pragma once

#include <cstdint>
#include <string>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace rlscope {

inline int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

enum class ClockSource : uint8_t { kMonotonic = 0, kTsc = 1 };

// Which CLOCK_MONOTONIC this process reads: the kernel's boot id and the
// inode of its time namespace ("<boot id>:<inode>"; "" when either cannot
// be read). Two processes with the same domain read the same clock, exactly
// (a time namespace shifts it; another boot or host is another clock).
// Edges: a process that sees a /proc without ns/time (another PID
// namespace's mount) is taken to have no time namespace; a dead time
// namespace's inode can be reused (a spool replayed much later could then
// match). Neither happens with the namespaces a profiled job runs in.
std::string ClockDomain();

// True when the CPU advertises an invariant TSC (constant_tsc and nonstop_tsc).
bool TscIsInvariant();

inline uint64_t ReadTicks(ClockSource source) {
#if defined(__x86_64__)
  if (source == ClockSource::kTsc) return __rdtsc();
#endif
  (void)source;
  return static_cast<uint64_t>(MonotonicNs());
}

// Converts raw ticks to CLOCK_MONOTONIC ns. Single-threaded (flush thread).
// The rate is fitted over the longest baseline seen (first sample to latest),
// the offset anchored at the latest sample, so error does not grow with time.
class TickConverter {
 public:
  explicit TickConverter(ClockSource source) : source_(source) {}
  ClockSource source() const { return source_; }
  // Takes a (ticks, ns) pair bracketed tightly; call periodically.
  void Sample();
  int64_t ToNs(uint64_t ticks) const;
  double ns_per_tick() const { return ns_per_tick_; }
  // Whether DurationPs converts yet (CLOCK_MONOTONIC ticks always do).
  bool durations_known() const { return source_ == ClockSource::kMonotonic || rate_known_; }
  // A duration of `ticks` in picoseconds; 0 while the tick rate is not
  // measured yet (TSC before its second Sample far enough apart).
  uint64_t DurationPs(uint64_t ticks) const;

 private:
  ClockSource source_;
  bool have_first_ = false;
  uint64_t first_ticks_ = 0;
  int64_t first_ns_ = 0;
  uint64_t last_ticks_ = 0;
  int64_t last_ns_ = 0;
  double ns_per_tick_ = 1.0;
  bool rate_known_ = false;
};

}  // namespace rlscope
