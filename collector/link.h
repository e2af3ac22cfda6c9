// The link to the aggregator: who this process is (its identity, labels and
// calibrated costs, in the Hello), what it says (Hello, the controller's
// Expected list, event batches through the Transport, the goodbye), and the
// link-level part of what the aggregator says (a refused hello, a request
// to say hello again, release points, flush barriers). The rest of a
// Control message (role, windows, the run's config) is the Collector's to
// hand to the units it concerns.
//
// Threads: SetLabel, SetCost, ReportExpected, SetRole and Cost from any
// thread (meta_mu_); everything else on the flush thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collector/arming.h"
#include "collector/context.h"
#include "collector/recording.h"
#include "collector/transport.h"
#include "native/wire.h"

namespace rlscope {

class Link {
 public:
  Link(CollectorContext& ctx, Recording& recording, Arming& arming, wire::Identity identity);

  // Adds or replaces an identity label; the next flush says hello again.
  void SetLabel(const std::string& key, const std::string& value);
  // Sets calibrated costs (ns per event; keys in wire.h Hello::costs); the
  // next flush says hello again. Ignored under test costs (test_clock.h),
  // which are fixed.
  void SetCost(const std::string& key, double ns);
  void SetCosts(const std::map<std::string, double>& costs);
  double Cost(const std::string& key);  // -1 when unknown
  // The role in the Hello: a controller's carries the keys its own config
  // set (the run's config is decided from them). The next flush says hello.
  void SetRole(bool controller);
  // The selection changed (the run's config): the next flush says hello.
  void SelectionChanged();
  // Queues the controller's list of processes that should connect.
  void ReportExpected(std::vector<std::map<std::string, std::string>> processes);

  // Flush thread, before the first flush: connects.
  void Start();
  // Flush thread, each flush: the Hello when it changed or the aggregator
  // asked for it (then the spool's replay, led by every name shipped so
  // far), and a pending Expected list. Once a hello is queued the transport
  // may send batches.
  void SendControl();
  // Flush thread: the link-level part of a Control (see above). False when
  // nothing else in it applies (this process was refused).
  bool Apply(const wire::Control& control);
  // A flush token is owed (answered by the next batch sent).
  bool barrier_owed() const { return pending_ack_ != 0; }
  // Flush thread: nothing of the link waits to go out (the hello is queued
  // as it stands, the spool has sent all it holds), or nothing could (no
  // socket, refused, the connection down).
  bool settled();
  // Flush thread: sends this flush (the ack owed rides on its last batch);
  // GPU records of a message that could not be queued are returned, lost.
  uint64_t SendBatches(Outgoing& out);
  // Flush thread: one stderr line when the aggregator has not answered for
  // 5 s, and one when drops start (`dropped`: the process's total so far).
  void SayTrouble(uint64_t dropped);
  // Flush thread, at exit: what waits in the spool goes first (three
  // quarters of flush.exit_timeout_ms), still answering the aggregator
  // through `apply`; then the goodbye with the process's totals as `totals`
  // gives them then (events recorded, and dropped before the transport),
  // then the socket lingers to the deadline. When not all of it was
  // delivered (something unsent, or the connection down or not yet said
  // hello to again), all the spool kept and the goodbye are left on the
  // node's disk instead (native/spool_file.h), said on stderr; a disk that
  // cannot take it is counted lost and said. A refused process's are lost.
  void Stop(const Transport::ControlHandler& apply, const std::function<std::pair<uint64_t, uint64_t>()>& totals);

  Transport& transport() { return transport_; }
  const Transport& transport() const { return transport_; }

 private:
  // The Hello (caller holds meta_mu_).
  wire::Hello MakeHello() const;
  // A batch with every name this collector has shipped: an aggregator that
  // restarted knows none of them, and the spool's replay uses them.
  std::string MakePreamble();
  // Stop: writes the spool's file (see Stop).
  void LeaveOnDisk(const std::function<std::pair<uint64_t, uint64_t>()>& totals);
  void SayLost(uint64_t events, const std::string& why);

  CollectorContext& ctx_;
  Recording& recording_;
  Arming& arming_;
  Transport transport_;

  std::mutex meta_mu_;  // guards the members down to costs_
  wire::Identity identity_;
  std::string hello_config_;  // Hello.config: a controller's own keys as YAML, "" for others
  // Where its spool goes at exit (native/spool_file.h), read from the
  // environment at construction: the flush thread never calls getenv (a
  // host's setenv on another thread would free what it walks).
  const std::string spool_dir_;
  const std::string clock_domain_;                     // Hello.clock_domain (native/clock.h ClockDomain)
  uint64_t hello_gen_ = 1, hello_sent_gen_ = 0;        // Hello (re)send when they differ
  uint64_t expected_gen_ = 0, expected_sent_gen_ = 0;  // likewise for Expected
  std::vector<std::map<std::string, std::string>> expected_;
  std::map<std::string, double> costs_;  // calibrated ns per event (wire.h Hello::costs)

  // Flush thread only: a Control was received; SayTrouble's lines were
  // said; an aggregator asked for a hello (Control.hello: it restarted);
  // the aggregator refused the hello (wrong secret): nothing more is sent.
  bool heard_from_aggregator_ = false, said_unreachable_ = false, said_dropping_ = false;
  bool rehello_ = false;
  bool refused_ = false;
  bool bye_acked_ = false;       // Control.bye_ack: the aggregator has everything (Stop)
  uint64_t controls_heard_ = 0;  // Control messages applied (Stop: alive after the goodbye)
  bool run_over_ = false;        // Control.release_ns kRunOver: nothing more can be written (Stop)
  uint64_t pending_ack_ = 0;     // flush token to acknowledge; 0 = none
  int64_t connected_ns_ = 0;     // flush thread: when Start connected (MonotonicNs), 0 before
};

}  // namespace rlscope
