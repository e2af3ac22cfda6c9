// CPU sampling for cross-stack attribution: what each thread of the process
// was running (which shared objects, from the interrupted one outwards; for
// Python, which module), driven by that thread's own CPU time, so the shares
// do not depend on machine load.
//
// Every thread is sampled: a thread that records events through its own
// state (its registry entry's SampledThread), every other thread (a torch or
// OpenMP pool, a data loader, NCCL's, Ray's, the collector's own) through a
// slot of its own (ForeignSlot), found by listing /proc/self/task at each
// flush while armed (a thread started in a window is sampled from the next
// flush on, cpu.threads: recording samples only the first kind). Each
// sampled thread gets a POSIX CPU-time timer (timer_create on its thread CPU
// clock, delivered to that thread alone: SIGEV_THREAD_ID, its cookie the
// thread's state or slot) that raises a real-time signal every
// 1/cpu.sampling_hz s of the thread's CPU time, armed only while the
// collector is armed (a capture window, a selected rank). The handler
// (OnSignal) records one kCpuSample into the thread's sample ring, its own
// SPSC ring apart from the event ring (a signal may land in the middle of a
// TryPush there): the objects of the thread's native stack (native_stack.h)
// and, when rlscope_ray registered a Python frame reader, the module of the
// thread's current Python frame, read with fault-proof reads only
// (safe_read.h): a frame it cannot read leaves the sample without a module,
// flagged kFlagFrameUnread and counted. The handler takes no lock and
// allocates nothing; its only system calls are the fault guard's two
// sigaction queries per sample (and process_vm_readv where reads go through
// the kernel: then the stack is not walked, the leaf alone names the code);
// it saves and restores errno.
//
// Everything else runs on the collector's flush thread: installing the
// handler and the fault guard, listing threads, creating, arming, disarming
// and deleting timers (Reconcile, ReconcileOthers, Release), the code map of
// the process's objects, naming objects, stacks and modules before the
// samples ship (Resolve).
//
// Where sampling cannot be set up safely it stays off and says why (the
// Hello label cpu_sampling): Linux before 5.11 or not x86-64 (there the
// kernel may raise a CPU timer's signal inside a system call, which could
// then fail with EINTR; from 5.11 on x86-64 the expiry is handled on the
// return to user space, so no system call is interrupted), no free real-time
// signal, timer_create refused. A host that installs its own handler for our
// signal later stops sampling (checked at every flush; every timer deleted
// then, the collector's own threads' too), said the same way;
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
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/native_stack.h"
#include "collector/rlscope_collector.h"
#include "collector/sampled_thread.h"
#include "native/clock.h"
#include "native/string_table.h"
#include "native/thread_buffer.h"

namespace rlscope {

class Arming;
class TestClock;

// A thread that records no events, sampled all the same. The handler finds
// it by its timer's cookie (the slot's address) and reads `ring` and
// `profiler`; the rest is the flush thread's.
struct ForeignSlot {
  std::atomic<ThreadBuffer*> ring{nullptr};
  std::atomic<bool> profiler{false};  // one of the collector's own threads
  int64_t tid = 0;                    // 0: free
  SampledThread sampled;
  bool present = false;        // in the last listing of the process's threads
  bool recording = false;      // it records events since: its state's timer samples it
  bool named = false;          // its name was shipped
  bool blocks = false;         // it blocks the sampler's signal (ZeroMQ's threads block all): no timer while it does
  int64_t seen_ns = 0;         // when it was first listed (MonotonicNs)
  int64_t blocks_look_ns = 0;  // when `blocks` is looked at again (a /proc read; NextBlocksLookNs)
  int64_t blocks_every_ns = 0;  // the wait before that look
};

// When a thread with no timer is looked at again for whether it blocks the
// sampler's signal, after a look at `now_ns` that found it did or not
// (`blocks`), the thread first listed at `seen_ns`; `every_ns` is the
// slot's wait, updated. In its first second, at every listing (a new
// thread blocks every signal for an instant); one that does not block it
// and still has no timer (none could be made), a second later. A thread that
// blocks it is looked at a second later, then twice as long after each look
// that finds it still blocking, up to `max_ns`: kBlocksLookMaxNs in steps
// not chosen up front, always on (ZeroMQ's and gRPC's threads block it for
// their lives, and re-reading their status every second was a tenth of an
// always-on flush thread's CPU), a second in steps chosen up front. One that
// stops blocking is sampled from the look after (at most `max_ns` later).
constexpr int64_t kBlocksLookMaxNs = 32'000'000'000;
int64_t NextBlocksLookNs(int64_t seen_ns, int64_t now_ns, bool blocks, int64_t max_ns, int64_t* every_ns);

class CpuSampler {
 public:
  // Samples per thread ring: at 10 kHz of CPU and a 20 ms flush, 200.
  static constexpr size_t kRingRecords = 4096;
  // Module names kept per process (the handler cannot allocate); a module
  // seen after the table is full is shipped unnamed (counted).
  static constexpr size_t kModuleSlots = 2048;
  static constexpr size_t kMaxModuleName = 117;
  // Threads that record no events, sampled at once; their rings' records
  // (at 1 kHz of CPU and a 20 ms flush, 20).
  static constexpr size_t kForeignSlots = 1024;
  static constexpr size_t kForeignRingRecords = 1024;

