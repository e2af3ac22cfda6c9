// What the environment asks of this process's collector, read once when it
// starts (the variables are in docs and native/names.h: RLSCOPE_CONFIG,
// RLSCOPE_AGGREGATOR, RLSCOPE_RANK or RANK, RLSCOPE_ROLE, RLSCOPE_SECRET,
// RLSCOPE_LABEL_*, RLSCOPE_OWNER_PID, RLSCOPE_PARENT_ACTOR, RLSCOPE_DISABLE, RLSCOPE_CLOCK,
// RLSCOPE_TEST_COSTS): the config, where to send, who this process is.
#pragma once

#include <memory>
#include <string>

#include "collector/test_clock.h"
#include "native/clock.h"
#include "native/config.h"
#include "native/wire.h"

namespace rlscope {

struct CollectorSettings {
  ProcessConfig own;  // RLSCOPE_CONFIG's
  std::string endpoint;
  std::string secret;
  wire::Identity identity;  // host, pid, rank, role, process name, labels
  std::unique_ptr<TestClock> test_clock;
  ClockSource clock_source = ClockSource::kMonotonic;
};

enum class StartVerdict {
  kStart,   // a collector runs: `settings` say how
  kOff,     // not profiled (disabled, no endpoint, another process's environment); nothing said
  kFailed,  // a bad config: said on stderr; profiling stays off in this process
};

// Reads the environment. The first collector claims it (RLSCOPE_OWNER_PID
// is set to this process): a process that inherits it is profiled only as
// this one's child (children.h).
StartVerdict ReadEnvironment(CollectorSettings* settings);

}  // namespace rlscope
