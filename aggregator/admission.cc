#include "aggregator/admission.h"

#include <cstdio>
#include <type_traits>
#include <variant>

#include "aggregator/relay.h"
#include "native/spool_file.h"

namespace rlscope {
namespace {

bool SameSecret(const std::string& given, const std::string& secret) {
  if (secret.empty() || given.size() != secret.size()) return false;
  // Constant time in the contents: a stranger learns nothing from timing.
  unsigned char diff = 0;
  for (size_t i = 0; i < secret.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ secret[i]);
  return diff == 0;
}

}  // namespace

uint64_t SessionOf(const wire::Message& message) {
  return std::visit(
      [](const auto& m) -> uint64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, wire::Control>) {
          return 0;
        } else {
          return m.session;
        }
      },
      message);
}

void Admission::SetSecret(std::string secret) {
  secret_ = std::move(secret);
  run_key_ = RunKey(secret_);
}

void Admission::Refuse(const std::string& why, const std::string& peer, bool ask_hello, int64_t now_ns) {
  ++context_->stats.refused_frames;
  context_->stats.last_refused = why;
  // No connection named (a caller without one): nothing to answer, and an
  // Outgoing without a peer would go to every collector.
  if (!ask_hello || peer.empty() || refused_peers_.count(peer) != 0) return;
  // At most twice a second per connection; the map is bounded (a stranger
  // opening connections only resets it).
  if (asked_hello_.size() > 4096) asked_hello_.clear();
  auto [it, fresh] = asked_hello_.emplace(peer, now_ns);
  if (!fresh && now_ns - it->second < 500000000) return;
  it->second = now_ns;
  wire::Control c;
  c.hello = true;
  context_->SendToPeer(peer, c);
}

void Admission::RefuseHello(const wire::Hello& hello, const std::string& peer, int64_t now_ns) {
  ++context_->stats.refused_hellos;
  Refuse("a hello " + std::string(hello.secret.empty() ? "without" : "with the wrong") + " secret (pid " +
             std::to_string(hello.identity.pid) + ")",
         peer, false, now_ns);
  // Told once (a collector says so on its stderr); its later frames are
  // refused without a request to say hello again.
  if (refused_peers_.size() > 4096) refused_peers_.clear();
  if (!peer.empty() && refused_peers_.insert(peer).second) {
    wire::Control c;
    c.role = wire::kRoleRefused;
    context_->SendToPeer(peer, c);
  }
}

bool Admission::Admit(const wire::Message& message, const std::string& peer, int64_t now_ns) {
  if (std::holds_alternative<wire::Control>(message)) {
    Refuse("a Control message (the aggregator's own kind) from a connection", peer, false, now_ns);
    return false;
  }
  const uint64_t session = SessionOf(message);
  if (const auto* hello = std::get_if<wire::Hello>(&message)) {
    if (!secret_.empty() && !SameSecret(hello->secret, secret_)) {
      RefuseHello(*hello, peer, now_ns);
      return false;
    }
    if (hello->kind == wire::Hello::kUpdate) {
      // An update is taken only on the connection the session said hello
      // on. Unknown here: a collector that said hello to an aggregator
      // before this one (it restarted behind a relay whose connection
      // stayed up); binding it now would skip what it sent the other. Known
      // on another connection: the session's replay came that way (its
      // spool file, through a relay that still held the live frames it sent
      // before its exit, in whatever order a drain delivers them); binding
      // it here would refuse the rest of the replay and skip its batches
      // as duplicates of later ones. Asked to say hello again, a live
      // collector replays its spool first (kReplay).
      const auto known = peers_.find(session);
      if (known == peers_.end() || known->second != peer) {
        Refuse(known == peers_.end() ? "an updated hello from a session that has not said hello here"
                                     : "an updated hello for a session that said hello on another connection",
               peer, true, now_ns);
        return false;
      }
    }
    peers_[session] = peer;
    return true;
  }
  auto it = peers_.find(session);
  if (it != peers_.end() && it->second == peer) return true;
  // Unknown here (this aggregator restarted, or the collector reconnected):
  // asked to say hello again, which then binds the session to this peer.
  Refuse(it == peers_.end() ? "a frame from a session that has not said hello"
                            : "a frame for a session that said hello on another connection",
         peer, true, now_ns);
  return false;
}

bool Admission::FirstTime(const wire::Batch& batch) {
  // A collector's messages arrive in order; a replay after a reconnect
  // starts with what this aggregator may have applied already.
  if (batch.threads.empty() && batch.gpu.empty()) return true;
  uint64_t& next_seq = next_seq_[batch.session];
  if (batch.seq < next_seq) {
    ++context_->stats.duplicate_frames;
    return false;
  }
  next_seq = batch.seq + 1;
  return true;
}

bool Admission::ViaRelay(uint64_t session) const {
  auto peer = peers_.find(session);
  std::string_view relay, inner;
  return peer != peers_.end() && SplitRelayPeer(peer->second, &relay, &inner);
}

}  // namespace rlscope
