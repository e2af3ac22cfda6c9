#include "collector/cpu_sampler.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "collector/arming.h"
#include "collector/proc_self.h"
#include "collector/recording.h"
#include "collector/safe_read.h"
#include "collector/test_clock.h"

namespace rlscope {

std::atomic<CpuSampler*> CpuSampler::installed_instance_{nullptr};

namespace {

std::atomic<rlscope_py_module_reader_t> g_py_reader{nullptr};
std::atomic<const char*> g_py_reader_name{""};
// Handlers between loading g_py_reader and leaving the reader it loaded
// (seq_cst with that load and SetPythonReader's store: a replaced reader is
// either never entered or waited for).
std::atomic<int> g_in_reader{0};

// The calibration's scratch ring (Setup, on the flush thread): a signal the
// thread sends itself is recorded there, and counted nowhere.
thread_local ThreadBuffer* tls_calibration_ring __attribute__((tls_model("initial-exec"))) = nullptr;
// Setup's signals: TakeSample's own time, summed (ns, steady clock: a vDSO
// read, safe in a handler).
thread_local int64_t tls_calibration_take_ns __attribute__((tls_model("initial-exec"))) = 0;

// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of the Linux ABI, as glibc's
// pthread_getcpuclockid computes it: the CPU clock of thread `tid` of this
// process (the kernel refuses another process's thread).
clockid_t ThreadCpuClock(int64_t tid) {
  return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 4 /* per thread */ | 2 /* sched */);
}

uint64_t Hash(const char* s, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ull;
  return h == 0 ? 1 : h;
}

uint64_t InstructionPointer(const void* ucontext) {
#if defined(__x86_64__)
  return static_cast<uint64_t>(static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<uint64_t>(static_cast<const ucontext_t*>(ucontext)->uc_mcontext.pc);
#else
  (void)ucontext;
  return 0;
#endif
}

// Why CPU sampling is not safe on this kernel, or "".
std::string KernelProblem() {
  utsname u{};
  if (uname(&u) != 0) return "uname failed";
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2)
    return std::string("kernel release '") + u.release + "' unreadable";
  const bool x86_64 = std::strcmp(u.machine, "x86_64") == 0;
  if (!x86_64 || major < 5 || (major == 5 && minor < 11)) {
    return std::string(
               "needs Linux >= 5.11 on x86_64, where a CPU timer's signal is raised on the return to user "
               "space and never interrupts a system call (this host: ") +
           u.sysname + " " + u.release + " " + u.machine + ")";
  }
  return "";
}

}  // namespace

CpuSampler::CpuSampler(const Arming* arming, ClockSource clock, TestClock* test_clock, int wake_fd)
    : arming_(arming), clock_(clock), test_clock_(test_clock), wake_fd_(wake_fd) {}

CpuSampler::~CpuSampler() {
  // The handler stays installed (a pending signal must never meet the
  // default action); it finds no instance and ignores timer signals.
  CpuSampler* self = this;
  installed_instance_.compare_exchange_strong(self, nullptr);
}

