#include "collector/safe_read.h"

#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>

namespace rlscope {

#if defined(__x86_64__)
// GuardedCopy(dst, src, n): 1 when all n bytes were copied, 0 when a load
// faulted. Every load from src is inside [rlscope_guarded_copy,
// rlscope_guarded_copy_fault); FaultGuard::OnFault resumes a fault there at
// rlscope_guarded_copy_fault, which returns 0. Words while 8 bytes are
// left, then bytes: never a byte past src + n.
extern "C" {
int rlscope_guarded_copy(void* dst, const void* src, size_t n);
extern const char rlscope_guarded_copy_fault[];
}
asm(R"(
  .text
  .p2align 4
  .globl rlscope_guarded_copy
  .hidden rlscope_guarded_copy
  .type rlscope_guarded_copy, @function
rlscope_guarded_copy:
  xorl %ecx, %ecx
1:
  leaq 8(%rcx), %r8
  cmpq %rdx, %r8
  ja 2f
  movq (%rsi,%rcx), %rax
  movq %rax, (%rdi,%rcx)
  movq %r8, %rcx
  jmp 1b
2:
  cmpq %rdx, %rcx
  jae 3f
  movzbl (%rsi,%rcx), %eax
  movb %al, (%rdi,%rcx)
  incq %rcx
  jmp 2b
3:
  movl $1, %eax
  ret
  .globl rlscope_guarded_copy_fault
  .hidden rlscope_guarded_copy_fault
rlscope_guarded_copy_fault:
  xorl %eax, %eax
  ret
  .size rlscope_guarded_copy, .-rlscope_guarded_copy
)");
constexpr bool kHaveGuardedCopy = true;
#else
constexpr bool kHaveGuardedCopy = false;
#endif

std::atomic<bool> FaultGuard::installed_{false};
std::atomic<uint64_t> FaultGuard::faults_{0};

namespace {

constexpr int kGuardedSignals[2] = {SIGSEGV, SIGBUS};
// The handlers ours replaced, per kGuardedSignals entry: written before ours is
// installed, never after (a host handler installed later is above ours and
// reaches us, if at all, through its own chaining).
struct sigaction g_previous[2];

int GuardedIndex(int sig) { return sig == SIGBUS ? 1 : 0; }

// kPending: in a scope, the mode not decided yet (at the first read: a
// sample whose reader reads nothing pays no sigaction queries).
enum class ReadMode : uint8_t { kNone, kPending, kGuarded, kKernel };
struct ReadState {
  ReadMode mode = ReadMode::kNone;
  bool failed = false;
  const void* interrupted = nullptr;  // the scope's ucontext_t
};
// The sampled thread's scope (its signal handler's), initial-exec: no
// allocation, async-signal-safe.
thread_local ReadState tls_read __attribute__((tls_model("initial-exec")));

bool KernelCopy(void* dst, const void* src, size_t n) {
  if (n == 0) return true;
  iovec local{dst, n};
  iovec remote{const_cast<void*>(src), n};
  const int saved = errno;
  // getpid each time: a forked child must never read its parent.
  const ssize_t got = process_vm_readv(static_cast<pid_t>(syscall(SYS_getpid)), &local, 1, &remote, 1, 0);
  errno = saved;
  return got == static_cast<ssize_t>(n);
}

}  // namespace

bool FaultGuard::Install(std::string* why) {
  if (installed_.load(std::memory_order_acquire)) return true;
  if (!kHaveGuardedCopy) {
    *why = "no guarded copy on this CPU";
    return false;
  }
  for (int i = 0; i < 2; ++i) {
    const int sig = kGuardedSignals[i];
    struct sigaction before {};
    if (sigaction(sig, nullptr, &before) != 0) {
      *why = "sigaction refused";
      return false;
    }
    g_previous[i] = before;
    struct sigaction ours {};
    ours.sa_sigaction = &FaultGuard::OnFault;
    // As the handler we replace ran: its mask, its NODEFER and RESTART; on
    // the alternate stack where the thread has one (a stack overflow's
    // fault cannot be handled on the stack that overflowed).
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
      ours.sa_flags |= before.sa_flags & (SA_NODEFER | SA_RESTART);
      ours.sa_mask = before.sa_mask;
    } else {
      sigemptyset(&ours.sa_mask);
    }
    struct sigaction replaced {};
    if (sigaction(sig, &ours, &replaced) != 0) {
      *why = "sigaction refused";
      return false;
    }
    g_previous[i] = replaced;  // the same unless a host changed it in between
  }
  installed_.store(true, std::memory_order_release);
  return true;
}

