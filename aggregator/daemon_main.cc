// rlscope-ray-aggregator: the daemon. Owns the ZeroMQ ROUTER socket and feeds
// the Aggregator library from one thread. Also `check FILE` (config check).
//
//   rlscope-ray-aggregator --listen tcp://127.0.0.1:5557 --out DIR
//       [--config FILE] [--grace-ms N] [--exit-when-done] [--endpoint-file F]
//   --exit-when-done: exit once the controller said bye and every step it
//   closed is written (late processes wait at most flush.step_grace_ms).
//   --exit-with-parent: also exit (writing what is pending, as on SIGTERM)
//   when the process that started it dies (rlscope_ray.init's child).
//   --resume: take up a --out whose run.json is not final even when it is
//   not this run's (no secret, or another one).
//   rlscope-ray-aggregator check FILE [--keys]
//   rlscope-ray-aggregator --relay-to ROOT --listen ENDPOINT [--endpoint-file F]
//   [--exit-with-parent]: a node's relay (aggregator/relay.h): forwards its
//   collectors' frames to the root aggregator and the answers back.
//
// SIGINT/SIGTERM: write every closed step, finalise run.json, exit 0.
// A step or run.json that cannot be written (disk full, read-only): said at
// once, nothing written is touched, exit 3 (the collectors keep the steps
// not written in their spools: start it again on the same --out to write
// them). Started on a --out whose run.json is not final and is this run's
// (the same secret: resume.run_key), an aggregator of the run was killed: it
// takes the run up (Aggregator::Resume). Another run's is not taken up
// (said; --resume forces it).
// RLSCOPE_SECRET in its environment: every hello must carry it.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <zmq.h>

#include "aggregator/aggregator.h"
#include "aggregator/chrome_trace.h"
#include "aggregator/relay.h"
#include "native/clock.h"
#include "native/config.h"
#include "native/names.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Usage() {
  std::fprintf(stderr,
               "usage: rlscope-ray-aggregator --listen ENDPOINT --out DIR [--config FILE]\n"
               "           [--grace-ms N] [--exit-when-done] [--exit-with-parent] [--resume] [--endpoint-file FILE]\n"
               "       rlscope-ray-aggregator --relay-to ROOT_ENDPOINT --listen ENDPOINT [--endpoint-file FILE]\n"
               "           [--exit-with-parent]\n"
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

struct Options {
  std::string listen, out, config_path, endpoint_file, relay_to;
  long grace_ms = -1;
  bool exit_when_done = false;
  bool exit_with_parent = false;
  bool resume = false;
};

// Fills `o` from the command line; returns an exit code when main should
// stop now (bad usage, --help).
std::optional<int> ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* dst) {
      if (i + 1 >= argc) return false;
      *dst = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--listen") { if (!value(&o->listen)) return Usage(); }
    else if (a == "--out") { if (!value(&o->out)) return Usage(); }
    else if (a == "--config") { if (!value(&o->config_path)) return Usage(); }
    else if (a == "--endpoint-file") { if (!value(&o->endpoint_file)) return Usage(); }
    else if (a == "--relay-to") { if (!value(&o->relay_to)) return Usage(); }
    else if (a == "--grace-ms") { if (!value(&v)) return Usage(); o->grace_ms = std::stol(v); }
    else if (a == "--exit-when-done") o->exit_when_done = true;
    else if (a == "--exit-with-parent") o->exit_with_parent = true;
    else if (a == "--resume") o->resume = true;
    else if (a == "-h" || a == "--help") { Usage(); return 0; }
    else { std::fprintf(stderr, "rlscope-ray aggregator: unknown argument '%s'\n", a.c_str()); return Usage(); }
  }
  if (o->listen.empty()) return Usage();
  return std::nullopt;
}

// The config file's settings, overridden by --out and --grace-ms; false
// (errors printed) for a bad file.
// `keys`: those the file set (the run's config takes the controller's run
// keys over them, config.h).
bool LoadConfig(const Options& o, rlscope::Config* config, rlscope::KeySet* keys) {
  if (!o.config_path.empty()) {
    rlscope::ConfigResult r = rlscope::LoadConfigFile(o.config_path);
    if (!r.ok()) {
      for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.c_str());
      return false;
    }
    *config = r.config;
    *keys = r.keys;
  }
  if (!o.out.empty()) config->output_dir = o.out;
  if (o.grace_ms >= 0) config->flush.step_grace_ms = o.grace_ms;
  return true;
}

