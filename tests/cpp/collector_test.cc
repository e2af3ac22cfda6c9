// collector_test: the collector's internals, without a GPU.
//
// The collector is a per-process singleton, so every test that starts one
// starts it the same way (StartTestCollector) and leaves its capture closed;
// the tests hold in any order and one per process (as CTest runs them).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collector/children.h"
#include "collector/collector.h"
#include "collector/cpu_sampling.h"
#include "collector/cpu_sampler.h"
#include "collector/cupti_trigger.h"
#include "collector/proc_self.h"
#include "collector/rlscope_collector.h"
#include "collector/safe_read.h"
#include "collector/spool.h"
#include "native/config.h"
#include "native/names.h"
#include "native/spool_file.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#if RLSCOPE_HAVE_CUPTI
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#endif

namespace rlscope {
namespace {

// A collector with capture_range cudaProfilerApi whose aggregator endpoint
// nobody listens on (sends are dropped; exit does not wait).
Collector* StartTestCollector() {
  setenv("RLSCOPE_AGGREGATOR", "tcp://127.0.0.1:1", 1);
  setenv("RLSCOPE_CONFIG", "{capture_range: cudaProfilerApi, flush: {exit_timeout_ms: 0}}", 1);
  for (const char* k : {"RLSCOPE_DISABLE", "RLSCOPE_ROLE", "RLSCOPE_RANK", "RANK"}) unsetenv(k);
  return Collector::Start();
}

TEST(InitializeInjection, ReturnsOneIsIdempotentAndLeavesTheCaptureAsItWas) {
  Collector* c = StartTestCollector();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->config().capture_range, "cudaProfilerApi");
  const int armed_before = rlscope_collector_armed();
  testing::internal::CaptureStderr();
  EXPECT_EQ(InitializeInjection(), 1);
  EXPECT_EQ(InitializeInjection(), 1);
  const std::string err = testing::internal::GetCapturedStderr();
  // Without a driver libcupti is absent, or present and failing (999): one
  // line says the trigger is unavailable. With a driver nothing is printed.
  if (!err.empty()) {
    EXPECT_NE(err.find("cudaProfilerApi trigger is unavailable"), std::string::npos) << err;
    EXPECT_NE(err.find("the capture stays closed"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  // Neither path touches the capture; only cuProfilerStart/Stop do.
  EXPECT_EQ(rlscope_collector_armed(), armed_before);
}

// The handlers' fast lanes keep push/pop pairs as the full path does: a
// pop is recorded exactly when its push was, whatever the arming by then,
// and a disarmed push costs the depth alone.
TEST(FastLanes, APopIsRecordedExactlyWhenItsPushWasWhateverTheArmingThen) {
  Collector* c = StartTestCollector();  // cudaProfilerApi: disarmed, not watching
  ASSERT_NE(c, nullptr);
  c->SetCaptureActive(true);
  ThreadState* ts = c->CurrentThread();
  ASSERT_NE(ts, nullptr);
  ASSERT_EQ(Collector::Hot(), kHotArmed);  // armed alone: the lanes record
  const auto name = [](RangeAttr* at) {
    at->name = 7;
    return true;
  };
  const uint64_t before = ts->buffer->pushed();
  int depth = -1;
  // Pushed armed, popped disarmed: both recorded.
  ASSERT_TRUE(Recording::FastPush(Collector::Hot(), ts, 0, name, &depth));
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(ts->buffer->pushed(), before + 1);
  EXPECT_EQ(ts->buffer->last().name, 7u);
  EXPECT_EQ(ts->buffer->last().kind, static_cast<uint8_t>(EventKind::kRangePush));
  c->SetCaptureActive(false);
  ASSERT_EQ(Collector::Hot() & kHotArmedOrWatching, 0);
  ASSERT_TRUE(Recording::FastPop(Collector::Hot(), ts, 0, kFlagNone, &depth));
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(ts->buffer->pushed(), before + 2);
  EXPECT_EQ(ts->buffer->last().kind, static_cast<uint8_t>(EventKind::kRangePop));
  // Pushed disarmed (the depth alone, the name never asked), popped armed:
  // neither recorded.
  const auto never = [](RangeAttr*) -> bool { std::abort(); };
  ASSERT_TRUE(Recording::FastPush(Collector::Hot(), ts, 0, never, &depth));
  EXPECT_EQ(depth, 0);
  c->SetCaptureActive(true);
  ASSERT_TRUE(Recording::FastPop(Collector::Hot(), ts, 0, kFlagNone, &depth));
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(ts->depth, 0);
  EXPECT_EQ(ts->buffer->pushed(), before + 2);
  // A name the lane cannot resolve inline: nothing done, the full path's.
  EXPECT_FALSE(Recording::FastPush(
      Collector::Hot(), ts, 0, [](RangeAttr*) { return false; }, &depth));
  EXPECT_EQ(ts->depth, 0);
  EXPECT_EQ(ts->buffer->pushed(), before + 2);
  // Nothing open: the full path's (-1 to NVTX).
  EXPECT_FALSE(Recording::FastPop(Collector::Hot(), ts, 0, kFlagNone, &depth));
  c->SetCaptureActive(false);
}

#if RLSCOPE_HAVE_CUPTI

constexpr int kEnter = CUPTI_API_ENTER;
constexpr int kExit = CUPTI_API_EXIT;
constexpr uint32_t kStart = CUPTI_DRIVER_TRACE_CBID_cuProfilerStart;
constexpr uint32_t kStop = CUPTI_DRIVER_TRACE_CBID_cuProfilerStop;

TEST(CudaProfilerTriggerAction, StartOpensOnSuccessfulExitOnly) {
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStart, kExit, CUDA_SUCCESS), TriggerAction::kOpen);
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStart, kEnter, CUDA_SUCCESS), TriggerAction::kNone);
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStart, kExit, CUDA_ERROR_NOT_INITIALIZED),
            TriggerAction::kNone);
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStart, kExit, CUDA_ERROR_INVALID_CONTEXT),
            TriggerAction::kNone);
}

