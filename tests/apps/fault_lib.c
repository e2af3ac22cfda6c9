/* Test-only: memory that goes away under the CPU sampler, and a host with
 * its own SIGSEGV handler (tests/test_sampler_safety.py through
 * tests/apps/fault_app.py).
 *
 * The target: a page holding a module name, read by a frame reader of this
 * library's (the contract of rlscope_set_py_module_reader) through the
 * collector's fault-proof read, then unmapped while samples keep reading it:
 * what CPython does to a data-stack chunk or an arena, on demand.
 *
 * The host: a SIGSEGV handler that repairs faults on a page of its own
 * (PROT_NONE until it faults, then made readable) and counts them, as a JIT
 * or a garbage collector with guard pages does; faults elsewhere go to the
 * handler it replaced. */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*safe_read_t)(void* dst, const void* src, size_t n);
typedef size_t (*reader_t)(safe_read_t read, char* out, size_t cap);
typedef void (*set_reader_t)(reader_t reader, const char* what);

static char* volatile target;
static const size_t kPage = 4096;

static size_t FaultReader(safe_read_t read, char* out, size_t cap) {
  char name[32];
  const char* p = target;
  if (p == NULL || cap == 0 || !read(name, p, sizeof(name))) return 0;
  size_t n = strnlen(name, sizeof(name));
  if (n >= cap) n = cap - 1;
  memcpy(out, name, n);
  return n;
}

/* Registers the reader with the collector's rlscope_set_py_module_reader. */
EXPORT void rlscope_test_use_fault_reader(set_reader_t set_reader) { set_reader(&FaultReader, "test fault reader"); }

/* A reader that spins `slow_ns` of wall time before reading (0: none): the
 * sampler's handler then takes that much longer, as a handler preempted
 * inside it does. clock_gettime is safe in a signal handler. */
static volatile long slow_ns;

static long NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static size_t SlowReader(safe_read_t read, char* out, size_t cap) {
  const long spin = slow_ns;
  if (spin > 0) {
    const long until = NowNs() + spin;
    while (NowNs() < until) {
    }
  }
  return FaultReader(read, out, cap);
}

EXPORT void rlscope_test_use_slow_reader(set_reader_t set_reader) { set_reader(&SlowReader, "test slow reader"); }
EXPORT void rlscope_test_set_slow_ns(long ns) { slow_ns = ns; }

/* Maps a fresh page holding `name` and points the reader at it. */
EXPORT void rlscope_test_map_target(const char* name) {
  char* p = mmap(NULL, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  strncpy(p, name, 31);
  target = p;
}

/* Unmaps the page the reader reads (it keeps reading the address). */
EXPORT void rlscope_test_unmap_target(void) { munmap(target, kPage); }

static char* volatile host_page;
static volatile long host_faults, host_seen;
static struct sigaction host_previous;

static void HostHandler(int sig, siginfo_t* info, void* ucontext) {
  ++host_seen;
  char* addr = (char*)info->si_addr;
  if (host_page != NULL && addr >= host_page && addr < host_page + kPage) {
    mprotect(host_page, kPage, PROT_READ); /* repaired: the load runs again */
    ++host_faults;
    return;
  }
  /* Not ours: to the handler before, or the default action. */
  if ((host_previous.sa_flags & SA_SIGINFO) != 0 && host_previous.sa_sigaction != NULL) {
    host_previous.sa_sigaction(sig, info, ucontext);
  } else {
    sigaction(sig, &host_previous, NULL);
  }
}

/* Installs the host's handler (over whatever is there, chaining to it). */
EXPORT int rlscope_test_install_host_handler(void) {
  if (host_page == NULL) {
    char* p = mmap(NULL, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    host_page = p;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = &HostHandler;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGSEGV, &sa, &host_previous) == 0;
}

/* One fault in host code the host's handler repairs; returns the count. */
EXPORT long rlscope_test_touch_host_page(void) {
  mprotect(host_page, kPage, PROT_NONE);
  (void)*(volatile char*)host_page;
  return host_faults;
}

/* Every SIGSEGV the host's handler was given, its own or not. */
EXPORT long rlscope_test_host_seen(void) { return host_seen; }

/* A real crash in host code: a store to an unmapped address. */
EXPORT void rlscope_test_segfault(void) { *(volatile int*)(uintptr_t)16 = 1; }