void CpuSampler::SetPythonReader(rlscope_py_module_reader_t reader, const char* what) {
  // The name is a literal or a string the caller keeps for the process's life.
  g_py_reader_name.store(reader != nullptr && what != nullptr ? what : "", std::memory_order_release);
  const rlscope_py_module_reader_t before = g_py_reader.exchange(reader);
  if (before == nullptr || before == reader) return;
  // Handlers still in the old reader (a few microseconds each): the caller
  // may be about to free what it reads (interpreter exit). A handler that
  // never leaves (its thread stopped in a debugger) is not waited for long.
  for (int spin = 0; g_in_reader.load() != 0 && spin < 10000; ++spin) {
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
}

std::string CpuSampler::PythonReaderName() {
  return g_py_reader.load(std::memory_order_acquire) != nullptr ? g_py_reader_name.load(std::memory_order_acquire) : "";
}

bool CpuSampler::Setup(std::string* why) {
  if (installed_) return true;
  if (const std::string k = KernelProblem(); !k.empty()) {
    *why = k;
    return false;
  }
  if (installed_instance_.load(std::memory_order_acquire) != nullptr) {
    *why = "another collector in this process samples already";
    return false;
  }
  modules_ = std::make_unique<ModuleEntry[]>(kModuleSlots);
  foreign_ = std::make_unique<ForeignSlot[]>(kForeignSlots);
  module_ids_.assign(kModuleSlots, 0);
  // A real-time signal nobody handles, from the top (libraries that take one
  // for themselves tend to take SIGRTMIN + n).
  for (int sig = SIGRTMAX - 1; sig >= SIGRTMIN + 2 && signal_ == 0; --sig) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_sigaction = &CpuSampler::OnSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    installed_instance_.store(this, std::memory_order_release);  // before the first signal can come
    if (sigaction(sig, &sa, &previous_) != 0) continue;
    signal_ = sig;
  }
  if (signal_ == 0) {
    installed_instance_.store(nullptr, std::memory_order_release);
    *why = "no free real-time signal (every one from SIGRTMIN+2 to SIGRTMAX-1 has a handler)";
    return false;
  }
  installed_ = true;
  // Faults in the frame reader's reads become failed reads; without the
  // guard the reads go through the kernel (FrameReads says so).
  std::string no_guard;
  FaultGuard::Install(&no_guard);
  if (test_clock_ == nullptr) {
    MeasureSampleCost();
  } else {
    sample_cost_ns_ = 0;  // test costs (test_clock.h): nothing measured in place either
  }
  return true;
}

// What a sample costs its thread: a signal this thread sends itself, taken
// through the same handler into a scratch ring, less a bare system call
// (the timer's expiry is raised without one). Best of a few rounds; of
// that round, what TakeSample itself took (the part the handler times in
// place, handler_ticks_).
void CpuSampler::MeasureSampleCost() {
  ThreadBuffer scratch(0, 1024);
  tls_calibration_ring = &scratch;
  const pid_t pid = getpid();
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  double take_ns = 0;  // TakeSample's, per signal, in the best round of signals
  // Ticks per ns (kHandlerCeilingNs in ticks), over the rounds below.
  const uint64_t ticks0 = ReadTicks(clock_);
  const auto ns0 = std::chrono::steady_clock::now();
  auto best_ns = [&](auto&& body) {
    double best = 1e18;
    for (int r = 0; r < 7; ++r) {
      tls_calibration_take_ns = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 64; ++i) body();
      const auto t1 = std::chrono::steady_clock::now();
      if (const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / 64; ns < best) {
        best = ns;
        take_ns = static_cast<double>(tls_calibration_take_ns) / 64;
      }
      scratch.Drain([](const EventRecord*, size_t) {});
    }
    return best;
  };
  const double signal_ns = best_ns([&] { syscall(SYS_tgkill, pid, tid, signal_); });
  const double sample_take_ns = take_ns;
  const double syscall_ns = best_ns([] { syscall(SYS_getppid); });
  tls_calibration_ring = nullptr;
  sample_cost_ns_ = std::max(0.0, signal_ns - syscall_ns);
  sample_take_ns_ = std::min(sample_cost_ns_, sample_take_ns);
  const double ticks_per_ns =
      static_cast<double>(ReadTicks(clock_) - ticks0) /
      std::max(1.0, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - ns0).count());
  handler_ceiling_ticks_.store(
      static_cast<uint64_t>(static_cast<double>(kHandlerCeilingNs) * std::max(ticks_per_ns, 0.1)),
      std::memory_order_relaxed);
}

bool CpuSampler::StillOurs(std::string* why) {
  if (!installed_) return false;
  struct sigaction now {};
  if (sigaction(signal_, nullptr, &now) != 0) return true;
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &CpuSampler::OnSignal) return true;
  *why =
      "the host installed its own handler for signal " + std::to_string(signal_) + " (the sampler's): sampling stopped";
  return false;
}

void CpuSampler::Reconcile(SampledThread* t, ThreadState* state, int64_t tid, bool on, int64_t hz) {
  ReconcileTimer(t, state, &state->sample_ring, tid, on, hz);
}

