// rlscope-ray-aggregator: the daemon. Owns the ZeroMQ ROUTER socket and feeds
// the Aggregator library from one thread. Also `check FILE` (config check).
//
//   rlscope-ray-aggregator --listen tcp://127.0.0.1:5557 --out DIR
//       [--config FILE] [--grace-ms N] [--exit-when-done] [--endpoint-file F]
//   --exit-when-done: exit once the controller said bye and every step it
//   closed is written (late processes wait at most flush.step_grace_ms).
//   --exit-with-parent: also exit (writing what is pending, as on SIGTERM)
//   when the process that started it dies (rlscope_ray.init's child).
//   rlscope-ray-aggregator check FILE [--keys]
//
// SIGINT/SIGTERM: write every closed step, finalise run.json, exit 0.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <sys/prctl.h>
#include <unistd.h>
#include <zmq.h>

#include "aggregator/aggregator.h"
#include "aggregator/chrome_trace.h"
#include "native/clock.h"
#include "native/config.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Usage() {
  std::fprintf(stderr,
               "usage: rlscope-ray-aggregator --listen ENDPOINT --out DIR [--config FILE]\n"
               "           [--grace-ms N] [--exit-when-done] [--exit-with-parent] [--endpoint-file FILE]\n"
               "       rlscope-ray-aggregator check CONFIG [--keys]\n");
  return 2;
}

int Check(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[2], "--keys") == 0) {
    std::fputs(rlscope::ConfigKeyHelp().c_str(), stdout);
    return 0;
  }
  if (argc < 3) return Usage();
  const rlscope::ConfigResult r = rlscope::LoadConfigFile(argv[2]);
  if (!r.ok()) {
    for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.c_str());
    std::fprintf(stderr, "%zu error%s in %s\n", r.errors.size(), r.errors.size() == 1 ? "" : "s",
                 argv[2]);
    return 1;
  }
  std::fputs(rlscope::ConfigToYaml(r.config).c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "check") == 0) return Check(argc, argv);
  std::string listen, out, config_path, endpoint_file;
  long grace_ms = -1;
  bool exit_when_done = false;
  bool exit_with_parent = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* dst) {
      if (i + 1 >= argc) return false;
      *dst = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--listen") { if (!value(&listen)) return Usage(); }
    else if (a == "--out") { if (!value(&out)) return Usage(); }
    else if (a == "--config") { if (!value(&config_path)) return Usage(); }
    else if (a == "--endpoint-file") { if (!value(&endpoint_file)) return Usage(); }
    else if (a == "--grace-ms") { if (!value(&v)) return Usage(); grace_ms = std::stol(v); }
    else if (a == "--exit-when-done") exit_when_done = true;
    else if (a == "--exit-with-parent") exit_with_parent = true;
    else if (a == "-h" || a == "--help") { Usage(); return 0; }
    else { std::fprintf(stderr, "rlscope-ray aggregator: unknown argument '%s'\n", a.c_str()); return Usage(); }
  }
  if (listen.empty()) return Usage();

  rlscope::Config config;
  if (!config_path.empty()) {
    rlscope::ConfigResult r = rlscope::LoadConfigFile(config_path);
    if (!r.ok()) {
      for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.c_str());
      return 2;
    }
    config = r.config;
  }
  if (!out.empty()) config.output_dir = out;
  if (grace_ms >= 0) config.flush.step_grace_ms = grace_ms;

  void* ctx = zmq_ctx_new();
  void* sock = zmq_socket(ctx, ZMQ_ROUTER);
  const int hwm = 100000;
  zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
  if (zmq_bind(sock, listen.c_str()) != 0) {
    std::fprintf(stderr, "rlscope-ray aggregator: cannot listen on '%s': %s\n", listen.c_str(),
                 zmq_strerror(zmq_errno()));
    return 2;
  }
  char bound[256] = {0};
  size_t bound_len = sizeof(bound);
  zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &bound_len);
  if (!endpoint_file.empty()) {
    std::ofstream(endpoint_file + ".tmp") << bound << "\n";
    std::rename((endpoint_file + ".tmp").c_str(), endpoint_file.c_str());
  }
  std::printf("rlscope-ray aggregator: listening on %s, writing %s\n", bound, config.output_dir.c_str());
  std::fflush(stdout);

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

  rlscope::ChromeTraceExporter exporter(config.output_dir);
  rlscope::Aggregator agg(config, &exporter);
  exporter.ExportRun({});
  size_t reported = 0;
  zmq_msg_t part;
  zmq_msg_init(&part);
  std::map<uint64_t, std::string> routes;  // session -> ROUTER routing id of its collector
  auto send_outgoing = [&] {
    for (const rlscope::Outgoing& o : agg.TakeOutgoing()) {
      for (const auto& [session, rid] : routes) {
        if (o.session != 0 && o.session != session) continue;
        // Never blocks: a peer that cannot take it now misses this message.
        if (zmq_send(sock, rid.data(), rid.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
          zmq_send(sock, o.bytes.data(), o.bytes.size(), ZMQ_DONTWAIT);
        }
      }
    }
  };
  while (!g_stop) {
    zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, 50);
    // Drain what is queued (bounded, so Tick runs regularly under load).
    for (int n = 0; n < 10000; ++n) {
      if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) break;  // routing id frame
      const std::string rid(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
      int more = 0;
      size_t more_len = sizeof(more);
      zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &more_len);
      while (more) {
        zmq_msg_recv(&part, sock, 0);
        const uint64_t session = agg.OnFrame(static_cast<const char*>(zmq_msg_data(&part)),
                                             zmq_msg_size(&part), rlscope::MonotonicNs());
        if (session != 0) routes[session] = rid;
        zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &more_len);
      }
      send_outgoing();
    }
    const int64_t now = rlscope::MonotonicNs();
    agg.Tick(now);
    send_outgoing();
    const auto written = agg.steps_written();
    for (; reported < written.size(); ++reported) {
      std::printf("rlscope-ray aggregator: step %lld written to %s/step_%lld/trace.json\n",
                  static_cast<long long>(written[reported]), config.output_dir.c_str(),
                  static_cast<long long>(written[reported]));
      std::fflush(stdout);
    }
    if (exit_when_done && agg.RunComplete()) break;
  }
  zmq_msg_close(&part);
  agg.Finish(rlscope::MonotonicNs());
  const auto written = agg.steps_written();
  for (; reported < written.size(); ++reported) {
    std::printf("rlscope-ray aggregator: step %lld written to %s/step_%lld/trace.json\n",
                static_cast<long long>(written[reported]), config.output_dir.c_str(),
                static_cast<long long>(written[reported]));
  }
  const auto& st = agg.stats();
  std::printf("rlscope-ray aggregator: done: %zu processes, %llu events, %llu steps seen, %llu written, "
              "%llu bad frames%s%s\n",
              agg.processes().size(), static_cast<unsigned long long>(st.events),
              static_cast<unsigned long long>(st.steps_seen),
              static_cast<unsigned long long>(st.steps_written),
              static_cast<unsigned long long>(st.decode_errors),
              st.decode_errors ? " (last: " : "", st.decode_errors ? (st.last_decode_error + ")").c_str() : "");
  if (!exporter.last_error().empty()) {
    std::fprintf(stderr, "rlscope-ray aggregator: write error: %s\n", exporter.last_error().c_str());
  }
  std::fflush(stdout);
  zmq_close(sock);
  zmq_ctx_term(ctx);
  return 0;
}