  // Records only while `arming` says the process is armed.
  // `wake_fd`: the flush thread's eventfd (-1 none), written by the handler
  // when a sample fills half of a thread's ring, as the hot path does for
  // events: the flush thread may be waiting a second when nothing happens.
  CpuSampler(const Arming* arming, ClockSource clock, TestClock* test_clock, int wake_fd = -1);
  ~CpuSampler();
  CpuSampler(const CpuSampler&) = delete;
  CpuSampler& operator=(const CpuSampler&) = delete;

  // Flush thread. Brings the thread's timer in line with `on` (sampling at
  // `hz`; creating it and its ring the first time), once Setup succeeded.
  // `state` is the thread's, `tid` its kernel id.
  void Reconcile(SampledThread* t, struct ThreadState* state, int64_t tid, bool on, int64_t hz);
  // Flush thread: deletes the thread's timer (it exited, or shutdown).
  void Release(SampledThread* t);
  // Flush thread, once Setup succeeded: every thread of the process listed
  // now (`tids`) that is not in `recording` (threads sampled through their
  // state) gets a slot and its timer in line with `on`; `own` are the
  // collector's threads (their samples are the profiler's). A slot whose
  // thread is gone is freed once its samples shipped. Threads past
  // kForeignSlots are not sampled (counted). A thread with no timer is
  // looked at for blocking the signal (a /proc read) as NextBlocksLookNs
  // says, `blocks_look_max_ns` its longest wait (`now_ns`: MonotonicNs).
  void ReconcileOthers(const std::vector<int64_t>& tids, const std::set<int64_t>& recording,
                       const std::set<int64_t>& own, bool on, int64_t hz, int64_t now_ns,
                       int64_t blocks_look_max_ns);
  // Flush thread: every slot's timer disarmed (outside windows; no listing).
  void DisarmOthers();
  // Flush thread: the slots in use (their rings ship with the flush; names
  // once, through `name`).
  template <typename Fn>
  void ForEachOther(Fn&& fn) {
    for (size_t i = 0; i < kForeignSlots && foreign_ != nullptr; ++i) {
      if (foreign_[i].tid != 0) fn(foreign_[i]);
    }
  }
  // Flush thread, once before any Reconcile that turns sampling on: checks
  // the kernel, finds a free signal, installs the handler, measures what a
  // sample costs. False (and why) when sampling cannot run here.
  bool Setup(std::string* why);
  bool set_up() const { return installed_; }
  // Flush thread, each flush while sampling may run: false once the host
  // replaced our handler (sampling then stops for good; `why` says so).
  bool StillOurs(std::string* why);
  // Flush thread: rewrites the first `n` pending samples of `ring` before
  // they ship: `name` the interned path of the shared object of the
  // interrupted instruction, `value` the interned chain of its callers'
  // objects (kFlagNativeStack; else 0), `category` the interned module
  // name. Interns into `strings`.
  void Resolve(ThreadBuffer* ring, size_t n, StringTable* strings);
  // Flush thread, each flush while armed: the code map in line with the
  // objects loaded now.
  void RefreshCode(StringTable* strings) { code_.Refresh(strings); }
  // Flush thread: how frames are read now, for the cpu_sampling label
  // ("guarded reads", or through the kernel and why).
  std::string FrameReads() const;