TEST(CudaProfilerTriggerAction, StopClosesOnEntryWhateverTheResult) {
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStop, kEnter, CUDA_SUCCESS), TriggerAction::kClose);
  // At entry there is no result yet; whatever is passed is ignored.
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStop, kEnter, CUDA_ERROR_NOT_INITIALIZED),
            TriggerAction::kClose);
  EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_DRIVER_API, kStop, kExit, CUDA_SUCCESS), TriggerAction::kNone);
}

TEST(CudaProfilerTriggerAction, RuntimeDomainIsIgnored) {
  // The runtime's cudaProfilerStart/Stop forward to the driver calls, which
  // carry the decision; acting on both would toggle twice.
  for (uint32_t cbid : {static_cast<uint32_t>(CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000),
                        static_cast<uint32_t>(CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000), kStart, kStop}) {
    for (int site : {kEnter, kExit}) {
      EXPECT_EQ(CudaProfilerTriggerAction(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, site, CUDA_SUCCESS), TriggerAction::kNone)
          << "cbid " << cbid << " site " << site;
    }
  }
}

TEST(CudaProfilerTriggerAction, EveryOtherCombinationIsNone) {
  const std::vector<uint32_t> domains = {
      CUPTI_CB_DOMAIN_INVALID,     CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_RESOURCE,
      CUPTI_CB_DOMAIN_SYNCHRONIZE, CUPTI_CB_DOMAIN_NVTX,       CUPTI_CB_DOMAIN_STATE};
  const std::vector<uint32_t> cbids = {kStart,
                                       kStop,
                                       CUPTI_DRIVER_TRACE_CBID_INVALID,
                                       CUPTI_DRIVER_TRACE_CBID_cuInit,
                                       CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                       CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
                                       CUPTI_DRIVER_TRACE_CBID_SIZE,
                                       0xFFFFFFFFu};
  int opens = 0, closes = 0;
  for (uint32_t domain : domains) {
    for (uint32_t cbid : cbids) {
      for (int site : {kEnter, kExit}) {
        for (int result : {static_cast<int>(CUDA_SUCCESS), static_cast<int>(CUDA_ERROR_UNKNOWN)}) {
          const TriggerAction a = CudaProfilerTriggerAction(domain, cbid, site, result);
          const bool driver = domain == CUPTI_CB_DOMAIN_DRIVER_API;
          TriggerAction want = TriggerAction::kNone;
          if (driver && cbid == kStart && site == kExit && result == CUDA_SUCCESS) {
            want = TriggerAction::kOpen;
          } else if (driver && cbid == kStop && site == kEnter) {
            want = TriggerAction::kClose;
          }
          EXPECT_EQ(a, want) << "domain " << domain << " cbid " << cbid << " site " << site << " result " << result;
          opens += a == TriggerAction::kOpen;
          closes += a == TriggerAction::kClose;
        }
      }
    }
  }
  EXPECT_EQ(opens, 1);
  EXPECT_EQ(closes, 2);  // stop at entry, with either (ignored) result
}

// Calls the real callback as CUPTI would, with hand-built callback data.
void Drive(Collector* c, CUpti_CallbackDomain domain, uint32_t cbid, CUpti_ApiCallbackSite site,
           CUresult result = CUDA_SUCCESS) {
  CUpti_CallbackData data = {};
  data.callbackSite = site;
  data.functionName = cbid == kStart ? "cuProfilerStart" : "cuProfilerStop";
  data.functionReturnValue = site == CUPTI_API_EXIT ? &result : nullptr;
  data.correlationId = 1;
  CudaProfilerTriggerCallback(c, domain, cbid, &data);
}

TEST(CudaProfilerTriggerCallback, CuProfilerStartAndStopOpenAndCloseTheCapture) {
  Collector* c = StartTestCollector();
  ASSERT_NE(c, nullptr);
  // From a closed capture, whatever the collector's initial state: a stop
  // closes it, and closing twice is harmless.
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStop, CUPTI_API_ENTER);
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStop, CUPTI_API_EXIT);
  ASSERT_EQ(rlscope_collector_armed(), 0);

  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStart, CUPTI_API_ENTER);
  EXPECT_EQ(rlscope_collector_armed(), 0) << "opened before cuProfilerStart returned";
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStart, CUPTI_API_EXIT);
  EXPECT_EQ(rlscope_collector_armed(), 1);

  // The runtime's own callbacks change nothing.
  Drive(c, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, CUPTI_API_ENTER);
  EXPECT_EQ(rlscope_collector_armed(), 1);

  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStop, CUPTI_API_ENTER);
  EXPECT_EQ(rlscope_collector_armed(), 0);
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStop, CUPTI_API_EXIT);
  EXPECT_EQ(rlscope_collector_armed(), 0);

  // A cuProfilerStart that failed does not open it.
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStart, CUPTI_API_EXIT, CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(rlscope_collector_armed(), 0);

  // A second window.
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStart, CUPTI_API_EXIT);
  EXPECT_EQ(rlscope_collector_armed(), 1);
  Drive(c, CUPTI_CB_DOMAIN_DRIVER_API, kStop, CUPTI_API_ENTER);
  EXPECT_EQ(rlscope_collector_armed(), 0);
}

