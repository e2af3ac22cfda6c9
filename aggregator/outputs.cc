#include "aggregator/outputs.h"

#include <algorithm>
#include <utility>

#include "aggregator/chrome_trace.h"
#include "aggregator/figures_json.h"
#include "aggregator/perfetto_trace.h"
#include "aggregator/run_json.h"
#include "aggregator/summary_json.h"
#include "native/names.h"

namespace rlscope {
namespace {

class PerfettoOutput : public Output {
 public:
  const char* step_file() const override { return "trace.pftrace"; }
  bool full_detail() const override { return true; }
  void WriteStep(const StepProfile& step, const TracePids& pids, OutputSink* out) override {
    out->Write(StepTracePerfetto(step, pids));
  }
};

class SummaryOutput : public Output {
 public:
  const char* step_file() const override { return "summary.json"; }
  void WriteStep(const StepProfile& step, const TracePids& pids, OutputSink* out) override {
    (void)pids;
    out->Write(StepSummaryJson(step));
  }
};

// Every whole step's figures, one line each (figures_json.h).
class FiguresOutput : public Output {
 public:
  const char* run_log_file() const override { return names::kFiguresFile; }
  void WriteStep(const StepProfile& step, const TracePids& pids, OutputSink* out) override {
    (void)pids;
    out->Write(StepFiguresJson(step));
  }
};

class RunJsonOutput : public Output {
 public:
  const char* run_file() const override { return kRunJsonFile; }
  void WriteRun(const RunInfo& run, OutputSink* out) override { out->Write(RunJson(run)); }
};

}  // namespace

std::unique_ptr<StepFiles> MakeStepFiles(const std::string& out_dir, const std::vector<std::string>& formats,
                                         int trace_workers) {
  auto asks = [&](const char* f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
  std::vector<std::unique_ptr<Output>> outputs;
  std::vector<std::string> resolved;
  if (asks(names::kFormatJson)) {
    outputs.push_back(std::make_unique<TraceJsonOutput>(trace_workers));
    resolved.push_back(names::kFormatJson);
  }
  if (asks(names::kFormatPftrace)) {
    outputs.push_back(std::make_unique<PerfettoOutput>());
    resolved.push_back(names::kFormatPftrace);
  }
  if (asks(names::kFormatDb)) resolved.push_back(names::kFormatDb);  // the follower's
  outputs.push_back(std::make_unique<SummaryOutput>());
  outputs.push_back(std::make_unique<FiguresOutput>());
  outputs.push_back(std::make_unique<RunJsonOutput>());
  return std::make_unique<StepFiles>(out_dir, std::move(outputs), std::move(resolved));
}

}  // namespace rlscope
