#include "collector/environment.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "collector/children.h"
#include "native/names.h"

namespace rlscope {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// "python3 train.py" -> "train.py"; "./my_app" -> "my_app"; a multiprocessing
// child -> "multiprocessing spawn" / "multiprocessing forkserver".
std::string ProcessName() {
  const std::vector<std::string> args = ReadCommandLine();
  auto base = [](const std::string& p) {
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  };
  if (args.empty()) {
    std::ifstream comm("/proc/self/comm");
    std::string line;
    std::getline(comm, line);
    return line;
  }
  const std::string exe = base(args[0]);
  if (exe.rfind("python", 0) == 0) {
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "-m" && i + 1 < args.size()) return args[i + 1];
      if (args[i] == "-c") {
        const std::string code = i + 1 < args.size() ? args[i + 1] : "";
        if (code.find("multiprocessing.spawn") != std::string::npos) return "multiprocessing spawn";
        if (code.find("multiprocessing.forkserver") != std::string::npos) return "multiprocessing forkserver";
        return exe + " -c";
      }
      if (!args[i].empty() && args[i][0] != '-') return base(args[i]);
    }
  }
  return exe;
}

int64_t ParseRank() {
  for (const char* name : {names::kEnvRank, "RANK"}) {
    const std::string v = Env(name);
    if (v.empty()) continue;
    char* end = nullptr;
    const long long r = std::strtoll(v.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && r >= 0) return r;
    std::fprintf(stderr, "rlscope: %s=%s is not a rank (an integer >= 0); rank unknown\n", name, v.c_str());
    return -1;
  }
  return -1;
}

std::string ParseRole() {
  const std::string role = Env(names::kEnvRole).empty() ? names::kWorker : Env(names::kEnvRole);
  if (role == names::kWorker || role == names::kController) return role;
  std::fprintf(stderr, "rlscope: %s=%s is not '%s' or '%s'; using %s\n", names::kEnvRole, role.c_str(),
               names::kController, names::kWorker, names::kWorker);
  return names::kWorker;
}

wire::Identity ReadIdentity(const Config& config) {
  wire::Identity id;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  id.host = host;
  id.pid = getpid();
  id.rank = ParseRank();
  id.role = ParseRole();
  id.name = ProcessName();
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    static const std::string kPrefix = names::kEnvLabelPrefix;
    const size_t eq = kv.find('=');
    if (kv.rfind(kPrefix, 0) == 0 && eq != std::string::npos) {
      std::string key = kv.substr(kPrefix.size(), eq - kPrefix.size());
      for (char& ch : key) ch = static_cast<char>(std::tolower(ch));
      id.labels[key] = kv.substr(eq + 1);
    }
  }
  // GPU tracing starts when the CUDA driver loads this library
  // (CUDA_INJECTION64_PATH) at its init; gpu_tracing.cc then sets the
  // label to "on" or says why not. A host without the NVIDIA driver never
  // gets there: say so now (a file check; nothing CUDA is touched).
  const Config::Gpu& g = config.gpu;
  if (g.kernels || g.memcpy || g.memset || g.runtime_api || g.driver_api || g.sync || g.memory) {
    id.labels["gpu_tracing"] = access("/proc/driver/nvidia/version", F_OK) == 0
                                   ? "pending: starts when CUDA initialises with CUDA_INJECTION64_PATH set"
                                   : "unavailable: no NVIDIA driver on this host";
  }
  return id;
}

// A child of a profiled process (children.h): a worker with its parent's
// (inherited) rank, labelled with its parent and its own command line.
void MarkChild(wire::Identity* id, const std::string& parent_pid, const std::vector<std::string>& args) {
  id->role = names::kWorker;
  id->labels[names::kLabelParentPid] = parent_pid;
  if (const std::string actor = Env(names::kEnvParentActor); !actor.empty())
    id->labels[names::kLabelParentActor] = actor;
  id->labels[names::kLabelCommandLine] = JoinCommandLine(args);
}

}  // namespace

StartVerdict ReadEnvironment(CollectorSettings* settings) {
  if (!Env(names::kEnvDisable).empty()) return StartVerdict::kOff;
  // The profiler's environment belongs to the process it was set up for (by
  // the user, rlscope_ray.init, or the Ray plugin, which clears
  // RLSCOPE_OWNER_PID for each profiled worker). A process that inherited it
  // was started by a profiled one: it is profiled as that process's child
  // when the config's `children` lets it in, never when it is one of Ray's
  // own helpers (children.h). One left out is not counted anywhere: it
  // never was a profiled process.
  const std::string owner = Env(names::kEnvOwnerPid);
  const bool child = !owner.empty() && owner != std::to_string(getpid());
  std::vector<std::string> args;
  if (child) {
    args = ReadCommandLine();
    if (IsRayHelper(args)) return StartVerdict::kOff;
  }
  ConfigResult cr = LoadConfigFromEnvValue(Env(names::kEnvConfig));
  if (!cr.ok()) {
    if (child) return StartVerdict::kOff;  // its parent said so already
    for (const auto& e : cr.errors) std::fprintf(stderr, "rlscope: %s\n", e.c_str());
    std::fprintf(stderr, "rlscope: invalid RLSCOPE_CONFIG; profiling is off in this process\n");
    return StartVerdict::kFailed;
  }
  if (child && !ChildSelected(cr.config.children, args)) return StartVerdict::kOff;
  settings->endpoint = ResolveEndpoint({Env(names::kEnvAggregator)}, cr.config);
  if (settings->endpoint.empty()) return StartVerdict::kOff;  // nobody to send to
  settings->test_clock = TestClock::FromEnvironment();
  // Test costs add ns to the raw stamp: ticks must be ns.
  settings->clock_source = settings->test_clock == nullptr && Env(names::kEnvClock) != "monotonic" && TscIsInvariant()
                               ? ClockSource::kTsc
                               : ClockSource::kMonotonic;
  settings->identity = ReadIdentity(cr.config);
  if (child) MarkChild(&settings->identity, owner, args);
  settings->secret = Env(names::kEnvSecret);
  settings->own = {std::move(cr.config), std::move(cr.keys)};
  // Claimed (children inherit this; Python's os.environ is updated by
  // rlscope_ray). Before any thread of ours exists.
  setenv(names::kEnvOwnerPid, std::to_string(getpid()).c_str(), 1);
  return StartVerdict::kStart;
}

}  // namespace rlscope
