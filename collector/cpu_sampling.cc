#include "collector/cpu_sampling.h"

#include <unistd.h>

#include <cstdio>
#include <set>
#include <utility>

#include "collector/proc_self.h"
#include "collector/safe_read.h"

namespace rlscope {

CpuSampling::CpuSampling(CollectorContext& ctx, Recording& recording, const Arming& arming,
                         std::function<void(const std::string&, const std::string&)> set_label,
                         std::function<void(const std::string&, double)> set_cost)
    : ctx_(ctx),
      recording_(recording),
      arming_(&arming),
      sampler_(&arming, ctx.clock_source, ctx.test_clock.get(), ctx.wake_fd),
      set_label_(std::move(set_label)),
      set_cost_(std::move(set_cost)),
      states_(ctx, recording) {
  SetRunConfig(ctx.own.config);
}

void CpuSampling::SetRunConfig(const Config& config) {
  SetHz(config.cpu.sampling_hz, config.always_on.enabled ? config.always_on.sampling_hz : -1);
  all_threads_.store(config.cpu.threads == "all", std::memory_order_relaxed);
  off_cpu_hz_.store(config.cpu.off_cpu_hz, std::memory_order_relaxed);
}

void CpuSampling::Flush(int64_t wait_ns, bool waits_now) {
  // Off when Reconcile found the host took the signal, or sampling cannot run.
  const bool on = Reconcile(!off_for_good_ && hz() > 0 && arming_->armed());
  ReconcileOthers(on && all_threads_.load(std::memory_order_relaxed));
  states_.SetHz(off_cpu_hz());
  states_.Flush(arming_->armed(), wait_ns, waits_now);
  SayCounts();
}

void CpuSampling::ReconcileOthers(bool on) {
  if (!sampler_.set_up()) return;
  if (!on) {
    sampler_.DisarmOthers();  // no listing outside windows: disarmed processes pay nothing per thread
    others_listed_ns_ = 0;
    return;
  }
  // Always on, in steps not chosen up front: the process's threads are
  // listed at most once a second (a listing reads /proc for every thread),
  // not at every flush; a thread started since is sampled from the next.
  // (A change of rate is brought to every thread at once: the samples'
  // weight is the sampler's one period.)
  const int64_t now_ns = MonotonicNs();
  if (!arming_->chosen() && others_listed_ns_ != 0 && hz() == others_hz_ &&
      now_ns - others_listed_ns_ < kFiguresListEveryNs) {
    return;
  }
  others_listed_ns_ = now_ns;
  others_hz_ = hz();
  sampler_.RefreshCode(&ctx_.strings);
  std::set<int64_t> recording;
  recording_.ForEachThread([&](ThreadEntry& t) { recording.insert(t.buffer->tid()); });
  const std::vector<int64_t> tids = threads_.List();
  ctx_.TakeOwnThreads(tids);
  sampler_.ReconcileOthers(tids, recording, ctx_.own_threads, on, hz(), now_ns,
                           arming_->chosen() ? 1'000'000'000 : kBlocksLookMaxNs);
}

void CpuSampling::NameOthers(Outgoing* out) {
  sampler_.ForEachOther([&](ForeignSlot& slot) {
    if (slot.named || slot.recording) return;
    slot.named = true;
    std::string name = ReadThreadName(slot.tid);
    if (name.empty()) name = "thread " + std::to_string(slot.tid);
    out->metadata.thread_names.emplace_back(slot.tid, name);
  });
}

void CpuSampling::Stop() {
  if (!sampler_.set_up()) return;
  recording_.ForEachThread([&](ThreadEntry& t) { sampler_.Release(&t.sampled); });  // no timer outlives the collector
  sampler_.ForEachOther([&](ForeignSlot& slot) { sampler_.Release(&slot.sampled); });
}

bool CpuSampling::Reconcile(bool on) {
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
      if (sampler_.sample_take_ns() >= 0) set_cost_("cpu_sample_handler", sampler_.sample_take_ns());
    }
  }
  if (sampler_.set_up() && !off_for_good_ && !sampler_.StillOurs(&why)) {
    off_for_good_ = true;
    on = false;
    why_off_ = "stopped: " + why;
    std::fprintf(stderr, "rlscope: pid %d: %s\n", static_cast<int>(getpid()), why.c_str());
    Stop();  // every timer deleted, not just disarmed: none fires into the host's handler again
  }
  if (sampler_.set_up()) {
    if (on) sampler_.RefreshCode(&ctx_.strings);  // the code the handlers walk through
    const int64_t hz = this->hz();
    recording_.ForEachThread([&](ThreadEntry& t) {
      // An exited thread's timer goes with its entry (Release).
      if (!t.exited.load(std::memory_order_acquire))
        sampler_.Reconcile(&t.sampled, t.state.get(), t.buffer->tid(), on, hz);
    });
  }
  if (const std::string label = Label(); label != label_) {
    label_ = label;
    set_label_("cpu_sampling", label);
  }
  return on;
}

