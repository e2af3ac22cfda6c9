#include "collector/collector.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include "collector/safe_read.h"
#include "native/names.h"
#include "native/steps.h"

namespace rlscope {

std::atomic<Collector*> Collector::instance_{nullptr};
constinit thread_local ThreadState* Collector::tls_state_ __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local bool Collector::tls_over_budget_ = false;
thread_local bool Collector::tls_exiting_ = false;

namespace {

int64_t GetTid() { return static_cast<int64_t>(syscall(SYS_gettid)); }

Trigger ParseTrigger(const std::string& capture_range) {
  if (capture_range == "api") return Trigger::kApi;
  if (capture_range == "cudaProfilerApi") return Trigger::kCudaProfilerApi;
  if (capture_range.rfind("nvtx:", 0) == 0) return Trigger::kNvtxRange;
  return Trigger::kController;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "python3 train.py" -> "train.py"; "./my_app" -> "my_app".
std::string ProcessName() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  auto base = [](const std::string& p) {
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  };
  if (args.empty()) return ReadFirstLine("/proc/self/comm");
  const std::string exe = base(args[0]);
  if (exe.rfind("python", 0) == 0) {
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "-m" && i + 1 < args.size()) return args[i + 1];
      if (args[i] == "-c") return exe + " -c";
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
    std::fprintf(stderr, "rlscope: %s=%s is not a rank (an integer >= 0); rank unknown\n", name,
                 v.c_str());
    return -1;
  }
  return -1;
}

// Keeps the collector library loaded for the life of the process: NVTX
// dlcloses a tool whose init fails, and thread-exit hooks live in this code.
void PinSelf() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PinSelf), &info) != 0 && info.dli_fname != nullptr) {
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
}

void ShutdownAtExit() {
  if (Collector* c = Collector::Instance()) c->Shutdown();
}

// A forked child has no flush thread, and its copies of the collector's locks
// may be held: it gets no collector at all (every entry point checks first).
void ChildAfterFork() { Collector::DetachInForkedChild(); }
// The parent counts its children (run.json: label forked_children).
void ParentAfterFork() {
  if (Collector* c = Collector::Instance()) c->CountFork();
}

}  // namespace

// Marks a thread's buffer retired when the thread exits; the flush thread
// drains what is left and frees it.
struct ThreadExitHook {
  Collector::ThreadEntry* entry = nullptr;
  ~ThreadExitHook() {
    // The thread's state first, then its entry: once `exited` is seen the
    // flush thread may free both, and the CPU sampler's handler, which can
    // interrupt this thread anywhere, finds the state through tls_state_
    // alone (the signal fence keeps the compiler from swapping the stores
    // as this thread's handler sees them).
    Collector::tls_state_ = nullptr;
    Collector::tls_exiting_ = true;  // events from later TLS destructors are dropped
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (entry != nullptr) entry->exited.store(true, std::memory_order_release);
  }
};

