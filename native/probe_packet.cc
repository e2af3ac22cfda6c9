#include "native/probe_packet.h"

#include <sys/socket.h>
#include <time.h>

#include <cstring>

#include "native/clock.h"

namespace rlscope::probe {
namespace {

constexpr char kMagic[4] = {'R', 'L', 'S', 'P'};
constexpr uint8_t kVersion = 1, kTypeRequest = 1, kTypeReply = 2;

void Put(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t Get(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}
void Header(char* out, uint8_t type) {
  std::memcpy(out, kMagic, 4);
  out[4] = static_cast<char>(kVersion);
  out[5] = static_cast<char>(type);
  out[6] = out[7] = 0;
}
bool HeaderIs(const char* in, size_t size, uint8_t type) {
  return size == kPacketBytes && std::memcmp(in, kMagic, 4) == 0 && static_cast<uint8_t>(in[4]) == kVersion &&
         static_cast<uint8_t>(in[5]) == type && in[6] == 0 && in[7] == 0;
}

int64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace

void Encode(const Request& r, char out[kPacketBytes]) {
  Header(out, kTypeRequest);
  Put(out + 8, r.key);
  Put(out + 16, r.session);
  Put(out + 24, r.nonce);
  Put(out + 32, static_cast<uint64_t>(r.t1));
}

void Encode(const Reply& r, char out[kPacketBytes]) {
  Header(out, kTypeReply);
  Put(out + 8, r.nonce);
  Put(out + 16, static_cast<uint64_t>(r.t1));
  Put(out + 24, static_cast<uint64_t>(r.t2));
  Put(out + 32, static_cast<uint64_t>(r.t3));
}

bool Decode(const char* data, size_t size, Request* r) {
  if (!HeaderIs(data, size, kTypeRequest)) return false;
  r->key = Get(data + 8);
  r->session = Get(data + 16);
  r->nonce = Get(data + 24);
  r->t1 = static_cast<int64_t>(Get(data + 32));
  return true;
}

bool Decode(const char* data, size_t size, Reply* r) {
  if (!HeaderIs(data, size, kTypeReply)) return false;
  r->nonce = Get(data + 8);
  r->t1 = static_cast<int64_t>(Get(data + 16));
  r->t2 = static_cast<int64_t>(Get(data + 24));
  r->t3 = static_cast<int64_t>(Get(data + 32));
  return true;
}

std::string EndpointHost(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) return "";
  const std::string rest = endpoint.substr(scheme.size());
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    return close == std::string::npos ? "" : rest.substr(1, close - 1);
  }
  const size_t colon = rest.rfind(':');
  return colon == std::string::npos || colon == 0 ? "" : rest.substr(0, colon);
}

bool IsWildcardHost(const std::string& host) { return host == "*" || host == "0.0.0.0" || host == "::"; }

bool EnableRxTimestamps(int fd) {
  const int on = 1;
  return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) == 0;
}

ssize_t ReceiveStamped(int fd, char* buf, size_t cap, int64_t* rx_ns, sockaddr_storage* from, socklen_t* from_len) {
  iovec iov{buf, cap};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (from != nullptr) {
    msg.msg_name = from;
    msg.msg_namelen = sizeof(*from);
  }
  const ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
  if (n < 0) return -1;
  if (from_len != nullptr) *from_len = msg.msg_namelen;
  *rx_ns = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
    timespec ts;
    std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
    // CLOCK_REALTIME and CLOCK_MONOTONIC advance alike (both slewed, only
    // REALTIME stepped): their difference, read between two MONOTONIC
    // readings, moves the stamp across.
    const int64_t m0 = MonotonicNs(), real = RealtimeNs(), m1 = MonotonicNs();
    const int64_t stamp = static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
    *rx_ns = stamp - (real - (m0 + (m1 - m0) / 2));
  }
  return n;
}

}  // namespace rlscope::probe
