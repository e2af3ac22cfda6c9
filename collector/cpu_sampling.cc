#include "collector/cpu_sampling.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "collector/safe_read.h"

namespace rlscope {

CpuSampling::CpuSampling(CollectorContext& ctx, Recording& recording, const Arming& arming,
                         std::function<void(const std::string&, const std::string&)> set_label,
                         std::function<void(const std::string&, double)> set_cost)
    : ctx_(ctx),
      recording_(recording),
      arming_(&arming),
      sampler_(&arming, ctx.clock_source, ctx.test_clock.get()),
      set_label_(std::move(set_label)),
      set_cost_(std::move(set_cost)) {
  SetHz(ctx.own.config.cpu.sampling_hz);
}

void CpuSampling::Flush() {
  Reconcile(!off_for_good_ && hz() > 0 && arming_->armed());
  SayCounts();
}

void CpuSampling::Stop() {
  if (!sampler_.set_up()) return;
  recording_.ForEachThread([&](ThreadEntry& t) { sampler_.Release(&t.sampled); });  // no timer outlives the collector
}

void CpuSampling::Reconcile(bool on) {
  std::string why;
  if (on && !sampler_.set_up()) {
    if (!sampler_.Setup(&why)) {
      off_for_good_ = true;
      on = false;
      why_off_ = "unavailable: " + why;
      std::fprintf(stderr, "rlscope: pid %d: CPU sampling is off in this process: %s\n", static_cast<int>(getpid()),
                   why.c_str());
    } else {
      set_cost_("cpu_sample", sampler_.sample_cost_ns());
    }
  }
  if (sampler_.set_up() && !off_for_good_ && !sampler_.StillOurs(&why)) {
    off_for_good_ = true;
    on = false;
    why_off_ = "stopped: " + why;
    std::fprintf(stderr, "rlscope: pid %d: %s\n", static_cast<int>(getpid()), why.c_str());
  }
  if (sampler_.set_up()) {
    const int64_t hz = this->hz();
    recording_.ForEachThread([&](ThreadEntry& t) {
      // An exited thread's timer goes with its entry (Release).
      if (!t.exited.load(std::memory_order_acquire)) sampler_.Reconcile(&t.sampled, t.state.get(), t.buffer->tid(), on, hz);
    });
  }
  if (const std::string label = Label(); label != label_) {
    label_ = label;
    set_label_("cpu_sampling", label);
  }
}

std::string CpuSampling::Label() const {
  if (off_for_good_) return why_off_;
  const int64_t hz = this->hz();
  if (hz == 0) return "off: cpu.sampling_hz is 0";
  if (!sampler_.set_up()) return "pending: starts with the first capture window";
  const std::string reader = CpuSampler::PythonReaderName();
  return "on: " + std::to_string(hz) + " Hz of each thread's CPU time, signal " +
         std::to_string(sampler_.signal_number()) + "; python frames: " +
         (reader.empty() ? std::string("none (rlscope_ray not imported in this process)")
                         : reader + ", reads " + sampler_.FrameReads());
}

void CpuSampling::SayCounts() {
  if (const uint64_t dropped = sampler_.dropped(); dropped != dropped_said_) {
    dropped_said_ = dropped;
    set_label_("cpu_samples_dropped", std::to_string(dropped));
  }
  sampler_.UpdateHandlerNs(ctx_.converter);
  if (const uint64_t unread = sampler_.frames_unread(); unread != unread_said_) {
    unread_said_ = unread;
    set_label_("cpu_frames_unread", std::to_string(unread));
  }
}

void CpuSampling::TakeSamples(Outgoing* out) {
  recording_.ForEachThread([&](ThreadEntry& t) {
    // CPU samples ship as a block of their own with the thread's tid; their
    // shared objects and modules are named now, before the names are collected.
    if (ThreadBuffer* ring = t.sampled.ring.get(); ring != nullptr && ring->size() > 0) {
      const size_t n = ring->size();
      sampler_.Resolve(ring, n, &ctx_.strings);
      out->threads.push_back({ring, n});
    }
  });
}

void CpuSampling::Stats(rlscope_sampler_stats_t* out) const {
  out->samples = sampler_.samples();
  out->dropped = sampler_.dropped();
  out->signals = sampler_.signals();
  out->timers = static_cast<uint64_t>(sampler_.timers());
  out->signal = static_cast<uint64_t>(sampler_.signal_number());
  out->frames_unread = sampler_.frames_unread();
  out->kernel_reads = sampler_.kernel_reads();
  out->guard_faults = FaultGuard::faults();
  out->handler_ns = sampler_.handler_ns();
}

}  // namespace rlscope
