// Processes that a profiled process starts (config `children`): whether a
// process that inherited another's profiling environment is profiled as
// that process's child, and who it is then.
//
// Contract: a process whose RLSCOPE_OWNER_PID names another process was
// started (directly or not) by a profiled one: a fork+exec, `subprocess`,
// multiprocessing spawn or forkserver, a shell's child. It is profiled as
// a child when
//   - it is not one of Ray's own helper processes (IsRayHelper: raylet, the
//     GCS, the dashboard and its agent, the runtime-env agent, the log
//     monitor, Ray workers the Ray plugin did not profile), and
//   - the config's `children` lets it in: "all" (every pattern "*"),
//     "none" (no pattern), or globs matched against its command line (one
//     string, argv joined by spaces) and against each argument and each
//     argument's file name ("*vllm*", "engine_core.py").
// A child records as a worker with its parent's rank (inherited), labelled
// with its parent's pid and actor class and its own command line.
#pragma once

#include <string>
#include <vector>

namespace rlscope {

// This process's argv (/proc/self/cmdline; Ray's workers rewrite it to
// their title, "ray::IDLE").
std::vector<std::string> ReadCommandLine();

// argv joined by spaces, at most `max_chars` (then "...").
std::string JoinCommandLine(const std::vector<std::string>& args, size_t max_chars = 512);

// One of Ray's own processes (or an unprofiled Ray worker) by its argv.
bool IsRayHelper(const std::vector<std::string>& args);

// Whether `children` (config: patterns; {"*"} all, {} none) lets in a
// process with this argv.
bool ChildSelected(const std::vector<std::string>& patterns, const std::vector<std::string>& args);

}  // namespace rlscope
