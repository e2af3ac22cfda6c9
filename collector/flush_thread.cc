// The Collector's flush thread (collector.h): the loop that wakes on the
// interval, a wake-up or a Control message, and the order in which it runs
// the units' hooks. Every function here runs on the flush thread only.
//
// Its work is proportional to what there is to do (an idle collector is
// close to silent). The wait between flushes is flush.interval_ms after a
// busy flush (kBusyRecords of the host's events and CPU samples, any GPU
// record or arming edge, a hello or batches waiting to go out while the
// connection is up, or, armed, the process using more than 1/kBusyCpuShare
// of a core, the flush thread's own CPU aside; always on, in steps not
// chosen up front, kFiguresIntervalFactor times that), and doubles after each
// flush that was not, up to IdleWaitCapNs: the interval for an armed
// controller (or trigger process) and, always on, for any in steps not
// chosen up front, else kIdleWaitNs (a disarmed controller's step edges
// that move windows wake the thread: Arming::AfterOpen, AfterClose).
// What cannot wait wakes the thread at once: an event ring's or a CPU
// sample ring's half mark, an arming change (Arming::UpdateArmed) or one
// into or out of a step chosen up front (Arming::chosen), a
// Control message (windows, barriers, a request for a probe burst, whose
// samples go out at once), Flush(), the connection coming up.
// A flush with nothing to send sends nothing, but a heartbeat (the
// watermark, the resident memory) goes out at least every kHeartbeatNs,
// and resident memory that moved kMemoryMovedBytes makes a batch. Clock
// probe bursts come every clock.probe_interval_ms while watching or while
// armed threads record events, every kIdleProbeFactor times that otherwise
// (CPU samples and off-CPU looks are placed to the millisecond: a probe
// burst's worth of wake-ups a second would be most of an idle process's
// cost), and always on the aggregator's own clock, where they place nothing
// (Control.same_clock).
//
//   start:      CostSampling  calibrates (before the first Hello, which carries the costs)
//               Link          connects, says hello
//   each flush: Arming        closes a window whose slack passed (between flushes too)
//               GpuQueue      asks CUPTI for its buffered records (window closed, barrier, exit)
//               Link          says hello / the expected list when they changed
//               CpuSampling   brings every thread's timer in line with the arming (listing
//                             the process's threads while armed), looks at the
//                             recording threads' states (off CPU) and the process's CPU
//               MemorySampler the process's resident memory (one pread)
//               Recording     the rings' sizes; then CpuSampling's sample rings (and
//                             the sampled threads' names), GpuQueue's records, and last
//                             Recording's new names
//               Link          sends the batches (the barrier's ack on the last); none
//                             when there is nothing to say and no heartbeat is due
//               Recording     frees the rings of threads that exited (CpuSampling
//                             deletes their timers)
//   stop:       CpuSampling   deletes every timer
//               Link          drains the spool, says goodbye, closes
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "collector/collector.h"