Collector* Collector::Start() {
  // Serialised; retried on each call until a collector runs or setup failed
  // for good (a bad config), so an environment set after the first call (e.g.
  // by rlscope_ray.init) takes effect for the C ABI and the Python API. (An
  // NVTX client library whose init already returned 0 stays a no-op: NVTX
  // never re-initialises.)
  static std::mutex mu;
  static bool failed = false;
  if (Collector* c = Instance()) return c;
  std::lock_guard<std::mutex> lock(mu);
  if (Instance() != nullptr || failed) return Instance();
  [] {
    try {
      if (!Env(names::kEnvDisable).empty()) return;
      // The profiler's environment belongs to the process it was set up for
      // (by the user, rlscope_ray.init, or the Ray plugin, which clears
      // RLSCOPE_OWNER_PID for each profiled worker): the first collector
      // claims it below. A process that merely inherited it (a child of a
      // profiled process, Ray's own helper processes) is not profiled and
      // takes no role. Not counted anywhere: it never was a profiled process.
      if (const std::string owner = Env(names::kEnvOwnerPid);
          !owner.empty() && owner != std::to_string(getpid())) {
        return;
      }
      const std::string config_value = Env(names::kEnvConfig);
      ConfigResult cr = LoadConfigFromEnvValue(config_value);
      if (!cr.ok()) {
        for (const auto& e : cr.errors) std::fprintf(stderr, "rlscope: %s\n", e.c_str());
        std::fprintf(stderr, "rlscope: invalid RLSCOPE_CONFIG; profiling is off in this process\n");
        failed = true;
        return;
      }
      const std::string endpoint = ResolveEndpoint({Env(names::kEnvAggregator)}, cr.config);
      if (endpoint.empty()) return;  // nobody to send to: off
      std::unique_ptr<TestClock> test_clock = TestClock::FromEnvironment();

      wire::Identity id;
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      id.host = host;
      id.pid = getpid();
      id.rank = ParseRank();
      id.role = Env(names::kEnvRole).empty() ? names::kWorker : Env(names::kEnvRole);
      if (id.role != names::kWorker && id.role != names::kController) {
        std::fprintf(stderr, "rlscope: %s=%s is not '%s' or '%s'; using %s\n", names::kEnvRole, id.role.c_str(),
                     names::kController, names::kWorker, names::kWorker);
        id.role = names::kWorker;
      }
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
      // (CUDA_INJECTION64_PATH) at its init; gpu_activity.cc then sets the
      // label to "on" or says why not. A host without the NVIDIA driver never
      // gets there: say so now (a file check; nothing CUDA is touched).
      const Config::Gpu& g = cr.config.gpu;
      if (g.kernels || g.memcpy || g.memset || g.runtime_api || g.driver_api || g.sync) {
        id.labels["gpu_tracing"] = access("/proc/driver/nvidia/version", F_OK) == 0
                                       ? "pending: starts when CUDA initialises with CUDA_INJECTION64_PATH set"
                                       : "unavailable: no NVIDIA driver on this host";
      }
      // Claimed (children inherit this; Python's os.environ is updated by
      // rlscope_ray). Before any thread of ours exists.
      setenv(names::kEnvOwnerPid, std::to_string(getpid()).c_str(), 1);
      auto* c = new Collector(std::move(cr.config), std::move(cr.keys), endpoint, std::move(id),
                              std::move(test_clock));
      PinSelf();
      // Exit handlers run in reverse order of registration, function-local
      // statics' destructors among them. The flush thread parses the run's
      // config (yaml-cpp's statics, KeySpecs) until ShutdownAtExit stops it:
      // construct them all now, before that handler is registered, so they
      // are destroyed after it ran. (Without this a short program exiting as
      // its first Control arrived crashed in about 1 of 150 runs.)
      (void)ParseConfig(ConfigToYaml(Config()), "warm-up");
      instance_.store(c, std::memory_order_release);
      std::atexit(ShutdownAtExit);
      pthread_atfork(nullptr, ParentAfterFork, ChildAfterFork);
    } catch (const std::exception& e) {
      // Any failure leaves the process without a collector: never crash it.
      std::fprintf(stderr, "rlscope: the collector failed to start (%s); profiling is off in this process\n",
                   e.what());
      failed = true;
    } catch (...) {
      std::fprintf(stderr, "rlscope: the collector failed to start; profiling is off in this process\n");
      failed = true;
    }
  }();
  return Instance();
}

namespace {
// Calls between timed ones (CostSampler): none while correction is off.
uint32_t SampleEvery(const Config& config) {
  return config.correction.enabled ? static_cast<uint32_t>(config.correction.sample_every) : 0;
}
}  // namespace

Collector::Collector(Config config, KeySet own_keys, std::string endpoint, wire::Identity identity,
                     std::unique_ptr<TestClock> test_clock)
    : config_(std::move(config)),
      test_clock_(std::move(test_clock)),
      endpoint_(std::move(endpoint)),
      session_([] {
        std::random_device rd;
        return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(MonotonicNs()) ^ static_cast<uint64_t>(getpid());
      }()),
      // Test costs add ns to the raw stamp: ticks must be ns.
      clock_source_(test_clock_ == nullptr && Env(names::kEnvClock) != "monotonic" && TscIsInvariant()
                        ? ClockSource::kTsc
                        : ClockSource::kMonotonic),
      owner_pid_(getpid()),
      start_ns_(MonotonicNs()),
      own_keys_(std::move(own_keys)),
      // A controller's own config is the run's (config.h): the aggregator adopts it.
      hello_config_(identity.role == names::kController && !own_keys_.empty() ? ConfigToYaml(config_, &own_keys_)
                                                                             : std::string()),
      selected_(SelectsProcess(config_, identity.role == names::kController, identity.rank)),
      is_controller_(identity.role == names::kController),
      trigger_(ParseTrigger(config_.capture_range)),
      // A controller always records its "step" ranges: they number the steps,
      // whatever opens its captures.
      watching_(is_controller() || trigger_ == Trigger::kNvtxRange),
      step_name_id_(strings_.Intern(names::kStep)),
      step_number_name_id_(strings_.Intern(names::kStepNumber)),
      trigger_name_id_(trigger_ == Trigger::kNvtxRange ? strings_.Intern(config_.capture_range.substr(5)) : 0),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      steps_(config_.steps),
      secret_(Env(names::kEnvSecret)),
      identity_(std::move(identity)),
      converter_(clock_source_) {
  if (test_clock_ != nullptr) costs_ = test_clock_->costs();
  sample_every_.store(SampleEvery(config_), std::memory_order_relaxed);
  sampling_hz_.store(config_.cpu.sampling_hz, std::memory_order_relaxed);
  if (!config_.ranks.all && identity_.rank < 0 && !is_controller()) {
    std::fprintf(stderr,
                 "rlscope: config selects ranks %s but this process has no rank "
                 "(set RLSCOPE_RANK or RANK); treating it as rank 0\n",
                 config_.ranks.ToString().c_str());
  }
  // Controller trigger: the window is open during a selected step and from
  // the end of the step before it (here: before step 1, if selected). A
  // controller follows its own steps, a worker the aggregator's broadcasts.
  // The other triggers start closed.
  window_open_.store(trigger_ == Trigger::kController && steps::ControllerArmedBefore(steps_, 1),
                     std::memory_order_relaxed);
  converter_.Sample();
  UpdateArmed();
  flush_thread_ = std::thread([this] { FlushLoop(); });
}

