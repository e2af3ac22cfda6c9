// A process's records other than spans, each in a store of its own until no
// step to come can hold them, and cut to a step: instants, GPU records (and
// the launches they are placed by), every event's cost mark per thread (in
// time order), cost samples, CPU samples, off-CPU samples and the
// process's CPU time, the flush thread's CPU, resident and GPU memory
// levels, and the arming edges. One of ProcessTimeline's parts
// (timeline.h); times are the collector's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "aggregator/chunk_queue.h"
#include "aggregator/time_blocks.h"
#include "aggregator/records.h"
#include "native/wire.h"

namespace rlscope {

// The mean of `v` with each value at most kCostClip times their median,
// and that mean's standard error (0, 0 when empty; `v` is reordered): a
// cost's level that a few interrupted calls do not move (SpeedSamples).
inline constexpr double kCostClip = 8;
std::pair<double, double> ClippedMean(std::vector<double>* v);

class RecordStores {
 public:
  static constexpr size_t kMaxArmEdges = 4096;  // two per selected step: thousands of steps
  static constexpr size_t kMaxDevices = 64;     // GPU memory totals kept for at most this many devices
  // A measured call longer than this was interrupted (the thread was
  // preempted, or took an interrupt or a signal, inside it) or took one of
  // recording's rare slow paths (the half-ring wake-up's syscall, a page's
  // first touch): left out of the costs and counted. One such sample
  // stands for correction.sample_every calls: a 3.6 us one among a dense
  // step's 500 (10 ns each) raised that step's mean cost by 70 %, and the
  // in-place ratio that scales the `nvtx` package's caller side with it,
  // while the wake-up costs a few us once per half ring (16k records by
  // default: under 0.3 ns a record). Cache misses stay far below it. (Test
  // costs over it, collector/test_clock.h, are left out alike: their
  // start-up figures, the same, are charged.)
  static constexpr uint64_t kInterruptedSamplePs = 2'000'000;  // 2 us

  // What a batch says besides its events: the flush thread's CPU, memory
  // readings, arming edges.
  void AddProgress(const wire::Batch& batch);
  // Its GPU records, those ending before `skip_before_ns` left out (a
  // resumed run's replay); kMemory records are running totals.
  void AddGpu(const wire::Batch& batch, int64_t skip_before_ns);
  // One thread's cost marks (every event it recorded), in time order
  // (ProcessTimeline::AddThreadEvents merges each block in).
  ChunkQueue<CostMark>& MarksOf(int64_t tid) { return cost_marks_[tid]; }
  // Marks appended from `from` on (CPU samples' block of their own, after
  // the events they fell among, or a block that begins before the marks
  // before it ended) merged into time order (after marks of the same
  // time), in one pass over those they overtake.
  static void MergeMarksFrom(ChunkQueue<CostMark>* marks, size_t from);
  void AddInstant(int64_t tid, const wire::Event& e);
  void AddCostSample(const wire::Event& e, bool after_calibration);
  void AddCpuSample(int64_t tid, const wire::Event& e);
  // An off-CPU sample or a reading of the process's CPU time.
  void AddOffCpu(const wire::Event& e);

  // The step's records ([begin, end) unless said): ProcessTimeline's Cut*.
  void CutInstants(int64_t begin_ns, int64_t end_ns, std::vector<Instant>* out) const;
  void CutGpu(int64_t begin_ns, int64_t end_ns, std::vector<GpuRecord>* out) const;
  void CutCosts(int64_t begin_ns, int64_t end_ns, std::map<int64_t, std::vector<CostMark>>* out) const;  // [begin, end]
  void CutSamples(int64_t begin_ns, int64_t end_ns, std::vector<CostSample>* out) const;                 // [begin, end]
  void CutCpuSamples(int64_t begin_ns, int64_t end_ns, std::vector<CpuSample>* out) const;
  void CutOffCpu(int64_t begin_ns, int64_t end_ns, std::vector<OffCpuSample>* out) const;
  // The recording threads' run-queue waits (cpu_wait) in [begin, end): each
  // look's wait spread evenly over the time since that thread's look before
  // and taken where that overlaps the step, so the first look after the end
  // gives its share too; a look whose interval is not known stands for the
  // time just before it, clipped at the begin (none after the end counted).
  int64_t RunQueueWaitNs(int64_t begin_ns, int64_t end_ns) const;
  void CutProcessCpu(int64_t begin_ns, int64_t end_ns, std::vector<ProcessCpuPoint>* out) const;
  // `gone`: the process said goodbye (none after its last reading).
  void CutMemory(int64_t begin_ns, int64_t end_ns, bool gone, std::vector<MemoryPoint>* rss,
                 std::map<uint32_t, std::vector<MemoryPoint>>* gpu_allocated) const;
  int64_t ProfilerCpuNs(int64_t begin_ns, int64_t end_ns) const;
  // A thread that recorded events (not only samples): its CPU samples are
  // the job's recording threads' (RunsOnRecordingThreads).
  void NoteRecordingThread(int64_t tid) { recording_tids_.insert(tid); }
  // Whether, over its last kRecentSamples CPU samples (a second of its CPU
  // at 250 samples a second, longer at a lower cpu.sampling_hz), the
  // process's work is its recording threads running: at least
  // kMinJobSamples of them on those threads, those on its other threads
  // (but the collector's own) under 1/kOtherShare of their weight, and the
  // threads its looks see (its recording threads) off a CPU meanwhile for
  // anything but a run-queue wait or the GIL under 1/kOtherShare of the
  // recording threads' sampled CPU. Such a process's steps are its
  // recording threads' CPU and run-queue waits, so the profiler's threads
  // took from them by the scheduler at most those waits (StepCorrection:
  // the `threads` part of the uncertainty, which also checks the step
  // itself), provided every thread is sampled and the waits are read
  // (CutProcess checks the config). A run without CPU samples never says so.
  // (A thread that recorded stays known as such: a tid the system gives
  // again to a thread of a pool would count as the job's.)
  bool RunsOnRecordingThreads() const;
  static constexpr uint64_t kMinJobSamples = 64;
  static constexpr int64_t kOtherShare = 50;  // 2 %
  static constexpr size_t kRecentSamples = 256;
  // ProcessTimeline::UnarmedNs over [begin, end] clipped to the process's
  // life: from `start_ns`, to `last_ns` (INT64_MAX while it lives).
  int64_t UnarmedNs(int64_t begin_ns, int64_t end_ns, int64_t start_ns, int64_t last_ns) const;
  // Whether it recorded for some of that span: 1, 0 (not alive then
  // included), -1 when UnarmedNs does not know or the span begins before
  // the oldest edge kept (kMaxArmEdges: some were forgotten).
  int ArmedDuring(int64_t begin_ns, int64_t end_ns, int64_t start_ns, int64_t last_ns) const;
  // Forgets what no step beginning at or after `ns` can hold (the level at
  // `ns` of each reading stays).
  void DiscardBefore(int64_t ns);