std::string CpuSampling::Label() const {
  if (off_for_good_) return why_off_;
  // The configured rates, not the one now: the label changes only with them.
  const int64_t hz = hz_.load(std::memory_order_relaxed), always_on = always_on_hz_.load(std::memory_order_relaxed);
  if (hz == 0 && always_on <= 0) return "off: cpu.sampling_hz is 0";
  if (!sampler_.set_up()) return "pending: starts with the first capture window";
  const std::string reader = CpuSampler::PythonReaderName();
  return "on: " + std::to_string(hz) + " Hz of each thread's CPU time" +
         (always_on >= 0 ? " (" + std::to_string(always_on) + " Hz in steps not chosen up front, always_on.sampling_hz)"
                         : std::string()) +
         ", " +
         (all_threads_.load(std::memory_order_relaxed) ? "every thread (cpu.threads: all)"
                                                       : "recording threads (cpu.threads: recording)") +
         ", signal " + std::to_string(sampler_.signal_number()) + "; python frames: " +
         (reader.empty() ? std::string("none (rlscope_ray not imported in this process)")
                         : reader + ", reads " + sampler_.FrameReads()) +
         "; native stacks: frame pointers where they validate, else a scan of " + std::to_string(CodeMap::kScanBytes) +
         " bytes of stack for return addresses, " + std::to_string(NativeChain::kMaxObjects) + " objects at most";
}

std::string CpuSampling::StacksLabel() const {
  // Which walk ran, over the samples so far.
  const uint64_t fp = sampler_.walks_fp(), scan = sampler_.walks_scan(), leaf = sampler_.walks_leaf(),
                 none = sampler_.unwalked();
  const uint64_t total = fp + scan + leaf + none;
  if (total == 0) return "";
  auto pct = [&](uint64_t n) { return std::to_string((n * 1000 / total + 5) / 10) + "%"; };
  return "frame pointers " + pct(fp) + ", scan " + pct(scan) + ", leaf only " + pct(leaf) + ", not walked " +
         pct(none) + " of " + std::to_string(total) + " samples";
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
  if (const uint64_t unsampled = sampler_.threads_unsampled(); unsampled != unsampled_said_) {
    unsampled_said_ = unsampled;
    set_label_("cpu_threads_unsampled", std::to_string(unsampled));
  }
  if (const uint64_t blocking = sampler_.threads_blocking(); blocking != blocking_said_) {
    blocking_said_ = blocking;
    set_label_("cpu_threads_blocking", std::to_string(blocking));  // their CPU is not in the samples
  }
  // The walks' mix, said once a window closed, and while one stays open
  // each time the samples doubled (a label re-sends the Hello: not at every
  // flush while the shares move).
  const uint64_t samples = sampler_.samples();
  if (samples != stacks_samples_said_ &&
      (!arming_->armed() || (samples >= 256 && samples >= 2 * stacks_samples_said_))) {
    stacks_samples_said_ = samples;
    if (std::string stacks = StacksLabel(); !stacks.empty() && stacks != stacks_said_) {
      stacks_said_ = stacks;
      set_label_("cpu_stacks", stacks);
    }
  }
}

size_t CpuSampling::TakeSamples(Outgoing* out) {
  // CPU samples ship as a block of their own with the thread's tid; their
  // shared objects and modules are named now, before the names are collected.
  size_t samples = 0;
  auto take = [&](ThreadBuffer* ring) {
    if (ring == nullptr || ring->size() == 0) return;
    const size_t n = ring->size();
    sampler_.Resolve(ring, n, &ctx_.strings);
    out->threads.push_back({ring, n});
    samples += n;
  };
  recording_.ForEachThread([&](ThreadEntry& t) { take(t.sampled.ring.get()); });
  sampler_.ForEachOther([&](ForeignSlot& slot) { take(slot.sampled.ring.get()); });
  // What the handler took in place so far (wire.h Batch::cpu_handler_*),
  // once ticks convert to time.
  if (sampler_.set_up() && ctx_.converter.durations_known()) {
    const uint64_t timed = sampler_.timed_samples();  // first: the ticks then cover them
    out->cpu_handler_samples = static_cast<int64_t>(timed);
    out->cpu_handler_ps = static_cast<int64_t>(ctx_.converter.DurationPs(sampler_.handler_ticks()));
  }
  NameOthers(out);
  states_.Take(out);
  return samples;
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
  out->handlers_interrupted = sampler_.handlers_interrupted();
  out->threads_unsampled = sampler_.threads_unsampled();
  out->walks_fp = sampler_.walks_fp();
  out->walks_scan = sampler_.walks_scan();
  out->walks_leaf = sampler_.walks_leaf();
  out->unwalked = sampler_.unwalked();
  out->off_cpu_looks = states_.looks();
  out->off_cpu_dropped = states_.dropped();
  out->walk_faults = sampler_.walk_faults();
}

}  // namespace rlscope
