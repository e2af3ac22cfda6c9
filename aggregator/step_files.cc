#include "aggregator/step_files.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <set>
#include <utility>

#include "aggregator/atomic_file.h"

namespace rlscope {
namespace {

struct StringSink : OutputSink {
  std::string data;
  void Write(std::string_view d) override { data.append(d); }
};

}  // namespace

StepFiles::StepFiles(std::string out_dir, std::vector<std::unique_ptr<Output>> outputs,
                     std::vector<std::string> formats)
    : out_dir_(std::move(out_dir)), outputs_(std::move(outputs)), formats_(std::move(formats)) {}

int64_t StepFiles::TracePid(uint64_t session, int64_t pid) {
  auto it = trace_pids_.find(session);
  if (it != trace_pids_.end()) return it->second;
  std::set<int64_t> used;
  for (const auto& [s, tp] : trace_pids_) used.insert(tp);
  int64_t tp = pid;
  while (used.count(tp) != 0) tp += 10000000;  // same pid on another host
  trace_pids_[session] = tp;
  return tp;
}

bool StepFiles::MakeDir(const std::string& dir) {
  if (MakeDirs(dir)) return true;
  last_error_ = "cannot create " + dir + ": " + std::strerror(errno);
  return false;
}

template <typename WriteFn>
bool StepFiles::WriteFile(const std::string& path, WriteFn write) {
  AtomicFile file(path);
  try {
    write(&file);
  } catch (const std::exception& e) {
    last_error_ = path + ": " + e.what();
    return false;  // the temporary file goes with `file`
  }
  if (file.Commit()) return true;
  last_error_ = file.error();
  return false;
}

bool StepFiles::ExportStep(const StepProfile& step) noexcept {
  if (shut_) {
    last_error_ = "step " + std::to_string(step.step) + " exported after the exporter shut down";
    return false;
  }
  try {
    for (const ProcessSlice& slice : step.processes) {
      TracePid(slice.process->hello().session, slice.process->identity().pid);
    }
    if (!step.figures_only) {
      std::string dir = out_dir_ + "/step_" + std::to_string(step.step);
      if (!step.capture.empty()) dir += "/" + step.capture;
      if (!MakeDir(dir)) return false;
      for (const std::unique_ptr<Output>& o : outputs_) {
        if (*o->step_file() == '\0' || (step.summary_only && o->full_detail())) continue;
        if (!WriteFile(dir + "/" + o->step_file(), [&](OutputSink* f) { o->WriteStep(step, trace_pids_, f); })) {
          return false;
        }
      }
    }
    // The run's logs last: a step's line is there once its files are.
    for (const std::unique_ptr<Output>& o : outputs_) {
      if (*o->run_log_file() == '\0' || !step.capture.empty()) continue;
      StringSink line;
      o->WriteStep(step, trace_pids_, &line);
      std::string& pending = logs_[o->run_log_file()];
      pending += line.data;
      if (pending.size() >= kLogPendingBytes && !FlushLogs()) return false;
    }
    return true;
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return false;
  }
}

bool StepFiles::ExportRun(const RunInfo& run) noexcept {
  if (shut_) {
    last_error_ = "the run's record exported after the exporter shut down";
    return false;
  }
  try {
    if (!MakeDir(out_dir_) || !FlushLogs()) return false;
    for (const std::unique_ptr<Output>& o : outputs_) {
      if (*o->run_file() == '\0') continue;
      if (!WriteFile(out_dir_ + "/" + o->run_file(), [&](OutputSink* f) { o->WriteRun(run, f); })) return false;
    }
    return true;
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return false;
  }
}

bool StepFiles::FlushLogs() {
  for (auto& [name, pending] : logs_) {
    if (pending.empty()) continue;
    if (!MakeDir(out_dir_) || !AppendWhole(out_dir_ + "/" + name, pending, &last_error_)) return false;
    pending.clear();
  }
  return true;
}

bool StepFiles::Flush(std::chrono::milliseconds timeout) noexcept {
  (void)timeout;  // nothing waits on a thread here
  try {
    return FlushLogs();
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return false;
  }
}

StepFiles::~StepFiles() {
  if (!shut_) Flush(std::chrono::milliseconds(0));
}

void StepFiles::Shutdown() noexcept {
  if (!shut_) Flush(std::chrono::milliseconds(0));  // what the last ExportRun did not take
  shut_ = true;
  logs_.clear();
  for (const std::unique_ptr<Output>& o : outputs_) o->Shutdown();
}

}  // namespace rlscope
