#include "aggregator/probe_server.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "native/clock.h"
#include "native/probe_packet.h"

namespace rlscope {

bool ProbeServer::Start(const std::string& host, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  hints.ai_family = host == "*" ? AF_INET : AF_UNSPEC;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host == "*" ? nullptr : host.c_str(), "0", &hints, &found);
  if (rc != 0 || found == nullptr) {
    *error = "cannot use '" + host + "' for clock probes: " + gai_strerror(rc);
    return false;
  }
  fd_ = socket(found->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const bool bound = fd_ >= 0 && bind(fd_, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (!bound || !probe::EnableRxTimestamps(fd_) || getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    *error = "cannot open a UDP port for clock probes on '" + host + "': " + std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return false;
  }
  port_ = ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  std::random_device rd;
  key_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) {
    *error = std::string("cannot make the probe thread's wake-up: ") + std::strerror(errno);
    close(fd_);
    fd_ = -1;
    port_ = 0;
    return false;
  }
  thread_ = std::thread([this] { Loop(); });
  return true;
}

void ProbeServer::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  fd_ = stop_fd_ = -1;
}

void ProbeServer::Loop() {
  pthread_setname_np(pthread_self(), "rlscope-probes");
  pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  char buf[probe::kPacketBytes + 1];
  while (true) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    sockaddr_storage from{};
    socklen_t from_len = 0;
    int64_t t2 = 0;
    ssize_t n;
    while ((n = probe::ReceiveStamped(fd_, buf, sizeof(buf), &t2, &from, &from_len)) >= 0) {
      probe::Request req;
      if (!probe::Decode(buf, static_cast<size_t>(n), &req) || req.key != key_) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      probe::Reply reply{req.nonce, req.t1, t2, 0};
      char out[probe::kPacketBytes];
      reply.t3 = MonotonicNs();
      if (reply.t2 == 0) reply.t2 = reply.t3;  // no kernel stamp: the read's time
      probe::Encode(reply, out);
      if (sendto(fd_, out, sizeof(out), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), from_len) ==
          static_cast<ssize_t>(sizeof(out))) {
        answered_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

}  // namespace rlscope
