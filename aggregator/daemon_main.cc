// rlscope-ray-aggregator: the daemon. Owns the ZeroMQ ROUTER socket and feeds
// the Aggregator library from one thread. Also `check FILE` (config check),
// and with --relay-to a node's relay instead (relay_main.cc).
//
//   rlscope-ray-aggregator --listen tcp://127.0.0.1:5557 --out DIR
//       [--config FILE] [--grace-ms N] [--exit-when-done] [--endpoint-file F]
//   --exit-when-done: exit once the controller said bye and every step it
//   closed is written (late processes wait at most flush.step_grace_ms).
//   --probe-host HOST: where collectors send clock probes when --listen is
//   a wildcard (probe_server.h): the address they connect to.
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
// (said; --resume forces it). A --out that holds another run, finished or
// not, gets a new run: that run's step directories, run database and report
// go (said), and run.json gets a new run_id.
// RLSCOPE_SECRET in its environment: every hello must carry it, and it
// takes up what the run's processes left on this node's disk at exit
// (spool_takeup.h: at start, every second, and before it finishes).
//   rlscope-ray-aggregator --recover SPOOL_DIR --out DIR: takes up the spool
//   files in SPOOL_DIR into the run directory DIR (resumed, final or not),
//   writes what they complete and exits (rlscope-ray recover).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "aggregator/aggregator.h"
#include "aggregator/chrome_trace.h"
#include "aggregator/outputs.h"
#include "aggregator/probe_server.h"
#include "aggregator/step_files.h"
#include "aggregator/daemon_support.h"
#include "aggregator/relay.h"
#include "aggregator/run_json.h"
#include "aggregator/spool_takeup.h"
#include "native/clock.h"
#include "native/config.h"
#include "native/names.h"
#include "native/probe_packet.h"
#include "native/spool_file.h"

namespace rlscope::daemon {
namespace {

int Check(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[2], "--keys") == 0) {
    std::fputs(ConfigKeyHelp().c_str(), stdout);
    return 0;
  }
  if (argc < 3) return Usage();
  const ConfigResult r = LoadConfigFile(argv[2]);
  if (!r.ok()) {
    for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.c_str());
    std::fprintf(stderr, "%zu error%s in %s\n", r.errors.size(), r.errors.size() == 1 ? "" : "s", argv[2]);
    return 1;
  }
  std::fputs(ConfigToYaml(r.config).c_str(), stdout);
  return 0;
}