namespace rlscope {

void Collector::FlushLoop() {
  pthread_setname_np(pthread_self(), "rlscope-flush");  // in traces, top and py-spy
  if (arming_.selected() && context_.own.config.correction.enabled && context_.test_clock == nullptr) Calibrate();
  link_.Start();
  // The collector's own threads: this one and ZeroMQ's (CPU sampling's profiler time).
  context_.own_threads.insert(static_cast<int64_t>(syscall(SYS_gettid)));
  for (int64_t tid : link_.transport().own_threads()) context_.own_threads.insert(tid);
  const Transport::ControlHandler apply = [this](const wire::Control& control) { ApplyControl(control); };
  Transport& transport = link_.transport();
  int64_t next_flush_ns = MonotonicNs();
  const int64_t chosen_interval_ns = context_.own.config.flush.interval_ms * 1000000;
  wait_ns_ = chosen_interval_ns;
  bool was_armed = armed(), was_chosen = arming_.chosen();
  // Hello before the first probe burst (up to probes_per_burst round trips):
  // the aggregator waits for a process's data only once it knows it.
  link_.SendControl();
  while (true) {
    uint64_t ticket;
    bool stop;
    {
      std::lock_guard<std::mutex> lock(flush_mu_);
      stop = stop_;
    }
    int64_t now = MonotonicNs();
    bool woken = false;
    // Waits for the interval, a wake-up (eventfd) or a Control message from
    // the aggregator, whichever comes first.
    if (!stop && now < next_flush_ns) {
      int64_t until_ns = next_flush_ns - now;
      if (const int64_t close_at = arming_.window_close_at(); close_at != 0) {
        until_ns = std::min(until_ns, std::max<int64_t>(0, close_at - now));
      }
      woken = transport.Wait(until_ns);
    }
    // Bursts further apart while no events need the clock (none on the aggregator's own clock); a
    // window that opens on recording threads finds the last one old and brings the next at once.
    const bool probing =
        !transport.same_clock() && (arming_.watching() || (armed() && now - events_flushed_ns_ < kEventsRecentNs));
    transport.ProbeIfDue(apply, context_.own.config.clock.probe_interval_ms * (probing ? 1 : kIdleProbeFactor));
    if (transport.ReceiveControls(apply)) woken = true;  // answer the barrier now
    // A step waits for this process's clock: the burst now, its samples in this flush.
    if (transport.burst_requested() && transport.ProbeIfDue(apply, 0)) woken = true;
    if (link_.barrier_owed()) woken = true;  // one that came during the probe burst too
    now = MonotonicNs();
    arming_.CloseWindowIfDue(now);
    {
      std::lock_guard<std::mutex> lock(flush_mu_);
      ticket = flush_requests_;
      stop = stop_;
      if (ticket > flushes_done_) woken = true;
    }
    // Into or out of a step chosen up front (a window's Control, always on,
    // arms nothing anew): the sampler's rate and the interval follow now.
    if (arming_.chosen() != was_chosen) woken = true;
    if (!woken && !stop && now < next_flush_ns) continue;
    // Always on, in steps not chosen up front: kFiguresIntervalFactor times
    // the interval (such a step has no barrier, and is cut once every
    // process's flushes passed its end; a ring's half mark, a step edge near
    // a chosen step, the change into a chosen step wake it): most of a
    // figures-only step's flushing, here and in the aggregator, is the
    // flushes' fixed work, not the events'.
    was_chosen = arming_.chosen();
    const int64_t interval_ns = was_chosen ? chosen_interval_ns : kFiguresIntervalFactor * chosen_interval_ns;
    const bool armed_now = armed();
    const bool busy = FlushOnce(stop, was_armed && !armed_now);
    was_armed = armed_now;
    wait_ns_ = busy ? interval_ns : std::min(2 * wait_ns_, IdleWaitCapNs(interval_ns));
    // Never later than the heartbeat: a flush that sent nothing must not
    // push the next batch past it.
    next_flush_ns = std::min(now + wait_ns_, last_batch_ns_ + kHeartbeatNs);
    {
      std::lock_guard<std::mutex> lock(flush_mu_);
      flushes_done_ = ticket;
    }
    flushed_cv_.notify_all();
    if (stop) break;
  }
  cpu_.Stop();  // no timer outlives the collector
  link_.Stop(apply, [this] { return Totals(/*gpu=*/false); });
}

int64_t Collector::IdleWaitCapNs(int64_t interval_ns) const {
  // An armed controller keeps the interval: the process CPU read at each
  // flush bounds its windows (coverage). So does one always on in steps
  // not chosen up front, armed or not (a controller not selected): those
  // steps' edges wake no one (Arming::EdgesMoveWindows), and the aggregator
  // cuts a step once they are in. Disarmed between the steps chosen up
  // front, nothing it has waits: the step edges that move workers' windows,
  // and its arming changes, wake the thread (it kept the interval there too
  // before: most of a controller's cost in selected-steps runs).
  const bool keeps = arming_.watching() && (armed() || !arming_.chosen());
  return keeps ? interval_ns : std::max(interval_ns, kIdleWaitNs);
}

// A process at work keeps the interval (a thread it starts is sampled from
// the next flush): armed, its CPU time but the flush thread's own, judged
// over kBusyCpuGapNs or more (a barrier's flush right after another says
// nothing); in between, the last judgement holds.
bool Collector::ProcessAtWork(int64_t mono_ns) {
  if (!armed()) return false;
  if (mono_ns - cpu_seen_at_ns_ < kBusyCpuGapNs) return working_;
  timespec cpu{}, own{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) != 0 || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own) != 0) {
    return working_;
  }
  const int64_t cpu_ns = static_cast<int64_t>(cpu.tv_sec) * 1000000000 + cpu.tv_nsec -
                         (static_cast<int64_t>(own.tv_sec) * 1000000000 + own.tv_nsec);
  working_ = (cpu_ns - cpu_seen_ns_) * kBusyCpuShare >= mono_ns - cpu_seen_at_ns_;
  cpu_seen_ns_ = cpu_ns;
  cpu_seen_at_ns_ = mono_ns;
  return working_;
}