void CpuSampler::ReconcileTimer(SampledThread* t, void* cookie, std::atomic<ThreadBuffer*>* ring_out, int64_t tid,
                                bool on, int64_t hz) {
  if (!installed_ || t->failed || (!on && !t->armed)) return;
  if (on && !t->has_timer) {
    // One ring for the thread's life: once published, a handler may be
    // writing it until the thread's entry goes.
    if (t->ring == nullptr) t->ring = std::make_unique<ThreadBuffer>(tid, kRingRecords);
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = signal_;
    sev.sigev_value.sival_ptr = cookie;
    sev._sigev_un._tid = static_cast<pid_t>(tid);
    if (timer_create(ThreadCpuClock(tid), &sev, &t->timer) != 0) {
      // Gone already (EINVAL: its clock is no more), or over RLIMIT_SIGPENDING: not sampled.
      if (errno != EINVAL) threads_unsampled_.fetch_add(1, std::memory_order_relaxed);
      t->failed = true;
      return;
    }
    t->has_timer = true;
    timers_.fetch_add(1, std::memory_order_relaxed);
    // Release: the ring is constructed before a handler can find it.
    ring_out->store(t->ring.get(), std::memory_order_release);
  }
  if (!t->has_timer || (on == t->armed && (!on || hz == t->hz))) return;
  itimerspec spec{};
  if (on) {
    const int64_t period_ns = std::max<int64_t>(1000, 1000000000 / std::max<int64_t>(1, hz));
    period_us_.store(period_ns / 1000, std::memory_order_relaxed);
    spec.it_interval.tv_sec = period_ns / 1000000000;
    spec.it_interval.tv_nsec = period_ns % 1000000000;
    spec.it_value = spec.it_interval;
  }
  if (timer_settime(t->timer, 0, &spec, nullptr) == 0) {
    t->armed = on;
    t->hz = on ? hz : 0;
  }
}

ForeignSlot* CpuSampler::SlotOf(const void* cookie) const {
  const ForeignSlot* base = foreign_.get();
  const auto p = reinterpret_cast<uintptr_t>(cookie), b = reinterpret_cast<uintptr_t>(base);
  if (base == nullptr || p < b || p >= b + kForeignSlots * sizeof(ForeignSlot) || (p - b) % sizeof(ForeignSlot) != 0) {
    return nullptr;
  }
  return const_cast<ForeignSlot*>(static_cast<const ForeignSlot*>(cookie));
}

int64_t NextBlocksLookNs(int64_t seen_ns, int64_t now_ns, bool blocks, int64_t max_ns, int64_t* every_ns) {
  if (now_ns - seen_ns < 1'000'000'000) return now_ns;
  if (!blocks) {  // no timer all the same (one could not be made): a second, as ever
    *every_ns = 0;
    return now_ns + 1'000'000'000;
  }
  *every_ns = std::min(*every_ns == 0 ? 1'000'000'000 : 2 * *every_ns, std::max<int64_t>(max_ns, 1'000'000'000));
  return now_ns + *every_ns;
}

