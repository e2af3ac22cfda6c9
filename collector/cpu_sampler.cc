#include "collector/cpu_sampler.h"

#include <dlfcn.h>
#include <fcntl.h>
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

#include "collector/collector.h"
#include "collector/test_clock.h"

namespace rlscope {

std::atomic<CpuSampler*> CpuSampler::installed_instance_{nullptr};

namespace {

std::atomic<rlscope_py_module_reader_t> g_py_reader{nullptr};
std::atomic<const char*> g_py_reader_name{""};

// The calibration's scratch ring (Setup, on the flush thread): a signal the
// thread sends itself is recorded there, and counted nowhere.
thread_local ThreadBuffer* tls_calibration_ring __attribute__((tls_model("initial-exec"))) = nullptr;
// While a handler runs on this thread: the readable ranges it entered.
struct ReadableView {
  const void* ranges = nullptr;
  size_t size = 0;
};
thread_local ReadableView tls_readable __attribute__((tls_model("initial-exec")));

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

uint64_t InstructionPointer(void* ucontext) {
#if defined(__x86_64__)
  return static_cast<uint64_t>(static_cast<ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<uint64_t>(static_cast<ucontext_t*>(ucontext)->uc_mcontext.pc);
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
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return std::string("kernel release '") + u.release + "' unreadable";
  const bool x86_64 = std::strcmp(u.machine, "x86_64") == 0;
  if (!x86_64 || major < 5 || (major == 5 && minor < 11)) {
    return std::string("needs Linux >= 5.11 on x86_64, where a CPU timer's signal is raised on the return to user "
                       "space and never interrupts a system call (this host: ") +
           u.sysname + " " + u.release + " " + u.machine + ")";
  }
  return "";
}

}  // namespace

CpuSampler::CpuSampler(Collector* owner, ClockSource clock, TestClock* test_clock)
    : owner_(owner), clock_(clock), test_clock_(test_clock) {}

CpuSampler::~CpuSampler() {
  // The handler stays installed (a pending signal must never meet the
  // default action); it finds no instance and ignores timer signals.
  CpuSampler* self = this;
  installed_instance_.compare_exchange_strong(self, nullptr);
}

void CpuSampler::SetPythonReader(rlscope_py_module_reader_t reader, const char* what) {
  // The name is a literal or a string the caller keeps for the process's life.
  g_py_reader_name.store(reader != nullptr && what != nullptr ? what : "", std::memory_order_release);
  g_py_reader.store(reader, std::memory_order_release);
}

std::string CpuSampler::PythonReaderName() {
  return g_py_reader.load(std::memory_order_acquire) != nullptr ? g_py_reader_name.load(std::memory_order_acquire)
                                                                : "";
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
  RefreshReadableMap();
  // What a sample costs its thread: a signal this thread sends itself, taken
  // through the same handler into a scratch ring, less a bare system call
  // (the timer's expiry is raised without one). Best of a few rounds.
  if (test_clock_ == nullptr) {
    ThreadBuffer scratch(0, 1024);
    tls_calibration_ring = &scratch;
    const pid_t pid = getpid();
    const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
    auto best_ns = [&](auto&& body) {
      double best = 1e18;
      for (int r = 0; r < 7; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 64; ++i) body();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / 64);
        scratch.Drain([](const EventRecord*, size_t) {});
      }
      return best;
    };
    const double signal_ns = best_ns([&] { syscall(SYS_tgkill, pid, tid, signal_); });
    const double syscall_ns = best_ns([] { syscall(SYS_getppid); });
    tls_calibration_ring = nullptr;
    sample_cost_ns_ = std::max(0.0, signal_ns - syscall_ns);
  } else {
    sample_cost_ns_ = 0;
  }
  return true;
}

bool CpuSampler::StillOurs(std::string* why) {
  if (!installed_) return false;
  struct sigaction now {};
  if (sigaction(signal_, nullptr, &now) != 0) return true;
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &CpuSampler::OnSignal) return true;
  *why = "the host installed its own handler for signal " + std::to_string(signal_) +
         " (the sampler's): sampling stopped";
  return false;
}

