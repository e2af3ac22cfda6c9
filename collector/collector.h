// The per-process collector: the root object owned by the injection entry
// points (NVTX, the C ABI, the Python module all reach the same instance).
//
// Threads: any application thread records through the inline hot path below
// into its own ThreadBuffer; the collector's flush thread (the only thread that
// touches ZeroMQ) drains buffers, converts ticks to nanoseconds, encodes and
// sends batches. Nothing here blocks or allocates on the hot path except the
// first event of a thread (buffer registration).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "native/clock.h"
#include "native/config.h"
#include "native/event.h"
#include "native/string_table.h"
#include "native/thread_buffer.h"
#include "native/wire.h"
#include "collector/rlscope_collector.h"

namespace rlscope {

// One recording thread's state, reached through a thread_local pointer.
struct ThreadState {
  ThreadBuffer* buffer = nullptr;  // owned by the collector's registry
  NameCache names;
  int depth = 0;  // open push/pop ranges, returned to NVTX callers
  explicit ThreadState(StringTable* table) : names(table) {}
};

class Collector {
 public:
  // The process's collector, or nullptr when none runs. Acquire pairs with the
  // release in Start(): a non-null pointer is fully constructed.
  static Collector* Instance() { return instance_.load(std::memory_order_acquire); }
  // Creates and starts the collector from the environment once per process.
  // Returns the instance or nullptr (profiling off, or a setup error reported).
  static Collector* Start();

  // Hot path: relaxed is enough for "armed", a hint read once per event; the
  // flush barrier, not this flag, orders data with the aggregator.
  bool armed() const { return armed_.load(std::memory_order_relaxed); }

  // Records one event into `ts`, the calling thread's state (from
  // CurrentThread()). Returns false when dropped.
  bool Record(ThreadState* ts, EventKind kind, uint32_t name, uint32_t domain, uint32_t category,
              uint64_t value, uint8_t flags) {
    EventRecord r;
    r.ts = ReadTicks(clock_source_);
    r.value = value;
    r.name = name;
    r.category = category;
    r.domain = domain;
    r.kind = static_cast<uint8_t>(kind);
    r.flags = flags;
    r.reserved = 0;
    return ts->buffer->TryPush(r);
  }

  // The calling thread's state; registers the thread on its first event.
  // nullptr when the per-process buffer budget is used up (counted as drops).
  ThreadState* CurrentThread() {
    ThreadState* ts = tls_state_;
    return ts != nullptr ? ts : RegisterThread();
  }

  uint32_t Intern(std::string_view s) { return strings_.Intern(s); }
  uint64_t NextRangeId() {
    // Relaxed: ids only need to be unique, not ordered with anything.
    return next_range_id_.fetch_add(1, std::memory_order_relaxed);
  }

  void NameThread(int64_t tid, const std::string& name);
  void NameCategory(uint32_t domain, uint32_t category, const std::string& name);

  void SetCaptureActive(bool active);
  // Wakes the flush thread and waits until what was recorded before the call
  // was sent (or timeout). Returns true when done in time.
  bool Flush(int timeout_ms);
  // Final flush, goodbye, socket close (bounded by flush.exit_timeout_ms).
  void Shutdown();
  void Stats(rlscope_stats_t* out);
  // In a forked child: no flush thread exists there, so record nothing.
  void DisableInForkedChild();

  // Adds or replaces an identity label; the flush thread re-sends Hello.
  void SetLabel(const std::string& key, const std::string& value);
  // Queues the controller's list of processes that should connect.
  void ReportExpected(std::vector<std::map<std::string, std::string>> processes);

  const Config& config() const { return config_; }

 private:
  Collector(Config config, std::string endpoint, wire::Identity identity);
  ThreadState* RegisterThread();
  void FlushLoop();
  void DrainAndSend(void* socket);
  // Sends Hello (first time and after SetLabel) and a pending Expected list.
  void SendControl(void* socket);
  void UpdateArmed();

  struct ThreadEntry {
    std::unique_ptr<ThreadBuffer> buffer;
    std::unique_ptr<ThreadState> state;
    std::atomic<bool> exited{false};  // set by the thread's TLS destructor
    bool name_sent = false;
  };

  static std::atomic<Collector*> instance_;
  static thread_local ThreadState* tls_state_;
  static thread_local bool tls_over_budget_;

  const Config config_;
  const std::string endpoint_;
  const uint64_t session_;
  const ClockSource clock_source_;
  const int owner_pid_;
  const int64_t start_ns_;
  const bool selected_;  // rank and role are profiled under this config

  std::atomic<bool> armed_{false};
  std::atomic<bool> capture_active_{true};
  std::atomic<uint64_t> next_range_id_{1};
  std::atomic<uint64_t> overflow_dropped_{0};  // events of threads over budget
  StringTable strings_;

  std::mutex registry_mu_;  // guards threads_, bytes_reserved_
  std::vector<std::unique_ptr<ThreadEntry>> threads_;
  size_t bytes_reserved_ = 0;
  uint64_t retired_dropped_ = 0;   // drops of threads already removed
  uint64_t retired_written_ = 0;   // records of threads already removed

  std::mutex meta_mu_;  // guards identity_, the hello/expected flags, thread_names_, categories_
  wire::Identity identity_;
  uint64_t hello_gen_ = 1, hello_sent_gen_ = 0;        // Hello (re)send when they differ
  uint64_t expected_gen_ = 0, expected_sent_gen_ = 0;  // likewise for Expected
  std::vector<std::map<std::string, std::string>> expected_;
  std::map<int64_t, std::string> thread_names_;  // explicit (NVTX) names
  std::vector<int64_t> renamed_threads_;
  std::vector<wire::CategoryName> categories_;
  size_t categories_sent_ = 0;

  // Flush thread control.
  std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  std::condition_variable flushed_cv_;
  bool stop_ = false;
  uint64_t flush_requests_ = 0;  // bumped by Flush()
  uint64_t flushes_done_ = 0;    // requests served, set by the flush thread
  std::thread flush_thread_;
  std::atomic<bool> shut_down_{false};

  // Owned by the flush thread.
  TickConverter converter_;
  wire::BatchWriter writer_;
  uint32_t next_string_id_ = 1;
  std::vector<std::pair<uint32_t, std::string>> unsent_strings_;
  std::vector<std::pair<int64_t, std::string>> unsent_names_;
  std::vector<wire::CategoryName> unsent_categories_;
  uint64_t seq_ = 0;

  // Statistics (relaxed: counters read for reporting only).
  std::atomic<uint64_t> events_sent_{0};
  std::atomic<uint64_t> send_dropped_events_{0};
  std::atomic<uint64_t> batches_sent_{0};
  std::atomic<uint64_t> batches_dropped_{0};

  friend struct ThreadExitHook;
  friend class CollectorTestPeer;
};

}  // namespace rlscope
