#include "aggregator/attribution.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <string>
#include <unordered_map>
#include <utility>

#include "aggregator/step_profile.h"
#include "native/gpu_record.h"
#include "native/names.h"

namespace rlscope {

namespace {

bool IsGlob(std::string_view p) { return p.find_first_of("*?[") != std::string_view::npos; }

bool Glob(std::string_view pattern, std::string_view text) {
  return fnmatch(std::string(pattern).c_str(), std::string(text).c_str(), 0) == 0;
}

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// "libmujoco.so.3.1" -> "mujoco"; "_functions.cpython-311-x86_64-linux-gnu.so" -> "_functions".
std::string_view Stem(std::string_view base) {
  if (base.rfind("lib", 0) == 0 && base.size() > 3) base.remove_prefix(3);
  return base.substr(0, base.find('.'));
}

// An object under site-packages or dist-packages as a dotted module path:
// ".../site-packages/mujoco/_functions.cpython-311.so" -> "mujoco._functions"; "" elsewhere.
std::string ModulePath(std::string_view path) {
  size_t at = std::string_view::npos, skip = 0;
  for (std::string_view dir : {"site-packages/", "dist-packages/"}) {
    const size_t p = path.rfind(dir);
    if (p != std::string_view::npos && (at == std::string_view::npos || p > at)) at = p, skip = dir.size();
  }
  if (at == std::string_view::npos) return "";
  std::string rel(path.substr(at + skip));
  const size_t slash = rel.rfind('/');
  const size_t dot = rel.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot != std::string::npos) rel.resize(dot);
  std::replace(rel.begin(), rel.end(), '/', '.');
  return rel;
}

bool AnyObject(const std::vector<std::string>& patterns, std::string_view path) {
  if (path.empty()) return false;
  for (const std::string& p : patterns) {
    if (MatchesObject(p, path)) return true;
  }
  return false;
}

bool AnyModule(const std::vector<std::string>& patterns, std::string_view module) {
  if (module.empty()) return false;
  for (const std::string& p : patterns) {
    if (MatchesModule(p, module)) return true;
  }
  return false;
}

// The profiler's own code: the collector library and rlscope_ray's native
// module (where its Python API runs); its Python frames (Ray's method
// wrapper, the step class).
const std::vector<std::string>& ProfilerObjects() {
  static const std::vector<std::string> p = {"librlscope_collector*", "rlscope_ray"};
  return p;
}
const std::vector<std::string>& ProfilerModules() {
  static const std::vector<std::string> p = {"rlscope_ray"};
  return p;
}

// The system's libraries, that every kind of code calls: a chain that
// reaches the interpreter through these alone is the interpreter's own work
// (a memcpy of a Python bytes object).
const std::vector<std::string>& SystemObjects() {
  static const std::vector<std::string> p = {"libc.so*",  "libm.so*",  "libpthread*", "ld-linux*",   "libdl.so*",
                                             "librt.so*", "libgcc_s*", "libstdc++*",  "linux-vdso*", "libffi*"};
  return p;
}

// What the native chain says: the first object, from the leaf outwards and
// before the interpreter, that a category's patterns name.
struct ChainVerdict {
  bool named = false;
  CpuCategory category = CpuCategory::kOther;
  bool interpreter = false;  // reached the interpreter through system libraries alone
};

}  // namespace

const char* CpuCategoryName(CpuCategory c) {
  switch (c) {
    case CpuCategory::kPython: return names::kCpuPython;
    case CpuCategory::kBackend: return names::kCpuBackend;
    case CpuCategory::kCudaApi: return names::kCpuCudaApi;
    case CpuCategory::kSimulator: return names::kCpuSimulator;
    case CpuCategory::kOther: return names::kCpuOther;
    case CpuCategory::kProfiler: return names::kCpuProfiler;
  }
  return names::kCpuOther;
}

bool MatchesModule(std::string_view pattern, std::string_view module) {
  if (pattern.empty() || module.empty()) return false;
  if (IsGlob(pattern)) return Glob(pattern, module);
  return module == pattern || (module.size() > pattern.size() && module.substr(0, pattern.size()) == pattern &&
                               module[pattern.size()] == '.');
}

