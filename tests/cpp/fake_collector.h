// Test doubles for the aggregator's tests (aggregator_test.cc,
// golden_test.cc): FakeCollector builds the wire messages one collector
// would send, with timestamps chosen by the test; RecordingExporter keeps
// what the aggregator exports.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "aggregator/exporter.h"
#include "aggregator/step_profile.h"
#include "native/clock.h"
#include "native/event.h"
#include "native/wire.h"

namespace rlscope {

// Builds the messages one collector would send. Events are queued per thread
// (in call order) and go out with the next Flush(); names are interned into
// the collector's string table and each new id is sent once, in the batch
// that first uses it.
class FakeCollector {
 public:
  FakeCollector(uint64_t session, std::string role, int64_t rank, int64_t pid, std::string host = "node0",
                std::string name = "proc") {
    hello_.session = session;
    hello_.identity.host = std::move(host);
    hello_.identity.pid = pid;
    hello_.identity.rank = rank;
    hello_.identity.role = std::move(role);
    hello_.identity.name = std::move(name);
    hello_.clock = "monotonic";
    hello_.clock_domain = ClockDomain();  // as a real collector on the aggregator's host (OtherClock)
  }

  wire::Hello Hello() const { return hello_; }
  uint64_t session() const { return hello_.session; }
  FakeCollector& Label(const std::string& key, const std::string& value) {
    hello_.identity.labels[key] = value;
    return *this;
  }
  // A process on another host (or time namespace): its clock is placed by
  // its probes (aggregator/clocks.h), none until they come.
  FakeCollector& OtherClock(std::string domain = "another-host:1") {
    hello_.clock_domain = std::move(domain);
    return *this;
  }
  // Calibrated ns per event, as the Hello carries them (wire.h Hello::costs).
  FakeCollector& Costs(std::map<std::string, double> costs) {
    hello_.costs = std::move(costs);
    return *this;
  }