bool FaultGuard::First(const void* interrupted) {
  if (!installed_.load(std::memory_order_acquire)) return false;
  if (interrupted != nullptr) {
    // A fault while its signal is blocked is not delivered: the kernel
    // ends the process.
    const sigset_t& mask = static_cast<const ucontext_t*>(interrupted)->uc_sigmask;
    if (sigismember(&mask, SIGSEGV) == 1 || sigismember(&mask, SIGBUS) == 1) return false;
  }
  for (int sig : kGuardedSignals) {
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) != 0) return false;
    if ((now.sa_flags & SA_SIGINFO) == 0 || now.sa_sigaction != &FaultGuard::OnFault) return false;
  }
  return true;
}

void FaultGuard::OnFault(int sig, siginfo_t* info, void* ucontext) {
#if defined(__x86_64__)
  auto* uc = static_cast<ucontext_t*>(ucontext);
  const auto pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  // A fault the kernel raised (si_code > 0) inside the routine's loads.
  if (info != nullptr && info->si_code > 0 && pc >= reinterpret_cast<uintptr_t>(&rlscope_guarded_copy) &&
      pc < reinterpret_cast<uintptr_t>(rlscope_guarded_copy_fault)) {
    uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(reinterpret_cast<uintptr_t>(rlscope_guarded_copy_fault));
    faults_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
#endif
  PassToPrevious(g_previous[GuardedIndex(sig)], sig, info, ucontext);
}

void PassToPrevious(const struct sigaction& previous, int sig, siginfo_t* info, void* ucontext) {
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    if ((previous.sa_flags & SA_RESETHAND) != 0) signal(sig, SIG_DFL);  // as its delivery would have
    previous.sa_sigaction(sig, info, ucontext);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    if ((previous.sa_flags & SA_RESETHAND) != 0) signal(sig, SIG_DFL);
    previous.sa_handler(sig);
    return;
  }
  // A synchronous fault the kernel raised is raised again when its
  // instruction runs again, now with the default action (the kernel does
  // not let a program ignore one either): the process ends as it would
  // have, with the same siginfo in its core.
  const bool fault = info != nullptr && info->si_code > 0 &&
                     (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP);
  if (fault) {
    signal(sig, SIG_DFL);
    return;
  }
  if (previous.sa_handler == SIG_IGN) return;  // ignored, as it was
  // Default action: for the signals we take, the process ends (once this
  // handler returns and the signal is unblocked).
  signal(sig, SIG_DFL);
  raise(sig);
}

SafeReadScope::SafeReadScope(const void* interrupted) {
  tls_read.failed = false;
  tls_read.interrupted = interrupted;
  tls_read.mode = ReadMode::kPending;
}

SafeReadScope::~SafeReadScope() { tls_read.mode = ReadMode::kNone; }

bool SafeReadScope::failed() const { return tls_read.failed; }

bool SafeReadScope::through_kernel() const { return tls_read.mode == ReadMode::kKernel; }

bool SafeReadScope::guarded() {
  ReadState& s = tls_read;
  if (s.mode == ReadMode::kPending) s.mode = FaultGuard::First(s.interrupted) ? ReadMode::kGuarded : ReadMode::kKernel;
  return s.mode == ReadMode::kGuarded;
}

int SafeRead(void* dst, const void* src, size_t n) {
  ReadState& s = tls_read;
  if (s.mode == ReadMode::kPending) s.mode = FaultGuard::First(s.interrupted) ? ReadMode::kGuarded : ReadMode::kKernel;
  bool ok = false;
  switch (s.mode) {
#if defined(__x86_64__)
    case ReadMode::kGuarded: ok = rlscope_guarded_copy(dst, src, n) != 0; break;
#endif
    case ReadMode::kKernel: ok = KernelCopy(dst, src, n); break;
    default: break;
  }
  if (!ok) s.failed = true;
  return ok ? 1 : 0;
}

}  // namespace rlscope
