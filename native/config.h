// The profiler's configuration: one YAML (or JSON) document, validated.
//
// The key table in config.cc (kKeySpecs) is the single source of every key's
// name, default, validation and help text; `rlscope-ray check` prints from it.
// Errors name the source, line and column, and the full key path, e.g.
//   ppo.yaml:4:8: steps: range "5-2" is empty (start 5 > end 2)
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "native/names.h"

namespace rlscope {

// A set of non-negative integers: `all`, or an explicit sorted list.
struct IntSelection {
  bool all = true;
  std::vector<int64_t> values;  // sorted, unique; meaningful when !all
  bool Contains(int64_t v) const;
  std::string ToString() const;  // "all" or "[1, 2, 5]"
};

struct Config {
  std::string aggregator = "auto";
  std::string output_dir = "rlscope_out";
  // The files of each written step besides summary.json (aggregator/outputs.h,
  // the only reader of this list):
  // "json" trace.json, "pftrace" trace.pftrace (perfetto_trace.h), "db" the
  // run database run.duckdb, kept by a process beside the aggregator from
  // each step's trace.json and summary.json (docs/run_database.md).
  struct Output {
    std::vector<std::string> formats = {names::kFormatJson, names::kFormatPftrace, names::kFormatDb};
  } output;
  IntSelection ranks;
  IntSelection steps;
  std::vector<std::string> subtasks;
  bool discrete = false;
  bool controller = true;
  std::string capture_range = "controller";
  // Processes a profiled process starts (collector/children.h): command-line
  // globs; {"*"} is "all", {} is "none".
  std::vector<std::string> children = {"*"};
  struct Cpu {
    bool nvtx = true;
    bool python_api = true;
    // CPU sampling for cross-stack attribution (collector/cpu_sampler.h):
    // samples per second of each profiled thread's own CPU time, inside
    // capture windows only; 0 off. The kernel checks CPU timers at its tick
    // (CONFIG_HZ, often 250): above that, one sample stands for several periods.
    int64_t sampling_hz = 1000;
    // Which threads are sampled: "all" (every thread of the process, those
    // that never record an event too: torch's and OpenMP's pools, loaders,
    // NCCL's, Ray's) or "recording" (only threads that recorded an event).
    std::string threads = "all";
    // Off-CPU sampling (collector/thread_states.h): looks per second at why
    // each recording thread is not running (the GIL, a lock, a socket poll,
    // I/O, sleep, the run queue), from the flush thread, in capture windows;
    // at most one look per flush. 0 off.
    int64_t off_cpu_hz = 50;
  } cpu;
  // Cross-stack attribution (aggregator/attribution.h): which shared objects
  // and Python modules count as which category. Each list replaces its
  // default. A pattern matches a shared object by its file name (glob:
  // "libtorch*"), a bare name also its library stem ("mujoco" matches
  // libmujoco.so.3) and, for objects in site-packages, the dotted module
  // path ("jaxlib.xla_extension"); a pattern with a '/' the whole path. It
  // matches a Python module by glob ("gymnasium.*") or, bare, the module and
  // its submodules ("gymnasium" matches gymnasium.envs.cartpole).
  struct Attribution {
    std::vector<std::string> python = {"python*", "libpython*", "*/lib-dynload/*"};
    std::vector<std::string> backend = {
        "libtorch*",      "libc10*",   "libshm*",      "torch._C",     "libcublas*",         "libcudnn*",
        "libnccl*",       "libcufft*", "libcurand*",   "libcusparse*", "libcusolver*",       "libgomp*",
        "libiomp*",       "libmkl*",   "libopenblas*", "libdnnl*",     "libsleef*",          "jaxlib",
        "libtensorflow*", "jax",       "numpy",        "scipy",        "libscipy_openblas*", "libgfortran*"};
    std::vector<std::string> cuda_api = {"libcuda.*", "libcudart*", "libcupti*", "libnvidia-*"};
    std::vector<std::string> simulator = {};
  } attribution;
  struct Gpu {
    bool kernels = true;
    bool memcpy = true;
    bool memset = true;
    bool runtime_api = true;
    bool driver_api = false;
    bool sync = true;
    bool memory = true;  // allocations and releases (CUPTI MEMORY2): the GPU memory allocated per step
  } gpu;
  struct Buffers {
    int64_t per_thread_kb = 1024;
    int64_t max_mb = 256;
    // The collector's spool (collector/spool.h): sent batches kept until the
    // aggregator wrote their step, and batches it could not send yet; in
    // memory, then in an unlinked temporary file.
    int64_t spool_mb = 64;
    int64_t spool_file_mb = 1024;
  } buffers;
  struct Flush {
    int64_t interval_ms = 20;
    int64_t exit_timeout_ms = 1000;
    int64_t step_grace_ms = 5000;
    int64_t window_slack_ms = 20;
  } flush;
  struct Correction {
    bool enabled = true;
    double scale = 1.0;         // applied to every calibrated cost
    int64_t sample_every = 64;  // in-place cost sampling: one handler call in N per thread is timed; 0 off
  } correction;
  // Always on (native/steps.h RecordedSteps; aggregator/triggers.h): every
  // step is recorded and its figures written (figures.jsonl, the run
  // database's rows); `steps` are written in full, and so is a step that goes
  // wrong, decided after it ended (collectors keep its records until then).
  struct AlwaysOn {
    bool enabled = false;
    // CPU samples per second in steps `steps` does not choose (cpu.sampling_hz in those it does):
    // 50, chosen for the always-on budget (at 100 the sampler took 0.04 ms more of the demo's
    // job threads a step, docs/always_on.md), one sample every 20 ms of a thread's CPU.
    int64_t sampling_hz = 50;
    // A step is written in full when its (corrected) time is above this many
    // times the median of the recent steps and above it by min_slower_ms (a
    // millisecond step twice as long is noise, not a step gone wrong); slower_than 0 off.
    double slower_than = 1.5;
    int64_t min_slower_ms = 100;
    // ... or when a process's resident or GPU memory grew this much within it; 0 off.
    int64_t memory_jump_mb = 1024;
    // The run's first steps never trigger and are no one's baseline (start-up, compilation, caches).
    int64_t warmup_steps = 3;
    int64_t recent_steps = 20;  // the baseline: the median of this many eligible steps before
  } always_on;
  // Live per-step figures as Prometheus metrics (rlscope_ray/metrics.py),
  // served by the run database's follower beside the aggregator; port 0 off.
  struct Metrics {
    int64_t port = 0;
    std::string host = "127.0.0.1";
  } metrics;
  struct Clock {
    int64_t probe_interval_ms = 1000;  // 0 = no clock probes (one host)
    int64_t probes_per_burst = 8;
    // Probes on the aggregator's UDP port of their own (probe_server.h),
    // falling back to the connection; false: on the connection only.
    bool udp_probes = true;
    // A step waits (up to flush.step_grace_ms) for a process whose clock
    // error bound is above max(max_bound_us, max_bound_fraction x the
    // step's duration), and is marked if it never comes down (replaces
    // clock.warn_bound_us, which only warned).
    int64_t max_bound_us = 100;
    double max_bound_fraction = 0.01;
  } clock;
};

// A set of keys by dotted path ("steps", "correction.scale").
using KeySet = std::set<std::string>;

struct ConfigResult {
  Config config;
  std::vector<std::string> errors;  // empty when valid
  KeySet keys;                      // the keys the text set (the others are defaults)
  bool ok() const { return errors.empty(); }
};

// Parses `text` (YAML or JSON). `source` names it in error messages.
ConfigResult ParseConfig(const std::string& text, const std::string& source);

// Reads a file; a missing or unreadable file is one error naming the path.
ConfigResult LoadConfigFile(const std::string& path);

// The RLSCOPE_CONFIG convention: empty means defaults; a value that contains a
// newline, starts with '{', or contains ':' and names no file is inline
// YAML/JSON (`steps: all`); anything else is a path.
ConfigResult LoadConfigFromEnvValue(const std::string& value);

// The resolved configuration as YAML: every key, defaults filled in; or only
// the keys in `only`.
std::string ConfigToYaml(const Config& config, const KeySet* only = nullptr);
// The same as JSON, typed (booleans, numbers, strings, lists; a selection is
// "all" or a list of integers), sections as nested objects.
std::string ConfigToJson(const Config& config, const KeySet* only = nullptr);

// ---- Layers: the one merge.
// A config arrives in layers (rlscope_ray.init's config, a config file, the
// keys of a runtime_env "rlscope" value, the job's over an actor's own);
// each layer is YAML or JSON text, checked by this parser.
struct ConfigLayer {
  std::string text;
  std::string source;   // names the layer in errors
  bool located = true;  // false: a generated text; its errors name the source without line and column
};
// The layers in order, each over those before it: a key a later layer sets
// wins, one no layer sets keeps its default. `keys`: the keys any layer set.
// Every error of every layer, naming its layer. The only place layers are
// merged: Python (rlscope_ray.init, the Ray plugin, the verl plugin) calls it.
ConfigResult MergeConfigLayers(const std::vector<ConfigLayer>& layers);

// One line per key: "  key: default  # help". For `rlscope-ray check --keys`.
std::string ConfigKeyHelp();

// A process's own config: the values it started with (a collector's
// RLSCOPE_CONFIG, the aggregator's --config) and the keys that set them
// (the others are defaults). Its run keys hold only until the run's config
// is decided (aggregator/run_config.h, the run config) and adopted.
struct ProcessConfig {
  Config config;
  KeySet keys;
};

// ---- One config per run.
// The run keys (ranks, steps, subtasks, discrete, controller, correction.*,
// cpu.sampling_hz, attribution.*)
// are decided once per run, by the run's config: the aggregator's own (its
// --config, else the defaults) with the run keys the controller's config sets
// over it (under rlscope_ray.init the driver, the aggregator and every actor
// get the same config). The aggregator decides it at the controller's first
// Hello and sends it to every collector, which adopts all its run keys
// (Control.run_config); the other keys stay each process's own.

// Copies the run keys of `run` into `into` (those in `only`, when given).
void AdoptRunKeys(const Config& run, Config* into, const KeySet* only = nullptr);
// The run keys on which `ours` and `theirs` differ (among `only`, when
// given), one "key: ours vs theirs" each ("steps: all vs [2, 4]"); empty
// when they agree.
std::vector<std::string> RunKeyDifferences(const Config& ours, const Config& theirs, const KeySet* only = nullptr);
// The run keys among `keys`.
KeySet RunKeysIn(const KeySet& keys);
// Whether a process is profiled under `config`: a controller when
// `controller` is on, a worker when `ranks` holds its rank (unknown = 0).
bool SelectsProcess(const Config& config, bool is_controller, int64_t rank);

// The aggregator's endpoint, the one rule everywhere (collector, Ray plugin,
// rlscope_ray.init): the first explicit value that is set and not "auto"
// (RLSCOPE_AGGREGATOR in a process's environment; the actor's 'aggregator'
// key, then the job's; init's aggregator= argument), else the config's
// `aggregator` unless it is "auto". "" = none (a process is then not
// profiled; init starts its own).
std::string ResolveEndpoint(const std::vector<std::string>& explicit_values, const Config& config);

}  // namespace rlscope
