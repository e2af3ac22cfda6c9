// CPU sampling as a unit of the collector: the CpuSampler (cpu_sampler.h)
// brought in line with the arming at every flush (a CPU-time timer per
// thread while armed at cpu.sampling_hz: recording threads, and with
// cpu.threads "all" every other thread of the process, listed each armed
// flush), its sample rings shipped with the flush, off-CPU looks at the
// recording threads (thread_states.h), and what it does said in the
// process's labels (cpu_sampling, cpu_samples_dropped, cpu_frames_unread,
// cpu_threads_unsampled, off_cpu).
//
// Threads: the flush thread, but for SetHz (any) and Stats (any).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "collector/arming.h"
#include "collector/context.h"
#include "collector/cpu_sampler.h"
#include "collector/proc_self.h"
#include "collector/recording.h"
#include "collector/rlscope_collector.h"
#include "collector/thread_states.h"
#include "collector/transport.h"

namespace rlscope {

class CpuSampling {
 public:
  // Labels go through `set_label` (Link::SetLabel), the sampler's measured
  // cost through `set_cost` (Link::SetCost).
  CpuSampling(CollectorContext& ctx, Recording& recording, const Arming& arming,
              std::function<void(const std::string&, const std::string&)> set_label,
              std::function<void(const std::string&, double)> set_cost);

  // cpu.sampling_hz of the config that applies (0: off); `always_on_hz`:
  // always_on.sampling_hz, the rate in steps not chosen up front
  // (Arming::chosen), -1 when always_on is off.
  void SetHz(int64_t hz, int64_t always_on_hz = -1) {
    hz_.store(hz, std::memory_order_relaxed);
    always_on_hz_.store(always_on_hz, std::memory_order_relaxed);
  }
  // The rate now.
  int64_t hz() const {
    const int64_t always_on = always_on_hz_.load(std::memory_order_relaxed);
    return always_on < 0 || arming_->chosen() ? hz_.load(std::memory_order_relaxed) : always_on;
  }
  // The off-CPU looks' rate now: cpu.off_cpu_hz, and in steps not chosen up
  // front the sampler's reduction of it (off_cpu_hz x always_on.sampling_hz
  // / cpu.sampling_hz, at least 1 Hz): a look reads up to three /proc files
  // per recording thread (ThreadStates), much of a figures-only flush's own work.
  int64_t off_cpu_hz() const {
    return OffCpuHzAt(off_cpu_hz_.load(std::memory_order_relaxed), hz_.load(std::memory_order_relaxed), hz());
  }
  // cpu.off_cpu_hz `off` while the sampler runs at `now` of its full `full`.
  static int64_t OffCpuHzAt(int64_t off, int64_t full, int64_t now) {
    if (off <= 0 || now >= full || full <= 0) return off;
    return now <= 0 ? 0 : std::max<int64_t>(1, off * now / full);
  }
  // The rest of the cpu block of the config that applies (any thread).
  void SetRunConfig(const Config& config);

  // Flush thread, each flush: every thread's timer in line with the arming
  // (on while armed with cpu.sampling_hz > 0), the sampler set up the first
  // time it is on; the labels say how it runs or why not. `wait_ns`: how
  // long the flush thread waited before this flush (the off-CPU looks'
  // weights); `waits_now`: the run-queue waits read even when no off-CPU
  // look is due (ThreadStates::Flush).
  void Flush(int64_t wait_ns, bool waits_now = false);
  // Flush thread, after the rings' snapshot: each sampled thread's pending
  // samples, their shared objects and modules named, as blocks of their own,
  // and the off-CPU looks' records. Returns the CPU samples taken (the
  // looks' records not counted: they are the flush thread's own).
  size_t TakeSamples(Outgoing* out);
  // Flush thread: a thread's timer goes with its entry.
  void Release(ThreadEntry& entry) { sampler_.Release(&entry.sampled); }
  // Flush thread, at exit: every timer deleted.
  void Stop();
  void Stats(rlscope_sampler_stats_t* out) const;

 private:
  // Sets the recording threads' timers; returns whether sampling is on after it.
  bool Reconcile(bool on);
  // Every thread that records no event, with cpu.threads "all".
  void ReconcileOthers(bool on);
  // Names of sampled threads not shipped yet (they record no events: the
  // recording unit does not name them).
  void NameOthers(Outgoing* out);
  std::string Label() const;
  std::string StacksLabel() const;
  void SayCounts();

  CollectorContext& ctx_;
  Recording& recording_;
  const Arming* const arming_;
  CpuSampler sampler_;
  std::function<void(const std::string&, const std::string&)> set_label_;
  std::function<void(const std::string&, double)> set_cost_;
  std::atomic<int64_t> hz_{0};
  std::atomic<int64_t> always_on_hz_{-1};
  std::atomic<int64_t> off_cpu_hz_{0};  // cpu.off_cpu_hz
  // ReconcileOthers: when the process's threads were last listed (0: not
  // while this window), and how often in steps not chosen up front.
  static constexpr int64_t kFiguresListEveryNs = 1000000000;
  int64_t others_listed_ns_ = 0;
  int64_t others_hz_ = 0;  // the rate they were brought to then
  ThreadLister threads_;   // the listing's directory, kept open
  std::atomic<bool> all_threads_{true};
  ThreadStates states_;
  // Flush thread only.
  std::string label_;          // the cpu_sampling label last set
  bool off_for_good_ = false;  // could not be set up, or the host took its signal
  uint64_t dropped_said_ = 0, unread_said_ = 0, unsampled_said_ = 0, blocking_said_ = 0;  // the counts' labels last set
  std::string stacks_said_;           // the cpu_stacks label last set
  uint64_t stacks_samples_said_ = 0;  // samples when it was last looked at
  std::string why_off_;               // why it is off for good
};

}  // namespace rlscope