TEST(CudaProfilerTriggerCallback, IgnoresMissingData) {
  Collector* c = StartTestCollector();
  ASSERT_NE(c, nullptr);
  CudaProfilerTriggerCallback(c, CUPTI_CB_DOMAIN_DRIVER_API, kStart, nullptr);
  CUpti_CallbackData data = {};
  data.callbackSite = CUPTI_API_EXIT;
  CudaProfilerTriggerCallback(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, kStart, &data);
  // A resource-domain callback carries a different struct: never read as API data.
  CUpti_ResourceData resource = {};
  CudaProfilerTriggerCallback(c, CUPTI_CB_DOMAIN_RESOURCE, kStart, &resource);
  EXPECT_EQ(rlscope_collector_armed(), 0);
}

// The capture opens only at cuProfilerStart. Depends on the collector starting
// closed under capture_range cudaProfilerApi.
TEST(CudaProfilerApiCapture, IsClosedUntilCuProfilerStart) {
  ASSERT_NE(StartTestCollector(), nullptr);
  EXPECT_EQ(rlscope_collector_armed(), 0);
}

// A scripted libcupti: results per call, and a log of what was called.
struct FakeCupti {
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  std::vector<CUptiResult> enable_results;             // consumed in order; CUPTI_SUCCESS once empty
  std::vector<std::pair<uint32_t, uint32_t>> enabled;  // (domain, cbid)
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  int unsubscribed = 0;
};
FakeCupti* g_fake = nullptr;
CUpti_SubscriberHandle const kFakeHandle = reinterpret_cast<CUpti_SubscriberHandle>(0x5eed);