void CpuSampler::ReconcileOthers(const std::vector<int64_t>& tids, const std::set<int64_t>& recording,
                                 const std::set<int64_t>& own, bool on, int64_t hz, int64_t now_ns,
                                 int64_t blocks_look_max_ns) {
  if (!installed_) return;
  for (size_t i = 0; i < kForeignSlots; ++i) foreign_[i].present = false;
  size_t next_free = 0;
  for (int64_t tid : tids) {
    auto it = foreign_index_.find(tid);
    if (it == foreign_index_.end()) {
      if (recording.count(tid) != 0 || !on) continue;  // sampled through its state; or nothing to start
      while (next_free < kForeignSlots && foreign_[next_free].tid != 0) ++next_free;
      if (next_free == kForeignSlots) {
        threads_unsampled_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ForeignSlot& slot = foreign_[next_free];
      slot.tid = tid;
      slot.sampled.failed = false;
      slot.recording = false;
      slot.named = false;
      slot.blocks = false;
      slot.seen_ns = slot.blocks_look_ns = now_ns;
      slot.blocks_every_ns = 0;
      slot.sampled.ring.reset();  // a ring is its thread's (the blocks it ships carry the tid)
      it = foreign_index_.emplace(tid, next_free).first;
    }
    ForeignSlot& slot = foreign_[it->second];
    slot.present = true;
    // At every look: a thread may say it is the collector's after it was
    // first listed (then named again: rlscope_own_thread may name it).
    if (const bool profiler = own.count(tid) != 0; profiler != slot.profiler.load(std::memory_order_relaxed)) {
      slot.profiler.store(profiler, std::memory_order_relaxed);
      slot.named = false;
    }
    if (!slot.recording && recording.count(tid) != 0) {
      slot.recording = true;  // it records now: its state's timer takes over
      Release(&slot.sampled);
    }
    if (slot.recording) continue;
    // A thread that blocks our signal (ZeroMQ's, some runtimes' helpers)
    // would keep it pending: no timer while it does (looked at again while
    // it has none; a new thread blocks every signal for an instant).
    if (!slot.sampled.has_timer && now_ns >= slot.blocks_look_ns) {
      slot.blocks = ThreadBlocksSignal(tid, signal_);
      slot.blocks_look_ns =
          NextBlocksLookNs(slot.seen_ns, now_ns, slot.blocks, blocks_look_max_ns, &slot.blocks_every_ns);
    }
    if (slot.blocks) continue;
    if (slot.sampled.ring == nullptr) slot.sampled.ring = std::make_unique<ThreadBuffer>(tid, kForeignRingRecords);
    ReconcileTimer(&slot.sampled, &slot, &slot.ring, tid, on, hz);
  }
  // Threads gone: no handler can run on them any more; the slot goes once
  // its samples shipped (the ring is kept for the next thread).
  uint64_t blocking = 0;
  for (size_t i = 0; i < kForeignSlots; ++i) {
    if (foreign_[i].tid != 0 && foreign_[i].present && foreign_[i].blocks) ++blocking;
  }
  threads_blocking_.store(blocking, std::memory_order_relaxed);
  for (size_t i = 0; i < kForeignSlots; ++i) {
    ForeignSlot& slot = foreign_[i];
    if (slot.tid == 0 || slot.present) continue;
    Release(&slot.sampled);
    if (slot.sampled.ring != nullptr && slot.sampled.ring->size() > 0) continue;
    foreign_index_.erase(slot.tid);
    slot.ring.store(nullptr, std::memory_order_release);
    slot.tid = 0;
  }
}

void CpuSampler::DisarmOthers() {
  if (!installed_) return;
  for (size_t i = 0; i < kForeignSlots; ++i) {
    ForeignSlot& slot = foreign_[i];
    if (slot.tid != 0 && slot.sampled.armed) ReconcileTimer(&slot.sampled, &slot, &slot.ring, slot.tid, false, 0);
  }
}

void CpuSampler::Release(SampledThread* t) {
  if (!t->has_timer) return;
  timer_delete(t->timer);
  t->has_timer = false;
  t->armed = false;
  timers_.fetch_sub(1, std::memory_order_relaxed);
}

void CpuSampler::OnSignal(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  CpuSampler* s = installed_instance_.load(std::memory_order_acquire);
  if (s == nullptr || info == nullptr) {
    errno = saved_errno;
    return;  // a collector that is gone (exit, a forked child): nothing of ours to do
  }
  if (ThreadBuffer* cal = tls_calibration_ring) {  // Setup's own signals
    const auto t0 = std::chrono::steady_clock::now();
    s->TakeSample(cal, ucontext, 0, kFlagNone);
    tls_calibration_take_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  } else if (info->si_code != SI_TIMER) {
    PassToPrevious(s->previous_, sig, info, ucontext);  // someone else's signal
  } else {
    s->signals_.fetch_add(1, std::memory_order_relaxed);
    // A timer is created for one thread's state or slot and delivered to it alone.
    ThreadBuffer* ring = nullptr;
    uint8_t flags = kFlagNone;
    ThreadState* ts = Recording::Current();
    if (ts != nullptr && info->si_value.sival_ptr == ts) {
      ts->signals.fetch_add(1, std::memory_order_relaxed);  // a timed recording call it lands in is no cost sample
      ring = ts->sample_ring.load(std::memory_order_acquire);
    } else if (ForeignSlot* slot = s->SlotOf(info->si_value.sival_ptr)) {
      ring = slot->ring.load(std::memory_order_acquire);
      if (slot->profiler.load(std::memory_order_relaxed)) flags = kFlagProfilerThread;
    }
    // Outside a window the flush thread is about to disarm the timer: not recorded.
    if (ring != nullptr && s->arming_->armed()) {
      const uint64_t entry = ReadTicks(s->clock_);
      const int64_t periods = 1 + static_cast<int64_t>(std::max(0, info->si_overrun));
      const int64_t us = periods * s->period_us_.load(std::memory_order_relaxed);
      if (s->TakeSample(ring, ucontext, static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX)), flags)) {
        if (const uint64_t took = ReadTicks(s->clock_) - entry;
            took <= s->handler_ceiling_ticks_.load(std::memory_order_relaxed)) {
          s->handler_ticks_.fetch_add(took, std::memory_order_relaxed);
          s->timed_samples_.fetch_add(1, std::memory_order_release);  // after its ticks (handler_ticks())
        } else {
          s->handlers_interrupted_.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
  }
  errno = saved_errno;
}

bool CpuSampler::TakeSample(ThreadBuffer* ring, const void* ucontext, uint32_t weight_us, uint8_t flags) {
  const bool calibrating = tls_calibration_ring != nullptr;
  uint32_t module = 0;
  bool unread = false, through_kernel = false;
  NativeChain chain;
  bool walked = false;
  {
    SafeReadScope reads(ucontext);
    g_in_reader.fetch_add(1);  // seq_cst: see g_in_reader
    if (rlscope_py_module_reader_t reader = g_py_reader.load()) {
      char name[kMaxModuleName + 1];
      const size_t n = reader(&SafeRead, name, sizeof(name));
      unread = reads.failed();  // the sample is kept, without a module
      if (!unread && n > 0 && !calibrating) module = ModuleSlot(name, std::min(n, kMaxModuleName));
    }
    g_in_reader.fetch_sub(1);
    // The stack is walked with guarded loads only (through the kernel, a
    // system call per read: the leaf alone names the code then).
    if (reads.guarded()) walked = code_.Walk(ucontext, &chain);
    through_kernel = reads.through_kernel();
  }
  EventRecord r;
  r.ts = ReadTicks(clock_);
  if (test_clock_ != nullptr) {  // test costs (test_clock.h): lock-free, so safe here
    int64_t own_ns = 0;
    r.ts += test_clock_->Advance(static_cast<uint8_t>(EventKind::kCpuSample), 0, &own_ns);
  }
  // Walked: the leaf's object id and its callers' (Resolve names them);
  // else the instruction's address (Resolve looks it up).
  r.value = walked ? chain.PackedCallers() : InstructionPointer(ucontext);
  r.name = walked ? chain.objects[0] : 0;
  r.category = module;  // its slot + 1 until Resolve interns it
  r.domain = weight_us;
  r.kind = static_cast<uint8_t>(EventKind::kCpuSample);
  r.flags = static_cast<uint8_t>(flags | (unread ? kFlagFrameUnread : 0) | (walked ? kFlagNativeStack : 0));
  r.reserved = 0;
  if (calibrating) return ring->TryPush(r, /*privileged=*/true, /*counted=*/false);
  if (!ring->TryPush(r, /*privileged=*/true, /*counted=*/false)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  samples_.fetch_add(1, std::memory_order_relaxed);
  if (ring->AtHalfMark() && wake_fd_ >= 0) {  // the flush thread drains it before it fills
    const int saved = errno;                  // a handler leaves errno as it found it
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    errno = saved;
  }
  if (unread) frames_unread_.fetch_add(1, std::memory_order_relaxed);
  if (through_kernel) kernel_reads_.fetch_add(1, std::memory_order_relaxed);
  if (chain.failed_reads > 0)
    walk_faults_.fetch_add(static_cast<uint64_t>(chain.failed_reads), std::memory_order_relaxed);
  if (!walked)
    unwalked_.fetch_add(1, std::memory_order_relaxed);
  else if (chain.frame_pointers)
    walks_fp_.fetch_add(1, std::memory_order_relaxed);
  else if (chain.scanned)
    walks_scan_.fetch_add(1, std::memory_order_relaxed);
  else
    walks_leaf_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void CpuSampler::UpdateHandlerNs(const TickConverter& converter) {
  // The ceiling from the converter's fitted rate once it has one (Setup's
  // is taken over a millisecond or two, and a preemption between its reads
  // can put it off several times).
  if (converter.durations_known() && converter.ns_per_tick() > 0) {
    handler_ceiling_ticks_.store(
        static_cast<uint64_t>(static_cast<double>(kHandlerCeilingNs) / converter.ns_per_tick()),
        std::memory_order_relaxed);
  }
  const uint64_t n = timed_samples();  // first: the ticks then cover them
  const uint64_t ps = converter.DurationPs(handler_ticks_.load(std::memory_order_relaxed));
  if (n > 0 && ps > 0)
    handler_ns_.store(static_cast<double>(ps) / 1000.0 / static_cast<double>(n), std::memory_order_relaxed);
}

uint32_t CpuSampler::ModuleSlot(const char* name, size_t n) {
  const uint64_t h = Hash(name, n);
  for (size_t probe = 0; probe < 16; ++probe) {
    const size_t index = (h + probe) & (kModuleSlots - 1);
    ModuleEntry& e = modules_[index];
    uint64_t key = e.key.load(std::memory_order_acquire);
    if (key == 0) {
      uint64_t expected = 0;
      if (e.key.compare_exchange_strong(expected, h, std::memory_order_acq_rel)) {
        std::memcpy(e.name, name, n);
        e.name[n] = '\0';
        e.length = static_cast<uint8_t>(n);
        e.ready.store(1, std::memory_order_release);  // publishes name and length
        return static_cast<uint32_t>(index + 1);
      }
      key = expected;  // another thread's handler took it meanwhile
    }
    if (key != h) continue;
    // The same hash: the same name unless it collides (checked once written).
    if (e.ready.load(std::memory_order_acquire) == 0) return static_cast<uint32_t>(index + 1);
    if (e.length == n && std::memcmp(e.name, name, n) == 0) return static_cast<uint32_t>(index + 1);
  }
  unnamed_modules_.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

void CpuSampler::Resolve(ThreadBuffer* ring, size_t n, StringTable* strings) {
  if (n == 0) return;
  code_.Refresh(strings);
  ring->VisitPending(n, [&](EventRecord& r) {
    if ((r.flags & kFlagNativeStack) != 0) {
      const uint32_t leaf = r.name;
      r.name = code_.ObjectName(leaf);
      r.value = code_.ChainName(leaf, r.value, strings);
    } else {
      r.name = code_.NameOf(r.value);
      r.value = 0;
    }
    if (r.category != 0 && r.category <= kModuleSlots) {
      const size_t slot = r.category - 1;
      if (module_ids_[slot] == 0 && modules_[slot].ready.load(std::memory_order_acquire) != 0) {
        module_ids_[slot] = strings->Intern(std::string_view(modules_[slot].name, modules_[slot].length));
      }
      r.category = module_ids_[slot];  // 0 while another thread's handler still writes it
    } else {
      r.category = 0;
    }
  });
}

std::string CpuSampler::FrameReads() const {
  if (!FaultGuard::Installed()) return "through the kernel (no fault guard on this CPU)";
  if (!FaultGuard::First(nullptr)) {
    return "through the kernel (the host's SIGSEGV or SIGBUS handler was installed after the sampler's guard)";
  }
  return "guarded";
}

}  // namespace rlscope
