// What the daemon's two modes share (the binary rlscope-ray-aggregator:
// daemon_main.cc is the aggregator and dispatches; relay_main.cc is a
// node's relay, with --relay-to): the command line, announcing the bound
// endpoint, stopping on signals, reading multipart messages. Sockets are
// the daemon's only: nothing here is in the library.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <zmq.h>

namespace rlscope::daemon {

struct Options {
  std::string listen, out, config_path, endpoint_file, relay_to;
  // The address collectors send clock probes to when --listen is a wildcard
  // (the one they connect to; probe_server.h). "": the host they connected to.
  std::string probe_host;
  std::string spool_dir;  // --spool-dir: --recover's directory (default: the run's, by its key)
  long grace_ms = -1;
  int trace_workers = 0;  // --trace-workers: threads encoding trace.json (0: kDefaultTraceWorkers)
  bool exit_when_done = false;
  bool exit_with_parent = false;
  bool resume = false;
  bool recover = false;  // --recover: take up spool files into --out, write, exit
};

// Prints the usage to stderr; returns 2 (the exit code for bad usage).
int Usage();
// Fills `o` from the command line; returns an exit code when main should
// stop now (bad usage, --help).
std::optional<int> ParseArgs(int argc, char** argv, Options* o);

// The endpoint `sock` is bound to (a port 0 resolved), written to
// --endpoint-file when one was given (atomically: a reader sees all or
// nothing).
std::string PublishEndpoint(void* sock, const Options& o);

// SIGINT and SIGTERM, and with `exit_with_parent` the death of the process
// that started this one, ask the daemon to stop (StopRequested).
void StopOnSignals(bool exit_with_parent);
bool StopRequested();

// Whether the message being read from `sock` has more parts.
bool MoreParts(void* sock);
inline std::string_view PartView(zmq_msg_t* part) {
  return {static_cast<const char*>(zmq_msg_data(part)), zmq_msg_size(part)};
}

// Relay mode (relay_main.cc): runs until asked to stop; the exit code.
int RunRelay(void* ctx, const Options& o);

}  // namespace rlscope::daemon
