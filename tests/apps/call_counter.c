/* A call counter to preload (LD_PRELOAD) into a profiled process: counts the
 * calls through which a process wakes up or reads the kernel's files, from
 * every thread, whoever makes them (the collector's flush thread, ZeroMQ's
 * I/O thread, the host): an independent witness of what an idle collector
 * does (tests/test_idle.py, make bench's idle section). Each interposed
 * function counts and calls the next definition (dlsym RTLD_NEXT).
 *
 * rlscope_test_call_counts(out, n) copies the counts, in this order:
 *   0 poll          poll/ppoll calls (zmq_poll: the flush thread's waits, probe replies)
 *   1 epoll_wait    epoll_wait/epoll_pwait (ZeroMQ's I/O thread waking)
 *   2 proc_opens    open/openat/fopen/opendir of a path under /proc
 *   3 opens         the same of any path
 *   4 timer_settime CPU-time timers armed or disarmed
 *   5 send          send/sendto/sendmsg (what goes out on a socket)
 *   6 eventfd_write writes of 8 bytes (eventfd wake-ups, among others)
 *   7 reserved
 * and returns n (at most 8). Calls glibc makes internally are not seen. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kPoll, kEpoll, kProcOpens, kOpens, kTimerSettime, kSend, kWrite8, kCounts = 8 };
static uint64_t counts[kCounts];

static void Count(int i) { __atomic_fetch_add(&counts[i], 1, __ATOMIC_RELAXED); }
static void CountPath(const char* path) {
  Count(kOpens);
  if (path != NULL && strncmp(path, "/proc/", 6) == 0) Count(kProcOpens);
}

__attribute__((visibility("default"))) int rlscope_test_call_counts(uint64_t* out, int n) {
  if (n > kCounts) n = kCounts;
  for (int i = 0; i < n; ++i) out[i] = __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
  return n;
}

#define NEXT(name)                      \
  static __typeof__(name)* next_##name; \
  if (next_##name == NULL) next_##name = (__typeof__(name)*)dlsym(RTLD_NEXT, #name)

int poll(struct pollfd* fds, nfds_t n, int timeout) {
  NEXT(poll);
  Count(kPoll);
  return next_poll(fds, n, timeout);
}
int ppoll(struct pollfd* fds, nfds_t n, const struct timespec* t, const sigset_t* mask) {
  NEXT(ppoll);
  Count(kPoll);
  return next_ppoll(fds, n, t, mask);
}
int epoll_wait(int fd, struct epoll_event* ev, int max, int timeout) {
  NEXT(epoll_wait);
  Count(kEpoll);
  return next_epoll_wait(fd, ev, max, timeout);
}
int epoll_pwait(int fd, struct epoll_event* ev, int max, int timeout, const sigset_t* mask) {
  NEXT(epoll_pwait);
  Count(kEpoll);
  return next_epoll_pwait(fd, ev, max, timeout, mask);
}
int open(const char* path, int flags, ...) {
  NEXT(open);
  va_list ap;
  va_start(ap, flags);
  int mode = va_arg(ap, int);
  va_end(ap);
  CountPath(path);
  return next_open(path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  NEXT(open64);
  va_list ap;
  va_start(ap, flags);
  int mode = va_arg(ap, int);
  va_end(ap);
  CountPath(path);
  return next_open64(path, flags, mode);
}
int openat(int dir, const char* path, int flags, ...) {
  NEXT(openat);
  va_list ap;
  va_start(ap, flags);
  int mode = va_arg(ap, int);
  va_end(ap);
  CountPath(path);
  return next_openat(dir, path, flags, mode);
}
FILE* fopen(const char* path, const char* mode) {
  NEXT(fopen);
  CountPath(path);
  return next_fopen(path, mode);
}
FILE* fopen64(const char* path, const char* mode) {
  NEXT(fopen64);
  CountPath(path);
  return next_fopen64(path, mode);
}
DIR* opendir(const char* path) {
  NEXT(opendir);
  CountPath(path);
  return next_opendir(path);
}
int timer_settime(timer_t t, int flags, const struct itimerspec* v, struct itimerspec* old) {
  NEXT(timer_settime);
  Count(kTimerSettime);
  return next_timer_settime(t, flags, v, old);
}
ssize_t send(int fd, const void* buf, size_t len, int flags) {
  NEXT(send);
  Count(kSend);
  return next_send(fd, buf, len, flags);
}
ssize_t sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* a, socklen_t alen) {
  NEXT(sendto);
  Count(kSend);
  return next_sendto(fd, buf, len, flags, a, alen);
}
ssize_t sendmsg(int fd, const struct msghdr* m, int flags) {
  NEXT(sendmsg);
  Count(kSend);
  return next_sendmsg(fd, m, flags);
}
ssize_t write(int fd, const void* buf, size_t len) {
  NEXT(write);
  if (len == 8) Count(kWrite8);
  return next_write(fd, buf, len);
}
