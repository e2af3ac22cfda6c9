// Cross-stack attribution: where a process's CPU time went, by category
// (the Python interpreter, the ML backend, the CUDA API, the simulator,
// other native code, the profiler itself), from the CPU sampler's samples
// (collector/cpu_sampler.h): each stands for the thread CPU time since the
// thread's previous one, spent where the thread was interrupted. Pure
// functions, no I/O; docs/summary_format.md says what each number means.
//
// Classification of one sample, first match wins:
//   1. cuda_api: inside a CUDA runtime or driver API call of its thread
//      (CUPTI records, where a GPU is traced), whatever code ran there
//      (ClassifyStepSamples);
//   2. profiler: the collector's own library or rlscope_ray's native module;
//   3. the shared object it was in, against the config's patterns, in the
//      order cuda_api, backend, simulator (config.h Attribution);
//   4. the module of the thread's current Python frame: the rlscope_ray
//      package is the profiler's, then the simulator, backend and cuda_api
//      patterns: Python code of a simulator module, or native code it
//      called (numpy inside an environment's step) that no pattern of step 3
//      named, is the simulator's;
//   5. the interpreter (the python patterns) is python; anything else, other.
// The native code is the interrupted instruction's only: libc's memcpy
// called by libtorch counts as other (no native stack is unwound).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aggregator/records.h"
#include "native/config.h"

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
  // A sample in the shared object `object` ("" unknown) while the thread's
  // current Python frame was in `module` ("" none); steps 1, 3 to 5 above.
  CpuCategory Classify(std::string_view object, std::string_view module) const;

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
  int64_t gpu_ns = 0;       // the process's GPU busy time (kernels, copies, sets)
  int64_t idle_ns = 0;      // window time with neither its threads on a CPU (as sampled) nor its GPU busy
  int64_t cuda_api_wall_ns = -1;  // its threads' CUDA API calls, wall time (CUPTI); -1 none traced
  void Add(const Attribution& o);
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