void CpuSampler::Reconcile(SampledThread* t, ThreadState* state, int64_t tid, bool on, int64_t hz) {
  if (!installed_ || t->failed || (!on && !t->armed)) return;
  if (on && !t->has_timer) {
    t->ring = std::make_unique<ThreadBuffer>(tid, kRingRecords);
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = signal_;
    sev.sigev_value.sival_ptr = state;
    sev._sigev_un._tid = static_cast<pid_t>(tid);
    if (timer_create(ThreadCpuClock(tid), &sev, &t->timer) != 0) {
      t->failed = true;  // gone already, or over RLIMIT_SIGPENDING: not sampled
      t->ring.reset();
      return;
    }
    t->has_timer = true;
    timers_.fetch_add(1, std::memory_order_relaxed);
    // Release: the ring is constructed before a handler can find it.
    state->sample_ring.store(t->ring.get(), std::memory_order_release);
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
    s->TakeSample(cal, InstructionPointer(ucontext), 0);
  } else if (info->si_code != SI_TIMER) {
    s->Forward(sig, info, ucontext);  // someone else's signal
  } else {
    s->signals_.fetch_add(1, std::memory_order_relaxed);
    ThreadState* ts = Collector::SignalThreadState();
    // A timer is created for one thread's state and delivered to it alone.
    if (ts != nullptr && info->si_value.sival_ptr == ts) {
      ts->signals.fetch_add(1, std::memory_order_relaxed);  // a timed recording call it lands in is no cost sample
      ThreadBuffer* ring = ts->sample_ring.load(std::memory_order_acquire);
      Collector* c = Collector::Instance();
      // Outside a window the flush thread is about to disarm the timer: not recorded.
      if (ring != nullptr && c == s->owner_ && c->armed()) {
        const int64_t periods = 1 + static_cast<int64_t>(std::max(0, info->si_overrun));
        const int64_t us = periods * s->period_us_.load(std::memory_order_relaxed);
        s->TakeSample(ring, InstructionPointer(ucontext), static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX)));
      }
    }
  }
  errno = saved_errno;
}

void CpuSampler::TakeSample(ThreadBuffer* ring, uint64_t ip, uint32_t weight_us) {
  const bool calibrating = tls_calibration_ring != nullptr;
  uint32_t module = 0;
  if (rlscope_py_module_reader_t reader = g_py_reader.load(std::memory_order_acquire)) {
    // Count in on the published readable map; the flush thread rewrites
    // only a map nobody is in (seq_cst: the count and the re-check of
    // active_ must not pass each other).
    int i;
    while (true) {
      i = active_.load();
      readers_[i].fetch_add(1);
      if (active_.load() == i) break;
      readers_[i].fetch_sub(1);
    }
    tls_readable.ranges = readable_[i].data();
    tls_readable.size = readable_size_[i].load();
    char name[kMaxModuleName + 1];
    const size_t n = reader(&CpuSampler::Readable, name, sizeof(name));
    tls_readable = ReadableView{};
    readers_[i].fetch_sub(1);
    if (n > 0 && !calibrating) module = ModuleSlot(name, std::min(n, kMaxModuleName));
  }
  EventRecord r;
  r.ts = ReadTicks(clock_);
  if (test_clock_ != nullptr) {  // test costs (test_clock.h): lock-free, so safe here
    int64_t own_ns = 0;
    r.ts += test_clock_->Advance(static_cast<uint8_t>(EventKind::kCpuSample), 0, &own_ns);
  }
  r.value = ip;
  r.name = 0;  // the shared object: resolved on the flush thread (Resolve)
  r.category = module;  // its slot + 1 until Resolve interns it
  r.domain = weight_us;
  r.kind = static_cast<uint8_t>(EventKind::kCpuSample);
  r.flags = kFlagNone;
  r.reserved = 0;
  if (!ring->TryPush(r, /*privileged=*/true, /*counted=*/false)) {
    if (!calibrating) dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!calibrating) samples_.fetch_add(1, std::memory_order_relaxed);
}