// Writes `bound` to --endpoint-file (atomically: a reader sees all or nothing).
void WriteEndpointFile(const Options& o, const char* bound) {
  if (o.endpoint_file.empty()) return;
  std::ofstream(o.endpoint_file + ".tmp") << bound << "\n";
  std::rename((o.endpoint_file + ".tmp").c_str(), o.endpoint_file.c_str());
}

// The ROUTER socket bound to --listen, its endpoint written to
// --endpoint-file and announced; nullptr (error printed) if it cannot bind.
void* Listen(void* ctx, const Options& o, const rlscope::Config& config) {
  void* sock = zmq_socket(ctx, ZMQ_ROUTER);
  const int hwm = 100000;
  zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
  // A cluster's worth of collectors connect at once (ZeroMQ's default
  // accept queue is 100): an overflowing queue drops their handshakes and
  // they retry, on an overloaded host for minutes. The kernel caps it at
  // net.core.somaxconn.
  const int backlog = 4096;
  zmq_setsockopt(sock, ZMQ_BACKLOG, &backlog, sizeof(backlog));
  if (zmq_bind(sock, o.listen.c_str()) != 0) {
    std::fprintf(stderr, "rlscope-ray aggregator: cannot listen on '%s': %s\n", o.listen.c_str(),
                 zmq_strerror(zmq_errno()));
    return nullptr;
  }
  char bound[256] = {0};
  size_t bound_len = sizeof(bound);
  zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &bound_len);
  WriteEndpointFile(o, bound);
  std::printf("rlscope-ray aggregator: listening on %s, writing %s\n", bound, config.output_dir.c_str());
  std::fflush(stdout);
  return sock;
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

// The socket side of the Aggregator: frames in, Outgoing messages routed
// back to the collectors they are for. One thread.
class Server {
 public:
  Server(void* sock, rlscope::Aggregator* agg) : sock_(sock), agg_(agg) { zmq_msg_init(&part_); }
  ~Server() { zmq_msg_close(&part_); }

  // Feeds what is queued to the aggregator (bounded, so Tick runs
  // regularly under load), answering after each message. A message is a
  // routing id and frames, or a routing id and a relay's three parts
  // (kRelayTag, the collector's routing id at the relay, its frame).
  void Drain() {
    for (int n = 0; n < 10000; ++n) {
      if (zmq_msg_recv(&part_, sock_, ZMQ_DONTWAIT) < 0) break;  // routing id frame
      const std::string rid(static_cast<const char*>(zmq_msg_data(&part_)), zmq_msg_size(&part_));
      std::string peer = rid;
      bool first = true;
      while (More()) {
        zmq_msg_recv(&part_, sock_, 0);
        if (first && Part() == rlscope::kRelayTag) {  // exactly [tag, collector's routing id, frame]
          std::string inner;
          if (More()) {
            zmq_msg_recv(&part_, sock_, 0);
            inner.assign(Part());
          }
          if (inner.empty() || !More()) {  // malformed: nothing of it is taken
            while (More()) zmq_msg_recv(&part_, sock_, 0);
            break;
          }
          zmq_msg_recv(&part_, sock_, 0);
          if (More()) {
            while (More()) zmq_msg_recv(&part_, sock_, 0);
            break;
          }
          peer = rlscope::RelayPeer(rid, inner);
        }
        first = false;
        const uint64_t session = agg_->OnFrame(static_cast<const char*>(zmq_msg_data(&part_)),
                                               zmq_msg_size(&part_), rlscope::MonotonicNs(), peer);
        if (session != 0) routes_[session] = peer;
      }
      SendOutgoing();
    }
  }

  void SendOutgoing() {
    for (const rlscope::Outgoing& o : agg_->TakeOutgoing()) {
      if (!o.peer.empty()) {  // a connection, known or not (Control.hello)
        SendTo(o.peer, o.bytes);
        continue;
      }
      for (const auto& [session, peer] : routes_) {
        if (o.session != 0 && o.session != session) continue;
        SendTo(peer, o.bytes);
      }
    }
  }