// The config file's settings, overridden by --out and --grace-ms; false
// (errors printed) for a bad file.
// `keys`: those the file set (the run's config takes the controller's run
// keys over them, config.h).
bool LoadConfig(const Options& o, Config* config, KeySet* keys) {
  if (!o.config_path.empty()) {
    ConfigResult r = LoadConfigFile(o.config_path);
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

// The ROUTER socket bound to --listen, its endpoint written to
// --endpoint-file and announced; nullptr (error printed) if it cannot bind.
void* Listen(void* ctx, const Options& o, const Config& config) {
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
  const std::string bound = PublishEndpoint(sock, o);
  std::printf("rlscope-ray aggregator: listening on %s, writing %s\n", bound.c_str(), config.output_dir.c_str());
  std::fflush(stdout);
  return sock;
}

// The socket side of the Aggregator: frames in, Outgoing messages routed
// back to the collectors they are for. One thread.
class Server {
 public:
  Server(void* sock, Aggregator* agg) : sock_(sock), agg_(agg) { zmq_msg_init(&part_); }
  ~Server() { zmq_msg_close(&part_); }

  // Feeds what is queued to the aggregator (bounded in messages and bytes,
  // so Tick runs regularly under load), answering after each message. What
  // is queued is read first, then taken (Aggregator::OnFrames, which may
  // decode large frames ahead on another core); each frame is taken, and
  // its time read, in its turn, as if it had just been read. A message is a
  // routing id and frames, or a routing id and a relay's three parts
  // (kRelayTag, the collector's routing id at the relay, its frame).
  // Taken in the order read, except that the controller's messages and
  // newcomers' hellos come first (Aggregator::PriorityOrder).
  void Drain() {
    constexpr int kMessages = 10000;
    constexpr size_t kBytes = 64 << 20;
    std::vector<std::string> bytes;  // each frame's
    std::vector<Aggregator::Received> frames;
    std::vector<bool> ends;  // frames[i] is its message's last
    size_t total = 0;
    for (int n = 0; n < kMessages && total < kBytes; ++n) {
      if (zmq_msg_recv(&part_, sock_, ZMQ_DONTWAIT) < 0) break;  // routing id frame
      const std::string rid(PartView(&part_));
      std::string peer = rid;
      bool first = true;
      while (MoreParts(sock_)) {
        zmq_msg_recv(&part_, sock_, 0);
        if (first && PartView(&part_) == kRelayTag && !ReadRelayed(rid, &peer)) break;
        first = false;
        bytes.emplace_back(PartView(&part_));
        total += bytes.back().size();
        frames.push_back({{}, peer});
        ends.push_back(false);
      }
      if (!ends.empty()) ends.back() = true;
    }
    PriorityFirst(&bytes, &frames, &ends);
    for (size_t i = 0; i < frames.size(); ++i) frames[i].bytes = bytes[i];  // once `bytes` stopped growing
    agg_->OnFrames(frames, MonotonicNs, [&](size_t i, uint64_t session) {
      if (session != 0) routes_[session] = frames[i].peer;
      if (ends[i]) SendOutgoing();
    });
  }

  void SendOutgoing() {
    for (const Outgoing& o : agg_->TakeOutgoing()) {
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
  // Reorders one drain's frames as Aggregator::PriorityOrder says.
  void PriorityFirst(std::vector<std::string>* bytes, std::vector<Aggregator::Received>* frames,
                     std::vector<bool>* ends) const {
    std::string controller;
    if (auto it = routes_.find(agg_->controller_session()); it != routes_.end()) controller = it->second;
    std::vector<std::string> peers;
    for (const Aggregator::Received& f : *frames) peers.push_back(f.peer);
    const std::vector<size_t> order = Aggregator::PriorityOrder(*bytes, peers, *ends, controller);
    std::vector<std::string> b;
    std::vector<Aggregator::Received> f;
    std::vector<bool> e;
    for (size_t i : order) {
      b.push_back(std::move((*bytes)[i]));
      f.push_back(std::move((*frames)[i]));
      e.push_back((*ends)[i]);
    }
    *bytes = std::move(b);
    *frames = std::move(f);
    *ends = std::move(e);
  }

  // After a relay's tag from connection `rid`: reads exactly [the
  // collector's routing id, its frame] (the frame left in part_) and names
  // the collector `*peer`; false, the rest of the message read and nothing
  // of it taken, when it is malformed.
  bool ReadRelayed(const std::string& rid, std::string* peer) {
    std::string inner;
    if (MoreParts(sock_)) {
      zmq_msg_recv(&part_, sock_, 0);
      inner.assign(PartView(&part_));
    }
    if (inner.empty() || !MoreParts(sock_)) {
      while (MoreParts(sock_)) zmq_msg_recv(&part_, sock_, 0);
      return false;
    }
    zmq_msg_recv(&part_, sock_, 0);
    if (MoreParts(sock_)) {
      while (MoreParts(sock_)) zmq_msg_recv(&part_, sock_, 0);
      return false;
    }
    *peer = RelayPeer(rid, inner);
    return true;
  }
  // Never blocks: a peer that cannot take it now misses this message.
  void SendTo(const std::string& peer, const std::string& bytes) {
    std::string_view relay, inner;
    if (SplitRelayPeer(peer, &relay, &inner)) {
      if (zmq_send(sock_, relay.data(), relay.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
        zmq_send(sock_, kRelayTag.data(), kRelayTag.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(sock_, inner.data(), inner.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
      }
    } else if (zmq_send(sock_, peer.data(), peer.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
      zmq_send(sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
    }
  }

  void* sock_;
  Aggregator* agg_;
  zmq_msg_t part_;
  std::map<uint64_t, std::string> routes_;  // session -> its connection (a routing id, or a relay peer)
};

// Announces the steps written since the last call (`*reported` of them
// announced so far).
void ReportWritten(const Aggregator& agg, const std::string& out_dir, size_t* reported) {
  const auto written = agg.steps_written();
  for (; *reported < written.size(); ++*reported) {
    std::printf("rlscope-ray aggregator: step %lld written to %s/step_%lld/\n",
                static_cast<long long>(written[*reported]), out_dir.c_str(),
                static_cast<long long>(written[*reported]));
    std::fflush(stdout);
  }
}

// Each decision about the run's config that deserves a line (a disagreement
// between the controller's config and --config).
void ReportNotes(Aggregator& agg) {
  for (const std::string& note : agg.TakeNotes()) std::printf("rlscope-ray aggregator: %s\n", note.c_str());
  std::fflush(stdout);
}

void ReportDone(const Aggregator& agg, const StepFiles& exporter) {
  const auto& st = agg.stats();
  std::printf(
      "rlscope-ray aggregator: done: %zu processes, %llu events, %llu steps seen, %llu written, "
      "%llu bad frames%s%s, %llu refused%s%s\n",
      agg.processes().size(), static_cast<unsigned long long>(st.events),
      static_cast<unsigned long long>(st.steps_seen), static_cast<unsigned long long>(st.steps_written),
      static_cast<unsigned long long>(st.decode_errors), st.decode_errors ? " (last: " : "",
      st.decode_errors ? (st.last_decode_error + ")").c_str() : "", static_cast<unsigned long long>(st.refused_frames),
      st.refused_frames ? " (last: " : "", st.refused_frames ? (st.last_refused + ")").c_str() : "");
  if (!exporter.last_error().empty()) {
    std::fprintf(stderr, "rlscope-ray aggregator: write error: %s\n", exporter.last_error().c_str());
  }
  std::fflush(stdout);
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
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)
        unlink(path.c_str());
      else if (name.rfind("step_", 0) == 0 && e->d_type == DT_DIR)
        recurse(path, recurse);
    }
    closedir(d);
  };
  sweep(out, sweep);
}

// A new run in a directory that holds an earlier run's record (run.json):
// what that run wrote beside it goes, so that nothing read from the
// directory (the steps, the run database, the report) mixes the two runs.
// Only the names a run writes: step_<N> directories, run.duckdb (and its
// write-ahead log), report.html, figures.jsonl. Said in one line, with what could not go.
void ReplaceEarlierRun(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::path(out) / kRunJsonFile, ec)) return;
  size_t steps = 0;
  std::vector<fs::path> doomed;
  std::string others;  // the files among them, named
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool step_dir = name.size() > 5 && name.rfind("step_", 0) == 0 &&
                          name.find_first_not_of("0123456789", 5) == std::string::npos && it->is_directory(ec);
    if (step_dir) ++steps;
    if (step_dir || name == "run.duckdb" || name == "run.duckdb.wal" || name == "report.html" ||
        name == names::kFiguresFile) {
      doomed.push_back(it->path());
      if (!step_dir) others += ", " + name;
    }
  }
  std::string failed;
  for (const fs::path& p : doomed) {
    if (fs::remove_all(p, ec) == static_cast<std::uintmax_t>(-1) || ec) {
      failed += (failed.empty() ? "" : ", ") + p.filename().string() + " (" + ec.message() + ")";
    }
  }
  if (doomed.empty()) return;
  std::printf(
      "rlscope-ray aggregator: %s held an earlier run: its %zu step directories%s are replaced by this "
      "run's%s%s\n",
      out.c_str(), steps, others.c_str(), failed.empty() ? "" : "; could not remove: ", failed.c_str());
  std::fflush(stdout);
}

// RLSCOPE_SECRET, when set, for every hello; without it, said when others
// than this host's processes can reach the aggregator.
void UseSecret(Aggregator& agg, const Options& options) {
  const char* secret = std::getenv(names::kEnvSecret);
  if (secret != nullptr && *secret != '\0') {
    agg.SetSecret(secret);
  } else if (options.listen.find("127.0.0.1") == std::string::npos && options.listen.rfind("ipc://", 0) != 0) {
    std::fprintf(stderr,
                 "rlscope-ray aggregator: no %s: any process that can reach %s can write to this run "
                 "(rlscope_ray.init makes one per run)\n",
                 names::kEnvSecret, options.listen.c_str());
  }
}

// Takes up the unfinished run in `out_dir` when it is this run's (or
// --resume); otherwise a new run starts there (ReplaceEarlierRun).
void TakeUpUnfinishedRun(Aggregator& agg, const Options& options, const std::string& out_dir) {
  std::string unreadable;
  const std::optional<ResumePoint> point = ReadResumePoint(out_dir, &unreadable);
  if (!unreadable.empty()) {
    std::fprintf(stderr, "rlscope-ray aggregator: %s/%s cannot be read (%s): starting the run afresh\n",
                 out_dir.c_str(), kRunJsonFile, unreadable.c_str());
  }
  if (point && (options.resume || (!agg.run_key().empty() && point->run_key == agg.run_key()))) {
    RemoveTemporaries(out_dir);  // a killed aggregator's writes in progress
    agg.Resume(*point);
    return;
  }
  if (point) {
    std::printf(
        "rlscope-ray aggregator: %s/run.json is an unfinished run that is not this one (%s): starting a "
        "new run there (--resume takes an unfinished run up)\n",
        out_dir.c_str(), agg.run_key().empty() ? "this aggregator has no secret to tell" : "another secret");
    std::fflush(stdout);
  }
  ReplaceEarlierRun(out_dir);
}

// The directory this run's processes leave on this node's disk at exit: by
// the run's key ("" without a secret: another run's could be there too, so
// nothing is taken up by itself; rlscope-ray recover takes it by hand).
std::string SpoolDirOf(const Aggregator& agg) {
  return agg.run_key().empty() ? std::string() : SpoolDirFor(agg.run_key());
}

// Clock probes on a UDP port of their own (probe_server.h), on the host the
// aggregator listens on (none for ipc://: collectors there probe on their
// connection). Said, and done without, when the port cannot be had.
void StartProbes(const Options& options, ProbeServer* probes, Aggregator* agg) {
  const std::string host = probe::EndpointHost(options.listen);
  if (host.empty()) return;
  std::string error;
  if (!probes->Start(host, &error)) {
    std::fprintf(stderr, "rlscope-ray aggregator: %s; clock probes go over the collectors' connections\n",
                 error.c_str());
    return;
  }
  // A wildcard: the host others connect to (--probe-host; a collector
  // behind a relay connected to the relay's), else the one each connected to.
  agg->SetProbePath(probe::IsWildcardHost(host) ? options.probe_host : host, probes->port(), probes->key());
}

// Serves collectors until a stop, a write error or (--exit-when-done) the
// run's end.
void Serve(void* sock, Server& server, Aggregator& agg, const Options& options, const std::string& out_dir,
           size_t* reported) {
  const std::string spool_dir = SpoolDirOf(agg);
  int64_t next_take_up = 0;
  int64_t due_ns = 0;  // when Tick has time-bound work (Aggregator::TickDueNs)
  while (!StopRequested()) {
    // Asleep until a message or what is due: each wake-up costs tens of
    // microseconds of this thread (a fixed 50 ms poll was most of an idle
    // aggregator's CPU, 1.6 ms a second, and about a tenth of an always-on
    // one's). A stop request (a signal) is seen when the poll ends: at once
    // when the signal interrupts it, else (it came just before the poll, or
    // to another thread) within the sleep, at most 250 ms.
    const int64_t sleep_ns = std::min(due_ns, next_take_up) - MonotonicNs();
    zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, static_cast<long>(std::clamp<int64_t>((sleep_ns + 999999) / 1000000, 0, 1000)));
    server.Drain();
    if (const int64_t now = MonotonicNs(); now >= next_take_up) {
      TakeUpSpoolFiles(agg, spool_dir, now);
      next_take_up = now + 1000000000;
    }
    agg.Tick(MonotonicNs());
    due_ns = agg.TickDueNs(MonotonicNs());
    server.SendOutgoing();
    ReportNotes(agg);
    ReportWritten(agg, out_dir, reported);
    if (agg.stats().write_errors > 0) break;
    if (options.exit_when_done && agg.RunComplete()) break;
  }
}

// The run's files as the config's output.formats asks (outputs.h), for
// both modes.
std::unique_ptr<StepFiles> MakeRunFiles(const Config& config, const Options& options) {
  return MakeStepFiles(config.output_dir, config.output.formats,
                       options.trace_workers > 0 ? options.trace_workers : kDefaultTraceWorkers);
}

// rlscope-ray recover: the spool files of --spool-dir (or of the run's
// directory by its key) into the run directory --out, resumed whether it is
// final or not; writes what they complete and finishes the run again.
int RunRecover(const Options& options) {
  Config config;
  KeySet config_keys;
  if (!LoadConfig(options, &config, &config_keys)) return 2;
  umask(077);
  const std::unique_ptr<StepFiles> exporter = MakeRunFiles(config, options);
  Aggregator agg(config, exporter.get(), options.config_path, config_keys);
  if (const char* secret = std::getenv(names::kEnvSecret); secret != nullptr && *secret != '\0') agg.SetSecret(secret);
  std::string unreadable;
  if (const std::optional<ResumePoint> point = ReadResumePoint(config.output_dir, &unreadable, true)) {
    RemoveTemporaries(config.output_dir);
    agg.Resume(*point);
    agg.KeepRunKey(point->run_key);
  } else if (!unreadable.empty()) {
    std::fprintf(stderr, "rlscope-ray recover: %s/%s cannot be read (%s)\n", config.output_dir.c_str(), kRunJsonFile,
                 unreadable.c_str());
    return 2;
  }
  const std::string dir = !options.spool_dir.empty() ? options.spool_dir : SpoolDirFor(agg.run_key());
  const size_t files = ListSpoolFiles(dir).size();
  std::printf("rlscope-ray recover: %zu spool file%s in %s\n", files, files == 1 ? "" : "s", dir.c_str());
  size_t reported = agg.steps_written().size();
  TakeUpSpoolFiles(agg, dir, MonotonicNs());
  ReportNotes(agg);
  agg.Finish(MonotonicNs());
  ReportWritten(agg, config.output_dir, &reported);
  ReportNotes(agg);
  ReportDone(agg, *exporter);
  return agg.stats().write_errors > 0 ? 3 : 0;
}

// After the run's end: the collectors hear that it is over (wire::kRunOver)
// and goodbyes that come now are acknowledged, for half a second. (A message
// is read only while its connection is up: one closed at once after sending
// would lose what its collector had not read yet.)
void AnswerAfterFinish(void* sock, Server& server) {
  server.SendOutgoing();
  const int64_t until = MonotonicNs() + 500000000;
  while (MonotonicNs() < until) {
    zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, 20);
    server.Drain();
    server.SendOutgoing();
  }
}

int RunAggregator(const Options& options) {
  Config config;
  KeySet config_keys;
  if (!LoadConfig(options, &config, &config_keys)) return 2;
  // The profile is its user's only (files 0600, directories 0700).
  umask(077);
  void* ctx = zmq_ctx_new();
  void* sock = Listen(ctx, options, config);
  if (sock == nullptr) return 2;
  StopOnSignals(options.exit_with_parent);
  const std::unique_ptr<StepFiles> exporter = MakeRunFiles(config, options);
  Aggregator agg(config, exporter.get(), options.config_path, config_keys);
  UseSecret(agg, options);
  TakeUpUnfinishedRun(agg, options, config.output_dir);
  if (!exporter->ExportRun(agg.RunInfoNow())) {
    std::fprintf(stderr, "rlscope-ray aggregator: %s\n", exporter->last_error().c_str());
    return 3;
  }
  size_t reported = agg.steps_written().size();  // a resumed run's are announced already
  TakeUpSpoolFiles(agg, SpoolDirOf(agg), MonotonicNs());
  ProbeServer probes;
  StartProbes(options, &probes, &agg);
  Server server(sock, &agg);
  Serve(sock, server, agg, options, config.output_dir, &reported);
  if (agg.stats().write_errors > 0) {
    std::fprintf(stderr,
                 "rlscope-ray aggregator: stopping: %s. The steps written so far are kept; the collectors keep "
                 "what was not written in their spools (buffers.spool_mb): start the aggregator again on the same "
                 "--out once it can be written, and it writes them\n",
                 exporter->last_error().c_str());
  } else {
    TakeUpSpoolFiles(agg, SpoolDirOf(agg), MonotonicNs());  // what the last exits left
    agg.Finish(MonotonicNs());
    AnswerAfterFinish(sock, server);
    ReportWritten(agg, config.output_dir, &reported);
    ReportNotes(agg);  // an empty run says why
  }
  ReportDone(agg, *exporter);
  if (probes.port() != 0) {
    probes.Stop();
    std::printf("rlscope-ray aggregator: clock probes: %llu answered on udp port %u, %llu refused\n",
                static_cast<unsigned long long>(probes.answered()), static_cast<unsigned>(probes.port()),
                static_cast<unsigned long long>(probes.refused()));
    std::fflush(stdout);
  }
  const int linger_ms = 1000;  // the last answers go out, or are given up on
  zmq_setsockopt(sock, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  zmq_close(sock);
  zmq_ctx_term(ctx);
  return agg.stats().write_errors > 0 ? 3 : 0;
}

}  // namespace
}  // namespace rlscope::daemon

int main(int argc, char** argv) {
  using namespace rlscope::daemon;
  if (argc >= 2 && std::strcmp(argv[1], "check") == 0) return Check(argc, argv);
  Options options;
  if (const std::optional<int> rc = ParseArgs(argc, argv, &options)) return *rc;
  if (!options.relay_to.empty()) return RunRelay(zmq_ctx_new(), options);
  if (options.recover) return RunRecover(options);
  return RunAggregator(options);
}