void Collector::UpdateArmed() {
  std::lock_guard<std::mutex> lock(arm_mu_);
  const bool open = trigger_ == Trigger::kController ? window_open_.load(std::memory_order_relaxed)
                                                     : capture_active_.load(std::memory_order_relaxed);
  const bool armed = selected() && open && !shut_down_.load(std::memory_order_relaxed);
  const bool was = armed_.load(std::memory_order_relaxed);
  armed_.store(armed, std::memory_order_relaxed);
  if (armed == was) return;
  // Remember the armed periods for GPU records, which arrive later.
  const int64_t now = MonotonicNs();
  if (armed) {
    if (armed_intervals_.size() >= 1024) armed_intervals_.erase(armed_intervals_.begin());
    armed_intervals_.emplace_back(now, INT64_MAX);
  } else if (!armed_intervals_.empty()) {
    armed_intervals_.back().second = now;
  }
}

bool Collector::WasArmedDuring(int64_t begin_ns, int64_t end_ns) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  for (auto it = armed_intervals_.rbegin(); it != armed_intervals_.rend(); ++it) {
    if (it->first <= end_ns && begin_ns <= it->second) return true;
    if (it->second < begin_ns) break;  // older periods end earlier still
  }
  return false;
}

void Collector::AddGpuRecords(std::vector<GpuRecord>&& records) {
  const size_t cap = (static_cast<size_t>(config_.buffers.max_mb) << 20) / sizeof(GpuRecord);
  std::lock_guard<std::mutex> lock(gpu_mu_);
  if (gpu_records_.size() + records.size() > cap) {
    gpu_dropped_.fetch_add(records.size(), std::memory_order_relaxed);
    return;
  }
  if (gpu_records_.empty()) {
    gpu_records_ = std::move(records);
  } else {
    gpu_records_.insert(gpu_records_.end(), records.begin(), records.end());
  }
}

void Collector::SetGpuFlushHook(void (*hook)()) { gpu_flush_hook_.store(hook, std::memory_order_release); }

void Collector::SetCaptureActive(bool active) {
  capture_active_.store(active, std::memory_order_relaxed);
  UpdateArmed();
}

bool Collector::OnRangeOpen(ThreadState* ts, uint32_t name, uint8_t flags, uint64_t payload, bool async,
                            uint64_t range_id) {
  if (name == 0) return false;
  if (is_controller() && name == step_name_id_) {
    // Numbered by steps.h; announced when the aggregator, which sees a
    // start/end range's id and not its payload, would number it otherwise.
    const bool has_payload = (flags & kFlagHasPayload) != 0;
    const int64_t n = steps::Number(has_payload, payload, next_step_.load(std::memory_order_relaxed));
    if (n != steps::Number(has_payload && !async, payload, derived_next_step_.load(std::memory_order_relaxed))) {
      Record(ts, EventKind::kMark, step_number_name_id_, 0, 0, static_cast<uint64_t>(n), kFlagHasPayload,
             /*privileged=*/true);
    }
    next_step_.store(n + 1, std::memory_order_relaxed);
    derived_next_step_.store(n + 1, std::memory_order_relaxed);
    in_step_.store(true, std::memory_order_relaxed);
    if (async) {
      step_range_id_.store(range_id, std::memory_order_relaxed);
    } else {
      ts->step_depth = ts->depth;
    }
    if (trigger_ == Trigger::kController) {
      window_open_.store(StepArmedDuring(n), std::memory_order_relaxed);
      UpdateArmed();
    }
    Wake();  // ship the step edge now: workers' windows follow it
    return true;
  }
  if (trigger_ == Trigger::kNvtxRange && name == trigger_name_id_) {
    if (async) {
      trigger_range_id_.store(range_id, std::memory_order_relaxed);
    } else {
      ts->trigger_depth = ts->depth;
    }
    SetCaptureActive(true);
    return true;
  }
  return false;
}