  FakeCollector& Push(int64_t tid, int64_t ts, const std::string& name, std::optional<uint64_t> payload = std::nullopt,
                      uint32_t domain = 0) {
    wire::Event e = Make(EventKind::kRangePush, ts, name);
    e.domain = domain;
    if (payload) {
      e.value = *payload;
      e.flags = kFlagHasPayload;
    }
    return Add(tid, e);
  }
  FakeCollector& Pop(int64_t tid, int64_t ts, uint32_t domain = 0) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(EventKind::kRangePop);
    e.ts_ns = ts;
    e.domain = domain;
    return Add(tid, e);
  }
  FakeCollector& Start(int64_t tid, int64_t ts, const std::string& name, uint64_t id) {
    wire::Event e = Make(EventKind::kRangeStart, ts, name);
    e.value = id;
    return Add(tid, e);
  }
  FakeCollector& End(int64_t tid, int64_t ts, uint64_t id) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(EventKind::kRangeEnd);
    e.ts_ns = ts;
    e.value = id;
    return Add(tid, e);
  }
  FakeCollector& Mark(int64_t tid, int64_t ts, const std::string& name,
                      std::optional<uint64_t> payload = std::nullopt) {
    wire::Event e = Make(EventKind::kMark, ts, name);
    if (payload) {
      e.value = *payload;
      e.flags = kFlagHasPayload;
    }
    return Add(tid, e);
  }
  // A CPU sample (EventKind::kCpuSample) of `weight_us` of thread CPU time
  // in the shared object `object` while the thread's Python frame was in
  // `module` ("" none); in a block of its own for the thread, as the
  // collector's sample ring ships them.
  // `unread`: its Python frame could not be read (kFlagFrameUnread; module "").
  FakeCollector& Sample(int64_t tid, int64_t ts, const std::string& object, const std::string& module,
                        uint32_t weight_us, bool unread = false) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(EventKind::kCpuSample);
    e.flags = unread ? kFlagFrameUnread : kFlagNone;
    e.ts_ns = ts;
    e.value = 0;
    e.name = object.empty() ? 0 : Intern(object);
    e.category = module.empty() ? 0 : Intern(module);
    e.domain = weight_us;
    pending_sample_blocks_.push_back({tid, {e}});
    return *this;
  }
  // A CPU sample with its walked stack: `callers` the objects outwards,
  // '\n'-joined (kFlagNativeStack); `profiler` a thread the collector runs.
  FakeCollector& StackSample(int64_t tid, int64_t ts, const std::string& object, const std::string& callers,
                             const std::string& module, uint32_t weight_us, bool profiler = false) {
    Sample(tid, ts, object, module, weight_us);
    wire::Event& e = pending_sample_blocks_.back().events.back();
    e.flags = static_cast<uint8_t>(kFlagNativeStack | (profiler ? kFlagProfilerThread : 0));
    e.value = callers.empty() ? 0 : Intern(callers);
    return *this;
  }
  // What the flush thread (`flush_tid`) saw: thread `tid` off CPU for
  // `reason` for the `weight_us` before ts (kOffCpuSample); the process's CPU
  // time at ts (kProcessCpu).
  // `interval_us` (cpu_wait): the time since the run delay's last reading.
  FakeCollector& OffCpu(int64_t flush_tid, int64_t ts, int64_t tid, OffCpuReason reason, uint32_t weight_us,
                        uint32_t interval_us = 0) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(EventKind::kOffCpuSample);
    e.ts_ns = ts;
    e.value = static_cast<uint64_t>(tid);
    e.category = static_cast<uint32_t>(reason);
    e.domain = weight_us;
    e.name = interval_us;
    pending_sample_blocks_.push_back({flush_tid, {e}});
    return *this;
  }
  FakeCollector& ProcessCpu(int64_t flush_tid, int64_t ts, int64_t cpu_ns) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(EventKind::kProcessCpu);
    e.ts_ns = ts;
    e.value = static_cast<uint64_t>(cpu_ns);
    pending_sample_blocks_.push_back({flush_tid, {e}});
    return *this;
  }
  // The measured cost of the thread's previous event (EventKind::
  // kCostSample): `ps` picoseconds of a call of kind `measured`.
  FakeCollector& CostSample(int64_t tid, int64_t ts, EventKind measured, uint64_t ps) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(EventKind::kCostSample);
    e.ts_ns = ts;
    e.value = ps;
    e.category = static_cast<uint8_t>(measured);
    return Add(tid, e);
  }
  FakeCollector& ThreadName(int64_t tid, const std::string& name) {
    pending_thread_names_.emplace_back(tid, name);
    return *this;
  }

  // Everything queued since the last flush, as one batch.
  wire::Batch Flush(int64_t watermark_ns) {
    wire::Batch b;
    b.session = hello_.session;
    b.seq = seq_++;
    b.watermark_ns = watermark_ns;
    b.strings = std::move(pending_strings_);
    b.thread_names = std::move(pending_thread_names_);
    b.threads = std::move(pending_threads_);
    b.threads.insert(b.threads.end(), pending_sample_blocks_.begin(), pending_sample_blocks_.end());
    pending_strings_.clear();
    pending_thread_names_.clear();
    pending_threads_.clear();
    pending_sample_blocks_.clear();
    return b;
  }

  wire::Bye Bye() const {
    wire::Bye bye;
    bye.session = hello_.session;
    return bye;
  }

 private:
  uint32_t Intern(const std::string& s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(ids_.size()) + 1;
    ids_[s] = id;
    pending_strings_.emplace_back(id, s);
    return id;
  }
  wire::Event Make(EventKind kind, int64_t ts, const std::string& name) {
    wire::Event e;
    e.kind = static_cast<uint8_t>(kind);
    e.ts_ns = ts;
    e.name = Intern(name);
    return e;
  }
  FakeCollector& Add(int64_t tid, const wire::Event& e) {
    for (auto& t : pending_threads_) {
      if (t.tid == tid) {
        t.events.push_back(e);
        return *this;
      }
    }
    pending_threads_.push_back({tid, {e}});
    return *this;
  }

  wire::Hello hello_;
  uint64_t seq_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::pair<uint32_t, std::string>> pending_strings_;
  std::vector<std::pair<int64_t, std::string>> pending_thread_names_;
  std::vector<wire::ThreadEvents> pending_threads_;
  std::vector<wire::ThreadEvents> pending_sample_blocks_;
};

// Keeps every StepProfile it is handed. The slices point at timelines owned by
// the Aggregator, so the Aggregator must outlive any inspection.
class RecordingExporter : public StepExporter {
 public:
  bool ExportStep(const StepProfile& step) noexcept override {
    steps.push_back(step);
    return true;
  }
  bool ExportRun(const RunInfo& run) noexcept override {
    ++runs;
    last_run_final = run.final;
    last_run_steps_written = run.steps_written;
    last_run_last_step = run.last_step;
    return true;
  }
  bool Flush(std::chrono::milliseconds) noexcept override {
    ++flushes;
    return true;
  }
  void Shutdown() noexcept override { ++shutdowns; }

  std::vector<int64_t> StepNumbers() const {
    std::vector<int64_t> out;
    for (const auto& s : steps) out.push_back(s.step);
    return out;
  }
  const StepProfile& Step(int64_t number) const {
    for (const auto& s : steps) {
      if (s.step == number) return s;
    }
    ADD_FAILURE() << "step " << number << " was not exported";
    static const StepProfile kNone;
    return kNone;
  }

  std::vector<StepProfile> steps;
  int runs = 0;
  bool last_run_final = false;
  std::vector<int64_t> last_run_steps_written;
  int64_t last_run_last_step = -1;
  int flushes = 0;
  int shutdowns = 0;
};

}  // namespace rlscope
