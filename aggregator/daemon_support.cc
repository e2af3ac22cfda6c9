#include "aggregator/daemon_support.h"

#include <csignal>
#include <cstdio>
#include <fstream>

#include <sys/prctl.h>
#include <unistd.h>

namespace rlscope::daemon {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

}  // namespace

int Usage() {
  std::fprintf(stderr,
               "usage: rlscope-ray-aggregator --listen ENDPOINT --out DIR [--config FILE]\n"
               "           [--grace-ms N] [--exit-when-done] [--exit-with-parent] [--resume] [--endpoint-file FILE]\n"
               "           [--trace-workers N] [--probe-host HOST]\n"
               "       rlscope-ray-aggregator --relay-to ROOT_ENDPOINT --listen ENDPOINT [--endpoint-file FILE]\n"
               "           [--exit-with-parent]\n"
               "       rlscope-ray-aggregator --recover --out DIR [--spool-dir DIR] [--config FILE]\n"
               "       rlscope-ray-aggregator check CONFIG [--keys]\n");
  return 2;
}

std::optional<int> ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* dst) {
      if (i + 1 >= argc) return false;
      *dst = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--listen") {
      if (!value(&o->listen)) return Usage();
    } else if (a == "--out") {
      if (!value(&o->out)) return Usage();
    } else if (a == "--config") {
      if (!value(&o->config_path)) return Usage();
    } else if (a == "--endpoint-file") {
      if (!value(&o->endpoint_file)) return Usage();
    } else if (a == "--probe-host") {
      if (!value(&o->probe_host)) return Usage();
    } else if (a == "--relay-to") {
      if (!value(&o->relay_to)) return Usage();
    } else if (a == "--grace-ms") {
      if (!value(&v)) return Usage();
      o->grace_ms = std::stol(v);
    } else if (a == "--trace-workers") {
      if (!value(&v)) return Usage();
      o->trace_workers = std::stoi(v);
    } else if (a == "--exit-when-done")
      o->exit_when_done = true;
    else if (a == "--exit-with-parent")
      o->exit_with_parent = true;
    else if (a == "--resume")
      o->resume = true;
    else if (a == "--recover")
      o->recover = true;
    else if (a == "--spool-dir") {
      if (!value(&o->spool_dir)) return Usage();
    } else if (a == "-h" || a == "--help") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "rlscope-ray aggregator: unknown argument '%s'\n", a.c_str());
      return Usage();
    }
  }
  if (o->recover ? o->out.empty() : o->listen.empty()) return Usage();
  return std::nullopt;
}

std::string PublishEndpoint(void* sock, const Options& o) {
  char bound[256] = {0};
  size_t bound_len = sizeof(bound);
  zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &bound_len);
  if (!o.endpoint_file.empty()) {
    std::ofstream(o.endpoint_file + ".tmp") << bound << "\n";
    std::rename((o.endpoint_file + ".tmp").c_str(), o.endpoint_file.c_str());
  }
  return bound;
}

void StopOnSignals(bool exit_with_parent) {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (exit_with_parent) {
    // SIGTERM when the parent dies (Linux: when the thread that started us
    // exits; rlscope_ray.init runs in the driver's main thread as a rule);
    // the check covers a parent gone already.
    const pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) g_stop = 1;
  }
}

bool StopRequested() { return g_stop != 0; }

bool MoreParts(void* sock) {
  int more = 0;
  size_t len = sizeof(more);
  zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len);
  return more != 0;
}

}  // namespace rlscope::daemon
