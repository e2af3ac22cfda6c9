// The export contract. The aggregator hands each written step and the run's
// record to one StepExporter; the run's files are StepFiles (step_files.h),
// a StepExporter over one Output per file, built by the one factory
// (outputs.h), the only reader of output.formats. What they are handed is
// step_profile.h's. Export is never called concurrently; no method throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/step_profile.h"

namespace rlscope {

// session -> the pid a process has in the step's traces (unique across
// hosts; the same in every trace file of the run).
using TracePids = std::map<uint64_t, int64_t>;

// Where an Output writes: a file being written (atomic_file.h), or a
// string in tests and benchmarks.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  virtual void Write(std::string_view data) = 0;
};

// One output file: written into each step's directory (step_file) and/or
// the run's (run_file). To add a format, write one Output and register it
// in outputs.cc. An Output only encodes: StepFiles makes the directories,
// opens, commits or discards the file, and catches what it throws.
class Output {
 public:
  virtual ~Output() = default;
  // The file's name in a step's directory, or "" (none per step).
  virtual const char* step_file() const { return ""; }
  // The file's name in the run's directory, or "" (none per run).
  virtual const char* run_file() const { return ""; }
  // A file in the run's directory that each whole step (not a discrete
  // capture) appends its WriteStep to, figures-only steps included; or "".
  virtual const char* run_log_file() const { return ""; }
  // A trace (a step in full detail): left out of a step whose detail is
  // figures only (StepProfile::summary_only, chosen per step, after it ended).
  virtual bool full_detail() const { return false; }
  virtual void WriteStep(const StepProfile& step, const TracePids& pids, OutputSink* out) {
    (void)step, (void)pids, (void)out;
  }
  virtual void WriteRun(const RunInfo& run, OutputSink* out) { (void)run, (void)out; }
  // Stops any thread of its own; it writes no more after.
  virtual void Shutdown() noexcept {}
};

class StepExporter {
 public:
  virtual ~StepExporter() = default;
  // True once the step's files are complete where they go; its line in a
  // run log may wait for the next ExportRun or Flush, which write it first
  // (the aggregator releases the collectors' copies only after an
  // ExportRun); false when one could not be written.
  virtual bool ExportStep(const StepProfile& step) noexcept = 0;
  // The run's record, rewritten whole each time (final at the run's end),
  // after every step line exported before it; false when either failed.
  virtual bool ExportRun(const RunInfo& run) noexcept = 0;
  // Waits, up to `timeout`, for anything handed over and not yet where it
  // goes; false when some is still not. (StepFiles writes its run logs'
  // pending lines; nothing else waits there.)
  virtual bool Flush(std::chrono::milliseconds timeout) noexcept {
    (void)timeout;
    return true;
  }
  // Stops its threads; every export after it fails.
  virtual void Shutdown() noexcept {}
  // The output formats it writes, as run.json records them (output_formats).
  virtual std::vector<std::string> formats() const { return {}; }
};

}  // namespace rlscope
