// What every unit of the collector shares (collector.h composes the units):
// the process's facts, fixed when the collector starts, and the few things
// that every unit uses (the string table, the clock, the flush thread's
// wake-up). Owned by the Collector, the root object of the injection entry
// points; each unit keeps a reference for the process's life.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "collector/test_clock.h"
#include "native/clock.h"
#include "native/config.h"
#include "native/string_table.h"

namespace rlscope {

struct CollectorContext {
  CollectorContext(ProcessConfig own, std::string endpoint, std::string secret, std::unique_ptr<TestClock> test_clock,
                   ClockSource clock_source, int wake_fd);

  // This process's own config (RLSCOPE_CONFIG) and the keys it set. Its run
  // keys are the run's only until the aggregator sends the run's config
  // (Arming and the units it tells say which apply now).
  const ProcessConfig own;
  const std::string endpoint;  // the aggregator's (or the node relay's) ZeroMQ endpoint
  const std::string secret;    // RLSCOPE_SECRET: Hello.secret
  const uint64_t session;      // this collector's id on the wire, random
  const int owner_pid;         // the process it was started in (a forked child is not it)
  const int64_t start_ns;      // MonotonicNs at start
  // Test-only virtual costs (test_clock.h); nullptr in production. With
  // them the clock source is monotonic: ticks are ns.
  const std::unique_ptr<TestClock> test_clock;
  const ClockSource clock_source;
  // Names and their ids (thread-safe; ids are never reused).
  StringTable strings;
  // The flush thread's converter of clock ticks to ns (flush thread only).
  TickConverter converter;
  // eventfd the flush thread waits on; -1 when unavailable (it then runs on
  // its interval alone).
  const int wake_fd;
  // The threads the collector runs itself (its flush thread, ZeroMQ's I/O
  // threads): CPU sampling gives their time to the profiler. Flush thread only.
  std::set<int64_t> own_threads;

  // A thread of the host that works for the collector (the Python
  // calibration's speed watch: rlscope_own_thread) says so from any thread;
  // the flush thread takes it into own_threads (TakeOwnThreads) before it
  // next looks at the process's threads.
  void AddOwnThread(int64_t tid) {
    std::lock_guard<std::mutex> lock(own_added_mu_);
    own_added_.push_back(tid);
  }
  // The flush thread: takes them in, and lets go of those of them not in
  // `listed` (the process's threads now, when it could list them: their
  // tids may come back as the program's). The collector's own threads stay.
  void TakeOwnThreads(const std::vector<int64_t>& listed) {
    {
      std::lock_guard<std::mutex> lock(own_added_mu_);
      host_own_.insert(own_added_.begin(), own_added_.end());
      own_threads.insert(own_added_.begin(), own_added_.end());
      own_added_.clear();
    }
    if (host_own_.empty() || listed.empty()) return;
    const std::set<int64_t> now(listed.begin(), listed.end());
    for (auto it = host_own_.begin(); it != host_own_.end();) {
      if (now.count(*it) != 0) {
        ++it;
        continue;
      }
      own_threads.erase(*it);
      it = host_own_.erase(it);
    }
  }

  // Wakes the flush thread (an eventfd write, best effort: a full counter
  // already means "wake up"). Any thread, async-signal-safe.
  void Wake() const {
    if (wake_fd < 0) return;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof(one));
  }
  // The test clock's ns so far; -1 without one.
  int64_t TestClockNs() const { return test_clock != nullptr ? test_clock->Now() : -1; }

 private:
  std::mutex own_added_mu_;
  std::vector<int64_t> own_added_;
  std::set<int64_t> host_own_;  // of own_threads, those the host's threads said (flush thread only)
};

}  // namespace rlscope
