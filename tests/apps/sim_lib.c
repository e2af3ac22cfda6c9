/* A test-only "simulator" library (tests/apps/whole_process_app.py): its
 * step spends its thread's CPU time in libm and libc, called from here, as a
 * physics engine's does. Attributed by the leaf alone that time is "other";
 * by the stack, the simulator's. */
#include <math.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

static double ThreadCpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char src[1 << 16], dst[1 << 16];

/* Burns `cpu_seconds` of the calling thread's CPU time; returns it. */
EXPORT double rlscope_test_sim_step(double cpu_seconds) {
  const double start = ThreadCpu();
  volatile double acc = 0.5;
  double now = start;
  while (now - start < cpu_seconds) {
    for (int i = 0; i < 2000; ++i) acc = sin(acc) + exp(-acc) + log1p(acc);
    for (int i = 0; i < 8; ++i) memcpy(dst, src, sizeof(src));
    src[0] = dst[1];
    now = ThreadCpu();
  }
  return now - start;
}
