// What the aggregator's units share (aggregator.h composes them): one
// AggregatorContext, owned by the Aggregator and handed to each unit when it
// is made. It holds the run's counters, the messages for collectors in the
// order the units made them, and the lines about the run for the daemon's
// log and run.json. Single-threaded, as the Aggregator is.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/timeline.h"
#include "native/wire.h"

namespace rlscope {

// Every process that connected (or sent a batch), by session.
using ProcessMap = std::map<uint64_t, std::unique_ptr<ProcessTimeline>>;

// A message the daemon must send: to one collector, or to all (session 0);
// or, `peer` set, to that connection (ROUTER routing id), known or not.
struct Outgoing {
  uint64_t session = 0;
  std::string bytes;
  std::string peer;
};

struct AggregatorStats {
  uint64_t messages = 0;
  uint64_t decode_errors = 0;
  uint64_t events = 0;
  uint64_t steps_seen = 0;
  uint64_t steps_written = 0;
  uint64_t steps_skipped = 0;       // closed but not selected by `steps:` (nor recorded by always_on)
  uint64_t steps_figures_only = 0;  // always_on: steps whose figures alone were written (figures.jsonl)
  uint64_t steps_triggered = 0;     // always_on: steps not chosen, written in full by a trigger
  uint64_t late_batches = 0;        // thread blocks that arrived for an already-written step
  uint64_t late_events = 0;         // their events older than the last written step's end
  // A collector silent this long (no heartbeat: an idle one sends one
  // every second, Collector::kHeartbeatNs; a busy one a batch every
  // flush.interval_ms) is taken as gone and holds no step back.
  static constexpr int64_t kSilentAfterNs = 3000000000;
  std::string last_decode_error;
  // Frames not taken: from a connection that had not said hello (with the
  // run's secret, when the aggregator has one) for that session. A collector
  // whose aggregator restarted sends some before it is asked to say hello
  // again; it replays them after.
  uint64_t refused_frames = 0;
  uint64_t refused_hellos = 0;  // of which hellos without the run's secret
  std::string last_refused;
  uint64_t duplicate_frames = 0;  // replayed batches already applied (seq)
  uint64_t write_errors = 0;      // a step or run.json the exporter could not write; the run stops there
};

// Lines about the run, each for the daemon's log (Take), and those recorded
// for run.json's config_notes too (recorded()), in the order they came.
class Notes {
 public:
  // For the log only.
  void Log(std::string line) { pending_.push_back(std::move(line)); }
  // For the log and run.json.
  void Record(std::string line) {
    pending_.push_back(std::move(line));
    recorded_.push_back(pending_.back());
  }
  // Records every line not taken yet, whether logged or recorded already
  // (the run config's decision does so: RunConfig::Decide).
  void RecordPending() { recorded_.insert(recorded_.end(), pending_.begin(), pending_.end()); }
  // The lines since the last call, for the log.
  std::vector<std::string> Take() {
    std::vector<std::string> out;
    out.swap(pending_);
    return out;
  }
  const std::vector<std::string>& recorded() const { return recorded_; }

 private:
  std::vector<std::string> pending_, recorded_;
};

struct AggregatorContext {
  AggregatorStats stats;
  std::vector<Outgoing> outgoing;  // Aggregator::TakeOutgoing
  Notes notes;

  // To collector `session`; 0: to every collector.
  void Send(uint64_t session, const wire::Control& control) {
    outgoing.push_back({session, wire::Encode(control), ""});
  }
  // To the connection `peer`, whether or not a session said hello on it.
  void SendToPeer(const std::string& peer, const wire::Control& control) {
    outgoing.push_back({0, wire::Encode(control), peer});
  }
};

}  // namespace rlscope
