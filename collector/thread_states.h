// Off-CPU sampling as a unit of the collector: why the recording threads
// (those whose ranges make the sub-tasks) are not running, and the process's
// CPU time, looked at from the flush thread, never from the host's threads.
//
// At each flush while armed, at most cpu.off_cpu_hz times a second, for each
// recording thread:
//  - /proc/self/task/<tid>/stat: its state. A thread not running (S, D, t)
//    is recorded as a kOffCpuSample with its reason, from the system call it
//    waits in (/proc/self/task/<tid>/syscall): a futex on the interpreter's
//    GIL (the address range rlscope_ray registers) is gil, another futex
//    lock, poll/select/epoll poll, read/write/send/receive/open/sync and the
//    D state io, nanosleep sleep, anything else other. The sample stands for
//    the wall time since the thread was last looked at (at most 4 looks'
//    worth, or 4 of the flush thread's waits while nothing happens), so the
//    reasons' times are sampled as CPU time is.
//  - /proc/self/task/<tid>/schedstat: the time it waited on a run queue
//    (runnable, no CPU) since it was last read, exact, recorded as reason
//    cpu_wait with the time since that reading (the aggregator spreads the
//    wait over it and gives a step its share). Between looks, every flush in a
//    chosen step, the one that closes a window and a barrier's read the
//    waits alone (schedstat only, one read per recording thread at every
//    such flush whatever cpu.off_cpu_hz, unless 0): the aggregator may cut a
//    chosen step at the first flush that passed its end, and that one has
//    its waits. A window's first reading covers the gap before it (the
//    reading is kept across windows); the aggregator spreads it evenly.
// And one kProcessCpu counter (CLOCK_PROCESS_CPUTIME_ID) per look: the
// process's own CPU time, every thread's, against which the aggregator
// states the CPU samples' coverage.
//
// The records go to one ring of the flush thread's (it writes and drains
// it), shipped as a block of their own; each names its thread in `value`.
// A look costs three reads of /proc per recording thread (through files
// kept open while the thread is looked at), one (schedstat)
// for a thread that has not run since it was last seen waiting: it still
// waits where it did (a thread woken and still waiting for a CPU has not
// run either: that wait counts under its old reason too, besides cpu_wait). System call numbers are x86-64's (elsewhere
// every wait is other). CUDA synchronisation is the aggregator's: an off-CPU sample inside a CUDA API call CUPTI traced
// (attribution.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "collector/context.h"
#include "collector/proc_self.h"
#include "collector/recording.h"
#include "collector/transport.h"
#include "native/event.h"
#include "native/thread_buffer.h"

namespace rlscope {

// What a thread was doing when looked at, from its /proc files' text.
struct ThreadLook {
  bool running = false;  // state R: on a CPU or on a run queue
  OffCpuReason reason = OffCpuReason::kOther;
};
// Pure (tests): `stat` is /proc/<tid>/stat's line, `syscall` its syscall
// file's ("" unread); `gil` the GIL's address range [begin, end).
ThreadLook ClassifyThread(const std::string& stat, const std::string& syscall, uint64_t gil_begin, uint64_t gil_end);

class ThreadStates {
 public:
  static constexpr size_t kRingRecords = 8192;

  explicit ThreadStates(CollectorContext& ctx, Recording& recording);

  // cpu.off_cpu_hz of the config that applies (0: off).
  void SetHz(int64_t hz) { hz_.store(hz, std::memory_order_relaxed); }
  // Flush thread, each flush: while armed, the process's CPU time, and a
  // look at the recording threads when one is due. `wait_ns`: how long the
  // flush thread waited before this flush (it waits longer while nothing
  // happens): a look stands for at most four such waits or four periods.
  // `waits_now`: when no look is due (or disarmed), read the run-queue
  // waits of the threads looked at before (a flush in or just after a
  // chosen step: the aggregator may cut the step at any flush that passed
  // its end, and its waits up to its end are then in).
  void Flush(bool armed, int64_t wait_ns, bool waits_now = false);
  // Flush thread: this flush's records, as a block of the flush thread's.
  void Take(Outgoing* out);
  uint64_t looks() const { return looks_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // The interpreter's GIL (rlscope_set_py_gil), process-wide.
  static void SetGil(const void* begin, uint64_t size);

 private:
  struct Seen {
    int64_t last_ns = 0;        // when last looked at (0 never)
    int64_t run_delay_ns = -1;  // schedstat's run delay at delay_read_ns
    int64_t delay_read_ns = 0;  // kept across windows (Flush)
    int64_t cpu_ns = -1;        // schedstat's CPU time then
    bool waiting = false;       // it was off CPU then, for `reason`
    OffCpuReason reason = OffCpuReason::kOther;
    uint64_t look = 0;  // the look it was last seen in
    // Its /proc files (proc_self.h), kept open between looks while `keep`:
    // an open and a close were most of a look's cost. Closed with its
    // entry, when a window closes, when its thread is found gone, and after
    // each look when not `keep`.
    KeptProcFile schedstat, stat, syscall;
    bool keep = false;
    void CloseFiles() {
      schedstat.Close();
      stat.Close();
      syscall.Close();
    }
    // What a look knew, forgotten (a window closed); the run delay is kept.
    void ForgetLook() {
      last_ns = 0;
      cpu_ns = -1;
      waiting = false;
      reason = OffCpuReason::kOther;
      look = 0;
    }
  };
  // Threads whose files are kept open: at most three descriptors each, for
  // the first kKeptThreads recording threads (a host with many keeps its
  // low descriptors: select() takes none above 1024); the rest open and
  // close them at each look, as before.
  static constexpr size_t kKeptThreads = 16;
  // The entry of thread `tid`, its files named when it is new.
  Seen& SeenOf(int64_t tid);
  // Erases an entry (its files closed); the next one.
  std::map<int64_t, Seen>::iterator Forget(std::map<int64_t, Seen>::iterator it);
  // One look at every recording thread (`period`: ns between looks).
  void Look(int64_t now, int64_t period, int64_t max_weight, uint64_t ticks);
  // The run-queue waits alone, of the threads looked at before (a flush in a
  // chosen step when no look is due, a window's closing flush, a barrier's).
  void ReadWaits(int64_t now, uint64_t ticks);
  // A thread's run delay read at `now`: a cpu_wait record when it grew.
  void PushWait(int64_t tid, int64_t delay_ns, int64_t now, uint64_t ticks, Seen* seen);
  // `interval_ns` (cpu_wait only): the time since the thread's run delay
  // was last read, over which its wait is spread (kOffCpuSample's `name`).
  void Push(int64_t tid, OffCpuReason reason, int64_t weight_ns, uint64_t ticks, int64_t interval_ns = 0);

  CollectorContext& ctx_;
  Recording& recording_;
  std::atomic<int64_t> hz_{0};
  std::unique_ptr<ThreadBuffer> ring_;  // the flush thread's; made at the first look
  std::map<int64_t, Seen> seen_;        // flush thread
  size_t kept_ = 0;                     // entries with `keep`
  int64_t next_look_ns_ = 0;
  uint64_t look_ = 0;
  std::atomic<uint64_t> looks_{0}, dropped_{0};
};

}  // namespace rlscope