bool Collector::FlushOnce(bool stop, bool window_closed) {
  if (!stop) {  // test only: RLSCOPE_TEST_LATE_FLUSH_EVENTS (recording.h)
    recording_.WaitLateFlushForTesting([this] {
      std::lock_guard<std::mutex> lock(flush_mu_);
      return stop_;
    });
  }
  // A window just closed, a barrier, or exit: CUPTI hands over what it
  // buffered first, so the GPU records ship with this flush. Always on, in
  // steps not chosen up front, every armed flush too: such a step has no
  // barrier, and is cut once this process's flushes have passed its end.
  gpu_.Flush(stop || link_.barrier_owed() || window_closed || (armed() && !arming_.chosen()));
  link_.SendControl();
  // A chosen step's run-queue waits up to its end, in the flush that may pass it.
  cpu_.Flush(wait_ns_, /*waits_now=*/link_.barrier_owed() || window_closed || (armed() && arming_.chosen()));
  context_.converter.Sample();
  Outgoing out;
  // Every event stamped before the watermark is drained, except one whose
  // thread read the clock but had not yet published it (a preemption between
  // the two): allow 5 ms for that. (The flush barrier's ack is the other path.)
  // (Under test costs, events are stamped ahead by the test clock: so is it.)
  const int64_t now_ns =
      context_.converter.ToNs(ReadTicks(context_.clock_source)) + std::max<int64_t>(0, context_.TestClockNs());
  out.watermark_ns = now_ns - 5000000;
  // Resident memory, each flush, armed or not: a step's peak and change
  // need the level before it began (wire.h Batch::memory). It goes out with
  // every batch, and makes one when it moved kMemoryMovedBytes since the
  // last it went out with.
  const int64_t rss = memory_.RssBytes();
  if (rss >= 0) out.memory.push_back({now_ns, rss});
  out.reports_arming = arming_.reports_arming();
  // Every edge before the watermark is in (later ones may ride along).
  if (out.reports_arming) out.arming = arming_.TakeEdges();
  recording_.SnapshotRings(&out);
  size_t host_records = 0;  // the host's: its threads' events and CPU samples (not the off-CPU looks)
  for (const Outgoing::Thread& t : out.threads) host_records += t.count;
  if (host_records > 0) events_flushed_ns_ = MonotonicNs();
  host_records += cpu_.TakeSamples(&out);
  gpu_.Take(&out);
  // After everything above interned its names: every drained event's exist.
  recording_.TakeMetadata(&out.metadata);
  out.dropped = Totals(/*gpu=*/true).second + link_.transport().events_dropped();
  const int64_t mono_ns = MonotonicNs();
  // Busy too while anything of the link's waits to go out (a hello not yet
  // queued, as before the connection's handshake; batches the socket did
  // not take): retried at the interval.
  bool busy = host_records >= kBusyRecords || !out.gpu.empty() || !out.arming.empty() || !link_.settled();
  busy = busy || ProcessAtWork(mono_ns);
  size_t all_records = 0;
  for (const Outgoing::Thread& t : out.threads) all_records += t.count;
  // Nothing at all to say: no batch, but a heartbeat now and then (the
  // aggregator's watermark and liveness), and what waits in the spool moves.
  const bool memory_moved = rss >= 0 && std::abs(rss - rss_sent_) >= kMemoryMovedBytes;
  if (!stop && !window_closed && !busy && all_records == 0 && out.metadata.empty() && !link_.barrier_owed() &&
      !link_.transport().has_pending() && out.dropped == dropped_sent_ && !memory_moved &&
      mono_ns - last_batch_ns_ < kHeartbeatNs) {
    link_.transport().Pump();
  } else {
    gpu_.CountLost(link_.SendBatches(out));
    last_batch_ns_ = mono_ns;
    dropped_sent_ = out.dropped;
    if (rss >= 0) rss_sent_ = rss;
  }
  // Rings that overflowed (thread_buffer.h), said when a window closes or at
  // exit (each label change re-sends the Hello): run.json labels.ring_overflow.
  if ((window_closed || stop) && recording_.overflow_episodes() != overflow_said_) {
    overflow_said_ = recording_.overflow_episodes();
    link_.SetLabel("ring_overflow", std::to_string(overflow_said_) + " episodes, peak " +
                                        std::to_string((recording_.overflow_peak_bytes() + (1 << 20) - 1) >> 20) +
                                        " MB of buffers.max_mb");
  }
  recording_.RetireExitedThreads([this](ThreadEntry& entry) { cpu_.Release(entry); });
  link_.SayTrouble(out.dropped);
  return busy;
}

}  // namespace rlscope
