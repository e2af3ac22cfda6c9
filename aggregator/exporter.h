// The one interface every exporter shares (Chrome JSON now; Perfetto
// protobuf later); what it is handed is in step_profile.h. Export is never
// called concurrently; no method throws.
#pragma once

#include <chrono>

#include "aggregator/step_profile.h"

namespace rlscope {

class StepExporter {
 public:
  virtual ~StepExporter() = default;
  virtual bool ExportStep(const StepProfile& step) noexcept = 0;
  virtual bool ExportRun(const RunInfo& run) noexcept = 0;
  virtual bool Flush(std::chrono::milliseconds timeout) noexcept { (void)timeout; return true; }
  virtual void Shutdown() noexcept {}
};

}  // namespace rlscope