CUptiResult CUPTIAPI FakeSubscribe(CUpti_SubscriberHandle* sub, CUpti_CallbackFunc cb, void* userdata) {
  g_fake->callback = cb;
  g_fake->userdata = userdata;
  *sub = g_fake->subscribe_result == CUPTI_SUCCESS ? kFakeHandle : nullptr;
  return g_fake->subscribe_result;
}
CUptiResult CUPTIAPI FakeEnableCallback(uint32_t enable, CUpti_SubscriberHandle sub, CUpti_CallbackDomain domain,
                                        CUpti_CallbackId cbid) {
  if (enable != 1 || sub != kFakeHandle) return CUPTI_ERROR_INVALID_PARAMETER;
  CUptiResult r = CUPTI_SUCCESS;
  if (!g_fake->enable_results.empty()) {
    r = g_fake->enable_results.front();
    g_fake->enable_results.erase(g_fake->enable_results.begin());
  }
  if (r == CUPTI_SUCCESS) g_fake->enabled.emplace_back(domain, cbid);
  return r;
}
CUptiResult CUPTIAPI FakeUnsubscribe(CUpti_SubscriberHandle sub) {
  if (sub != kFakeHandle) return CUPTI_ERROR_INVALID_PARAMETER;
  ++g_fake->unsubscribed;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI FakeGetResultString(CUptiResult r, const char** str) {
  *str = r == CUPTI_ERROR_UNKNOWN ? "CUPTI_ERROR_UNKNOWN" : "CUPTI_ERROR_SOMETHING";
  return CUPTI_SUCCESS;
}

class InstallCudaProfilerTriggerTest : public testing::Test {
 protected:
  void SetUp() override { g_fake = &fake_; }
  void TearDown() override { g_fake = nullptr; }
  bool Install(std::string* why) {
    CuptiApi api;
    api.subscribe = &FakeSubscribe;
    api.enable_callback = &FakeEnableCallback;
    api.unsubscribe = &FakeUnsubscribe;
    api.get_result_string = &FakeGetResultString;
    return InstallCudaProfilerTrigger(api, &userdata_, why);
  }
  FakeCupti fake_;
  int userdata_ = 0;
};

TEST_F(InstallCudaProfilerTriggerTest, SubscribesAndEnablesTheTwoDriverCallbacks) {
  std::string why;
  ASSERT_TRUE(Install(&why)) << why;
  EXPECT_EQ(fake_.callback, &CudaProfilerTriggerCallback);
  EXPECT_EQ(fake_.userdata, &userdata_);
  const std::vector<std::pair<uint32_t, uint32_t>> want = {{CUPTI_CB_DOMAIN_DRIVER_API, kStart},
                                                           {CUPTI_CB_DOMAIN_DRIVER_API, kStop}};
  EXPECT_EQ(fake_.enabled, want);
  EXPECT_EQ(fake_.unsubscribed, 0);
}

TEST_F(InstallCudaProfilerTriggerTest, NoDriverIsReportedWithCuptisError) {
  fake_.subscribe_result = CUPTI_ERROR_UNKNOWN;  // what libcupti 13 returns without a driver
  std::string why;
  EXPECT_FALSE(Install(&why));
  EXPECT_EQ(why, "cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN (999)");
  EXPECT_TRUE(fake_.enabled.empty());
  EXPECT_EQ(fake_.unsubscribed, 0);
}

TEST_F(InstallCudaProfilerTriggerTest, AnotherSubscriberIsNamedAsTheCause) {
  fake_.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  std::string why;
  EXPECT_FALSE(Install(&why));
  EXPECT_NE(why.find("(39)"), std::string::npos) << why;
  EXPECT_NE(why.find("another CUPTI tool"), std::string::npos) << why;
}

TEST_F(InstallCudaProfilerTriggerTest, AFailedEnableUndoesTheSubscription) {
  fake_.enable_results = {CUPTI_SUCCESS, CUPTI_ERROR_INVALID_PARAMETER};
  std::string why;
  EXPECT_FALSE(Install(&why));
  EXPECT_EQ(why.rfind("cuptiEnableCallback failed: ", 0), 0u) << why;
  EXPECT_EQ(fake_.unsubscribed, 1);
}

#endif  // RLSCOPE_HAVE_CUPTI

// ------------------------------------------------------------------ spool

// A socket that takes `room` messages, then refuses.
struct FakeSocket {
  size_t room = SIZE_MAX;
  std::vector<std::string> sent;
  Spool::SendFn fn() {
    return [this](const std::string& m) {
      if (sent.size() >= room) return false;
      sent.push_back(m);
      return true;
    };
  }
};

TEST(Spool, WhatTheSocketCannotTakeWaitsAndGoesOutInOrder) {
  Spool spool(1 << 20, 0);
  FakeSocket sock;
  sock.room = 1;
  spool.Push("a", 1, 10);
  spool.Push("b", 1, 20);
  spool.Push("c", 1, 30);
  EXPECT_EQ(spool.Pump(sock.fn()), 1u);
  EXPECT_EQ(spool.unsent_events(), 2u);
  sock.room = SIZE_MAX;
  spool.Pump(sock.fn());
  EXPECT_EQ(sock.sent, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(spool.idle());
  EXPECT_EQ(spool.lost_events(), 0u);
}

TEST(Spool, SentBatchesAreKeptUntilReleasedAndReplayedAfterThePreamble) {
  Spool spool(1 << 20, 0);
  FakeSocket sock;
  spool.Push("a", 1, 10);
  spool.Push("heartbeat", 0, 0);  // no events: not kept once sent
  spool.Push("b", 1, 20);
  spool.Pump(sock.fn());
  spool.Release(15);  // "a" belongs to a written step
  spool.Rewind("names");
  sock.sent.clear();
  spool.Pump(sock.fn());
  EXPECT_EQ(sock.sent, (std::vector<std::string>{"names", "b"}));
}

TEST(Spool, OverMemoryTheOldestGoToTheFileAndComeBackInOrder) {
  Spool spool(8, 1 << 20);  // 8 bytes of memory
  FakeSocket sock;
  sock.room = 0;  // the aggregator cannot be reached
  for (const char* m : {"first---", "second--", "third---", "fourth--"}) spool.Push(m, 2, 1);
  EXPECT_LE(spool.memory_bytes(), 8u);
  EXPECT_GT(spool.file_bytes(), 0u);
  sock.room = SIZE_MAX;
  spool.Pump(sock.fn());
  EXPECT_EQ(sock.sent, (std::vector<std::string>{"first---", "second--", "third---", "fourth--"}));
  EXPECT_EQ(spool.lost_events(), 0u);
}

TEST(Spool, WhenFullTheOldestGoUnsentOnesCountedLostSentOnesEvicted) {
  Spool spool(8, 0);  // memory only
  FakeSocket sock;
  spool.Push("sent----", 3, 1);
  spool.Pump(sock.fn());
  sock.room = 1;                 // nothing more goes out
  spool.Push("unsent-1", 5, 2);  // evicts the sent one: no loss, only no replay
  EXPECT_EQ(spool.evicted_events(), 3u);
  EXPECT_EQ(spool.lost_events(), 0u);
  spool.Push("unsent-2", 7, 3);  // drops an unsent one: lost
  EXPECT_EQ(spool.lost_events(), 5u);
  EXPECT_EQ(spool.lost_messages(), 1u);
  EXPECT_EQ(spool.unsent_events(), 7u);
}

TEST(Spool, WhenTheFileIsFullItKeepsItsMessagesAndTheNewerOneInMemoryGoes) {
  Spool spool(8, 16);  // 8 bytes of memory, 16 of file
  FakeSocket sock;
  sock.room = 0;
  spool.Push("m1------", 1, 1);
  spool.Push("m2------", 2, 2);
  spool.Push("m3------", 4, 3);  // m1, m2 in the file, m3 in memory
  EXPECT_FALSE(spool.TakeNamesLost());
  spool.Push("m4------", 8, 4);  // the file is full: m3 goes, not the file's
  EXPECT_EQ(spool.lost_events(), 4u);
  EXPECT_TRUE(spool.TakeNamesLost());  // the names it carried are sent again
  EXPECT_FALSE(spool.TakeNamesLost());
  sock.room = SIZE_MAX;
  spool.SetPreamble("names");
  spool.Pump(sock.fn());
  EXPECT_EQ(sock.sent, (std::vector<std::string>{"names", "m1------", "m2------", "m4------"}));
}

TEST(Spool, EvictedMessagesOfStepsNotReleasedCountLostWhenTheAggregatorRestarts) {
  for (const bool released : {false, true}) {
    Spool spool(8, 0);
    FakeSocket sock;
    spool.Push("sent----", 3, 10);
    spool.Pump(sock.fn());
    sock.room = 0;
    spool.Push("unsent-1", 5, 20);  // evicts the sent one
    EXPECT_EQ(spool.evicted_events(), 3u);
    if (released) spool.Release(15);  // its step was written before the restart
    spool.Rewind("names");
    EXPECT_EQ(spool.lost_events(), released ? 0u : 3u);
  }
}

TEST(Spool, AtExitAllThatIsKeptSentOrNotIsTakenInOrderWithinTheFileBound) {
  Spool spool(8, 1 << 20);  // the oldest unsent go to the temporary file
  FakeSocket sock;
  spool.Push("sent-a--", 1, 10);
  spool.Push("beat", 0, 0);  // sent, no events: nothing to take
  spool.Pump(sock.fn());
  spool.Release(5);  // releases nothing: "sent-a--" ends at 10
  sock.room = 0;
  spool.Push("unsent-b", 2, 20);
  spool.Push("unsent-c", 4, 30);
  spool.Push("unsent-d", 8, 40);
  std::vector<std::string> out;
  uint64_t events = 0;
  // Room for three of the four: the newest is over the bound, lost.
  EXPECT_EQ(spool.TakeAll(24, &out, &events), 8u);
  EXPECT_EQ(out, (std::vector<std::string>{"sent-a--", "unsent-b", "unsent-c"}));
  EXPECT_EQ(events, 7u);
  EXPECT_EQ(spool.lost_events(), 8u);
  EXPECT_EQ(spool.unsent_events(), 0u);
  EXPECT_TRUE(spool.idle());
  EXPECT_EQ(spool.size(), 0u);
}

TEST(SpoolFile, WrittenWholeForTheUserOnlyAndReadBackInOrder) {
  char tmpl[] = "/tmp/rlscope_spool_file_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/run/key";
  const std::vector<std::string> messages = {"hello", std::string("\0bin\xff", 5), std::string(70000, 'x'), ""};
  const SpoolWriteResult w = WriteSpoolFile(dir, "123-00ab", messages);
  ASSERT_TRUE(w.ok) << w.error;
  EXPECT_EQ(w.path, dir + "/123-00ab.spool");
  struct stat st {};
  ASSERT_EQ(stat(w.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(ListSpoolFiles(dir), std::vector<std::string>{w.path});  // no .tmp left beside it
  std::vector<std::string> back;
  std::string error;
  ASSERT_TRUE(ReadSpoolFile(w.path, &back, &error)) << error;
  EXPECT_EQ(back, messages);
  // Cut short (a copy interrupted) or not ours: said, not read.
  ASSERT_EQ(truncate(w.path.c_str(), st.st_size > 0 ? 100 : 0), 0);
  EXPECT_FALSE(ReadSpoolFile(w.path, &back, &error));
  EXPECT_NE(error.find("cut short"), std::string::npos) << error;
  const std::string foreign = dir + "/other.spool";
  FILE* f = std::fopen(foreign.c_str(), "w");
  std::fputs("not a spool\n", f);
  std::fclose(f);
  EXPECT_FALSE(ReadSpoolFile(foreign, &back, &error));
  EXPECT_NE(error.find("not an rlscope spool file"), std::string::npos) << error;
  EXPECT_TRUE(ListSpoolFiles(std::string(tmpl) + "/nowhere").empty());
  EXPECT_EQ(RunKey(""), "");
  EXPECT_EQ(RunKey("a").size(), 16u);
  EXPECT_NE(RunKey("a"), RunKey("b"));
  std::system(("rm -rf " + std::string(tmpl)).c_str());
}

TEST(Spool, AtExitWhatWasNeverSentIsCountedLost) {
  Spool spool(1 << 20, 0);
  FakeSocket sock;
  spool.Push("a", 1, 1);
  spool.Pump(sock.fn());
  sock.room = 0;
  spool.Push("b", 2, 2);
  spool.Push("c", 4, 3);
  EXPECT_EQ(spool.AbandonUnsent(), 6u);
  EXPECT_EQ(spool.lost_events(), 6u);
  EXPECT_EQ(spool.lost_messages(), 2u);
  EXPECT_EQ(spool.unsent_events(), 0u);
  EXPECT_TRUE(spool.idle());
}

// Fault-proof reads (safe_read.h), outside a signal handler: the copy and
// the guard do not depend on where they run. Each test leaves the guard as
// the first SIGSEGV/SIGBUS handler, as it found it.
class SafeReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(FaultGuard::Install(&why)) << why;
    page_ = static_cast<char*>(mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(page_, MAP_FAILED);
    for (size_t i = 0; i < 2 * kPage; ++i) page_[i] = static_cast<char>(i * 7);
  }
  void TearDown() override { munmap(page_, 2 * kPage); }
  static constexpr size_t kPage = 4096;
  char* page_ = nullptr;
};

TEST_F(SafeReadTest, CopiesReadableMemoryExactlyWithGuardedLoads) {
  SafeReadScope scope(nullptr);
  ASSERT_FALSE(scope.through_kernel());  // nothing read yet: nothing decided
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{80}, size_t{163}}) {
    char out[200] = {};
    ASSERT_EQ(SafeRead(out, page_ + 3, n), 1) << n;
    EXPECT_EQ(std::memcmp(out, page_ + 3, n), 0) << n;
    EXPECT_EQ(out[n], 0) << "wrote past n = " << n;
  }
  EXPECT_FALSE(scope.failed());
  EXPECT_FALSE(scope.through_kernel());
}

TEST_F(SafeReadTest, UnmappedMemoryIsAFailedReadCountedAsAFaultNotACrash) {
  munmap(page_ + kPage, kPage);  // the second page goes
  SafeReadScope scope(nullptr);
  const uint64_t faults = FaultGuard::faults();
  char out[64];
  EXPECT_EQ(SafeRead(out, page_ + 2 * kPage - 16, 32), 0);  // straddles the edge
  EXPECT_EQ(SafeRead(out, page_ + kPage, 1), 0);
  EXPECT_EQ(FaultGuard::faults(), faults + 2);
  EXPECT_TRUE(scope.failed());
  EXPECT_EQ(SafeRead(out, page_ + kPage - 16, 16), 1);  // up to the edge: readable
}

TEST_F(SafeReadTest, UnderAHostHandlerInstalledAfterTheGuardReadsGoThroughTheKernel) {
  struct sigaction host {
  }, ours{};
  host.sa_handler = [](int) {};
  sigemptyset(&host.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &host, &ours), 0);
  EXPECT_FALSE(FaultGuard::First(nullptr));
  {
    SafeReadScope scope(nullptr);
    const uint64_t faults = FaultGuard::faults();
    char out[16];
    ASSERT_EQ(SafeRead(out, page_, sizeof(out)), 1);
    EXPECT_TRUE(scope.through_kernel());
    EXPECT_EQ(std::memcmp(out, page_, sizeof(out)), 0);
    EXPECT_FALSE(scope.failed());
    munmap(page_ + kPage, kPage);
    EXPECT_EQ(SafeRead(out, page_ + kPage, sizeof(out)), 0);
    EXPECT_TRUE(scope.failed());
    EXPECT_EQ(FaultGuard::faults(), faults);  // nothing faulted: the host's handler was never in play
  }
  ASSERT_EQ(sigaction(SIGSEGV, &ours, nullptr), 0);
  EXPECT_TRUE(FaultGuard::First(nullptr));
}

