// Names that cross languages or processes, spelled once. C++ uses these
// constants; Python reads the same strings from rlscope_ray._native.names
// (python/bindings/native_module.cc exports kAll under the names given there).
// Changing one changes the wire contract with traces written before: add,
// never rename.
#pragma once

#include <utility>

namespace rlscope::names {

// Ranges and marks the profiler itself gives meaning to.
inline constexpr char kStep[] = "step";             // a controller's training step
inline constexpr char kRaySubmit[] = "ray.submit";  // controller, just before an actor call
inline constexpr char kRayTask[] = "ray.task";      // controller, the call's task key (payload)
inline constexpr char kRayGot[] = "ray.got";        // controller, the call's result is in (payload: key)
// Controller, a wait on other processes is over (a queue, a pipe, a
// collective; payload: a key the user gave, rlscope_ray.waited): the work
// it waited for is any other process's range with the same payload.
inline constexpr char kWaited[] = "rlscope.waited";
// Controller, just before a step range whose number the aggregator would not
// derive from the range itself (payload: the number; steps.h).
inline constexpr char kStepNumber[] = "rlscope.step_number";
// Events of in-process calibration (collector/cost_sampling.cc, rlscope_ray/calibration.py):
// recorded and shipped to measure costs, left out of every step.
inline constexpr char kCalibration[] = "rlscope.calibration";

// Roles (RLSCOPE_ROLE, Hello identity.role).
inline constexpr char kController[] = "controller";
inline constexpr char kWorker[] = "worker";

// Environment variables read by the collector.
inline constexpr char kEnvAggregator[] = "RLSCOPE_AGGREGATOR";  // endpoint (rule: config.h ResolveEndpoint)
inline constexpr char kEnvConfig[] = "RLSCOPE_CONFIG";          // path, or inline YAML/JSON
inline constexpr char kEnvRole[] = "RLSCOPE_ROLE";
inline constexpr char kEnvRank[] = "RLSCOPE_RANK";
inline constexpr char kEnvOwnerPid[] = "RLSCOPE_OWNER_PID";  // the process the environment is for
inline constexpr char kEnvDisable[] = "RLSCOPE_DISABLE";
// The Ray actor class of the profiled process that set it (rlscope_ray's
// worker bootstrap): its children, which inherit it, are labelled with it.
inline constexpr char kEnvParentActor[] = "RLSCOPE_PARENT_ACTOR";
// The run's secret (Hello.secret): collectors send it, the aggregator
// requires it when it has one. Read from the environment, never argv.
inline constexpr char kEnvSecret[] = "RLSCOPE_SECRET";
inline constexpr char kEnvLabelPrefix[] = "RLSCOPE_LABEL_";  // RLSCOPE_LABEL_<KEY>=value
// Where what could not be delivered at exit is left (native/spool_file.h):
// the root of the per-run directories, on every node. Read by collectors,
// the aggregator, relays and `rlscope-ray recover` alike.
inline constexpr char kEnvSpoolDir[] = "RLSCOPE_SPOOL_DIR";
inline constexpr char kEnvClock[] = "RLSCOPE_CLOCK";           // "monotonic": no TSC
inline constexpr char kEnvTestCosts[] = "RLSCOPE_TEST_COSTS";  // test_clock.h
inline constexpr char kEnvTestClock[] = "RLSCOPE_TEST_CLOCK";
// Test only (collector/transport.h): "MS" stamps every clock probe's answer
// MS milliseconds late, as a descheduled flush thread reads it; "MS:N" only
// in the first N bursts; "MS:own" only in the bursts it starts itself (those
// the aggregator asks for, Control.probe, are read on time); "drop",
// "drop:N", "drop:own" take no answer in those bursts instead.
inline constexpr char kEnvTestProbeLate[] = "RLSCOPE_TEST_PROBE_LATE";

// Labels of a child of a profiled process (collector/children.h).
inline constexpr char kLabelParentPid[] = "parent_pid";
inline constexpr char kLabelParentActor[] = "parent_actor";
inline constexpr char kLabelCommandLine[] = "command_line";

// Chrome trace categories ("cat") of what the aggregator writes besides
// NVTX ranges (whose category is their domain's name).
inline constexpr char kCatKernel[] = "gpu";
inline constexpr char kCatMemcpy[] = "gpu_memcpy";
inline constexpr char kCatMemset[] = "gpu_memset";
inline constexpr char kCatCudaApi[] = "cuda_api";
inline constexpr char kCatCudaSync[] = "cuda_sync";
inline constexpr char kCatCuptiOverhead[] = "cupti_overhead";
inline constexpr char kCatLaunch[] = "launch";     // launch -> kernel flow arrows
inline constexpr char kCatRayCall[] = "ray_call";  // a Ray call's submit -> its execution
// The category tracks of CPU samples, one per sampled thread.
inline constexpr char kCatCpuSamples[] = "cpu_samples";
inline constexpr char kCatOffCpu[] = "off_cpu";

// run.json's "format" (aggregator/run_json.cc): what readers of a run
// directory (rlscope-ray report, query, export) know how to read.
inline constexpr char kRunFormat[] = "rlscope-ray run v1";
// Every written step's figures, one JSON line per step, in the run's
// directory (aggregator/figures_json.h; always on: the only record of a
// figures-only step). Read by the run database, `rlscope-ray diff` and the
// metrics endpoint.
inline constexpr char kFiguresFile[] = "figures.jsonl";

// output.formats' names (native/config.h; aggregator/outputs.h builds the
// aggregator's, the run database follower, rlscope_ray/rundb_follow.py, writes db).
inline constexpr char kFormatJson[] = "json";        // step_<N>/trace.json
inline constexpr char kFormatPftrace[] = "pftrace";  // step_<N>/trace.pftrace
inline constexpr char kFormatDb[] = "db";            // run.duckdb

// Cross-stack attribution's categories (aggregator/attribution.h): keys of
// summary.json's breakdown[].attribution, names of the trace's sample slices.
inline constexpr char kCpuPython[] = "python";
inline constexpr char kCpuBackend[] = "backend";
inline constexpr char kCpuCudaApi[] = "cuda_api";
inline constexpr char kCpuSimulator[] = "simulator";
inline constexpr char kCpuOther[] = "other";
inline constexpr char kCpuProfiler[] = "profiler";

// Every name above, as Python sees it (rlscope_ray._native.names.<NAME>).
inline constexpr std::pair<const char*, const char*> kAll[] = {
    {"STEP", kStep},
    {"RAY_SUBMIT", kRaySubmit},
    {"RAY_TASK", kRayTask},
    {"RAY_GOT", kRayGot},
    {"WAITED", kWaited},
    {"STEP_NUMBER", kStepNumber},
    {"CALIBRATION", kCalibration},
    {"CONTROLLER", kController},
    {"WORKER", kWorker},
    {"ENV_AGGREGATOR", kEnvAggregator},
    {"ENV_CONFIG", kEnvConfig},
    {"ENV_ROLE", kEnvRole},
    {"ENV_RANK", kEnvRank},
    {"ENV_OWNER_PID", kEnvOwnerPid},
    {"ENV_DISABLE", kEnvDisable},
    {"ENV_PARENT_ACTOR", kEnvParentActor},
    {"ENV_SECRET", kEnvSecret},
    {"ENV_LABEL_PREFIX", kEnvLabelPrefix},
    {"ENV_SPOOL_DIR", kEnvSpoolDir},
    {"ENV_CLOCK", kEnvClock},
    {"ENV_TEST_COSTS", kEnvTestCosts},
    {"ENV_TEST_CLOCK", kEnvTestClock},
    {"CAT_KERNEL", kCatKernel},
    {"CAT_MEMCPY", kCatMemcpy},
    {"CAT_MEMSET", kCatMemset},
    {"CAT_CUDA_API", kCatCudaApi},
    {"CAT_CUDA_SYNC", kCatCudaSync},
    {"CAT_CUPTI_OVERHEAD", kCatCuptiOverhead},
    {"CAT_LAUNCH", kCatLaunch},
    {"CAT_RAY_CALL", kCatRayCall},
    {"CAT_CPU_SAMPLES", kCatCpuSamples},
    {"CAT_OFF_CPU", kCatOffCpu},
    {"CPU_PYTHON", kCpuPython},
    {"CPU_BACKEND", kCpuBackend},
    {"CPU_CUDA_API", kCpuCudaApi},
    {"CPU_SIMULATOR", kCpuSimulator},
    {"CPU_OTHER", kCpuOther},
    {"CPU_PROFILER", kCpuProfiler},
    {"RUN_FORMAT", kRunFormat},
    {"FIGURES_FILE", kFiguresFile},
    {"FORMAT_JSON", kFormatJson},
    {"FORMAT_PFTRACE", kFormatPftrace},
    {"FORMAT_DB", kFormatDb},
};

}  // namespace rlscope::names