  uint64_t cpu_samples_received() const { return cpu_samples_received_; }
  // The run's cost samples by the measured event's kind (push ... mark).
  const KindSamples& sample_totals() const { return sample_totals_; }
  // The run's usual in-place cost of each recording kind so far: its cost
  // samples' clipped means (ClippedMean) kSpeedChunk at a time, and of those the median of the
  // ones within kUsualBand of the fastest tenth (the machine's usual speed,
  // as calibration.Speed takes it for the start-up loops: Python code here
  // runs up to 2x slower for tenths of a second to seconds at a time, and
  // the recording calls with it). 0 for a kind with fewer than
  // kMinSpeedChunks chunks.
  KindCosts UsualCosts() const;
  static constexpr uint64_t kSpeedChunk = 64;
  static constexpr size_t kMinSpeedChunks = 4;
  static constexpr size_t kMaxSpeedChunks = 4096;  // then one in 2, 4, ... is kept, evenly over the run
  static constexpr double kUsualBand = 1.25;
  const HandlerStats& cpu_handler() const { return cpu_handler_; }
  uint64_t interrupted_samples() const { return interrupted_samples_; }
  size_t buffered() const { return instants_.size() + gpu_.size(); }

 private:
  void AddGpuMemory(const GpuRecord& g);  // a kMemory record: the device's running total

  // Forgets what `queue` holds before `ns` (TimeBlocks::Forget), popping
  // its front while that is forgotten.
  template <typename T>
  static void PopForgotten(ChunkQueue<T>* queue, TimeBlocks* blocks, int64_t ns);
  ChunkQueue<Instant> instants_;                               // in arrival order
  TimeBlocks instant_blocks_;                                  // of instants_
  ChunkQueue<GpuRecord> gpu_;                                  // in arrival order
  std::unordered_map<uint32_t, int64_t> launches_;             // correlation -> API call start
  std::map<int64_t, ChunkQueue<CostMark>> cost_marks_;         // per thread, in time order
  ChunkQueue<CostSample> cost_samples_;                        // in arrival order
  ChunkQueue<CpuSample> cpu_samples_;                          // in arrival order
  TimeBlocks cpu_sample_blocks_;                               // of cpu_samples_
  ChunkQueue<OffCpuSample> off_cpu_;                           // in arrival order (one flush thread: by time)
  std::deque<ProcessCpuPoint> process_cpu_;                    // by time
  std::deque<std::pair<int64_t, int64_t>> cpu_points_;         // (watermark, flush thread CPU so far)
  std::deque<MemoryPoint> rss_;                                // by time
  std::map<uint32_t, std::deque<MemoryPoint>> gpu_allocated_;  // per device, by time
  bool reports_arming_ = false;
  bool saw_first_batch_ = false;      // its batch seq 0 came here (UnarmedNs)
  std::deque<wire::ArmEdge> arming_;  // by time; bounded (kMaxArmEdges), the oldest forgotten
  uint64_t cpu_samples_received_ = 0;
  KindSamples sample_totals_;
  std::array<std::vector<double>, 8> speed_chunk_;   // the open chunk of each kind, ps
  std::array<std::vector<double>, 8> speed_chunks_;  // closed chunks' clipped means, ps
  std::array<uint32_t, 8> speed_stride_{1, 1, 1, 1, 1, 1, 1, 1}, speed_skipped_{};  // one in `stride` kept
  HandlerStats cpu_handler_;
  uint64_t interrupted_samples_ = 0;
  // RunsOnRecordingThreads's evidence.
  std::unordered_set<int64_t> recording_tids_;  // threads that recorded events
  struct RecentSample {
    int64_t ts_ns = 0, tid = 0, weight_ns = 0;
  };
  std::deque<RecentSample> recent_cpu_;  // the last kRecentSamples CPU samples, the collector's own left out
  // Recording threads off CPU, for anything but a run-queue wait or the
  // GIL: (time, weight), none before recent_cpu_'s first.
  std::deque<std::pair<int64_t, int64_t>> recent_blocked_;
};

}  // namespace rlscope
