// Admission: which frames the aggregator takes, and from whom.
//
// Every hello must carry the run's secret (when there is one; compared in
// constant time) and binds its session to the connection it came on; any
// other frame is taken only from that connection (a stranger cannot write
// as, or end, a collector it learnt the session of), and a batch only once
// (a replay after a reconnect repeats what was applied). Whatever is not
// taken is counted (AggregatorStats) and, from a connection this aggregator
// does not know yet (it restarted, or the collector reconnected), answered
// with Control.hello: say hello again.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "aggregator/context.h"
#include "native/wire.h"

namespace rlscope {

class Admission {
 public:
  explicit Admission(AggregatorContext* context) : context_(context) {}

  // Every hello must carry `secret`; "" (the default) takes any hello. Call
  // before the first frame.
  void SetSecret(std::string secret);
  // The run's key: RunKey(secret) (native/spool_file.h), "" for no secret.
  const std::string& run_key() const { return run_key_; }
  // The run's key without its secret (a recovery writes into the run's
  // directory; no hello is taken over the network then).
  void KeepRunKey(const std::string& key) {
    if (secret_.empty()) run_key_ = key;
  }
  // Whether a frame's `message` from connection `peer` (the ROUTER routing
  // id) is taken; a hello taken binds its session to `peer`.
  bool Admit(const wire::Message& message, const std::string& peer, int64_t now_ns);
  // False, counted, for a batch with data that an earlier copy of was
  // applied (its seq); a batch of names alone (a replay's preamble, numbered
  // after the batches it precedes) is always taken.
  bool FirstTime(const wire::Batch& batch);
  // Whether the session's hello came through a node's relay (relay.h).
  bool ViaRelay(uint64_t session) const;

 private:
  void Refuse(const std::string& why, const std::string& peer, bool ask_hello, int64_t now_ns);
  // A hello without the run's secret: refused, and told once.
  void RefuseHello(const wire::Hello& hello, const std::string& peer, int64_t now_ns);

  AggregatorContext* context_;
  std::string secret_;                          // SetSecret; "" = none required
  std::string run_key_;                         // RunKey(secret_)
  std::map<uint64_t, std::string> peers_;       // session -> the connection its hello came on
  std::map<std::string, int64_t> asked_hello_;  // peer -> when it was last asked (bounded)
  std::set<std::string> refused_peers_;         // peers whose hello lacked the secret (bounded)
  std::map<uint64_t, uint64_t> next_seq_;       // session -> seq after the last batch applied
};

// The session a collector's message is from; 0 for a Control (the
// aggregator's own kind, which carries none).
uint64_t SessionOf(const wire::Message& message);

}  // namespace rlscope