int CpuSampler::Readable(const void* p, size_t n) {
  const auto* ranges = static_cast<const Range*>(tls_readable.ranges);
  const size_t size = tls_readable.size;
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  if (ranges == nullptr || a + n < a) return 0;
  size_t lo = 0, hi = size;  // the first range ending after a
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (ranges[mid].end <= a) lo = mid + 1;
    else hi = mid;
  }
  if (lo < size && ranges[lo].begin <= a && a + n <= ranges[lo].end) return 1;
  if (CpuSampler* s = installed_instance_.load(std::memory_order_acquire)) {
    s->readable_misses_.fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
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

void CpuSampler::Forward(int sig, siginfo_t* info, void* ucontext) {
  if ((previous_.sa_flags & SA_SIGINFO) != 0 && previous_.sa_sigaction != nullptr) {
    previous_.sa_sigaction(sig, info, ucontext);
  } else if (previous_.sa_handler == SIG_IGN) {
    // Ignored, as it was.
  } else if (previous_.sa_handler == SIG_DFL) {
    // As without us: a real-time signal's default action ends the process
    // (once this handler returns and the signal is unblocked).
    signal(sig, SIG_DFL);
    raise(sig);
  } else {
    previous_.sa_handler(sig);
  }
}

void CpuSampler::RefreshObjects(StringTable* strings) {
  struct Counters {
    uint64_t adds = 0, subs = 0;
  } counters;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
          static_cast<Counters*>(data)->adds = info->dlpi_adds;
          static_cast<Counters*>(data)->subs = info->dlpi_subs;
        }
        return 1;  // the first object carries the counters: stop
      },
      &counters);
  if (counters.adds == objects_adds_ && counters.subs == objects_subs_ && !objects_.empty()) return;
  objects_adds_ = counters.adds;
  objects_subs_ = counters.subs;
  struct Walk {
    std::vector<ObjectRange>* out;
    StringTable* strings;
    std::string exe;
  } walk{&objects_, strings, {}};
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  walk.exe = len > 0 ? std::string(exe, static_cast<size_t>(len)) : "(main executable)";
  objects_.clear();
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* w = static_cast<Walk*>(data);
        const char* name = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' ? info->dlpi_name : nullptr;
        const uint32_t id = w->strings->Intern(name != nullptr ? std::string_view(name) : std::string_view(w->exe));
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
          const uint64_t begin = info->dlpi_addr + ph.p_vaddr;
          w->out->push_back({begin, begin + ph.p_memsz, id});
        }
        return 0;
      },
      &walk);
  std::sort(objects_.begin(), objects_.end(), [](const ObjectRange& a, const ObjectRange& b) { return a.begin < b.begin; });
}

void CpuSampler::Resolve(ThreadBuffer* ring, size_t n, StringTable* strings) {
  if (n == 0) return;
  RefreshObjects(strings);
  ring->VisitPending(n, [&](EventRecord& r) {
    auto it = std::upper_bound(objects_.begin(), objects_.end(), r.value,
                               [](uint64_t ip, const ObjectRange& o) { return ip < o.begin; });
    r.name = it != objects_.begin() && r.value < std::prev(it)->end ? std::prev(it)->name : 0;
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

void CpuSampler::MaintainReadableMap(int64_t now_ns) {
  if (!installed_ || g_py_reader.load(std::memory_order_acquire) == nullptr) return;
  const uint64_t misses = readable_misses_.load(std::memory_order_relaxed);
  const int64_t age = now_ns - readable_at_ns_;
  if ((misses != misses_seen_ && age >= 100000000) || age >= 2000000000 || !readable_ready_) RefreshReadableMap();
}

void CpuSampler::RefreshReadableMap() {
  readable_at_ns_ = MonotonicNs();
  misses_seen_ = readable_misses_.load(std::memory_order_relaxed);
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  const int next = 1 - active_.load();
  // Nobody may be in the map to rewrite: handlers are short; give up this
  // round after a millisecond (the next flush tries again).
  for (int spin = 0; readers_[next].load() != 0; ++spin) {
    if (spin > 1000) return;
    std::this_thread::sleep_for(std::chrono::microseconds(1));
  }
  std::vector<Range>& out = readable_[next];
  out.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    unsigned long long begin = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(text.c_str() + pos, "%llx-%llx %4s", &begin, &end, perms) == 3 && perms[0] == 'r') {
      if (!out.empty() && out.back().end == begin) out.back().end = end;
      else out.push_back({begin, end});
    }
    pos = eol + 1;
  }
  readable_size_[next].store(out.size());
  active_.store(next);
  readable_ready_ = true;
}

}  // namespace rlscope
