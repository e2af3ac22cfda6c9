// trace.json: a step's trace (step_trace.h) as Chrome Trace Event JSON,
// which the Perfetto UI and chrome://tracing load; the Output for
// output.formats "json" (outputs.h registers it). Encoded and written a
// chunk at a time: the trace is never whole in memory.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "aggregator/exporter.h"

namespace rlscope {

// Threads that encode a step's trace.json: one by default (on two cores a
// second one gained nothing measurable in bench/aggregator_bench, and the
// profiled job wants its cores); the daemon's --trace-workers N asks for up
// to kMaxTraceWorkers.
inline constexpr int kMaxTraceWorkers = 4;
inline constexpr int kDefaultTraceWorkers = 1;

class TraceJsonOutput : public Output {
 public:
  // `workers`: threads that encode trace.json, the calling one included
  // (1: all of it on the calling thread). With more than one, the file is
  // written on a thread of its own (the trace writer's), started with the
  // first step and stopped by Shutdown. The file is the same either way.
  explicit TraceJsonOutput(int workers = kDefaultTraceWorkers);
  ~TraceJsonOutput() override;
  const char* step_file() const override { return "trace.json"; }
  bool full_detail() const override { return true; }
  void WriteStep(const StepProfile& step, const TracePids& pids, OutputSink* out) override;
  void Shutdown() noexcept override;

 private:
  class Writer;
  int workers_;
  bool shut_ = false;
  std::unique_ptr<Writer> writer_;
};

// Serialises a step as Chrome trace JSON (exposed for tests and benchmarks),
// on `workers` threads.
std::string StepTraceJson(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids, int workers = 1);

}  // namespace rlscope
