// Cross-stack attribution: where a process's time went, by category (the
// Python interpreter, the ML backend, the CUDA API, the simulator, other
// native code, the profiler itself) from the CPU sampler's samples
// (collector/cpu_sampler.h: every thread of the process; each stands for the
// thread CPU time since the thread's previous one), and why its recording
// threads were off CPU (collector/thread_states.h: the GIL, a lock, a poll,
// I/O, sleep, the run queue, a CUDA synchronisation), with the coverage: the
// sampled CPU time over the process's own. Pure functions, no I/O;
// docs/summary_format.md says what each number means.
//
// Classification of one sample, first match wins:
//   1. profiler: a thread the collector runs (its flush thread, ZeroMQ's);
//      cuda_api: inside a CUDA runtime or driver API call of its thread
//      (CUPTI records, where a GPU is traced), whatever code ran there
//      (ClassifyStepSamples);
//   2. the native chain: the objects of its frames from the interrupted one
//      outwards, up to the interpreter, the first that the profiler's own
//      (the collector, rlscope_ray's native module) or the config's cuda_api,
//      backend or simulator patterns name (config.h Attribution): libc's
//      memcpy called by libtorch is the backend's, libm's sin called by a
//      simulator's library the simulator's. Profiler, cuda_api and simulator
//      decide here;
//   3. the module of the thread's current Python frame: the rlscope_ray
//      package is the profiler's, a simulator module the simulator's (its
//      step, numerics it calls included);
//   4. a backend object of step 2, then the backend and cuda_api modules;
//   5. the interpreter (the python patterns, reached from the leaf through
//      system libraries alone) is python; anything else, other.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aggregator/records.h"
#include "native/config.h"
#include "native/event.h"

namespace rlscope {

enum class CpuCategory : uint8_t {
  kPython = 0,
  kBackend = 1,
  kCudaApi = 2,
  kSimulator = 3,
  kOther = 4,
  kProfiler = 5,
};
inline constexpr size_t kCpuCategories = 6;
// "python", "backend", "cuda_api", "simulator", "other", "profiler" (names.h).
const char* CpuCategoryName(CpuCategory c);
// "other", "gil", "lock", "poll", "io", "sleep", "cpu_wait", "cuda_sync".
const char* OffCpuReasonName(int reason);

// Whether `pattern` names the shared object at `path`: a glob on its file
// name ("libtorch*"); a bare name (no glob characters) also its library stem
// ("mujoco": libmujoco.so.3.1) and, for an object under site-packages or
// dist-packages, its dotted module path and that path's packages ("jaxlib":
// jaxlib/xla_extension.so); a pattern with a '/' is a glob on the whole path.
bool MatchesObject(std::string_view pattern, std::string_view path);
// Whether `pattern` names the Python module `module`: a glob
// ("gymnasium.*"), or a bare name for the module and its submodules.
bool MatchesModule(std::string_view pattern, std::string_view module);

// The config's patterns, ready to classify samples (thread-compatible: one
// per analysis; the cache is not shared).
class AttributionRules {
 public:
  AttributionRules() : AttributionRules(Config::Attribution{}) {}
  explicit AttributionRules(const Config::Attribution& patterns);
  // A sample in the shared object `object` ("" unknown), called from the
  // objects `callers` ('\n'-joined outwards, "" not walked), while the
  // thread's current Python frame was in `module` ("" none); steps 2 to 6
  // above.
  CpuCategory Classify(std::string_view object, std::string_view module, std::string_view callers = {}) const;
  const Config::Attribution& patterns() const { return patterns_; }

 private:
  Config::Attribution patterns_;
};

struct StepProfile;  // step_profile.h

// Where one window's (or several windows') CPU time went: what a
// breakdown row carries (breakdown.h).
struct Attribution {
  std::array<int64_t, kCpuCategories> ns{};  // CPU time per category; profiler includes the sampler's own cost
  int64_t samples = 0;
  double weight_sq_ns2 = 0;  // the samples' weights squared, summed: the sampling error's
  int64_t max_weight_ns = 0;
  int64_t gpu_ns = 0;             // the process's GPU busy time (kernels, copies, sets)
  int64_t idle_ns = 0;            // window time with neither its threads on a CPU (as sampled) nor its GPU busy
  int64_t cuda_api_wall_ns = -1;  // its threads' CUDA API calls, wall time (CUPTI); -1 none traced
  // Off CPU: the recording threads' wall time not running, per OffCpuReason
  // (native/event.h), summed over threads; the looks it came from.
  std::array<int64_t, kOffCpuReasons> off_ns{};
  int64_t off_samples = 0;
  // The process's own CPU time over the part of the window its CPU points
  // cover, and the sampled CPU time in that part (-1 unknown): coverage is
  // their ratio.
  int64_t process_cpu_ns = -1;
  int64_t covered_cpu_ns = 0;
  int threads = 0;  // threads with CPU samples in the window
  void Add(const Attribution& o);
  int64_t off_cpu_ns() const {
    int64_t total = 0;
    for (int64_t v : off_ns) total += v;
    return total;
  }
  // Sampled CPU over the process's CPU time; -1 unknown.
  double Coverage() const {
    return process_cpu_ns > 0 ? static_cast<double>(covered_cpu_ns) / static_cast<double>(process_cpu_ns) : -1;
  }
  // CPU time in all categories; less the profiler's; category c's share of that.
  int64_t cpu_ns() const {
    int64_t total = 0;
    for (int64_t v : ns) total += v;
    return total;
  }
  int64_t job_cpu_ns() const { return cpu_ns() - ns[static_cast<size_t>(CpuCategory::kProfiler)]; }
  double Share(CpuCategory c) const;
  // One standard deviation of category c's time from sampling (as random
  // sampling would err; CPU-time sampling of long phases errs less).
  double ErrorNs(CpuCategory c) const;
};

// Sets the category of every CPU sample of the step (ProcessSlice::
// cpu_samples): step 2 from each slice's CUDA API records, the rest by
// `rules` on the process's names. After correction (times are compared with
// the API records'), before the breakdown and the exporters read them.
void ClassifyStepSamples(StepProfile* step, const AttributionRules& rules);

}  // namespace rlscope
