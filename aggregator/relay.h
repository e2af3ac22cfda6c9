// Relays (rlscope-ray-aggregator --relay-to ROOT): a node's collectors
// connect to their node's relay, which forwards their frames to the root
// aggregator over one connection, and the root's answers back. The relay
// neither decodes nor keeps anything: a frame is on its way once the root's
// connection takes it, and the collectors' spools keep every batch until the
// root releases its step, so a relay lost or restarted loses nothing.
//
// On the relay -> root connection each frame travels as three parts:
// kRelayTag, the collector's routing id at the relay, the frame; answers
// come back the same way. The root names such a connection a "relay peer":
// "\0", the relay's routing id length (one byte), the relay's routing id,
// the collector's routing id. ZeroMQ's own routing ids are 5 bytes starting
// with "\0" and chosen ones may not start with "\0", so the two never meet.
#pragma once

#include <string>
#include <string_view>

namespace rlscope {

inline constexpr std::string_view kRelayTag = "rlscope-relay-1";

// The root's name for collector `inner` behind the relay connection `relay`.
inline std::string RelayPeer(std::string_view relay, std::string_view inner) {
  std::string peer(1, '\0');
  peer.push_back(static_cast<char>(relay.size() & 0xff));
  peer.append(relay);
  peer.append(inner);
  return peer;
}

// Splits a relay peer into the relay's and the collector's routing ids;
// false for a direct connection's routing id.
inline bool SplitRelayPeer(std::string_view peer, std::string_view* relay, std::string_view* inner) {
  if (peer.size() < 3 || peer[0] != '\0' || peer.size() == 5) return false;
  const size_t n = static_cast<unsigned char>(peer[1]);
  if (peer.size() < 2 + n + 1) return false;
  *relay = peer.substr(2, n);
  *inner = peer.substr(2 + n);
  return true;
}

}  // namespace rlscope
