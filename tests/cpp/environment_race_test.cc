// environment_race_test: the collector's flush thread never reads the
// environment. A host thread's setenv can free the array getenv walks, so a
// getenv on the flush thread, at any moment the host changes its
// environment, can crash the profiled process (one did: ZeroMQ's context
// creation, libpgm's getenv, on the flush thread while Python imported and
// set variables). This binary replaces getenv for the whole process (the
// executable's definition comes first for every library, ZeroMQ and libpgm
// included) with one that counts the calls made on the thread named
// "rlscope-flush", then runs a collector through its start, flushes and
// stop.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "collector/collector.h"
#include "collector/rlscope_collector.h"

extern char** environ;

namespace {
std::atomic<int> g_flush_thread_getenv{0};
char g_last_name[128];
}  // namespace

// glibc's getenv, without glibc: a walk of `environ` (no call that could come
// back here), counting the calls from the flush thread.
extern "C" char* getenv(const char* name) {
  char thread[16] = {0};
  if (pthread_getname_np(pthread_self(), thread, sizeof(thread)) == 0 && std::strcmp(thread, "rlscope-flush") == 0) {
    g_flush_thread_getenv.fetch_add(1);
    std::strncpy(g_last_name, name, sizeof(g_last_name) - 1);
  }
  const size_t n = std::strlen(name);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

namespace rlscope {
namespace {

TEST(FlushThread, NeverReadsTheEnvironmentFromStartToStop) {
  setenv("RLSCOPE_AGGREGATOR", "tcp://127.0.0.1:1", 1);  // nobody listens: sends are dropped
  setenv("RLSCOPE_CONFIG", "{flush: {exit_timeout_ms: 0, interval_ms: 5}, buffers: {spool_mb: 1}}", 1);
  for (const char* k : {"RLSCOPE_DISABLE", "RLSCOPE_ROLE", "RLSCOPE_RANK", "RANK"}) unsetenv(k);
  char spool[] = "/tmp/rlscope_envrace_XXXXXX";  // what it leaves at exit goes here, removed after
  ASSERT_NE(mkdtemp(spool), nullptr);
  setenv("RLSCOPE_SPOOL_DIR", spool, 1);
  Collector* c = Collector::Start();
  ASSERT_NE(c, nullptr);
  for (int i = 0; i < 5; ++i) rlscope_flush(1000);  // its start (connect, hello), then flushes
  c->Shutdown();
  std::filesystem::remove_all(spool);
  EXPECT_EQ(g_flush_thread_getenv.load(), 0) << "the flush thread read the environment, last: " << g_last_name;
}

}  // namespace
}  // namespace rlscope