TEST_F(SafeReadTest, InterruptedCodeThatBlocksSigsegvIsReadThroughTheKernel) {
  ucontext_t interrupted{};
  sigemptyset(&interrupted.uc_sigmask);
  EXPECT_TRUE(FaultGuard::First(&interrupted));
  sigaddset(&interrupted.uc_sigmask, SIGSEGV);  // a fault there would end the process
  EXPECT_FALSE(FaultGuard::First(&interrupted));
  SafeReadScope scope(&interrupted);
  char out[8];
  EXPECT_EQ(SafeRead(out, page_, sizeof(out)), 1);
  EXPECT_TRUE(scope.through_kernel());
}

TEST(SafeRead, OutsideAScopeReadsNothing) {
  char src[8] = "abcdefg", out[8] = {};
  EXPECT_EQ(SafeRead(out, src, sizeof(src)), 0);
  EXPECT_EQ(out[0], 0);
}

// ---- children (children.h): which inherited processes are profiled.

TEST(Children, RaysOwnProcessesAreHelpersWhateverTheirPaths) {
  const std::string site = "/venv/lib/python3.11/site-packages/ray";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {site + "/core/src/ray/raylet/raylet", "--node_ip_address=10.0.0.1"},
           {site + "/core/src/ray/gcs/gcs_server", "--gcs_server_port=6379"},
           {"/venv/bin/python", "-u", site + "/_private/runtime_env/agent/main.py", "--node-ip-address=x"},
           {"/venv/bin/python", site + "/dashboard/agent.py"},
           {"/venv/bin/python", "-u", site + "/_private/log_monitor.py"},
           {"/venv/bin/python", site + "/_private/workers/default_worker.py", "--worker-id=1"},
           {"ray::IDLE"},
           {"/venv/bin/python", "-m", "ray.util.client.server"},
       }) {
    EXPECT_TRUE(IsRayHelper(args)) << JoinCommandLine(args);
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"/venv/bin/python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()",
            "--multiprocessing-fork"},
           {"/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"},
           {"/usr/bin/python3", "train_ray.py"},  // a user's script named after Ray is not Ray's
           {"./engine_core"},
       }) {
    EXPECT_FALSE(IsRayHelper(args)) << JoinCommandLine(args);
  }
}

