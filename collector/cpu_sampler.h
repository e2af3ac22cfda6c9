// CPU sampling for cross-stack attribution: what each profiled thread was
// running (which shared object; for Python, which module), driven by that
// thread's own CPU time, so the shares do not depend on machine load.
//
// Each registered thread gets a POSIX CPU-time timer (timer_create on its
// thread CPU clock, delivered to that thread alone: SIGEV_THREAD_ID) that
// raises a real-time signal every 1/cpu.sampling_hz s of the thread's CPU
// time, armed only while the collector is armed (a capture window, a
// selected rank). The handler (OnSignal) records one kCpuSample into the
// thread's sample ring, its own SPSC ring apart from the event ring (a signal
// may land in the middle of a TryPush there): the interrupted instruction's
// address and, when rlscope_ray registered a Python frame reader, the module
// of the thread's current Python frame, read with fault-proof reads only
// (safe_read.h): a frame it cannot read leaves the sample without a module,
// flagged kFlagFrameUnread and counted. The handler takes no lock and
// allocates nothing; its only system calls are the fault guard's two
// sigaction queries per sample with a frame reader (and process_vm_readv
// where reads go through the kernel); it saves and restores errno.
//
// Everything else runs on the collector's flush thread: installing the
// handler and the fault guard, creating, arming, disarming and deleting
// timers (Reconcile, Release), resolving addresses to shared objects and
// interning module names before the samples ship (Resolve).
//
// Where sampling cannot be set up safely it stays off and says why (the
// Hello label cpu_sampling): Linux before 5.11 or not x86-64 (there the
// kernel may raise a CPU timer's signal inside a system call, which could
// then fail with EINTR; from 5.11 on x86-64 the expiry is handled on the
// return to user space, so no system call is interrupted), no free real-time
// signal, timer_create refused. A host that installs its own handler for our
// signal later stops sampling (checked at every flush), said the same way;
// a signal that is not our timer's (sent by someone else) goes to the
// handler that was there before ours, or, if there was none, takes the
// default action, as without us.
#pragma once

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/rlscope_collector.h"
#include "native/clock.h"
#include "native/string_table.h"
#include "native/thread_buffer.h"

namespace rlscope {

class Arming;
class TestClock;

// One profiled thread's sampling state, owned by its registry entry; the
// flush thread alone touches it (the handler reaches the ring through the
// thread's ThreadState::sample_ring).
struct SampledThread {
  std::unique_ptr<ThreadBuffer> ring;  // created with the timer
  timer_t timer{};
  bool has_timer = false;
  bool armed = false;
  int64_t hz = 0;       // the rate it is armed at
  bool failed = false;  // timer_create refused: this thread is not sampled
};

class CpuSampler {
 public:
  // Samples per thread ring: at 10 kHz of CPU and a 20 ms flush, 200.
  static constexpr size_t kRingRecords = 4096;
  // Module names kept per process (the handler cannot allocate); a module
  // seen after the table is full is shipped unnamed (counted).
  static constexpr size_t kModuleSlots = 2048;
  static constexpr size_t kMaxModuleName = 117;

  // Records only while `arming` says the process is armed.
  CpuSampler(const Arming* arming, ClockSource clock, TestClock* test_clock);
  ~CpuSampler();
  CpuSampler(const CpuSampler&) = delete;
  CpuSampler& operator=(const CpuSampler&) = delete;

  // Flush thread. Brings the thread's timer in line with `on` (sampling at
  // `hz`; creating it and its ring the first time), once Setup succeeded.
  // `state` is the thread's, `tid` its kernel id.
  void Reconcile(SampledThread* t, struct ThreadState* state, int64_t tid, bool on, int64_t hz);
  // Flush thread: deletes the thread's timer (it exited, or shutdown).
  void Release(SampledThread* t);
  // Flush thread, once before any Reconcile that turns sampling on: checks
  // the kernel, finds a free signal, installs the handler, measures what a
  // sample costs. False (and why) when sampling cannot run here.
  bool Setup(std::string* why);
  bool set_up() const { return installed_; }
  // Flush thread, each flush while sampling may run: false once the host
  // replaced our handler (sampling then stops for good; `why` says so).
  bool StillOurs(std::string* why);
  // Flush thread: rewrites the first `n` pending samples of `ring` before
  // they ship: `name` the interned path of the shared object holding the
  // address, `category` the interned module name. Interns into `strings`.
  void Resolve(ThreadBuffer* ring, size_t n, StringTable* strings);
  // Flush thread: how frames are read now, for the cpu_sampling label
  // ("guarded reads", or through the kernel and why).
  std::string FrameReads() const;

