/* Test-only native code for tests/apps/whole_process_app.py: a pool of
 * threads that never record an event (as torch's, OpenMP's or a loader's),
 * burning a known amount of their own CPU time in this library; and a wait
 * that lasts until the collector looked at the threads' states a number of
 * times (a handshake with the off-CPU sampler, not a timing). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collector/rlscope_collector.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_THREADS 16

static double ThreadCpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct {
  pthread_t threads[MAX_THREADS];
  double cpu[MAX_THREADS];
  int n;
  double seconds;
  int go;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void* Worker(void* arg) {
  const int i = (int)(intptr_t)arg;
  pthread_mutex_lock(&pool.mu);
  while (!pool.go) pthread_cond_wait(&pool.cv, &pool.mu);
  pthread_mutex_unlock(&pool.mu);
  const double start = ThreadCpu();
  volatile unsigned long x = 1;
  double now = start;
  while (now - start < pool.seconds) {
    for (int k = 0; k < 20000; ++k) x = x * 6364136223846793005ul + 1442695040888963407ul;
    now = ThreadCpu();
  }
  pool.cpu[i] = now - start;
  return NULL;
}

/* Starts n threads (they wait for rlscope_test_pool_go); 0 on success. */
EXPORT int rlscope_test_pool_start(int n, double cpu_seconds) {
  if (n < 1 || n > MAX_THREADS) return -1;
  pool.n = n;
  pool.seconds = cpu_seconds;
  pool.go = 0;
  for (int i = 0; i < n; ++i) {
    if (pthread_create(&pool.threads[i], NULL, Worker, (void*)(intptr_t)i) != 0) return -1;
  }
  return 0;
}

EXPORT void rlscope_test_pool_go(void) {
  pthread_mutex_lock(&pool.mu);
  pool.go = 1;
  pthread_cond_broadcast(&pool.cv);
  pthread_mutex_unlock(&pool.mu);
}

/* Joins the pool; writes each thread's CPU seconds to out[0..n). */
EXPORT int rlscope_test_pool_join(double* out) {
  for (int i = 0; i < pool.n; ++i) pthread_join(pool.threads[i], NULL);
  memcpy(out, pool.cpu, sizeof(double) * (size_t)pool.n);
  return pool.n;
}

/* The collector's sampler counters (collector/rlscope_collector.h): only the
 * field read here is declared, at its offset. */
/* The collector's own struct: a copy here fell behind it (fields are
 * appended), and the collector wrote past it, on this stack. */
typedef rlscope_sampler_stats_t SamplerStats;
typedef void (*StatsFn)(SamplerStats*);

/* Sleeps 2 ms at a time until the collector made `looks` more off-CPU looks
 * than when called (`stats` is rlscope_sampler_stats), or max_s passed.
 * Returns the looks seen. Called through ctypes.PyDLL it holds the GIL all
 * along; through CDLL it does not. */
EXPORT uint64_t rlscope_test_wait_looks(void* stats, uint64_t looks, double max_s) {
  SamplerStats s;
  memset(&s, 0, sizeof(s));
  ((StatsFn)stats)(&s);
  const uint64_t first = s.off_cpu_looks;
  for (double waited = 0; waited < max_s; waited += 0.002) {
    ((StatsFn)stats)(&s);
    if (s.off_cpu_looks - first >= looks) break;
    usleep(2000);
  }
  return s.off_cpu_looks - first;
}