TEST(Children, PatternsMatchTheCommandLineAnArgumentOrItsFileName) {
  const std::vector<std::string> engine = {"/venv/bin/python", "/opt/sglang/scheduler.py", "--tp", "2"};
  EXPECT_TRUE(ChildSelected({"*"}, engine));
  EXPECT_FALSE(ChildSelected({}, engine));
  EXPECT_TRUE(ChildSelected({"scheduler.py"}, engine));      // a file name
  EXPECT_TRUE(ChildSelected({"*sglang*"}, engine));          // the whole line
  EXPECT_TRUE(ChildSelected({"/opt/sglang/*.py"}, engine));  // an argument
  EXPECT_FALSE(ChildSelected({"*vllm*", "engine_core.py"}, engine));
}

TEST(Children, TheConfigKeyIsAllNoneOrPatternsAndSaysWhatItExpects) {
  EXPECT_EQ(ParseConfig("{}", "t").config.children, std::vector<std::string>{"*"});
  EXPECT_TRUE(ParseConfig("children: none", "t").config.children.empty());
  const ConfigResult listed = ParseConfig("children: [\"*vllm*\", scheduler.py]", "t");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed.config.children, (std::vector<std::string>{"*vllm*", "scheduler.py"}));
  EXPECT_NE(ConfigToYaml(listed.config).find("children: [\"*vllm*\", scheduler.py]"), std::string::npos);
  EXPECT_NE(ConfigToYaml(ParseConfig("children: none", "t").config).find("children: none"), std::string::npos);
  const ConfigResult bad = ParseConfig("steps: [1]\nchildren: some", "cfg.yaml");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].find("cfg.yaml:2"), std::string::npos) << bad.errors[0];
  EXPECT_NE(bad.errors[0].find("expected all, none, or a list"), std::string::npos) << bad.errors[0];
}

