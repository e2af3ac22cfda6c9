#include "collector/collector.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "native/names.h"

namespace rlscope {

std::atomic<Collector*> Collector::instance_{nullptr};

namespace {

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

uint64_t NewSession() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(MonotonicNs()) ^
         static_cast<uint64_t>(getpid());
}

}  // namespace

CollectorContext::CollectorContext(ProcessConfig own_in, std::string endpoint_in, std::string secret_in,
                                   std::unique_ptr<TestClock> test_clock_in, ClockSource clock_source_in,
                                   int wake_fd_in)
    : own(std::move(own_in)),
      endpoint(std::move(endpoint_in)),
      secret(std::move(secret_in)),
      session(NewSession()),
      owner_pid(getpid()),
      start_ns(MonotonicNs()),
      test_clock(std::move(test_clock_in)),
      clock_source(clock_source_in),
      converter(clock_source_in),
      wake_fd(wake_fd_in) {}

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
  try {
    CollectorSettings settings;
    const StartVerdict verdict = ReadEnvironment(&settings);
    if (verdict != StartVerdict::kStart) {
      failed = verdict == StartVerdict::kFailed;
      return nullptr;
    }
    auto* c = new Collector(std::move(settings));
    PinSelf();
    // Exit handlers run in reverse order of registration, function-local
    // statics' destructors among them. The flush thread parses the run's
    // config (yaml-cpp's statics, KeySpecs) until ShutdownAtExit stops it:
    // construct them all now, before that handler is registered, so they
    // are destroyed after it ran. (Without this a short program exiting as
    // its first Control arrived crashed in about 1 of 150 runs.)
    (void)ParseConfig(ConfigToYaml(Config()), "warm-up");
    instance_.store(c, std::memory_order_release);
    Arming::SetOn(true);  // the handlers' fast lanes: after the instance
    std::atexit(ShutdownAtExit);
    pthread_atfork(nullptr, ParentAfterFork, ChildAfterFork);
  } catch (const std::exception& e) {
    // Any failure leaves the process without a collector: never crash it.
    std::fprintf(stderr, "rlscope: the collector failed to start (%s); profiling is off in this process\n", e.what());
    failed = true;
  } catch (...) {
    std::fprintf(stderr, "rlscope: the collector failed to start; profiling is off in this process\n");
    failed = true;
  }
  return Instance();
}