  // What a sample costs its thread, ns (Setup measures it; -1 before), and
  // of that what the handler's TakeSample took, the part handler_ticks()
  // times in place (the rest: the signal's delivery and return, and the
  // handler's dispatch); -1 under test costs.
  double sample_cost_ns() const { return sample_cost_ns_; }
  double sample_take_ns() const { return sample_take_ns_; }
  int signal_number() const { return signal_; }
  // Counters (any thread, relaxed: statistics).
  uint64_t samples() const { return samples_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t signals() const { return signals_.load(std::memory_order_relaxed); }
  uint64_t unnamed_modules() const { return unnamed_modules_.load(std::memory_order_relaxed); }
  uint64_t frames_unread() const { return frames_unread_.load(std::memory_order_relaxed); }
  uint64_t kernel_reads() const { return kernel_reads_.load(std::memory_order_relaxed); }
  // Samples whose native stack was walked: with a frame-pointer step, with
  // scanned return addresses, with the leaf's object alone; and samples not
  // walked (no code map yet, an unknown leaf, reads through the kernel).
  uint64_t walks_fp() const { return walks_fp_.load(std::memory_order_relaxed); }
  // Reads of the walks that failed: faults the guard caught, beside the
  // frame reader's (safe_read.h FaultGuard::faults counts both).
  uint64_t walk_faults() const { return walk_faults_.load(std::memory_order_relaxed); }
  uint64_t walks_scan() const { return walks_scan_.load(std::memory_order_relaxed); }
  uint64_t walks_leaf() const { return walks_leaf_.load(std::memory_order_relaxed); }
  uint64_t unwalked() const { return unwalked_.load(std::memory_order_relaxed); }
  // Threads the sampler could not take (more than kForeignSlots at once, a
  // timer refused); threads that block its signal now (their CPU is not
  // sampled, so coverage is below 1 by it).
  uint64_t threads_unsampled() const { return threads_unsampled_.load(std::memory_order_relaxed); }
  uint64_t threads_blocking() const { return threads_blocking_.load(std::memory_order_relaxed); }
  // The handler's own time per timed sample (recorded, not interrupted),
  // measured in place (clock ticks from its entry to its return, summed),
  // in ns: the flush thread converts it (UpdateHandlerNs with its
  // converter, which also sets the ceiling); -1 before any sample or while
  // the tick rate is not known.
  void UpdateHandlerNs(const TickConverter& converter);
  double handler_ns() const { return handler_ns_.load(std::memory_order_relaxed); }
  // The samples whose handler time is summed so far, and that sum in clock
  // ticks. Read in that order, the sum holds at least those samples' time
  // (a count goes up after its ticks are added): at most the handlers
  // running at that moment more. A handler that took over
  // kHandlerCeilingNs was interrupted (its thread preempted inside it): not
  // summed, counted (handlers_interrupted). Its usual time is microseconds.
  static constexpr int64_t kHandlerCeilingNs = 50'000;
  uint64_t timed_samples() const { return timed_samples_.load(std::memory_order_acquire); }
  uint64_t handler_ticks() const { return handler_ticks_.load(std::memory_order_relaxed); }
  uint64_t handlers_interrupted() const { return handlers_interrupted_.load(std::memory_order_relaxed); }
  int timers() const { return timers_.load(std::memory_order_relaxed); }

  // The frame reader rlscope_ray._native registers (rlscope_collector.h),
  // process-wide, whether a collector runs or not; "" when none. Replacing
  // or removing one returns once no handler is still in it (bounded).
  static void SetPythonReader(rlscope_py_module_reader_t reader, const char* what);
  static std::string PythonReaderName();

 private:
  static void OnSignal(int sig, siginfo_t* info, void* ucontext);
  // Setup, with the handler installed: sample_cost_ns_, sample_take_ns_ and
  // handler_ceiling_ticks_ (not under test costs).
  void MeasureSampleCost();
  // Records a sample into `ring` (signal handler; ring may be a scratch
  // one): the instruction `ucontext` was interrupted at, and its thread's
  // Python module when a frame reader is registered. False: not recorded
  // (the ring was full).
  bool TakeSample(ThreadBuffer* ring, const void* ucontext, uint32_t weight_us, uint8_t flags);
  // The timer of one thread (Reconcile): `cookie` is what the handler gets
  // (its state or slot), `ring_out` where the ring is published for it.
  void ReconcileTimer(SampledThread* t, void* cookie, std::atomic<ThreadBuffer*>* ring_out, int64_t tid, bool on,
                      int64_t hz);
  // The slot `cookie` points at, or null (handler).
  ForeignSlot* SlotOf(const void* cookie) const;
  // The module table's slot of `name` + 1, adding it; 0 when full (handler).
  uint32_t ModuleSlot(const char* name, size_t n);

  const Arming* const arming_;
  const ClockSource clock_;
  TestClock* const test_clock_;
  const int wake_fd_;
  bool installed_ = false;
  int signal_ = 0;
  struct sigaction previous_ {};
  std::atomic<int64_t> period_us_{1000};
  double sample_cost_ns_ = -1;
  double sample_take_ns_ = -1;
  std::atomic<uint64_t> samples_{0}, dropped_{0}, signals_{0}, unnamed_modules_{0};
  std::atomic<uint64_t> frames_unread_{0}, kernel_reads_{0};  // samples: a read failed; read through the kernel
  std::atomic<uint64_t> walks_fp_{0}, walks_scan_{0}, walks_leaf_{0}, unwalked_{0}, threads_unsampled_{0};
  std::atomic<uint64_t> threads_blocking_{0}, walk_faults_{0};
  std::atomic<uint64_t> handler_ticks_{0};  // summed over recorded samples
  std::atomic<uint64_t> timed_samples_{0};  // the samples in handler_ticks_
  std::atomic<uint64_t> handlers_interrupted_{0};
  // kHandlerCeilingNs in clock ticks: Setup's rate, then the flush thread's
  // converter's (UpdateHandlerNs); none before Setup.
  std::atomic<uint64_t> handler_ceiling_ticks_{UINT64_MAX};
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

  CodeMap code_;                                       // the process's code, for the handler's walks
  std::unique_ptr<ForeignSlot[]> foreign_;             // kForeignSlots, made by Setup
  std::unordered_map<int64_t, size_t> foreign_index_;  // tid -> slot (flush thread)

  static std::atomic<CpuSampler*> installed_instance_;
};

}  // namespace rlscope
