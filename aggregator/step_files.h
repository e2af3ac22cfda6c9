// The run's files: a StepExporter over one Output per file (exporter.h).
// Per written step, <out>/step_<N>[/<capture>]/ with each Output's step
// file (a step whose detail is figures only, StepProfile::summary_only,
// gets those that are not full detail; one whose detail is figures only,
// StepProfile::figures_only, none); per run, each Output's run file in
// <out>, and each Output's run log, to which every whole step appends a
// line. A step's files are written whole before ExportStep returns
// (atomic_file.h: a reader never sees half of one); its log lines wait and
// go out at the next ExportRun, Flush or Shutdown (Log). A failed write
// leaves no temporary file and says why (last_error). outputs.h builds one
// from output.formats.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/exporter.h"

namespace rlscope {

class StepFiles : public StepExporter {
 public:
  // `formats`: what run.json records it writes (the factory's resolved list).
  StepFiles(std::string out_dir, std::vector<std::unique_ptr<Output>> outputs, std::vector<std::string> formats);
  // Writes the log lines still pending (a daemon that stopped on a write
  // error: those steps were not released, and are written again, whole,
  // by the aggregator started next; a reader keeps a step's last line).
  ~StepFiles() override;
  bool ExportStep(const StepProfile& step) noexcept override;
  bool ExportRun(const RunInfo& run) noexcept override;
  // Writes the log lines pending; nothing else waits here.
  bool Flush(std::chrono::milliseconds timeout) noexcept override;
  // Stops every output's threads; exports after it fail.
  void Shutdown() noexcept override;
  std::vector<std::string> formats() const override { return formats_; }

  const std::string& last_error() const { return last_error_; }

 private:
  // The pid a process has in the run's traces (TracePids).
  int64_t TracePid(uint64_t session, int64_t pid);
  // Creates `dir` (and its parents); false with last_error.
  bool MakeDir(const std::string& dir);
  // One output's file at `path`, encoded by `write` and committed; false with last_error.
  template <typename WriteFn>
  bool WriteFile(const std::string& path, WriteFn write);

  std::string out_dir_;
  std::vector<std::unique_ptr<Output>> outputs_;
  std::vector<std::string> formats_;
  TracePids trace_pids_;
  // Appends what the run's logs hold pending; false with last_error.
  bool FlushLogs();

  // The run logs' lines not yet written (Output::run_log_file:
  // figures.jsonl), by file name. They wait for the next ExportRun (the
  // aggregator's release point, at most about a second apart while steps
  // come: a line is on disk before the resume point that says its step is
  // done, and before any collector forgets the step), Flush or Shutdown, or
  // until kLogPendingBytes: one open, write and close a second instead of
  // one a step.
  static constexpr size_t kLogPendingBytes = 1 << 20;
  std::map<std::string, std::string> logs_;
  bool shut_ = false;
  std::string last_error_;
};

}  // namespace rlscope