bool Collector::OnRangeClose(ThreadState* ts, bool async, uint64_t range_id) {
  bool step_end = false, trigger_end = false;
  if (async) {
    // A relaxed load first: most ends are neither, and then cost no RMW.
    uint64_t expected = range_id;
    step_end = range_id != 0 && step_range_id_.load(std::memory_order_relaxed) == range_id &&
               step_range_id_.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
    expected = range_id;
    trigger_end = range_id != 0 && trigger_range_id_.load(std::memory_order_relaxed) == range_id &&
                  trigger_range_id_.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
  } else {
    if (ts->step_depth >= 0 && ts->depth == ts->step_depth) {
      ts->step_depth = -1;
      step_end = true;
    }
    if (ts->trigger_depth >= 0 && ts->depth == ts->trigger_depth) {
      ts->trigger_depth = -1;
      trigger_end = true;
    }
  }
  if (step_end) {
    in_step_.store(false, std::memory_order_relaxed);
    if (trigger_ == Trigger::kController) {
      // Armed from the end of the step before a selected one, as workers are
      // (native/steps.h): a range opened just before that step begins is kept.
      window_open_.store(StepArmedBefore(next_step_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
      UpdateArmed();
    }
    Wake();
  }
  if (trigger_end) SetCaptureActive(false);
  return step_end || trigger_end;
}

void Collector::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  // Best effort: a full counter already means "wake up".
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Collector::ApplyControl(const wire::Control& control) {
  heard_from_aggregator_ = true;
  if (control.role == wire::kRoleRefused) {
    if (!refused_) {
      refused_ = true;
      transport_.SetReady(false);  // for good: what it records waits in the spool, then is dropped (counted)
      std::fprintf(stderr,
                   "rlscope: pid %d: the aggregator at %s refused this process: its hello %s the run's secret "
                   "(%s); nothing it records reaches the run\n",
                   static_cast<int>(getpid()), endpoint_.c_str(), secret_.empty() ? "lacks" : "does not carry",
                   names::kEnvSecret);
    }
    return;
  }
  if (refused_) return;
  if (control.hello && !rehello_) {
    // An aggregator that does not know this collector (it restarted): hello
    // again, then the spool's replay; nothing else goes out before.
    rehello_ = true;
    transport_.SetReady(false);
  }
  if (control.release_ns != 0) transport_.Release(control.release_ns);
  if (control.role == names::kWorker && is_controller()) BecomeWorker();  // before the window it carries
  // Windows steer only workers under the controller trigger; the controller
  // follows its own steps and the other triggers their own events.
  if (control.window != wire::Control::Window::kUnchanged && trigger_ == Trigger::kController &&
      !is_controller()) {
    if (control.window == wire::Control::Window::kOpen) {
      window_close_at_ns_ = 0;
      window_open_.store(true, std::memory_order_relaxed);
      UpdateArmed();
    } else if (window_open_.load(std::memory_order_relaxed) && window_close_at_ns_ == 0) {
      // Stay armed a little longer: events in flight at the step's end are kept.
      window_close_at_ns_ = MonotonicNs() + config_.flush.window_slack_ms * 1000000;
    }
  }
  if (control.flush > pending_ack_) pending_ack_ = control.flush;
  if (!control.run_config.empty() && control.run_config != run_config_) AdoptRunConfig(control.run_config);
}

void Collector::AdoptRunConfig(const std::string& yaml) {
  run_config_ = yaml;
  const ConfigResult run = ParseConfig(yaml, "the run's config");
  if (!run.ok()) {  // the aggregator's own output: never expected
    std::fprintf(stderr, "rlscope: ignoring a run config the aggregator sent: %s\n", run.errors[0].c_str());
    return;
  }
  // Said only of the keys this process's own config set: a default is no choice.
  if (const auto diff = RunKeyDifferences(config_, run.config, &own_keys_); !diff.empty()) {
    std::string list;
    for (const std::string& d : diff) list += (list.empty() ? "" : "; ") + d;
    std::fprintf(stderr, "rlscope: pid %d: this process's %s disagrees with the run's config (%s): using the run's\n",
                 static_cast<int>(getpid()), names::kEnvConfig, list.c_str());
  }
  const bool selected = SelectsProcess(run.config, is_controller(), identity_.rank);
  if (!run.config.ranks.all && config_.ranks.all && identity_.rank < 0 && !is_controller()) {
    std::fprintf(stderr,  // as at start, when its own config selected ranks
                 "rlscope: the run's config selects ranks %s but this process has no rank "
                 "(set RLSCOPE_RANK or RANK); treating it as rank 0\n",
                 run.config.ranks.ToString().c_str());
  }
  {
    std::lock_guard<std::mutex> lock(arm_mu_);
    steps_ = run.config.steps;
  }
  sample_every_.store(SampleEvery(run.config), std::memory_order_relaxed);
  sampling_hz_.store(run.config.cpu.sampling_hz, std::memory_order_relaxed);
  if (is_controller() && trigger_ == Trigger::kController && !in_step_.load(std::memory_order_relaxed)) {
    // Between steps (a step under way keeps its window; the next edge follows the run's steps).
    window_open_.store(StepArmedBefore(next_step_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
  }
  if (selected_.exchange(selected, std::memory_order_relaxed) != selected) {
    {
      std::lock_guard<std::mutex> lock(meta_mu_);
      ++hello_gen_;  // the aggregator learns it from the next Hello
    }
    // Selected only now (its own config left it out): the costs the
    // correction needs were never measured. About a millisecond, here on
    // the flush thread; the Hello carries them.
    if (selected && run.config.correction.enabled && test_clock_ == nullptr && Cost("push") < 0) Calibrate();
  }
  UpdateArmed();
}

void Collector::BecomeWorker() {
  demoted_.store(true, std::memory_order_relaxed);
  is_controller_.store(false, std::memory_order_relaxed);
  std::fprintf(stderr,
               "rlscope: pid %d: another process is the run's controller; this one records as a worker "
               "(a Ray actor created by the controller actor inherits its runtime_env, role included)\n",
               static_cast<int>(getpid()));
  {
    std::lock_guard<std::mutex> lock(meta_mu_);
    identity_.role = names::kWorker;
    ++hello_gen_;
  }
  // The windows come from the aggregator now (this Control's, then its
  // broadcasts); until then, as a worker that has not heard of one.
  window_open_.store(false, std::memory_order_relaxed);
  selected_.store(SelectsProcess(config_, false, identity_.rank), std::memory_order_relaxed);
  UpdateArmed();
  if (!run_config_.empty()) {  // selected again as a worker under the run's config
    std::string yaml;
    yaml.swap(run_config_);
    AdoptRunConfig(yaml);
  }
}

bool Collector::ClaimController() {
  if (is_controller()) return true;
  if (demoted_.load(std::memory_order_relaxed)) return false;
  is_controller_.store(true, std::memory_order_relaxed);  // before the Hello it makes (MakeHello)
  watching_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(meta_mu_);
    identity_.role = names::kController;
    // As a controller started with the role sends (the constructor).
    hello_config_ = own_keys_.empty() ? std::string() : ConfigToYaml(config_, &own_keys_);
    ++hello_gen_;  // the flush thread says hello again, now as the controller
  }
  // Under the run's config when it came (the aggregator re-sends it with its
  // reply to the new Hello, AdoptRunConfig), else its own.
  selected_.store(SelectsProcess(config_, true, identity_.rank), std::memory_order_relaxed);
  if (trigger_ == Trigger::kController && !in_step_.load(std::memory_order_relaxed)) {
    window_open_.store(StepArmedBefore(next_step_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
  }
  UpdateArmed();
  std::fprintf(stderr, "rlscope: pid %d claims the run's controller role (its steps drive the run)\n",
               static_cast<int>(getpid()));
  Wake();
  return true;
}

void Collector::SetNextStep(int64_t n) {
  if (n < 0) return;
  next_step_.store(n, std::memory_order_relaxed);
  // Between steps a controller is armed for the next one (steps.h): that is
  // step n now.
  if (is_controller() && trigger_ == Trigger::kController && !in_step_.load(std::memory_order_relaxed)) {
    window_open_.store(StepArmedBefore(n), std::memory_order_relaxed);
    UpdateArmed();
  }
}

bool Collector::StepArmedDuring(int64_t n) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  return steps::ControllerArmedDuring(steps_, n);
}

bool Collector::StepArmedBefore(int64_t n) const {
  std::lock_guard<std::mutex> lock(arm_mu_);
  return steps::ControllerArmedBefore(steps_, n);
}

ThreadState* Collector::RegisterThread() {
  if (tls_over_budget_ || tls_exiting_ || shut_down_.load(std::memory_order_relaxed)) {
    overflow_dropped_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(config_.buffers.per_thread_kb) * 1024;
  {
    std::lock_guard<std::mutex> lock(registry_mu_);  // reserve the budget first
    if (bytes_reserved_ + bytes > static_cast<size_t>(config_.buffers.max_mb) << 20) {
      tls_over_budget_ = true;
      overflow_dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    bytes_reserved_ += bytes;
  }
  // Allocate and prefault outside the lock: the flush thread keeps going.
  auto entry = std::make_unique<ThreadEntry>();
  entry->buffer = std::make_unique<ThreadBuffer>(GetTid(), bytes / sizeof(EventRecord));
  entry->state = std::make_unique<ThreadState>(&strings_);
  entry->state->buffer = entry->buffer.get();
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    threads_.push_back(std::move(entry));
    static thread_local ThreadExitHook hook;
    hook.entry = threads_.back().get();
    tls_state_ = threads_.back()->state.get();
  }
  // Sampled from its first window on: the flush thread gives it a timer now.
  if (armed() && sampling_hz_.load(std::memory_order_relaxed) > 0) Wake();
  return tls_state_;
}

void Collector::RetireExitedThreads() {
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (auto it = threads_.begin(); it != threads_.end();) {
    ThreadEntry* e = it->get();
    if (e->exited.load(std::memory_order_acquire) && e->buffer->size() == 0 && e->name_sent &&
        (e->sampled.ring == nullptr || e->sampled.ring->size() == 0)) {
      sampler_.Release(&e->sampled);
      retired_dropped_ += e->buffer->dropped();
      retired_written_ += e->buffer->written();
      bytes_reserved_ -= static_cast<size_t>(config_.buffers.per_thread_kb) * 1024;
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
}

void Collector::NameThread(int64_t tid, const std::string& name) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  thread_names_[tid] = name;
  renamed_threads_.push_back(tid);
}

void Collector::NameCategory(uint32_t domain, uint32_t category, const std::string& name) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  categories_.push_back({domain, category, name});
}

void Collector::CollectMetadata(const std::vector<ThreadEntry*>& entries, Metadata* out) {
  next_string_id_ = strings_.CopySince(next_string_id_, &out->strings);
  std::lock_guard<std::mutex> lock(meta_mu_);
  for (ThreadEntry* e : entries) {
    if (e->name_sent) continue;
    e->name_sent = true;
    const int64_t tid = e->buffer->tid();
    auto it = thread_names_.find(tid);
    std::string name = it != thread_names_.end()
                           ? it->second
                           : ReadFirstLine("/proc/self/task/" + std::to_string(tid) + "/comm");
    out->thread_names.emplace_back(tid, name.empty() ? "thread " + std::to_string(tid) : name);
  }
  for (int64_t tid : renamed_threads_) out->thread_names.emplace_back(tid, thread_names_[tid]);
  renamed_threads_.clear();
  out->categories.insert(out->categories.end(), categories_.begin() + static_cast<long>(categories_sent_),
                         categories_.end());
  categories_sent_ = categories_.size();
}

std::string Collector::MakePreamble() {
  wire::Batch b;
  b.session = session_;
  b.seq = transport_.NextSeq();
  strings_.CopySince(1, &b.strings);
  std::vector<ThreadEntry*> entries;
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (auto& t : threads_) {
      if (t->name_sent) entries.push_back(t.get());
    }
  }
  std::lock_guard<std::mutex> lock(meta_mu_);
  for (ThreadEntry* e : entries) {
    const int64_t tid = e->buffer->tid();
    auto it = thread_names_.find(tid);
    std::string name =
        it != thread_names_.end() ? it->second : ReadFirstLine("/proc/self/task/" + std::to_string(tid) + "/comm");
    b.thread_names.emplace_back(tid, name.empty() ? "thread " + std::to_string(tid) : name);
  }
  b.categories.assign(categories_.begin(), categories_.begin() + static_cast<long>(categories_sent_));
  return wire::Encode(b);
}

bool Collector::Flush(int timeout_ms) {
  if (shut_down_.load(std::memory_order_relaxed)) return false;
  std::unique_lock<std::mutex> lock(flush_mu_);
  const uint64_t ticket = ++flush_requests_;
  Wake();
  flushed_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [&] { return flushes_done_ >= ticket || stop_; });
  return flushes_done_ >= ticket;
}

void Collector::Shutdown() {
  if (getpid() != owner_pid_) return;
  if (shut_down_.exchange(true)) return;
  UpdateArmed();
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    stop_ = true;
  }
  Wake();
  if (flush_thread_.joinable()) flush_thread_.join();
}

void Collector::CountFork() {
  const uint64_t n = forks_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n == 1) {
    std::fprintf(stderr,
                 "rlscope: pid %d forked: a forked child is not profiled (what it records is not kept); its "
                 "children are counted in run.json (label forked_children)\n",
                 static_cast<int>(getpid()));
  }
  SetLabel("forked_children", std::to_string(n));
}

void Collector::DetachInForkedChild() {
  // The parent's instance stays allocated (and unused) in the child.
  instance_.store(nullptr, std::memory_order_relaxed);
}

void Collector::Stats(rlscope_stats_t* out) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  uint64_t written = retired_written_, dropped = retired_dropped_;
  for (const auto& t : threads_) {
    written += t->buffer->written();
    dropped += t->buffer->dropped();
  }
  out->events = written;  // cost samples are not in written(): counted apart
  out->dropped = dropped + overflow_dropped_.load(std::memory_order_relaxed) + transport_.events_dropped();
  out->batches_sent = transport_.batches_sent();
  out->batches_dropped = transport_.batches_dropped();
  out->threads = threads_.size();
}