// Always on: the off-CPU looks' rate in steps not chosen up front is the
// sampler's reduction of cpu.off_cpu_hz (at least 1 Hz while it samples);
// in chosen steps, and without always_on, cpu.off_cpu_hz itself.
TEST(CpuSamplingTest, OffCpuLooksFollowTheSamplersReduction) {
  EXPECT_EQ(CpuSampling::OffCpuHzAt(50, 1000, 1000), 50);  // chosen: the full rate
  EXPECT_EQ(CpuSampling::OffCpuHzAt(50, 1000, 100), 5);    // always_on.sampling_hz 100
  EXPECT_EQ(CpuSampling::OffCpuHzAt(50, 1000, 10), 1);     // never below 1 Hz while sampling
  EXPECT_EQ(CpuSampling::OffCpuHzAt(50, 1000, 0), 0);      // always_on.sampling_hz 0: none
  EXPECT_EQ(CpuSampling::OffCpuHzAt(0, 1000, 100), 0);     // cpu.off_cpu_hz 0: none
  EXPECT_EQ(CpuSampling::OffCpuHzAt(50, 0, 100), 50);      // cpu.sampling_hz 0: looks as set
}

// The kept directory lists the threads as they are at each listing.
TEST(ProcSelfTest, AThreadListerListsTheThreadsAsTheyAreNow) {
  ThreadLister lister;
  const std::vector<int64_t> before = lister.List();
  EXPECT_EQ(before, ListThreads());
  std::atomic<int64_t> tid{0};
  std::atomic<bool> done{false};
  std::thread t([&] {
    tid = static_cast<int64_t>(syscall(SYS_gettid));
    while (!done) usleep(1000);
  });
  while (tid == 0) usleep(1000);
  const std::vector<int64_t> with = lister.List();
  EXPECT_EQ(with.size(), before.size() + 1);
  EXPECT_NE(std::find(with.begin(), with.end(), tid.load()), with.end());
  done = true;
  t.join();
  std::vector<int64_t> after = lister.List();
  for (int i = 0; i < 2000 && after != before; ++i) {  // until the kernel lets it go
    usleep(1000);
    after = lister.List();
  }
  EXPECT_EQ(after, before);
}

// A thread with no timer that blocks the sampler's signal is looked at
// again (a read of its /proc status) at every listing in its first second,
// then a second later, then twice as long after each look that finds it
// still blocking, up to the longest wait (kBlocksLookMaxNs in steps not
// chosen up front, a second in chosen ones); one that does not block it
// (and has no timer all the same), a second later.
TEST(CpuSamplerTest, AThreadThatBlocksTheSignalIsLookedAtLessAndLessOften) {
  constexpr int64_t s = 1'000'000'000;
  int64_t every = 0;
  EXPECT_EQ(NextBlocksLookNs(0, s / 2, true, kBlocksLookMaxNs, &every), s / 2);  // first second: the next listing
  EXPECT_EQ(NextBlocksLookNs(0, 2 * s, true, kBlocksLookMaxNs, &every), 3 * s);
  EXPECT_EQ(NextBlocksLookNs(0, 3 * s, true, kBlocksLookMaxNs, &every), 5 * s);
  EXPECT_EQ(NextBlocksLookNs(0, 5 * s, true, kBlocksLookMaxNs, &every), 9 * s);
  for (int i = 0; i < 10; ++i) NextBlocksLookNs(0, 9 * s, true, kBlocksLookMaxNs, &every);
  EXPECT_EQ(every, kBlocksLookMaxNs);
  EXPECT_EQ(NextBlocksLookNs(0, 100 * s, true, s, &every), 101 * s);  // a chosen step: a second at most
  EXPECT_EQ(NextBlocksLookNs(0, 101 * s, false, kBlocksLookMaxNs, &every), 102 * s);  // stopped blocking
  EXPECT_EQ(every, 0);  // the backoff starts again
  EXPECT_EQ(NextBlocksLookNs(0, 102 * s, true, kBlocksLookMaxNs, &every), 103 * s);
}

// Whether a thread blocks a signal is read from its /proc status.
TEST(ProcSelfTest, ThreadBlocksSignalReadsTheThreadsOwnMask) {
  std::atomic<int64_t> tid{0};
  std::atomic<bool> blocked{false}, done{false};
  std::thread t([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    tid = static_cast<int64_t>(syscall(SYS_gettid));
    blocked = true;
    while (!done) usleep(1000);
  });
  while (!blocked) usleep(1000);
  EXPECT_TRUE(ThreadBlocksSignal(tid, SIGPROF));
  EXPECT_FALSE(ThreadBlocksSignal(tid, SIGUSR2));
  EXPECT_FALSE(ThreadBlocksSignal(static_cast<int64_t>(syscall(SYS_gettid)), SIGPROF));  // this thread does not
  done = true;
  t.join();
  bool blocks = true;
  for (int i = 0; i < 2000 && blocks; ++i) {  // its status keeps its mask until the kernel lets it go
    blocks = ThreadBlocksSignal(tid, SIGPROF);
    if (blocks) usleep(1000);
  }
  EXPECT_FALSE(blocks);  // gone: unknown, false
}

