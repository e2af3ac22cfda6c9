// A thread's CPU sampling state (cpu_sampler.h), apart from the sampler so
// that a recording thread's state (recording.h) can hold one without
// depending on the sampler, which depends on it.
#pragma once

#include <time.h>

#include <cstdint>
#include <memory>

#include "native/thread_buffer.h"

namespace rlscope {

// One profiled thread's sampling state, owned by its registry entry; the
// flush thread alone touches it (the handler reaches the ring through the
// thread's ThreadState::sample_ring).
struct SampledThread {
  std::unique_ptr<ThreadBuffer> ring;  // created with the timer
  timer_t timer{};
  bool has_timer = false;
  bool armed = false;
  int64_t hz = 0;       // the rate it is armed at
  bool failed = false;  // timer_create refused: this thread is not sampled
};

}  // namespace rlscope