 private:
  bool More() {
    int more = 0;
    size_t len = sizeof(more);
    zmq_getsockopt(sock_, ZMQ_RCVMORE, &more, &len);
    return more != 0;
  }
  std::string_view Part() { return {static_cast<const char*>(zmq_msg_data(&part_)), zmq_msg_size(&part_)}; }
  // Never blocks: a peer that cannot take it now misses this message.
  void SendTo(const std::string& peer, const std::string& bytes) {
    std::string_view relay, inner;
    if (rlscope::SplitRelayPeer(peer, &relay, &inner)) {
      if (zmq_send(sock_, relay.data(), relay.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
        zmq_send(sock_, rlscope::kRelayTag.data(), rlscope::kRelayTag.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(sock_, inner.data(), inner.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
      }
    } else if (zmq_send(sock_, peer.data(), peer.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
      zmq_send(sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
    }
  }

  void* sock_;
  rlscope::Aggregator* agg_;
  zmq_msg_t part_;
  std::map<uint64_t, std::string> routes_;  // session -> its connection (a routing id, or a relay peer)
};

// Announces the steps written since the last call (`*reported` of them
// announced so far).
void ReportWritten(const rlscope::Aggregator& agg, const std::string& out_dir, size_t* reported) {
  const auto written = agg.steps_written();
  for (; *reported < written.size(); ++*reported) {
    std::printf("rlscope-ray aggregator: step %lld written to %s/step_%lld/trace.json\n",
                static_cast<long long>(written[*reported]), out_dir.c_str(),
                static_cast<long long>(written[*reported]));
    std::fflush(stdout);
  }
}

// Each decision about the run's config that deserves a line (a disagreement
// between the controller's config and --config).
void ReportNotes(rlscope::Aggregator& agg) {
  for (const std::string& note : agg.TakeNotes()) std::printf("rlscope-ray aggregator: %s\n", note.c_str());
  std::fflush(stdout);
}

void ReportDone(const rlscope::Aggregator& agg, const rlscope::ChromeTraceExporter& exporter) {
  const auto& st = agg.stats();
  std::printf("rlscope-ray aggregator: done: %zu processes, %llu events, %llu steps seen, %llu written, "
              "%llu bad frames%s%s, %llu refused%s%s\n",
              agg.processes().size(), static_cast<unsigned long long>(st.events),
              static_cast<unsigned long long>(st.steps_seen),
              static_cast<unsigned long long>(st.steps_written),
              static_cast<unsigned long long>(st.decode_errors),
              st.decode_errors ? " (last: " : "", st.decode_errors ? (st.last_decode_error + ")").c_str() : "",
              static_cast<unsigned long long>(st.refused_frames), st.refused_frames ? " (last: " : "",
              st.refused_frames ? (st.last_refused + ")").c_str() : "");
  if (!exporter.last_error().empty()) {
    std::fprintf(stderr, "rlscope-ray aggregator: write error: %s\n", exporter.last_error().c_str());
  }
  std::fflush(stdout);
}

// The resume point in `out`/run.json when an aggregator of the run stopped
// before its end (run.json not final), else nullopt.
std::optional<rlscope::ResumePoint> ReadResumePoint(const std::string& out) {
  const std::string path = out + "/run.json";
  if (access(path.c_str(), F_OK) != 0) return std::nullopt;
  try {
    const YAML::Node run = YAML::LoadFile(path);  // JSON is YAML
    if (run["final"].as<bool>(true)) return std::nullopt;
    rlscope::ResumePoint p;
    for (const auto& n : run["steps_written"]) p.steps_written.push_back(n.as<int64_t>());
    p.steps_seen = run["steps_seen"].as<uint64_t>(0);
    for (const auto& proc : run["processes"]) {
      const uint64_t session = std::stoull(proc["session"].as<std::string>(), nullptr, 16);
      if (proc["selected"].as<bool>(false) && !proc["said_bye"].as<bool>(false) && !proc["lost"].as<bool>(false)) {
        p.awaited.push_back(session);
      }
      if (const int64_t released = proc["released_ns"].as<int64_t>(0); released != 0) p.released[session] = released;
    }
    if (const YAML::Node r = run["resume"]) {
      p.last_step = r["last_step"].as<int64_t>(-1);
      p.controller_session = std::stoull(r["controller_session"].as<std::string>("0"), nullptr, 16);
      p.controller_ns = r["controller_ns"].as<int64_t>(0);
      p.resumes = r["resumes"].as<int>(0);
      p.run_key = r["run_key"].as<std::string>("");
    }
    return p;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rlscope-ray aggregator: %s cannot be read (%s): starting the run afresh\n", path.c_str(),
                 e.what());
    return std::nullopt;
  }
}

// Removes temporary files a killed aggregator left in `out` and its step
// directories (a write in progress).
void RemoveTemporaries(const std::string& out) {
  auto sweep = [](const std::string& dir, auto&& recurse) -> void {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string path = dir + "/" + name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) unlink(path.c_str());
      else if (name.rfind("step_", 0) == 0 && e->d_type == DT_DIR) recurse(path, recurse);
    }
    closedir(d);
  };
  sweep(out, sweep);
}

}  // namespace

// Relay mode: a ROUTER for the node's collectors, a DEALER to the root. A
// collector's frame goes up only while the root's connection takes it (else
// it waits in the collector's socket and spool: backpressure, never a drop
// here); the root's answers come down to their collector, or are dropped
// and counted when it is gone (the root repeats what matters). Never blocks:
// SIGTERM stops it at once, what is queued for the root lingers 2 s.
int RunRelay(void* ctx, const Options& o) {
  void* front = zmq_socket(ctx, ZMQ_ROUTER);
  void* back = zmq_socket(ctx, ZMQ_DEALER);
  const int hwm = 100000, backlog = 4096, reconnect_max_ms = 2000, mandatory = 1, no_linger = 0;
  zmq_setsockopt(front, ZMQ_RCVHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(front, ZMQ_BACKLOG, &backlog, sizeof(backlog));
  zmq_setsockopt(front, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof(mandatory));  // a gone collector: an error
  zmq_setsockopt(front, ZMQ_LINGER, &no_linger, sizeof(no_linger));
  zmq_setsockopt(back, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(back, ZMQ_RECONNECT_IVL_MAX, &reconnect_max_ms, sizeof(reconnect_max_ms));
  if (zmq_bind(front, o.listen.c_str()) != 0 || zmq_connect(back, o.relay_to.c_str()) != 0) {
    std::fprintf(stderr, "rlscope-ray relay: cannot listen on '%s' or reach '%s': %s\n", o.listen.c_str(),
                 o.relay_to.c_str(), zmq_strerror(zmq_errno()));
    return 2;
  }
  char bound[256] = {0};
  size_t bound_len = sizeof(bound);
  zmq_getsockopt(front, ZMQ_LAST_ENDPOINT, bound, &bound_len);
  WriteEndpointFile(o, bound);
  std::printf("rlscope-ray relay: listening on %s, relaying to %s\n", bound, o.relay_to.c_str());
  std::fflush(stdout);
  StopOnSignals(o.exit_with_parent);
  auto more = [](void* sock) {
    int m = 0;
    size_t len = sizeof(m);
    zmq_getsockopt(sock, ZMQ_RCVMORE, &m, &len);
    return m != 0;
  };
  auto part_string = [](zmq_msg_t* m) {
    return std::string(static_cast<const char*>(zmq_msg_data(m)), zmq_msg_size(m));
  };
  // Frames read from collectors, not yet taken by the root's connection:
  // (routing id, frame). Collectors are read only while it is short.
  std::deque<std::pair<std::string, std::string>> up_queue;
  constexpr size_t kMaxQueued = 256;
  uint64_t up = 0, down = 0, down_dropped = 0, malformed = 0;
  zmq_msg_t part;
  zmq_msg_init(&part);
  while (!g_stop) {
    zmq_pollitem_t items[2] = {{back, 0, static_cast<short>(ZMQ_POLLIN | (up_queue.empty() ? 0 : ZMQ_POLLOUT)), 0},
                               {front, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, up_queue.size() < kMaxQueued ? 2 : 1, 50);
    // Down: [tag, collector's routing id, bytes] -> [routing id, bytes].
    while (!g_stop && zmq_msg_recv(&part, back, ZMQ_DONTWAIT) >= 0) {
      std::vector<std::string> parts{part_string(&part)};
      while (more(back) && zmq_msg_recv(&part, back, 0) >= 0) parts.push_back(part_string(&part));
      if (parts.size() != 3 || parts[0] != rlscope::kRelayTag) {
        ++malformed;  // not for a collector
        continue;
      }
      if (zmq_send(front, parts[1].data(), parts[1].size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
          zmq_send(front, parts[2].data(), parts[2].size(), ZMQ_DONTWAIT) >= 0) {
        ++down;
      } else {
        ++down_dropped;  // the collector is gone (ROUTER_MANDATORY) or cannot take it now
      }
    }
    // Up: read [routing id, frame...] while the queue is short; send each
    // frame as [tag, routing id, frame] while the root's connection takes it.
    while (!g_stop && up_queue.size() < kMaxQueued && zmq_msg_recv(&part, front, ZMQ_DONTWAIT) >= 0) {
      const std::string rid = part_string(&part);
      while (more(front) && zmq_msg_recv(&part, front, 0) >= 0) up_queue.emplace_back(rid, part_string(&part));
    }
    while (!g_stop && !up_queue.empty()) {
      const auto& [rid, frame] = up_queue.front();
      // Only the first part can meet the high-water mark; the rest of a
      // message then always goes (ZeroMQ queues a message whole).
      if (zmq_send(back, rlscope::kRelayTag.data(), rlscope::kRelayTag.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        break;  // EAGAIN (the root is slow or away) or EINTR: tried again next pass
      }
      zmq_send(back, rid.data(), rid.size(), ZMQ_SNDMORE);
      zmq_send(back, frame.data(), frame.size(), 0);
      up_queue.pop_front();
      ++up;
    }
  }
  zmq_msg_close(&part);
  std::printf("rlscope-ray relay: done: %llu frames up, %llu down, %llu down to collectors gone, %llu frames "
              "not for a collector, %zu frames not sent up (their collectors replay them)\n",
              static_cast<unsigned long long>(up), static_cast<unsigned long long>(down),
              static_cast<unsigned long long>(down_dropped), static_cast<unsigned long long>(malformed),
              up_queue.size());
  std::fflush(stdout);
  const int linger = 2000;  // what is queued for the root goes, for a while
  zmq_setsockopt(back, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(front);
  zmq_close(back);
  zmq_ctx_term(ctx);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "check") == 0) return Check(argc, argv);
  Options options;
  if (const std::optional<int> rc = ParseArgs(argc, argv, &options)) return *rc;
  if (!options.relay_to.empty()) return RunRelay(zmq_ctx_new(), options);
  rlscope::Config config;
  rlscope::KeySet config_keys;
  if (!LoadConfig(options, &config, &config_keys)) return 2;

  // The profile is its user's only (files 0600, directories 0700).
  umask(077);
  void* ctx = zmq_ctx_new();
  void* sock = Listen(ctx, options, config);
  if (sock == nullptr) return 2;
  StopOnSignals(options.exit_with_parent);

  rlscope::ChromeTraceExporter exporter(config.output_dir);
  rlscope::Aggregator agg(config, &exporter, options.config_path, config_keys);
  const char* secret = std::getenv(rlscope::names::kEnvSecret);
  if (secret != nullptr && *secret != '\0') {
    agg.SetSecret(secret);
  } else if (options.listen.find("127.0.0.1") == std::string::npos && options.listen.rfind("ipc://", 0) != 0) {
    std::fprintf(stderr, "rlscope-ray aggregator: no %s: any process that can reach %s can write to this run "
                 "(rlscope_ray.init makes one per run)\n", rlscope::names::kEnvSecret, options.listen.c_str());
  }
  if (const std::optional<rlscope::ResumePoint> point = ReadResumePoint(config.output_dir)) {
    if (options.resume || (!agg.run_key().empty() && point->run_key == agg.run_key())) {
      RemoveTemporaries(config.output_dir);  // a killed aggregator's writes in progress
      agg.Resume(*point);
    } else {
      std::printf("rlscope-ray aggregator: %s/run.json is an unfinished run that is not this one (%s): starting a "
                  "new run there; its %zu steps on disk stay but are no longer listed (--resume takes it up)\n",
                  config.output_dir.c_str(),
                  agg.run_key().empty() ? "this aggregator has no secret to tell" : "another secret",
                  point->steps_written.size());
      std::fflush(stdout);
    }
  }
  if (!exporter.ExportRun(agg.RunInfoNow())) {
    std::fprintf(stderr, "rlscope-ray aggregator: %s\n", exporter.last_error().c_str());
    return 3;
  }
  size_t reported = agg.steps_written().size();  // a resumed run's are announced already
  {
    Server server(sock, &agg);
    while (!g_stop) {
      zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
      zmq_poll(&item, 1, 50);
      server.Drain();
      agg.Tick(rlscope::MonotonicNs());
      server.SendOutgoing();
      ReportNotes(agg);
      ReportWritten(agg, config.output_dir, &reported);
      if (agg.stats().write_errors > 0) break;
      if (options.exit_when_done && agg.RunComplete()) break;
    }
  }
  if (agg.stats().write_errors > 0) {
    std::fprintf(stderr,
                 "rlscope-ray aggregator: stopping: %s. The steps written so far are kept; the collectors keep "
                 "what was not written in their spools (buffers.spool_mb): start the aggregator again on the same "
                 "--out once it can be written, and it writes them\n",
                 exporter.last_error().c_str());
    ReportDone(agg, exporter);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return 3;
  }
  agg.Finish(rlscope::MonotonicNs());
  ReportWritten(agg, config.output_dir, &reported);
  ReportNotes(agg);  // an empty run says why
  ReportDone(agg, exporter);
  zmq_close(sock);
  zmq_ctx_term(ctx);
  return agg.stats().write_errors > 0 ? 3 : 0;
}
