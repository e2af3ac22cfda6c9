// Fault-proof reads of memory the collector does not own, for signal
// handlers: the CPU sampler reading the interrupted thread's Python frames
// (cpu_sampler.h; the frame reader is python/bindings/py_frame.c). Such
// memory can be unmapped at any instant (a data-stack chunk CPython freed a
// moment ago, an arena returned to the system, garbage in a frame that is
// half set up), so no check made beforehand can make a plain load safe.
//
// SafeRead copies n bytes and says whether it could. It never faults,
// whatever address it is given, in one of two ways, chosen per sample
// (SafeReadScope):
//  - guarded: a copy routine whose loads may fault (GuardedCopy, a few
//    instructions of assembly) and a SIGSEGV/SIGBUS handler of ours
//    (FaultGuard) that sends a fault raised inside that routine to its
//    failure exit; nothing else. Costs a plain copy; used when, at the
//    sample, the guard is the first handler of both signals and the
//    interrupted code does not block them (checked at a sample's first
//    read: two sigaction queries).
//  - through the kernel: process_vm_readv on this process, which fails
//    with EFAULT where a load would fault. A system call per read; used
//    where the guard cannot be first (a host installed its own handler
//    after ours, the interrupted code blocks the signals, no guard on this
//    CPU).
//
// The guard coexists with the host's own handlers (Ray's, Python's
// faulthandler, a JVM's). Installed once, over whatever was there, it
// passes every fault that is not in GuardedCopy to that handler as the
// kernel would have (the same siginfo and context; for a default action,
// the fault is raised again with nothing of ours in the way). It runs on
// the alternate signal stack where the thread has one, so a host's stack
// overflow handler still gets its fault. A handler installed after ours
// comes first and is never displaced: reads then go through the kernel.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace rlscope {

// Process-wide; installed by the CPU sampler's Setup (flush thread).
class FaultGuard {
 public:
  // Installs the handlers once (idempotent). False, and why, where there is
  // no guarded copy for this CPU or sigaction refused.
  static bool Install(std::string* why);
  static bool Installed() { return installed_.load(std::memory_order_acquire); }
  // Whether a fault in GuardedCopy reaches our handler right now: installed,
  // the first handler of SIGSEGV and SIGBUS, and neither blocked in
  // `interrupted` (a signal handler's ucontext_t; nullptr: the caller's own
  // mask is not checked). Async-signal-safe (sigaction queries).
  static bool First(const void* interrupted);
  // Faults GuardedCopy met and turned into failed reads (relaxed: a count).
  static uint64_t faults() { return faults_.load(std::memory_order_relaxed); }

 private:
  static void OnFault(int sig, siginfo_t* info, void* ucontext);
  static std::atomic<bool> installed_;
  static std::atomic<uint64_t> faults_;
};

// Hands a signal our handler took to the handler that was there before
// ours, as the kernel would have: its SA_SIGINFO or plain handler, ignored
// if it was ignored, the default action if it had none (a fault the kernel
// raised is raised again by the faulting instruction; any other signal is
// re-sent). Async-signal-safe.
void PassToPrevious(const struct sigaction& previous, int sig, siginfo_t* info, void* ucontext);

// How the reads of one sample are made, for the sampled thread's handler.
// Not reentrant per thread (a sampler signal does not nest in itself).
class SafeReadScope {
 public:
  // `interrupted`: the handler's ucontext_t.
  explicit SafeReadScope(const void* interrupted);
  ~SafeReadScope();
  SafeReadScope(const SafeReadScope&) = delete;
  SafeReadScope& operator=(const SafeReadScope&) = delete;
  // A read in this scope could not be made (the memory was not readable).
  bool failed() const;
  // The reads went through the kernel (the guard was not first); false
  // when nothing was read.
  bool through_kernel() const;
  // Whether reads in this scope are guarded loads (deciding the mode now
  // if no read did yet: the two sigaction queries).
  bool guarded();
};

// The read handed to frame readers (rlscope_safe_read_t in
// rlscope_collector.h): copies n bytes from src to dst and returns 1, or
// returns 0 (dst undefined) when any of them cannot be read; never faults.
// Outside a SafeReadScope it reads nothing and returns 0.
int SafeRead(void* dst, const void* src, size_t n);

}  // namespace rlscope