bool MatchesObject(std::string_view pattern, std::string_view path) {
  if (pattern.empty() || path.empty()) return false;
  if (pattern.find('/') != std::string_view::npos) return Glob(pattern, path);
  const std::string_view base = BaseName(path);
  if (Glob(pattern, base)) return true;
  if (!IsGlob(pattern) && Stem(base) == pattern) return true;
  const std::string module = ModulePath(path);
  return !module.empty() && MatchesModule(pattern, module);
}

AttributionRules::AttributionRules(const Config::Attribution& patterns) : patterns_(patterns) {}

CpuCategory AttributionRules::Classify(std::string_view object, std::string_view module,
                                       std::string_view callers) const {
  ChainVerdict chain;
  bool system_only = true;
  std::string_view rest = callers;
  for (std::string_view obj = object;;) {
    if (AnyObject(ProfilerObjects(), obj))
      chain = {true, CpuCategory::kProfiler, false};
    else if (AnyObject(patterns_.cuda_api, obj))
      chain = {true, CpuCategory::kCudaApi, false};
    else if (AnyObject(patterns_.backend, obj))
      chain = {true, CpuCategory::kBackend, false};
    else if (AnyObject(patterns_.simulator, obj))
      chain = {true, CpuCategory::kSimulator, false};
    else if (AnyObject(patterns_.python, obj))
      chain.interpreter = system_only;
    if (chain.named || AnyObject(patterns_.python, obj) || rest.empty()) break;
    if (!AnyObject(SystemObjects(), obj)) system_only = false;
    const size_t nl = rest.find('\n');
    obj = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  if (chain.named && chain.category != CpuCategory::kBackend) return chain.category;
  if (AnyModule(ProfilerModules(), module)) return CpuCategory::kProfiler;
  // An environment's step is the simulator's, the numerics it calls included.
  if (AnyModule(patterns_.simulator, module)) return CpuCategory::kSimulator;
  if (chain.named) return chain.category;
  if (AnyModule(patterns_.backend, module)) return CpuCategory::kBackend;
  if (AnyModule(patterns_.cuda_api, module)) return CpuCategory::kCudaApi;
  return chain.interpreter ? CpuCategory::kPython : CpuCategory::kOther;
}

const char* OffCpuReasonName(int reason) {
  static const char* const kNames[kOffCpuReasons] = {"other", "gil",   "lock",     "poll",
                                                     "io",    "sleep", "cpu_wait", "cuda_sync"};
  return reason >= 0 && reason < kOffCpuReasons ? kNames[reason] : "other";
}

void Attribution::Add(const Attribution& o) {
  for (size_t c = 0; c < kCpuCategories; ++c) ns[c] += o.ns[c];
  for (int r = 0; r < kOffCpuReasons; ++r) off_ns[r] += o.off_ns[r];
  off_samples += o.off_samples;
  if (o.process_cpu_ns >= 0) {
    process_cpu_ns = std::max<int64_t>(0, process_cpu_ns) + o.process_cpu_ns;
    covered_cpu_ns += o.covered_cpu_ns;
  }
  threads = std::max(threads, o.threads);
  samples += o.samples;
  weight_sq_ns2 += o.weight_sq_ns2;
  max_weight_ns = std::max(max_weight_ns, o.max_weight_ns);
  gpu_ns += o.gpu_ns;
  idle_ns += o.idle_ns;
  if (o.cuda_api_wall_ns >= 0) cuda_api_wall_ns = std::max<int64_t>(0, cuda_api_wall_ns) + o.cuda_api_wall_ns;
}

double Attribution::Share(CpuCategory c) const {
  const int64_t job = job_cpu_ns();
  if (c == CpuCategory::kProfiler || job <= 0) return 0;
  return static_cast<double>(ns[static_cast<size_t>(c)]) / static_cast<double>(job);
}

double Attribution::ErrorNs(CpuCategory c) const {
  // Binomial over the effective number of samples (weights differ: a sample
  // after the kernel's tick missed some periods stands for several).
  const double total = static_cast<double>(cpu_ns());
  if (total <= 0 || weight_sq_ns2 <= 0) return 0;
  const double n_eff = total * total / weight_sq_ns2;
  const double p = static_cast<double>(ns[static_cast<size_t>(c)]) / total;
  return total * std::sqrt(std::max(0.0, p * (1 - p)) / n_eff);
}

namespace {

// What rules of these patterns said of a sample's (object, module,
// callers), kept from step to step: a step's samples mostly repeat the
// steps' before, and one classification matches every pattern against every
// object of the chain. One set of patterns a run (another clears it); at
// most kMaxEntries, then it starts again.
class ClassifyMemo {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;

  CpuCategory Classify(const AttributionRules& rules, const std::string& patterns, std::string_view object,
                       std::string_view module, std::string_view callers) {
    std::string key;
    key.reserve(object.size() + module.size() + callers.size() + 2);
    key.append(object).append(1, '\0').append(module).append(1, '\0').append(callers);
    std::lock_guard<std::mutex> lock(mu_);
    if (patterns != patterns_ || memo_.size() >= kMaxEntries) {
      patterns_ = patterns;
      memo_.clear();
    }
    auto it = memo_.find(key);
    if (it == memo_.end()) it = memo_.emplace(std::move(key), rules.Classify(object, module, callers)).first;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::string patterns_;
  std::unordered_map<std::string, CpuCategory> memo_;
};

std::string PatternsKey(const Config::Attribution& a) {
  std::string key;
  for (const auto* list : {&a.python, &a.backend, &a.cuda_api, &a.simulator}) {
    for (const std::string& p : *list) key.append(p).append(1, '\0');
    key.append(1, '\1');
  }
  return key;
}

}  // namespace

void ClassifyStepSamples(StepProfile* step, const AttributionRules& rules) {
  static ClassifyMemo memo;
  const std::string patterns = PatternsKey(rules.patterns());
  for (ProcessSlice& slice : step->processes) {
    if (slice.cpu_samples.empty()) continue;
    // Each thread's CUDA API calls (CUPTI, where traced), in time order.
    std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> api;
    for (const GpuRecord& g : slice.gpu) {
      const auto kind = static_cast<GpuKind>(g.kind);
      if ((kind == GpuKind::kRuntimeApi || kind == GpuKind::kDriverApi) && g.tid != 0) {
        api[g.tid].emplace_back(g.start_ns, g.end_ns);
      }
    }
    for (auto& [tid, calls] : api) {  // sorted and merged: a driver call inside a runtime call is one
      std::sort(calls.begin(), calls.end());
      std::vector<std::pair<int64_t, int64_t>> merged;
      for (const auto& c : calls) {
        if (!merged.empty() && c.first <= merged.back().second)
          merged.back().second = std::max(merged.back().second, c.second);
        else
          merged.push_back(c);
      }
      calls = std::move(merged);
    }
    // Whether thread `tid` was inside one of its CUDA API calls at `ts`.
    auto in_api = [&](int64_t tid, int64_t ts) {
      auto it = api.find(tid);
      if (it == api.end()) return false;
      const auto& calls = it->second;  // the last call beginning at or before ts
      auto c = std::upper_bound(calls.begin(), calls.end(), std::make_pair(ts, INT64_MAX));
      return c != calls.begin() && std::prev(c)->second >= ts;
    };
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, CpuCategory> by_names;
    const ProcessView& p = *slice.process;
    for (CpuSample& s : slice.cpu_samples) {
      if (s.profiler_thread) {
        s.category = static_cast<uint8_t>(CpuCategory::kProfiler);
        continue;
      }
      if (in_api(s.tid, s.ts_ns)) {
        s.category = static_cast<uint8_t>(CpuCategory::kCudaApi);
        continue;
      }
      const auto key = std::make_tuple(s.object, s.module, s.stack);
      auto it = by_names.find(key);
      if (it == by_names.end()) {
        it =
            by_names
                .emplace(key, memo.Classify(rules, patterns, p.String(s.object), p.String(s.module), p.String(s.stack)))
                .first;
      }
      s.category = static_cast<uint8_t>(it->second);
    }
    // A thread off CPU inside a CUDA API call waits for the GPU.
    for (OffCpuSample& o : slice.off_cpu) {
      if (in_api(o.tid, o.ts_ns)) o.reason = static_cast<uint8_t>(OffCpuReason::kCudaSync);
    }
  }
}

}  // namespace rlscope
