// A test-only shared library that burns a known amount of the calling
// thread's CPU time in its own code (tests/test_attribution.py: what the
// attribution calls this library must be what this code took). The clock is
// read every few thousand iterations, so the vDSO's share stays negligible.
#include <time.h>

namespace {
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) double rlscope_test_burn(double cpu_seconds) {
  const double start = ThreadCpuSeconds();
  volatile unsigned long x = 1;
  double now = start;
  while (now - start < cpu_seconds) {
    for (int i = 0; i < 20000; ++i) x = x * 6364136223846793005ul + 1442695040888963407ul;
    now = ThreadCpuSeconds();
  }
  return now - start;
}

// A fixed amount of work (the CPU sampler's bench: what sampling adds to it).
extern "C" __attribute__((visibility("default"))) unsigned long rlscope_test_spin(unsigned long iterations) {
  volatile unsigned long x = 1;
  for (unsigned long i = 0; i < iterations; ++i) x = x * 6364136223846793005ul + 1442695040888963407ul;
  return x;
}