// A /proc file kept open is written afresh at each read; a thread's says
// when the thread is gone; it holds one descriptor at most, closed with it.
TEST(ProcSelfTest, AKeptProcFileReadsTheFileAsItIsNowAndSaysWhenTheThreadIsGone) {
  std::atomic<int64_t> tid{0};
  // The process's descriptors open on the thread's /proc files (the test
  // binary may hold others that come and go: a collector's sockets).
  auto open_fds = [&tid] {
    const std::string prefix = "/proc/" + std::to_string(getpid()) + "/task/" + std::to_string(tid.load()) + "/";
    size_t n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (const dirent* e = readdir(d)) {
        char target[256];
        const ssize_t len =
            readlink((std::string("/proc/self/fd/") + e->d_name).c_str(), target, sizeof(target) - 1);
        if (len > 0 && std::string(target, static_cast<size_t>(len)).rfind(prefix, 0) == 0) ++n;
      }
      closedir(d);
    }
    return n;
  };
  std::atomic<int> phase{0};
  std::thread t([&] {
    tid = static_cast<int64_t>(syscall(SYS_gettid));
    phase = 1;
    while (phase == 1) usleep(1000);  // sleeping: state S
    volatile uint64_t x = 0;
    while (phase == 2) x = x + 1;  // spinning: CPU time grows, state R
  });
  while (phase == 0) usleep(1000);
  {
    KeptProcFile stat("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
    KeptProcFile schedstat("/proc/self/task/" + std::to_string(tid.load()) + "/schedstat");
    EXPECT_FALSE(stat.is_open());  // opened at the first read
    auto state = [](const std::string& text) {
      const size_t close = text.rfind(')');
      return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '?';
    };
    std::string sleeping = stat.Read();
    EXPECT_TRUE(stat.is_open());
    for (int i = 0; i < 2000 && state(sleeping) != 'S'; ++i) {  // between its naps
      usleep(1000);
      sleeping = stat.Read();
    }
    EXPECT_EQ(state(sleeping), 'S');
    const long long cpu_before = std::atoll(schedstat.Read().c_str());
    phase = 2;
    std::string spinning;
    for (int i = 0; i < 2000 && state(spinning) != 'R'; ++i) {  // until it is seen running (it spins until told)
      spinning = stat.Read();
      usleep(1000);
    }
    EXPECT_EQ(state(spinning), 'R');
    long long cpu_after = cpu_before;
    for (int i = 0; i < 2000 && cpu_after == cpu_before; ++i) {  // its CPU time as the scheduler updates it
      cpu_after = std::atoll(schedstat.Read().c_str());
      usleep(1000);
    }
    EXPECT_GT(cpu_after, cpu_before);
    EXPECT_EQ(open_fds(), 2u);
    phase = 3;
    t.join();
    std::string gone = stat.Read();
    for (int i = 0; i < 2000 && !gone.empty(); ++i) {  // dead (X) until the kernel lets it go
      usleep(1000);
      gone = stat.Read();
    }
    EXPECT_EQ(gone, "");
    EXPECT_FALSE(stat.is_open());  // opened again at the next read (a thread with its id since)
    EXPECT_EQ(schedstat.Read(), "");
  }
  EXPECT_EQ(open_fds(), 0u);
}

// A controller's step beginning moves workers' windows, so it wakes the
// flush thread at once, but only once the edge is in the ring: OnRangeOpen
// says so (kOpensShipNow) and AfterOpen, which the collector calls after
// recording the open, wakes. Woken before, the flush thread found nothing
// new and the edge waited for the next flush (on a Ray job, workers armed a
// step late in 6 of 14 selected steps). Arming's hot byte is the process's:
// this test, as every one here, runs in a process of its own (CTest).
TEST(ArmingTest, AStepsBeginningWakesTheFlushThreadOnceItIsRecorded) {
  const int efd = eventfd(0, EFD_NONBLOCK);
  ASSERT_GE(efd, 0);
  const ConfigResult parsed = ParseConfig("steps: [5]", "test");
  ASSERT_TRUE(parsed.ok());
  CollectorContext ctx(ProcessConfig{parsed.config, parsed.keys}, "tcp://127.0.0.1:1", "", nullptr,
                       ClockSource::kMonotonic, efd);
  Recording recording(ctx);
  Arming arming(ctx, recording, /*controller=*/true, 0);
  ThreadBuffer ring(0, 1024);  // the thread's, not registered (as CostSampling::Calibrate's)
  ThreadState ts(&ctx.strings);
  ts.buffer = &ring;
  auto wakes = [&] {
    uint64_t n = 0;
    return read(efd, &n, sizeof(n)) == static_cast<ssize_t>(sizeof(n)) ? n : 0;
  };
  wakes();
  const int opens = arming.OnRangeOpen(&ts, ctx.strings.Intern(names::kStep), kFlagNone, 0, false, 0);
  EXPECT_EQ(opens, Arming::kOpensSpecial | Arming::kOpensShipNow);
  EXPECT_EQ(wakes(), 0u);  // the edge is not recorded yet
  arming.AfterOpen(opens);
  EXPECT_EQ(wakes(), 1u);
  EXPECT_EQ(arming.OnRangeOpen(&ts, ctx.strings.Intern("not_a_step"), kFlagNone, 0, false, 0), 0);
  close(efd);
}

}  // namespace
}  // namespace rlscope