void Collector::SamplerStats(rlscope_sampler_stats_t* out) const {
  out->samples = sampler_.samples();
  out->dropped = sampler_.dropped();
  out->signals = sampler_.signals();
  out->timers = static_cast<uint64_t>(sampler_.timers());
  out->signal = static_cast<uint64_t>(sampler_.signal_number());
  out->frames_unread = sampler_.frames_unread();
  out->kernel_reads = sampler_.kernel_reads();
  out->guard_faults = FaultGuard::faults();
  out->handler_ns = sampler_.handler_ns();
}

void Collector::ReconcileSampling(bool stop) {
  const int64_t hz = sampling_hz_.load(std::memory_order_relaxed);
  bool on = !stop && !sampling_off_for_good_ && hz > 0 && armed();
  std::string label = sampling_label_;
  if (on && !sampler_.set_up()) {
    std::string why;
    if (!sampler_.Setup(&why)) {
      sampling_off_for_good_ = true;
      on = false;
      label = "unavailable: " + why;
      std::fprintf(stderr, "rlscope: pid %d: CPU sampling is off in this process: %s\n", static_cast<int>(getpid()),
                   why.c_str());
    } else {
      SetCost("cpu_sample", sampler_.sample_cost_ns());
    }
  }
  if (sampler_.set_up() && !sampling_off_for_good_) {
    if (std::string why; !sampler_.StillOurs(&why)) {
      sampling_off_for_good_ = true;
      on = false;
      label = "stopped: " + why;
      std::fprintf(stderr, "rlscope: pid %d: %s\n", static_cast<int>(getpid()), why.c_str());
    }
  }
  if (sampler_.set_up()) {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (auto& t : threads_) {
      if (stop) {
        sampler_.Release(&t->sampled);
      } else if (!t->exited.load(std::memory_order_acquire)) {  // an exited thread's timer goes with its entry
        sampler_.Reconcile(&t->sampled, t->state.get(), t->buffer->tid(), on, hz);
      }
    }
  }
  if (!sampling_off_for_good_) {
    if (hz == 0) {
      label = "off: cpu.sampling_hz is 0";
    } else if (sampler_.set_up()) {
      const std::string reader = CpuSampler::PythonReaderName();
      label = "on: " + std::to_string(hz) + " Hz of each thread's CPU time, signal " +
              std::to_string(sampler_.signal_number()) + "; python frames: " +
              (reader.empty() ? std::string("none (rlscope_ray not imported in this process)")
                              : reader + ", reads " + sampler_.FrameReads());
    } else {
      label = "pending: starts with the first capture window";
    }
  }
  if (label != sampling_label_) {
    sampling_label_ = label;
    SetLabel("cpu_sampling", label);
  }
  if (const uint64_t dropped = sampler_.dropped(); dropped != samples_dropped_said_) {
    samples_dropped_said_ = dropped;
    SetLabel("cpu_samples_dropped", std::to_string(dropped));
  }
  sampler_.UpdateHandlerNs(converter_);
  if (const uint64_t unread = sampler_.frames_unread(); unread != frames_unread_said_) {
    frames_unread_said_ = unread;
    SetLabel("cpu_frames_unread", std::to_string(unread));
  }
}

