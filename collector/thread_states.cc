#include "collector/thread_states.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "native/clock.h"

namespace rlscope {
namespace {

std::atomic<uint64_t> g_gil_begin{0}, g_gil_end{0};

// Why a thread waits in system call `nr` with first argument `arg0`
// (x86-64 numbers).
OffCpuReason SyscallReason(long nr, uint64_t arg0, uint64_t gil_begin, uint64_t gil_end) {
#if defined(__x86_64__)
  switch (nr) {
    case 202:  // futex
    case 449:  // futex_waitv
      return nr == 202 && arg0 >= gil_begin && arg0 < gil_end ? OffCpuReason::kGil : OffCpuReason::kLock;
    case 7:
    case 23:
    case 232:
    case 270:
    case 271:
    case 281:
    case 441:  // poll select epoll_wait pselect6 ppoll epoll_pwait(2)
      return OffCpuReason::kPoll;
    case 0:
    case 1:
    case 17:
    case 18:
    case 19:
    case 20:
    case 42:
    case 43:
    case 44:
    case 45:
    case 46:
    case 47:
    case 74:
    case 75:
    case 257:
    case 288:
    case 295:
    case 296:
    case 299:
    case 307:
    case 208:
    case 426:
      // read write pread pwrite readv writev connect accept sendto recvfrom sendmsg recvmsg fsync fdatasync
      // openat accept4 preadv pwritev recvmmsg sendmmsg io_getevents io_uring_enter
      return OffCpuReason::kIo;
    case 35:
    case 230:  // nanosleep clock_nanosleep
      return OffCpuReason::kSleep;
    default: return OffCpuReason::kOther;
  }
#else
  (void)nr;
  (void)arg0;
  (void)gil_begin;
  (void)gil_end;
  return OffCpuReason::kOther;
#endif
}

}  // namespace

ThreadLook ClassifyThread(const std::string& stat, const std::string& syscall, uint64_t gil_begin, uint64_t gil_end) {
  ThreadLook look;
  // "tid (comm) S ...": the state follows the last ')' (comm may hold one).
  const size_t close = stat.rfind(')');
  const char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 'R';
  if (state == 'R' || stat.empty()) {
    look.running = true;
    return look;
  }
  long nr = -1;
  unsigned long long arg0 = 0;
  if (!syscall.empty() && syscall.compare(0, 7, "running") != 0) {
    if (std::sscanf(syscall.c_str(), "%ld 0x%llx", &nr, &arg0) < 1) nr = -1;
  }
  look.reason = nr >= 0 ? SyscallReason(nr, arg0, gil_begin, gil_end) : OffCpuReason::kOther;
  if (state == 'D' && look.reason == OffCpuReason::kOther) look.reason = OffCpuReason::kIo;
  return look;
}

ThreadStates::ThreadStates(CollectorContext& ctx, Recording& recording) : ctx_(ctx), recording_(recording) {
  SetHz(ctx.own.config.cpu.off_cpu_hz);
}

void ThreadStates::SetGil(const void* begin, uint64_t size) {
  const auto b = reinterpret_cast<uint64_t>(begin);
  g_gil_begin.store(b, std::memory_order_relaxed);
  g_gil_end.store(begin != nullptr ? b + size : 0, std::memory_order_relaxed);
}

void ThreadStates::Push(int64_t tid, OffCpuReason reason, int64_t weight_ns, uint64_t ticks, int64_t interval_ns) {
  EventRecord r{};
  r.ts = ticks;
  r.value = static_cast<uint64_t>(tid);
  r.name = static_cast<uint32_t>(std::clamp<int64_t>(interval_ns / 1000, 0, UINT32_MAX));  // PushWait keeps it under
  r.category = static_cast<uint32_t>(reason);
  r.domain = static_cast<uint32_t>(std::clamp<int64_t>(weight_ns / 1000, 0, UINT32_MAX));
  r.kind = static_cast<uint8_t>(EventKind::kOffCpuSample);
  if (!ring_->TryPush(r, /*privileged=*/true, /*counted=*/false)) dropped_.fetch_add(1, std::memory_order_relaxed);
}

void ThreadStates::Flush(bool armed, int64_t wait_ns, bool waits_now) {
  if (!armed) {
    // A window that just closed (or a barrier after it): the run-queue waits
    // up to now, so the step that closed it gets its share before it is cut.
    if (waits_now && hz_.load(std::memory_order_relaxed) > 0 && ring_ != nullptr) {
      ReadWaits(MonotonicNs(), ReadTicks(ctx_.clock_source));
    }
    // The next window starts afresh: no off-CPU reason's time spans a gap in
    // looking. The run-queue wait keeps its reading: the aggregator spreads
    // the next one over the whole time since it, gap included, so the
    // window's first step still gets its share.
    // Nothing is held open between windows.
    for (auto& [tid, seen] : seen_) {
      seen.ForgetLook();
      seen.CloseFiles();
    }
    return;
  }
  if (ring_ == nullptr) ring_ = std::make_unique<ThreadBuffer>(static_cast<int64_t>(syscall(SYS_gettid)), kRingRecords);
  const uint64_t ticks = ReadTicks(ctx_.clock_source);
  timespec cpu{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0) {  // every armed flush: coverage's denominator
    EventRecord r{};
    r.ts = ticks;
    r.value = static_cast<uint64_t>(cpu.tv_sec) * 1000000000ull + static_cast<uint64_t>(cpu.tv_nsec);
    r.kind = static_cast<uint8_t>(EventKind::kProcessCpu);
    if (!ring_->TryPush(r, true, false)) dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  const int64_t hz = hz_.load(std::memory_order_relaxed);
  const int64_t now = MonotonicNs();
  if (hz <= 0) return;
  if (now < next_look_ns_) {  // not due: the waits alone when asked
    if (waits_now) ReadWaits(now, ticks);
    return;
  }
  const int64_t period = 1000000000 / hz;
  next_look_ns_ = now + period * 9 / 10;  // a flush a little early still looks
  Look(now, period, 4 * std::max(period, wait_ns), ticks);
}

ThreadStates::Seen& ThreadStates::SeenOf(int64_t tid) {
  auto [it, added] = seen_.try_emplace(tid);
  if (added) {
    const std::string dir = "/proc/self/task/" + std::to_string(tid) + "/";
    it->second.schedstat = KeptProcFile(dir + "schedstat");
    it->second.stat = KeptProcFile(dir + "stat");
    it->second.syscall = KeptProcFile(dir + "syscall");
    it->second.keep = kept_ < kKeptThreads;
    if (it->second.keep) ++kept_;
  }
  return it->second;
}

std::map<int64_t, ThreadStates::Seen>::iterator ThreadStates::Forget(std::map<int64_t, Seen>::iterator it) {
  if (it->second.keep) --kept_;
  return seen_.erase(it);  // its files close with it
}

void ThreadStates::ReadWaits(int64_t now, uint64_t ticks) {
  for (auto it = seen_.begin(); it != seen_.end();) {
    long long cpu_ns = 0, delay_ns = 0;
    if (std::sscanf(it->second.schedstat.Read().c_str(), "%lld %lld", &cpu_ns, &delay_ns) != 2) {
      it = Forget(it);  // gone: its id may come back as another thread's
      continue;
    }
    PushWait(it->first, delay_ns, now, ticks, &it->second);
    ++it;
  }
}

void ThreadStates::PushWait(int64_t tid, int64_t delay_ns, int64_t now, uint64_t ticks, Seen* seen) {
  // The interval travels in 32 bits of microseconds (about 71 minutes): a
  // reading older than that starts afresh rather than spread its wait too thin.
  const bool recent = now - seen->delay_read_ns <= static_cast<int64_t>(UINT32_MAX) * 1000;
  if (recent && seen->run_delay_ns >= 0 && delay_ns > seen->run_delay_ns) {
    Push(tid, OffCpuReason::kCpuWait, delay_ns - seen->run_delay_ns, ticks, now - seen->delay_read_ns);
  }
  seen->run_delay_ns = delay_ns;
  seen->delay_read_ns = now;
}

void ThreadStates::Look(int64_t now, int64_t period, int64_t max_weight, uint64_t ticks) {
  ++look_;
  looks_.fetch_add(1, std::memory_order_relaxed);
  std::vector<int64_t> tids;
  recording_.ForEachThread([&](ThreadEntry& t) {
    if (!t.exited.load(std::memory_order_acquire)) tids.push_back(t.buffer->tid());
  });
  const uint64_t gil_begin = g_gil_begin.load(std::memory_order_relaxed),
                 gil_end = g_gil_end.load(std::memory_order_relaxed);
  for (int64_t tid : tids) {
    Seen& seen = SeenOf(tid);
    const int64_t weight = seen.last_ns == 0 ? period : std::min(now - seen.last_ns, max_weight);
    seen.last_ns = now;
    seen.look = look_;
    // schedstat first: its CPU time and run-queue wait (exact).
    const std::string sched = seen.schedstat.Read();
    long long cpu_ns = 0, delay_ns = 0;
    const bool timed =
        std::sscanf(sched.c_str(), "%lld %lld", &cpu_ns, &delay_ns) == 2;  // false: gone, or no schedstat
    // Files not kept, or of a thread that may be gone (its id may come back
    // as another's: each is opened again at its next read), close after
    // this look.
    struct Closing {
      Seen& seen;
      bool now;
      ~Closing() {
        if (now) seen.CloseFiles();
      }
    } closing{seen, !timed || !seen.keep};
    // A thread that has not run since it was last seen waiting still waits
    // where it did: that look's reason again, with no more reads.
    if (timed && seen.waiting && cpu_ns == seen.cpu_ns) {
      Push(tid, seen.reason, weight, ticks);
    } else {
      const std::string stat = seen.stat.Read();
      if (stat.empty()) continue;  // gone
      std::string sys;
      const size_t close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'R') {
        sys = seen.syscall.Read();
      }
      const ThreadLook look = ClassifyThread(stat, sys, gil_begin, gil_end);
      if (!look.running) Push(tid, look.reason, weight, ticks);
      seen.waiting = !look.running;
      seen.reason = look.reason;
    }
    seen.cpu_ns = timed ? cpu_ns : -1;
    if (timed) PushWait(tid, delay_ns, now, ticks, &seen);
  }
  for (auto it = seen_.begin(); it != seen_.end();) {  // threads gone
    it = it->second.look != look_ ? Forget(it) : std::next(it);
  }
}

void ThreadStates::Take(Outgoing* out) {
  if (ring_ != nullptr && ring_->size() > 0) out->threads.push_back({ring_.get(), ring_->size()});
}

}  // namespace rlscope