Collector::Collector(CollectorSettings settings)
    : context_(std::move(settings.own), std::move(settings.endpoint), std::move(settings.secret),
               std::move(settings.test_clock), settings.clock_source, eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      arming_(context_, recording_, settings.identity.role == names::kController, settings.identity.rank,
              settings.identity.labels.count(names::kLabelParentPid) != 0),
      link_(context_, recording_, arming_, std::move(settings.identity)),
      cpu_(
          context_, recording_, arming_, [this](const std::string& k, const std::string& v) { link_.SetLabel(k, v); },
          [this](const std::string& k, double ns) { link_.SetCost(k, ns); }) {
  context_.converter.Sample();
  flush_thread_ = std::thread([this] { FlushLoop(); });
}

ThreadState* Collector::RegisterThread() {
  ThreadState* ts = recording_.Register();
  // Sampled from its first window on: the flush thread gives it a timer now.
  if (ts != nullptr && armed() && cpu_.hz() > 0) context_.Wake();
  return ts;
}

bool Collector::ClaimController() {
  switch (arming_.ClaimController()) {
    case Arming::Claim::kAlready: return true;
    case Arming::Claim::kRefused: return false;
    case Arming::Claim::kClaimed: break;
  }
  link_.SetRole(true);  // the flush thread says hello again, now as the controller
  std::fprintf(stderr, "rlscope: pid %d claims the run's controller role (its steps drive the run)\n",
               static_cast<int>(getpid()));
  context_.Wake();
  return true;
}

void Collector::RecordCostSample(ThreadState* ts, uint64_t ticks) { costs_.RecordCostSample(ts, ticks); }

std::map<std::string, double> Collector::Calibrate() {
  std::map<std::string, double> costs = costs_.Calibrate();
  link_.SetCosts(costs);
  return costs;
}

bool Collector::ScratchScope(bool on) {
  // Registered on entry even while disarmed: a calibration must pay the
  // path a tracked thread pays. An unregistered thread's calls take the idle
  // lane (a worker before its first window: its caller side read about half
  // of what it reads once its thread is tracked). The thread stays
  // registered (a ring from the budget; disarmed pushes keep its depth).
  ThreadState* ts = on ? CurrentThread() : Recording::Current();
  return ts != nullptr && CostSampling::ScratchScope(ts, on);
}

void Collector::ApplyControl(const wire::Control& control) {
  if (!link_.Apply(control)) return;                                              // refused: nothing else applies
  if (control.role == names::kWorker && arming_.is_controller()) BecomeWorker();  // before the window it carries
  // The run's config first: the window's step is chosen or not under its steps.
  if (!control.run_config.empty() && control.run_config != run_config_) AdoptRunConfig(control.run_config);
  arming_.ApplyWindow(control.window, control.step);
}

void Collector::AdoptRunConfig(const std::string& yaml) {
  run_config_ = yaml;
  const ConfigResult run = ParseConfig(yaml, "the run's config");
  if (!run.ok()) {  // the aggregator's own output: never expected
    std::fprintf(stderr, "rlscope: ignoring a run config the aggregator sent: %s\n", run.errors[0].c_str());
    return;
  }
  // Said only of the keys this process's own config set: a default is no choice.
  if (const auto diff = RunKeyDifferences(context_.own.config, run.config, &context_.own.keys); !diff.empty()) {
    std::string list;
    for (const std::string& d : diff) list += (list.empty() ? "" : "; ") + d;
    std::fprintf(stderr, "rlscope: pid %d: this process's %s disagrees with the run's config (%s): using the run's\n",
                 static_cast<int>(getpid()), names::kEnvConfig, list.c_str());
  }
  costs_.SetSampleEvery(run.config);
  cpu_.SetRunConfig(run.config);
  if (arming_.AdoptRunKeys(run.config)) {
    link_.SelectionChanged();
    // Selected only now (its own config left it out): the costs the
    // correction needs were never measured. About a millisecond, here on
    // the flush thread; the Hello carries them.
    if (arming_.selected() && run.config.correction.enabled && context_.test_clock == nullptr &&
        link_.Cost("push") < 0) {
      Calibrate();
    }
  }
}

void Collector::BecomeWorker() {
  arming_.BecomeWorker();
  std::fprintf(stderr,
               "rlscope: pid %d: another process is the run's controller; this one records as a worker "
               "(a Ray actor created by the controller actor inherits its runtime_env, role included)\n",
               static_cast<int>(getpid()));
  link_.SetRole(false);
  if (!run_config_.empty()) {  // selected again as a worker under the run's config
    std::string yaml;
    yaml.swap(run_config_);
    AdoptRunConfig(yaml);
  }
}

bool Collector::Flush(int timeout_ms) {
  if (shut_down_.load(std::memory_order_relaxed)) return false;
  std::unique_lock<std::mutex> lock(flush_mu_);
  const uint64_t ticket = ++flush_requests_;
  context_.Wake();
  flushed_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return flushes_done_ >= ticket || stop_; });
  return flushes_done_ >= ticket;
}

void Collector::Shutdown() {
  if (getpid() != context_.owner_pid) return;
  if (shut_down_.exchange(true)) return;
  recording_.Close();
  arming_.Stop();
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    stop_ = true;
  }
  context_.Wake();
  if (flush_thread_.joinable()) flush_thread_.join();
}

std::pair<uint64_t, uint64_t> Collector::Totals(bool gpu) {
  const Recording::Counts counts = recording_.Count();
  return {counts.written, counts.dropped + (gpu ? gpu_.dropped() : 0)};
}

void Collector::Stats(rlscope_stats_t* out) {
  const Recording::Counts counts = recording_.Count();
  out->events = counts.written;  // cost samples are not in written(): counted apart
  out->dropped = counts.dropped + link_.transport().events_dropped();
  out->batches_sent = link_.transport().batches_sent();
  out->batches_dropped = link_.transport().batches_dropped();
  out->threads = counts.threads;
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
  Arming::SetOn(false);
}

}  // namespace rlscope