void Collector::SetLabel(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  identity_.labels[key] = value;
  ++hello_gen_;
}

void Collector::SetCost(const std::string& key, double ns) {
  if (test_clock_ != nullptr) return;
  std::lock_guard<std::mutex> lock(meta_mu_);
  costs_[key] = ns;
  ++hello_gen_;
}

wire::Hello Collector::MakeHello() const {
  wire::Hello hello;
  hello.session = session_;
  hello.identity = identity_;
  hello.clock = "monotonic";
  hello.start_ns = start_ns_;
  hello.selected = selected();
  if (is_controller()) hello.config = hello_config_;
  hello.costs = costs_;
  hello.secret = secret_;
  return hello;
}

std::map<std::string, double> Collector::Calibrate() {
  if (test_clock_ != nullptr) return test_clock_->costs();
  constexpr int kEvents = 2048, kRounds = 7;
  // As large as a real ring: the early wake-up every half ring (Record) is
  // paid as often per event as it is when recording.
  ThreadBuffer scratch(0, std::max<size_t>(kEvents, static_cast<size_t>(config_.buffers.per_thread_kb) * 1024 /
                                                        sizeof(EventRecord)));
  ThreadState state(&strings_);
  state.buffer = &scratch;
  const char* const kName = names::kCalibration;
  auto drain = [&] { scratch.Drain([](const EventRecord*, size_t) {}); };
  // ns per iteration of `body`, best of kRounds.
  auto best_ns = [&](auto&& body) {
    double best = 1e18;
    for (int r = 0; r < kRounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kEvents; ++i) {
        body(i);
        asm volatile("" ::: "memory");
      }
      const auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / kEvents);
      drain();
    }
    return best;
  };
  const double empty = best_ns([](int) {});
  // What timing a call adds to what it measures (CostSampler): two clock
  // reads with nothing between, the median of many.
  {
    std::vector<uint64_t> d(1001);
    for (uint64_t& v : d) {
      const uint64_t t0 = ReadTicks(clock_source_);
      v = ReadTicks(clock_source_) - t0;
    }
    std::nth_element(d.begin(), d.begin() + 500, d.end());
    timer_ticks_.store(d[500], std::memory_order_relaxed);
  }
  // Each body is what a recorded event of that kind costs in its handler:
  // the name lookup, the depth bookkeeping, the record.
  const double push = best_ns([&](int) {
    const uint32_t name = state.names.Lookup(kName);
    Record(&state, EventKind::kRangePush, name, 0, 0, 0, kFlagNone);
    state.SetRecorded(state.depth++ & 63, true);  // & 63: stay in the mask, as real nesting does
  });
  const double pop = best_ns([&](int) {
    --state.depth;
    if (state.WasRecorded(state.depth & 63, false)) Record(&state, EventKind::kRangePop, 0, 0, 0, 0, kFlagNone);
  });
  const double start = best_ns([&](int) {
    const uint32_t name = state.names.Lookup(kName);
    Record(&state, EventKind::kRangeStart, name, 0, 0, NextRangeId(), kFlagNone);
  });
  const double end = best_ns([&](int i) {
    Record(&state, EventKind::kRangeEnd, 0, 0, 0, static_cast<uint64_t>(i) | kRecordedRangeBit, kFlagNone);
  });
  const double mark = best_ns([&](int) {
    Record(&state, EventKind::kMark, state.names.Lookup(kName), 0, 0, 0, kFlagNone);
  });
  // A cost sample: the timed call's two clock reads and the sample's record.
  const double sample = best_ns([&](int) {
    volatile uint64_t t0 = ReadTicks(clock_source_);
    RecordCostSample(&state, ReadTicks(clock_source_) - t0);
  });
  std::map<std::string, double> out = {{"push", push - empty}, {"pop", pop - empty}, {"start", start - empty},
                                       {"end", end - empty}, {"mark", mark - empty}, {"sample", sample - empty}};
  for (auto& [k, v] : out) v = std::max(0.0, v);
  std::lock_guard<std::mutex> lock(meta_mu_);
  for (const auto& [k, v] : out) costs_[k] = v;
  ++hello_gen_;
  return out;
}

bool Collector::ScratchScope(bool on) {
  ThreadState* ts = TrackedThread();  // disarmed and never recorded: nothing to keep apart
  if (ts == nullptr || (ts->scratch != nullptr) == on) return false;
  if (on) {
    ts->scratch = std::make_unique<ThreadBuffer>(ts->buffer->tid(), std::max<size_t>(ts->buffer->capacity(), 65536));
    ts->real_buffer = ts->buffer;
    ts->buffer = ts->scratch.get();
  } else {
    ts->buffer = ts->real_buffer;
    ts->real_buffer = nullptr;
    ts->scratch.reset();
  }
  return true;
}

void Collector::ReportExpected(std::vector<std::map<std::string, std::string>> processes) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  expected_ = std::move(processes);
  ++expected_gen_;
}

}  // namespace rlscope