  // What a sample costs its thread, ns (Setup measures it; -1 before).
  double sample_cost_ns() const { return sample_cost_ns_; }
  int signal_number() const { return signal_; }
  // Counters (any thread, relaxed: statistics).
  uint64_t samples() const { return samples_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t signals() const { return signals_.load(std::memory_order_relaxed); }
  uint64_t unnamed_modules() const { return unnamed_modules_.load(std::memory_order_relaxed); }
  uint64_t frames_unread() const { return frames_unread_.load(std::memory_order_relaxed); }
  uint64_t kernel_reads() const { return kernel_reads_.load(std::memory_order_relaxed); }
  // The handler's own time per recorded sample, measured in place (clock
  // ticks from its entry to its return, summed), in ns: the flush thread
  // converts it (UpdateHandlerNs with its converter); -1 before any sample
  // or while the tick rate is not known.
  void UpdateHandlerNs(const TickConverter& converter);
  double handler_ns() const { return handler_ns_.load(std::memory_order_relaxed); }
  int timers() const { return timers_.load(std::memory_order_relaxed); }

  // The frame reader rlscope_ray._native registers (rlscope_collector.h),
  // process-wide, whether a collector runs or not; "" when none. Replacing
  // or removing one returns once no handler is still in it (bounded).
  static void SetPythonReader(rlscope_py_module_reader_t reader, const char* what);
  static std::string PythonReaderName();

 private:
  static void OnSignal(int sig, siginfo_t* info, void* ucontext);
  // Records a sample into `ring` (signal handler; ring may be a scratch
  // one): the instruction `ucontext` was interrupted at, and its thread's
  // Python module when a frame reader is registered. False: not recorded
  // (the ring was full).
  bool TakeSample(ThreadBuffer* ring, const void* ucontext, uint32_t weight_us);
  // The module table's slot of `name` + 1, adding it; 0 when full (handler).
  uint32_t ModuleSlot(const char* name, size_t n);
  void RefreshObjects(StringTable* strings);

  const Arming* const arming_;
  const ClockSource clock_;
  TestClock* const test_clock_;
  bool installed_ = false;
  int signal_ = 0;
  struct sigaction previous_ {};
  std::atomic<int64_t> period_us_{1000};
  double sample_cost_ns_ = -1;
  std::atomic<uint64_t> samples_{0}, dropped_{0}, signals_{0}, unnamed_modules_{0};
  std::atomic<uint64_t> frames_unread_{0}, kernel_reads_{0};  // samples: a read failed; read through the kernel
  std::atomic<uint64_t> handler_ticks_{0};                   // summed over recorded samples
  std::atomic<double> handler_ns_{-1};
  std::atomic<int> timers_{0};

  // Module names: filled by handlers (any sampled thread), read by the
  // flush thread. A slot is claimed by a CAS on `key` (the name's hash),
  // then written, then published by `ready` (release).
  struct ModuleEntry {
    std::atomic<uint64_t> key{0};
    std::atomic<uint8_t> ready{0};
    uint8_t length = 0;
    char name[kMaxModuleName + 1] = {};
  };
  std::unique_ptr<ModuleEntry[]> modules_;
  std::vector<uint32_t> module_ids_;  // flush thread: slot -> interned id (0 not yet)

  // Shared objects' executable segments, sorted (flush thread).
  struct ObjectRange {
    uint64_t begin, end;
    uint32_t name;
  };
  std::vector<ObjectRange> objects_;
  uint64_t objects_adds_ = ~uint64_t{0}, objects_subs_ = ~uint64_t{0};

  static std::atomic<CpuSampler*> installed_instance_;
};

}  // namespace rlscope
