// Tests for rlscope_aggregator: timelines built from wire batches, step
// detection on the controller, cutting and clipping spans to steps, async
// ranges, readiness (watermarks, bye, grace, finish), step selection, memory,
// merge order, multi-process export and robustness against bad input.
//
// Collectors are faked: FakeCollector builds the wire::Hello/Batch/Bye
// messages a real collector would send, with timestamps chosen by the test,
// and every `now_ns` the aggregator sees is explicit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "aggregator/chunk_queue.h"
#include "aggregator/span_store.h"
#include "aggregator/record_stores.h"
#include "aggregator/decode_ahead.h"
#include "aggregator/aggregator.h"
#include "aggregator/breakdown.h"
#include "aggregator/clock_fit.h"
#include "aggregator/chrome_trace.h"
#include "aggregator/exporter.h"
#include "aggregator/outputs.h"
#include "aggregator/probe_server.h"
#include "aggregator/ray_calls.h"
#include "aggregator/step_files.h"
#include "aggregator/json_writer.h"
#include "aggregator/process_json.h"
#include "aggregator/prefault.h"
#include "native/spool_file.h"
#include "aggregator/run_json.h"
#include "aggregator/sorting.h"
#include "aggregator/step_profile.h"
#include "aggregator/summary_json.h"
#include "native/names.h"
#include "aggregator/timeline.h"
#include "aggregator/triggers.h"
#include "native/steps.h"
#include "native/config.h"
#include "native/event.h"
#include "native/probe_packet.h"
#include "native/wire.h"
#include "tests/cpp/fake_collector.h"

namespace rlscope {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr int64_t kMs = 1000000;

// ------------------------------------------------------------------ helpers

const ProcessSlice* FindSlice(const StepProfile& step, uint64_t session) {
  for (const auto& s : step.processes) {
    if (s.process != nullptr && s.process->hello().session == session) return &s;
  }
  return nullptr;
}

std::string SpanName(const ProcessSlice& slice, const Span& s) { return slice.process->String(s.name); }

std::vector<std::string> SpanNames(const ProcessSlice* slice) {
  std::vector<std::string> out;
  if (slice == nullptr) return out;
  for (const Span& s : slice->spans) out.push_back(SpanName(*slice, s));
  return out;
}

std::vector<std::string> InstantNames(const ProcessSlice* slice) {
  std::vector<std::string> out;
  if (slice == nullptr) return out;
  for (const Instant& i : slice->instants) out.push_back(slice->process->String(i.name));
  return out;
}

// The single span called `name` in the slice (fails the test if not exactly one).
const Span* FindSpan(const ProcessSlice* slice, const std::string& name) {
  if (slice == nullptr) {
    ADD_FAILURE() << "no slice";
    return nullptr;
  }
  const Span* found = nullptr;
  int n = 0;
  for (const Span& s : slice->spans) {
    if (SpanName(*slice, s) == name) {
      found = &s;
      ++n;
    }
  }
  if (n != 1) {
    ADD_FAILURE() << "expected exactly one span '" << name << "', found " << n;
    return nullptr;
  }
  return found;
}

bool HasSpan(const ProcessSlice* slice, const std::string& name) {
  for (const auto& n : SpanNames(slice)) {
    if (n == name) return true;
  }
  return false;
}

Config ConfigFrom(const std::string& yaml) {
  ConfigResult r = ParseConfig(yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0]);
  return r.config;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rlscope_agg_test_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Drives one Aggregator with a recording exporter.
class AggregatorTest : public ::testing::Test {
 protected:
  void Init(Config config = Config()) { agg_ = std::make_unique<Aggregator>(std::move(config), &exporter_); }
  void SetUp() override { Init(); }

  void Send(const wire::Message& m, int64_t now_ns = 0) { agg_->OnMessage(m, now_ns); }
  // The worker's probes (its clock 1,000,000 behind, +- 50 us), then one
  // step of `ctl` with a Ray call that `worker` ran from its 1105 to 1895
  // (truly 1,001,105 - 1,001,895: 5 us either side), both sent.
  void SendProbesAndAStepWithARayCall(FakeCollector& ctl, FakeCollector& worker) {
    wire::Batch b = worker.Flush(100);
    b.probes = {{1000, 1001000 + 40000, 1001000 + 40000, 1000 + 100000 - 20000}};
    Send(b);
    ctl.Push(1, 1001000, "step");
    ctl.Mark(1, 1001100, "ray.submit", 0).Mark(1, 1001110, "ray.task", 11).Mark(1, 1001900, "ray.got", 11);
    ctl.Pop(1, 1002000);
    worker.Push(7, 1105, "update_actor", 11).Pop(7, 1895);
    Send(ctl.Flush(1002500));
    Send(worker.Flush(200000));
  }
  void Connect(const FakeCollector& c, int64_t now_ns = 0) { Send(c.Hello(), now_ns); }
  // The (window, step) of the capture windows broadcast since the last call.
  std::vector<std::pair<int, int64_t>> Windows() {
    std::vector<std::pair<int, int64_t>> out;
    for (const Outgoing& o : agg_->TakeOutgoing()) {
      const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
      if (o.session == 0 && c.window != wire::Control::Window::kUnchanged) {
        out.emplace_back(static_cast<int>(c.window), c.step);
      }
    }
    return out;
  }

  RecordingExporter exporter_;
  std::unique_ptr<Aggregator> agg_;
};

// ---------------------------------------------------------- step detection

TEST_F(AggregatorTest, ControllerPushPopStepsAreNumberedOneTwoThree) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 100, "step").Pop(1, 200);
  ctl.Push(1, 300, "step").Pop(1, 400);
  ctl.Push(1, 500, "step").Pop(1, 600);
  Send(ctl.Flush(1000));
  EXPECT_EQ(agg_->stats().steps_seen, 3u);
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(exporter_.steps[0].begin_ns, 100);
  EXPECT_EQ(exporter_.steps[0].end_ns, 200);
  EXPECT_EQ(exporter_.steps[1].begin_ns, 300);
  EXPECT_EQ(exporter_.steps[1].end_ns, 400);
  EXPECT_EQ(exporter_.steps[2].begin_ns, 500);
  EXPECT_EQ(exporter_.steps[2].end_ns, 600);
  for (const auto& s : exporter_.steps) EXPECT_EQ(s.reason, "complete");
  EXPECT_EQ(agg_->steps_written(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(agg_->stats().steps_written, 3u);
}

TEST_F(AggregatorTest, StepPayloadGivesTheNumberAndLaterStepsContinueFromIt) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 100, "step", 10).Pop(1, 200);
  ctl.Push(1, 300, "step", 11).Pop(1, 400);
  ctl.Push(1, 500, "step").Pop(1, 600);  // no payload: the next number
  Send(ctl.Flush(1000));
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{10, 11, 12}));
}

TEST_F(AggregatorTest, StartEndStepRangesDelimitSteps) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Start(1, 100, "step", 7).End(1, 200, 7);
  ctl.Start(1, 300, "step", 8).End(2, 400, 8);  // ended on another thread
  Send(ctl.Flush(1000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(exporter_.steps[1].begin_ns, 300);
  EXPECT_EQ(exporter_.steps[1].end_ns, 400);
}

TEST_F(AggregatorTest, AnAnnouncedNumberNumbersTheNextStepAndLaterOnesContinueFromIt) {
  // The collector announces a number the aggregator cannot derive (a resumed
  // run's verl global_steps, a start/end range's payload) with a
  // rlscope.step_number mark just before the step's range.
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Mark(1, 90, rlscope::names::kStepNumber, 201);
  Send(ctl.Flush(95));  // the mark and its step may come in different batches
  ctl.Start(1, 100, "step", 7).End(1, 200, 7);
  ctl.Start(1, 300, "step", 8).End(1, 400, 8);  // not announced: one more
  ctl.Mark(1, 490, rlscope::names::kStepNumber, 7);
  ctl.Push(1, 500, "step").Pop(1, 600);
  Send(ctl.Flush(1000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{201, 202, 7}));
  EXPECT_EQ(exporter_.steps[0].begin_ns, 100);
  for (const auto& s : exporter_.steps) {  // the mark is no instant of the trace
    for (const auto& p : s.processes) {
      for (const auto& i : p.instants) EXPECT_STRNE(p.process->String(i.name), rlscope::names::kStepNumber);
    }
  }
}

TEST_F(AggregatorTest, StepSplitAcrossBatchesIsDetectedWhenItCloses) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 100, "step");
  Send(ctl.Flush(150));
  EXPECT_EQ(agg_->stats().steps_seen, 0u);
  ctl.Pop(1, 200);  // "step" is not resent: the timeline remembers its id
  Send(ctl.Flush(250));
  EXPECT_EQ(agg_->stats().steps_seen, 1u);
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
}

TEST_F(AggregatorTest, WorkerStepRangeDoesNotMakeAStep) {
  FakeCollector worker(2, "worker", 0, 200);
  Connect(worker);
  worker.Push(1, 100, "step", 5).Pop(1, 200);
  worker.Start(1, 300, "step", 9).End(1, 400, 9);
  Send(worker.Flush(1000));
  agg_->Tick(0);
  agg_->Tick(100 * 1000 * kMs);
  EXPECT_EQ(agg_->stats().steps_seen, 0u);
  EXPECT_THAT(exporter_.steps, IsEmpty());
}

TEST_F(AggregatorTest, WorkerStepRangeIsAnOrdinarySpanInsideTheControllersStep) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 1200, "step", 99).Pop(1, 1800);
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(agg_->stats().steps_seen, 1u);
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  EXPECT_EQ(SpanNames(w), (std::vector<std::string>{"step"}));
}

// ----------------------------------------------------------------- cutting

// Controller steps [1000, 2000) and [3000, 4000); a worker's spans placed
// around them.
class CuttingTest : public AggregatorTest {
 protected:
  void SetUp() override {
    Init();
    FakeCollector ctl(1, "controller", -1, 100);
    FakeCollector worker(2, "worker", 0, 200);
    Connect(ctl);
    Connect(worker);
    // tid 10: sequential ranges and the marks.
    worker.Push(10, 900, "straddle_begin").Pop(10, 1100);
    worker.Push(10, 1100, "inside").Pop(10, 1200);
    worker.Mark(10, 999, "before_begin");
    worker.Mark(10, 1000, "at_begin");
    worker.Mark(10, 1999, "before_end");
    worker.Mark(10, 2000, "at_end");
    worker.Mark(10, 2050, "after_end");
    worker.Mark(10, 3000, "at_begin_2");
    // tid 11: one range over both steps.
    worker.Push(11, 1500, "both").Pop(11, 3500);
    // tid 12: straddles the end, lies between the steps, then stays open.
    worker.Push(12, 1900, "straddle_end").Pop(12, 2100);
    worker.Push(12, 2200, "between").Pop(12, 2800);
    worker.Push(12, 3500, "open");
    Send(worker.Flush(5000));
    ctl.Push(1, 1000, "step").Pop(1, 2000);
    ctl.Push(1, 3000, "step").Pop(1, 4000);
    Send(ctl.Flush(5000));
    agg_->Tick(0);
    ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
    s1_ = FindSlice(exporter_.steps[0], 2);
    s2_ = FindSlice(exporter_.steps[1], 2);
    ASSERT_NE(s1_, nullptr);
    ASSERT_NE(s2_, nullptr);
  }
  const ProcessSlice* s1_ = nullptr;
  const ProcessSlice* s2_ = nullptr;
};

TEST_F(CuttingTest, SpanInsideTheStepIsUnclipped) {
  const Span* s = FindSpan(s1_, "inside");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->begin_ns, 1100);
  EXPECT_EQ(s->end_ns, 1200);
  EXPECT_FALSE(s->clipped_begin);
  EXPECT_FALSE(s->clipped_end);
  EXPECT_FALSE(s->open);
  EXPECT_EQ(s->tid, 10);
  EXPECT_FALSE(HasSpan(s2_, "inside"));
}

TEST_F(CuttingTest, SpanStraddlingTheBeginIsClippedToIt) {
  const Span* s = FindSpan(s1_, "straddle_begin");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->begin_ns, 1000);
  EXPECT_EQ(s->end_ns, 1100);
  EXPECT_TRUE(s->clipped_begin);
  EXPECT_FALSE(s->clipped_end);
  EXPECT_FALSE(s->open);
}

TEST_F(CuttingTest, SpanStraddlingTheEndIsClippedToIt) {
  const Span* s = FindSpan(s1_, "straddle_end");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->begin_ns, 1900);
  EXPECT_EQ(s->end_ns, 2000);
  EXPECT_FALSE(s->clipped_begin);
  EXPECT_TRUE(s->clipped_end);
  EXPECT_FALSE(s->open);
  EXPECT_FALSE(HasSpan(s2_, "straddle_end"));
}

TEST_F(CuttingTest, SpanBetweenStepsIsInNeither) {
  EXPECT_FALSE(HasSpan(s1_, "between"));
  EXPECT_FALSE(HasSpan(s2_, "between"));
}

TEST_F(CuttingTest, SpanCoveringTwoStepsIsInBothClippedInEach) {
  const Span* a = FindSpan(s1_, "both");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->begin_ns, 1500);
  EXPECT_EQ(a->end_ns, 2000);
  EXPECT_FALSE(a->clipped_begin);
  EXPECT_TRUE(a->clipped_end);
  const Span* b = FindSpan(s2_, "both");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->begin_ns, 3000);
  EXPECT_EQ(b->end_ns, 3500);
  EXPECT_TRUE(b->clipped_begin);
  EXPECT_FALSE(b->clipped_end);
}

TEST_F(CuttingTest, RangeStillOpenAtStepEndIsOpenAndEndsThere) {
  EXPECT_FALSE(HasSpan(s1_, "open"));  // began after step 1
  const Span* s = FindSpan(s2_, "open");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->begin_ns, 3500);
  EXPECT_EQ(s->end_ns, 4000);
  EXPECT_TRUE(s->open);
  EXPECT_TRUE(s->clipped_end);
  EXPECT_FALSE(s->clipped_begin);
}

TEST_F(CuttingTest, MarksInsideHalfOpenStepIntervalOnly) {
  EXPECT_EQ(InstantNames(s1_), (std::vector<std::string>{"at_begin", "before_end"}));
  EXPECT_EQ(InstantNames(s2_), (std::vector<std::string>{"at_begin_2"}));
  EXPECT_EQ(s1_->instants[0].ts_ns, 1000);
  EXPECT_EQ(s1_->instants[0].tid, 10);
}

TEST_F(CuttingTest, StepSlicesExactContents) {
  EXPECT_EQ(SpanNames(s1_), (std::vector<std::string>{"straddle_begin", "inside", "both", "straddle_end"}));
  EXPECT_EQ(SpanNames(s2_), (std::vector<std::string>{"both", "open"}));
  // The controller's own slice holds just its step range, unclipped.
  const ProcessSlice* c1 = FindSlice(exporter_.steps[0], 1);
  EXPECT_EQ(SpanNames(c1), (std::vector<std::string>{"step"}));
  EXPECT_FALSE(c1->spans[0].clipped_begin);
  EXPECT_FALSE(c1->spans[0].clipped_end);
}

// Back-to-back steps (one ends where the next begins): an event at the shared
// boundary belongs to the later step only ([begin, end) intervals), and must
// survive the discarding done after the earlier step is emitted.
TEST_F(AggregatorTest, EventsAtBoundaryOfBackToBackStepsGoToTheLaterStep) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Mark(1, 2000, "boundary_mark");
  worker.Push(1, 2000, "zero_length").Pop(1, 2000);
  worker.Push(1, 1500, "ends_at_boundary").Pop(1, 2000);
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  ctl.Push(1, 2000, "step").Pop(1, 3000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  const ProcessSlice* w1 = FindSlice(exporter_.steps[0], 2);
  const ProcessSlice* w2 = FindSlice(exporter_.steps[1], 2);
  EXPECT_THAT(InstantNames(w1), IsEmpty());
  EXPECT_EQ(InstantNames(w2), (std::vector<std::string>{"boundary_mark"}));
  EXPECT_EQ(SpanNames(w1), (std::vector<std::string>{"ends_at_boundary"}));
  EXPECT_EQ(SpanNames(w2), (std::vector<std::string>{"zero_length"}));
}

// ------------------------------------------------------------ async ranges

TEST_F(AggregatorTest, StartEndRangeEndingOnAnotherThreadIsOneAsyncSpan) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Start(1, 1100, "handoff", 42).End(2, 1500, 42);
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  ASSERT_EQ(SpanNames(w), (std::vector<std::string>{"handoff"}));
  const Span& s = w->spans[0];
  EXPECT_TRUE(s.async);
  EXPECT_EQ(s.tid, 1);
  EXPECT_EQ(s.end_tid, 2);
  EXPECT_EQ(s.range_id, 42u);
  EXPECT_EQ(s.begin_ns, 1100);
  EXPECT_EQ(s.end_ns, 1500);
  EXPECT_FALSE(s.open);
  EXPECT_EQ(agg_->processes().at(2)->unmatched(), 0u);
}

TEST_F(AggregatorTest, EndArrivingBeforeItsStartStillMatches) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.End(2, 1600, 43);  // flushed from thread 2's buffer first
  Send(worker.Flush(1000));
  worker.Start(1, 1200, "early_end", 43);
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  const Span* s = FindSpan(w, "early_end");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->async);
  EXPECT_EQ(s->begin_ns, 1200);
  EXPECT_EQ(s->end_ns, 1600);
  EXPECT_EQ(s->tid, 1);
  EXPECT_EQ(s->end_tid, 2);
  EXPECT_EQ(s->range_id, 43u);
  EXPECT_FALSE(s->open);
  Send(worker.Bye());
  EXPECT_EQ(agg_->processes().at(2)->unmatched(), 0u);
}

TEST_F(AggregatorTest, StartWithoutEndIsOpenAsyncSpan) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Start(3, 1200, "pending", 44);
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const Span* s = FindSpan(FindSlice(exporter_.steps[0], 2), "pending");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->async);
  EXPECT_TRUE(s->open);
  EXPECT_TRUE(s->clipped_end);
  EXPECT_EQ(s->end_ns, 2000);
}

// --------------------------------------------------------------- readiness

TEST_F(AggregatorTest, StepWaitsForAConnectedWorkerWatermark) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 1100, "early_work").Pop(1, 1200);
  Send(worker.Flush(1500), 0);  // behind the step end (2000)
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500), 10 * kMs);
  agg_->Tick(10 * kMs);
  agg_->Tick(10 * kMs + 1500 * kMs);  // heard from 1.5 s ago: alive, still holds the step
  EXPECT_THAT(exporter_.steps, IsEmpty());
  worker.Push(1, 1800, "late_work").Pop(1, 1900);
  Send(worker.Flush(2100), 20 * kMs);
  agg_->Tick(20 * kMs);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& p = exporter_.steps[0];
  EXPECT_EQ(p.reason, "complete");
  const ProcessSlice* w = FindSlice(p, 2);
  EXPECT_FALSE(w->late);
  EXPECT_EQ(SpanNames(w), (std::vector<std::string>{"early_work", "late_work"}));
}

// verl's controller: marked_timer opens "step" and its sub-tasks as
// start/end ranges (the nvtx package's start_range/end_range), one of them
// ended on another thread; a push/pop sub-task sits beside them.
void VerlShapedStep(FakeCollector& ctl) {
  ctl.Start(1, 1000, "step", 10);
  ctl.Start(1, 1100, "gen", 11).Start(1, 1150, "generate_sequences", 12).End(1, 1300, 12).End(1, 1400, 11);
  ctl.Push(1, 1500, "reward").Pop(1, 1600);
  ctl.Push(2, 1520, "background").Pop(2, 1580);  // another thread's push/pop: not a sub-task of the step
  ctl.Start(1, 1700, "adv", 13).End(3, 1800, 13);
  ctl.End(1, 2000, 10);
}

TEST_F(AggregatorTest, StartEndRangesAreSubtasksOfAStartEndStep) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  VerlShapedStep(ctl);
  Send(ctl.Flush(2500));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepAnalysis& a = *exporter_.steps[0].analysis.Get();
  std::vector<std::string> segments;
  for (const CriticalSegment& c : a.critical_path) segments.push_back(c.subtask);
  EXPECT_EQ(segments, (std::vector<std::string>{"gen", "reward", "adv"}));
  std::set<std::string> rows;
  for (const BreakdownRow& r : a.rows) rows.insert(r.subtask);
  EXPECT_EQ(rows, (std::set<std::string>{"step", "gen", "reward", "adv"}));
}

TEST_F(AggregatorTest, DiscreteCapturesOfStartEndSubtasks) {
  Init(ConfigFrom("discrete: true\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  VerlShapedStep(ctl);
  Send(ctl.Flush(2500));
  agg_->Tick(0);
  ASSERT_FALSE(exporter_.steps.empty());
  EXPECT_EQ(exporter_.steps.back().captures, (std::vector<std::string>{"gen", "reward", "adv"}));
  // A capture holds its range, cut to it: gen's has gen and what is inside.
  const StepProfile& gen = exporter_.steps[0];
  ASSERT_EQ(gen.capture, "gen");
  EXPECT_EQ(gen.begin_ns, 1100);
  EXPECT_EQ(gen.end_ns, 1400);
}

TEST_F(AggregatorTest, DiscreteCaptureNamesAreSafeUniqueDirectoryNames) {
  Init(ConfigFrom("discrete: true\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 1000, "step");
  int64_t t = 1100;
  for (const char* name : {"gen", "gen_2", "gen", "../x/y", ""}) {
    ctl.Push(1, t, name).Pop(1, t + 50);
    t += 100;
  }
  ctl.Pop(1, 2000);
  Send(ctl.Flush(2500));
  agg_->Tick(0);
  ASSERT_FALSE(exporter_.steps.empty());
  const StepProfile& step = exporter_.steps.back();
  EXPECT_EQ(step.captures, (std::vector<std::string>{"gen", "gen_2", "gen_3", "___x_y", "unnamed"}));
}

// A kernel belongs to the step of its launch, even when it runs after the
// step ended; the trace puts it on its stream's track with a launch arrow.
TEST_F(AggregatorTest, GpuRecordsFollowTheirLaunchIntoStepsAndTraces) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  ctl.Push(1, 2100, "step").Pop(1, 3000);
  wire::Batch b = ctl.Flush(5000);
  const uint32_t kKernelName = 900, kApiName = 901;
  b.strings.emplace_back(kKernelName, "gemm_kernel");
  b.strings.emplace_back(kApiName, "cudaLaunchKernel");
  auto rec = [](GpuKind kind, int64_t start, int64_t end, uint32_t corr) {
    GpuRecord g;
    g.kind = static_cast<uint8_t>(kind);
    g.start_ns = start;
    g.end_ns = end;
    g.correlation = corr;
    return g;
  };
  GpuRecord launch = rec(GpuKind::kRuntimeApi, 1900, 1950, 7);  // in step 1
  launch.tid = 1;
  launch.name = kApiName;
  GpuRecord kernel = rec(GpuKind::kKernel, 2200, 2600, 7);  // runs during step 2
  kernel.name = kKernelName;
  kernel.device = 1;
  kernel.stream = 13;
  kernel.grid[0] = 64;
  kernel.block[0] = 128;
  GpuRecord copy = rec(GpuKind::kMemcpy, 2500, 2700, 0);  // no launch known: by time, step 2
  copy.subkind = 1;
  copy.bytes = 1000;
  copy.stream = 13;
  b.gpu = {launch, kernel, copy};
  Send(b);
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  auto kinds = [](const ProcessSlice* s) {
    std::vector<int> k;
    for (const GpuRecord& g : s->gpu) k.push_back(g.kind);
    return k;
  };
  EXPECT_EQ(kinds(FindSlice(exporter_.steps[0], 1)),
            (std::vector<int>{static_cast<int>(GpuKind::kRuntimeApi), static_cast<int>(GpuKind::kKernel)}));
  EXPECT_EQ(kinds(FindSlice(exporter_.steps[1], 1)), (std::vector<int>{static_cast<int>(GpuKind::kMemcpy)}));
  const std::string json = StepTraceJson(exporter_.steps[0], {{1, 100}});
  EXPECT_THAT(json, HasSubstr("\"name\":\"stream 13 (GPU 1)\""));
  EXPECT_THAT(json, HasSubstr("\"name\":\"gemm_kernel\",\"cat\":\"gpu\""));
  EXPECT_THAT(json, HasSubstr("\"grid\":[64,0,0],\"block\":[128,0,0]"));
  EXPECT_THAT(json, HasSubstr("\"name\":\"cudaLaunchKernel\",\"cat\":\"cuda_api\",\"pid\":100,\"tid\":1"));
  // The flow's id: the process's correlation id made unique in the trace (pid << 32 ^ correlation).
  const std::string id = "\"id\":\"launch." + std::to_string((uint64_t{100} << 32) ^ 7) + "\"";
  EXPECT_THAT(json, HasSubstr("\"ph\":\"s\",\"name\":\"launch\",\"cat\":\"launch\"," + id));
  EXPECT_THAT(json, HasSubstr("\"ph\":\"f\",\"bp\":\"e\",\"name\":\"launch\",\"cat\":\"launch\"," + id));
  const std::string json2 = StepTraceJson(exporter_.steps[1], {{1, 100}});
  EXPECT_THAT(json2, HasSubstr("\"name\":\"Memcpy HtoD\",\"cat\":\"gpu_memcpy\""));
  EXPECT_THAT(json2, HasSubstr("\"bytes\":1000,\"bandwidth_GBps\":5"));
}

// ------------------------------------------------------ cross-stack attribution

TEST_F(AggregatorTest, CpuSamplesSayWhereEachSubtasksCpuTimeWentWithTheConfigsPatterns) {
  // A controller's step [0, 100 ms) with three sub-tasks on thread 1:
  // "native" [10, 40) in a library the config calls the backend, "python"
  // [40, 70) in the interpreter, "sim" [70, 100) interpreting a module the
  // config calls the simulator; one sample of 1 ms every ms, in the middle
  // of each ms, one of them in the collector itself. Thread 2 runs the
  // simulator's native code for the whole "sim" window. A sample costs 1 us.
  Init(
      ConfigFrom("attribution: {simulator: [rlscope_test_sim], backend: [\"librlscope_test_burn*\"]}\n"
                 "correction: {enabled: false}\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  ctl.Costs({{"cpu_sample", 1000}});
  Connect(ctl);
  const std::string burn = "/build/tests/apps/librlscope_test_burn.so", py = "/py/lib/libpython3.11.so.1.0";
  ctl.Push(1, 0, "step").Push(1, 10 * kMs, "native").Pop(1, 40 * kMs);
  ctl.Push(1, 40 * kMs, "python").Pop(1, 70 * kMs).Push(1, 70 * kMs, "sim").Pop(1, 100 * kMs).Pop(1, 100 * kMs);
  for (int ms = 10; ms < 100; ++ms) {
    const int64_t ts = ms * kMs + kMs / 2;
    if (ms == 20)
      ctl.Sample(1, ts, "/v/site-packages/rlscope_ray/librlscope_collector.so", "__main__", 1000);
    else if (ms < 40)
      ctl.Sample(1, ts, burn, "__main__", 1000);
    else if (ms < 70)
      ctl.Sample(1, ts, py, "__main__", 1000);
    else
      ctl.Sample(1, ts, py, "rlscope_test_sim", 1000);
    if (ms >= 70) ctl.Sample(2, ts, "/v/site-packages/numpy/core/_umath.so", "rlscope_test_sim.physics", 1000);
  }
  Send(ctl.Flush(200 * kMs));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& step = exporter_.steps[0];
  ASSERT_NE(step.analysis.Get(), nullptr);
  auto row = [&](const std::string& subtask) -> const Attribution& {
    for (const BreakdownRow& r : step.analysis.Get()->rows) {
      if (r.subtask == subtask) return r.attribution;
    }
    ADD_FAILURE() << "no row " << subtask;
    static const Attribution kNone;
    return kNone;
  };
  auto ns = [](const Attribution& a, CpuCategory c) { return a.ns[static_cast<size_t>(c)]; };
  // native: 29 samples in the library, 1 in the collector, and 30 us of the
  // samples' own cost moved from what they landed in to the profiler.
  const Attribution& native = row("native");
  EXPECT_EQ(native.samples, 30);
  EXPECT_EQ(native.cpu_ns(), 30 * kMs);
  EXPECT_EQ(ns(native, CpuCategory::kBackend), 29 * kMs - 30000);
  EXPECT_EQ(ns(native, CpuCategory::kProfiler), 1 * kMs + 30000);
  EXPECT_EQ(ns(native, CpuCategory::kPython), 0);
  EXPECT_NEAR(native.Share(CpuCategory::kBackend), 1.0, 1e-12);
  EXPECT_EQ(native.idle_ns, 0);  // a sample every ms of 1 ms: the thread ran throughout
  const Attribution& python = row("python");
  EXPECT_EQ(ns(python, CpuCategory::kPython), 30 * kMs - 30000);
  EXPECT_EQ(ns(python, CpuCategory::kSimulator), 0);
  // sim: thread 1 interprets the simulator module, thread 2 runs native code
  // it called (named by no pattern, so the simulator's): 60 ms of CPU in a
  // 30 ms window, on two threads.
  const Attribution& sim = row("sim");
  EXPECT_EQ(sim.samples, 60);
  EXPECT_EQ(ns(sim, CpuCategory::kSimulator), 60 * kMs - 60000);
  EXPECT_EQ(sim.gpu_ns, 0);
  EXPECT_EQ(sim.cuda_api_wall_ns, -1);
  const Attribution& whole = row("step");
  EXPECT_EQ(whole.samples, 120);
  EXPECT_EQ(whole.idle_ns, 10 * kMs);  // [0, 10 ms): no sample covers it
  // The summary and the trace say the same.
  const std::string summary = StepSummaryJson(step);
  EXPECT_THAT(summary, HasSubstr("\"subtask\":\"native\""));
  EXPECT_THAT(summary,
              HasSubstr("\"attribution\":{\"cpu_ms\":30,\"samples\":30,\"python_ms\":0,\"backend_ms\":28.97,"));
  EXPECT_THAT(summary, HasSubstr("\"cpu_samples\":120"));
  const std::string trace = StepTraceJson(step, {{1, 100}});
  EXPECT_THAT(trace, HasSubstr("CPU (sampled)"));
  EXPECT_THAT(trace, HasSubstr("\"name\":\"backend\",\"cat\":\"cpu_samples\""));
  EXPECT_THAT(trace, HasSubstr("\"name\":\"profiler\",\"cat\":\"cpu_samples\""));
  EXPECT_THAT(trace, HasSubstr("\"name\":\"simulator\",\"cat\":\"cpu_samples\""));
  EXPECT_THAT(trace, HasSubstr("\"where\":\"rlscope_test_sim\""));
  // Samples are neither spans nor the process's events.
  EXPECT_EQ(FindSlice(step, 1)->process->events_received(), 8u);  // 4 pushes, 4 pops
  EXPECT_EQ(FindSlice(step, 1)->process->cpu_samples_received(), 120u);
}

TEST_F(AggregatorTest, EveryThreadsCpuTimeItsStackTheCoverageAndWhyTheRecordingThreadWaited) {
  // A controller's step [0, 100 ms) on thread 1: "work" [10, 50), "wait"
  // [50, 100). In "work", thread 7 (a pool thread that records nothing) runs
  // libc's memcpy called by libtorch, a 1 ms sample every ms; thread 9, the
  // collector's flush thread, one sample. The process's CPU time (its flush
  // thread 5's counter) grows by exactly what was sampled. In "wait", thread
  // 1 is looked at off CPU: the GIL three times, a poll, a sleep, a CUDA
  // synchronisation (inside its cudaStreamSynchronize), and 2 ms on the run
  // queue.
  Init(ConfigFrom("correction: {enabled: false}\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 0, "step").Push(1, 10 * kMs, "work").Pop(1, 50 * kMs);
  ctl.Push(1, 50 * kMs, "wait").Pop(1, 100 * kMs).Pop(1, 100 * kMs);
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6", torch = "/v/site-packages/torch/lib/libtorch_cpu.so";
  for (int ms = 10; ms < 50; ++ms)
    ctl.StackSample(7, ms * kMs + kMs / 2, libc, torch + "\n/usr/bin/python3.11", "", 1000);
  ctl.StackSample(9, 30 * kMs + kMs / 4, libc, "", "", 1000, /*profiler=*/true);
  for (auto [at_ms, cpu_ms] : {std::pair{0, 0}, {10, 0}, {50, 41}, {100, 41}, {120, 41}}) {
    ctl.ProcessCpu(5, at_ms * kMs, cpu_ms * kMs);
  }
  for (int at_ms : {60, 70, 80}) ctl.OffCpu(5, at_ms * kMs, 1, OffCpuReason::kGil, 10000);
  ctl.OffCpu(5, 85 * kMs, 1, OffCpuReason::kLock, 5000);  // inside the API call below
  ctl.OffCpu(5, 90 * kMs, 1, OffCpuReason::kPoll, 5000);
  ctl.OffCpu(5, 95 * kMs, 1, OffCpuReason::kCpuWait, 2000);
  ctl.OffCpu(5, 99 * kMs, 1, OffCpuReason::kSleep, 9000);
  // A window's first run-queue reading covers the gap before it: 500 ms of
  // wait over the second up to 52 ms; "wait" (from 50 ms) gets its 2 ms' share.
  ctl.OffCpu(5, 52 * kMs, 1, OffCpuReason::kCpuWait, 500000, 1000000);
  wire::Batch b = ctl.Flush(200 * kMs);
  GpuRecord sync;
  sync.kind = static_cast<uint8_t>(GpuKind::kRuntimeApi);
  sync.start_ns = 81 * kMs;
  sync.end_ns = 86 * kMs;
  sync.tid = 1;
  b.gpu = {sync};
  Send(b);
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& step = exporter_.steps[0];
  ASSERT_NE(step.analysis.Get(), nullptr);
  auto row = [&](const std::string& subtask, int process) -> const Attribution& {
    for (const BreakdownRow& r : step.analysis.Get()->rows) {
      if (r.subtask == subtask && r.process == process) return r.attribution;
    }
    ADD_FAILURE() << "no row " << subtask;
    static const Attribution kNone;
    return kNone;
  };
  const Attribution& work = row("work", 0);
  EXPECT_EQ(work.ns[static_cast<size_t>(CpuCategory::kBackend)], 40 * kMs);  // libc under libtorch
  EXPECT_EQ(work.ns[static_cast<size_t>(CpuCategory::kProfiler)], 1 * kMs);  // the flush thread
  EXPECT_EQ(work.threads, 2);
  EXPECT_EQ(work.process_cpu_ns, 41 * kMs);
  EXPECT_EQ(work.covered_cpu_ns, 41 * kMs);
  EXPECT_DOUBLE_EQ(work.Coverage(), 1.0);
  EXPECT_EQ(work.off_cpu_ns(), 0);
  const Attribution& wait = row("wait", 0);
  auto off = [&](OffCpuReason r) { return wait.off_ns[static_cast<size_t>(r)]; };
  EXPECT_EQ(off(OffCpuReason::kGil), 30 * kMs);
  EXPECT_EQ(off(OffCpuReason::kCudaSync), 5 * kMs);  // a lock wait inside a CUDA API call
  EXPECT_EQ(off(OffCpuReason::kLock), 0);
  EXPECT_EQ(off(OffCpuReason::kPoll), 5 * kMs);
  EXPECT_EQ(off(OffCpuReason::kCpuWait), 2 * kMs + 1 * kMs);
  EXPECT_EQ(off(OffCpuReason::kSleep), 9 * kMs);
  EXPECT_EQ(wait.off_samples, 8);
  EXPECT_EQ(wait.process_cpu_ns, 0);
  EXPECT_EQ(wait.Coverage(), -1);  // no CPU to cover
  // The summary and the trace say the same.
  const std::string summary = StepSummaryJson(step);
  EXPECT_THAT(summary, HasSubstr("\"threads\":2,\"process_cpu_ms\":41,\"coverage\":1,"));
  EXPECT_THAT(summary, HasSubstr("\"off_cpu_ms\":{\"other\":0,\"gil\":30,\"lock\":0,\"poll\":5,\"io\":0,\"sleep\":9,"
                                 "\"cpu_wait\":3,\"cuda_sync\":5},\"off_cpu_looks\":8"));
  const std::string trace = StepTraceJson(step, {{1, 100}});
  EXPECT_THAT(trace, HasSubstr("off CPU (sampled)"));
  EXPECT_THAT(trace, HasSubstr("\"name\":\"off CPU: gil\",\"cat\":\"off_cpu\""));
  EXPECT_THAT(trace, HasSubstr("\"args\":{\"looks\":3,\"off_cpu_ms\":30}"));  // the three GIL looks, one slice
  // The gap's reading in the step's trace: the step's share (52 of its 1000 ms).
  EXPECT_THAT(trace, HasSubstr("\"args\":{\"looks\":1,\"off_cpu_ms\":26}"));
  // The flush thread's looks are not the process's events.
  EXPECT_EQ(FindSlice(step, 1)->process->events_received(), 7u);  // 3 pushes, 3 pops, the API call
}

TEST_F(AggregatorTest, SamplesInsideACudaApiCallAreTheCudaApisWhateverCodeRanThere) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 0, "step").Push(1, 10 * kMs, "update").Pop(1, 50 * kMs).Pop(1, 60 * kMs);
  ctl.Sample(1, 20 * kMs, "/usr/lib/x86_64-linux-gnu/libc.so.6", "__main__", 1000);  // memcpy in cudaMemcpy
  ctl.Sample(1, 30 * kMs, "/py/lib/libpython3.11.so.1.0", "__main__", 1000);
  wire::Batch b = ctl.Flush(200 * kMs);
  GpuRecord api;
  api.kind = static_cast<uint8_t>(GpuKind::kRuntimeApi);
  api.start_ns = 15 * kMs;
  api.end_ns = 25 * kMs;
  api.tid = 1;
  b.gpu = {api};
  Send(b);
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  for (const BreakdownRow& r : exporter_.steps[0].analysis.Get()->rows) {
    if (r.subtask != "update") continue;
    EXPECT_EQ(r.attribution.ns[static_cast<size_t>(CpuCategory::kCudaApi)], 1 * kMs);
    EXPECT_EQ(r.attribution.ns[static_cast<size_t>(CpuCategory::kPython)], 1 * kMs);
    EXPECT_EQ(r.attribution.cuda_api_wall_ns, 10 * kMs);
    return;
  }
  ADD_FAILURE() << "no update row";
}

// A collector whose clock runs `offset` behind the aggregator's and drifts by
// `ppm`: probes with asymmetric paths (out 30 us, back 10-90 us).
std::vector<wire::ProbeSample> Probes(int64_t offset, double ppm, int64_t from, int bursts, int per_burst) {
  std::vector<wire::ProbeSample> out;
  uint64_t jitter = 12345;
  for (int b = 0; b < bursts; ++b) {
    for (int i = 0; i < per_burst; ++i) {
      jitter = jitter * 6364136223846793005ULL + 1442695040888963407ULL;
      const int64_t t1 = from + b * int64_t{1000000000} + i * 1000000;
      auto agg = [&](int64_t c) { return c + offset + static_cast<int64_t>(ppm * 1e-6 * (c - from)); };
      const int64_t out_delay = 30000, back = 10000 + static_cast<int64_t>(jitter >> 40) % 80000;
      const int64_t t2 = agg(t1 + out_delay), t3 = t2 + 2000;
      const int64_t t4 = t1 + out_delay + 2000 + back;  // collector time at receipt
      out.push_back({t1, t2, t3, t4});
    }
  }
  return out;
}

// Always on, a flush brings many short steps' spans at once (each
// thread's together), cut step by step: each cut reads the blocks that can
// hold its step's spans, not every span held (before, cutting grew with
// the square of the steps a flush brings); its answers are those reading
// every span gives (each thread's spans in completion order), and what no
// later step can hold is let go.
TEST(SpanStoreTest, ACutReadsWhatItsStepCanHoldAndAnswersAsReadingAll) {
  std::mt19937 rng(7);
  SpanStore store;
  std::vector<Span> added;  // in completion order
  constexpr int64_t kStepNs = 30000;
  constexpr int kStepsAFlush = 25, kFlushes = 4;
  uint64_t held_read = 0;  // what reading every span held would have read
  for (int flush = 0; flush < kFlushes; ++flush) {
    const int64_t from = flush * kStepsAFlush * kStepNs, to = from + kStepsAFlush * kStepNs;
    for (int64_t tid : {11, 12, 13}) {
      for (int64_t t = from; t < to;) {
        Span s;
        s.tid = tid;
        s.begin_ns = t;
        const uint32_t r = rng() % 40;  // a few zero-length, a few across several steps
        s.end_ns = std::min(to, t + (r == 0 ? 0 : r == 1 ? 100000 : static_cast<int64_t>(rng() % 2000)));
        s.name = static_cast<uint32_t>(added.size());
        added.push_back(s);
        store.Add(s);
        t = s.end_ns + 1 + static_cast<int64_t>(rng() % 300);
      }
    }
    for (int k = 0; k < kStepsAFlush; ++k) {
      const int64_t begin = from + k * kStepNs, end = begin + kStepNs;
      held_read += store.size();
      std::vector<Span> cut;
      store.Cut(begin, end, &cut, 0, false);
      std::map<int64_t, std::vector<uint32_t>> got, want;
      for (const Span& s : cut) got[s.tid].push_back(s.name);
      int64_t earliest = end;
      for (const Span& s : added) {
        if ((s.begin_ns < end && s.end_ns > begin) || (s.begin_ns == s.end_ns && s.begin_ns >= begin && s.begin_ns < end)) {
          want[s.tid].push_back(s.name);
        }
        if (s.end_ns >= end) earliest = std::min(earliest, s.begin_ns);
      }
      ASSERT_EQ(got, want) << "step " << flush * kStepsAFlush + k;
      ASSERT_EQ(store.EarliestBeginEndingFrom(end), earliest) << "step " << flush * kStepsAFlush + k;
      store.DiscardBefore(end);
    }
    EXPECT_EQ(store.size(), 0u) << "flush " << flush;  // past its last step: all let go
  }
  // Two passes to cut (count, place) and one for the release point read
  // less than one pass over every span held: reading all of them, a cut,
  // the release point and the discard each made one (a spans' block is
  // read again for each step one of its spans crosses).
  EXPECT_LT(store.spans_read(), held_read) << store.spans_read() << " of " << held_read;
  std::printf("spans read %llu, held at the cuts %llu, added %zu\n",
              static_cast<unsigned long long>(store.spans_read()), static_cast<unsigned long long>(held_read),
              added.size());
}

// Discards judge the spans held when they are made, as erasing them did:
// a process's discard times follow its clock estimate, which may move
// back, and spans that come after a discard are not judged by it. Random
// adds, cuts anywhere and discards up and down against a store that
// erases.
TEST(SpanStoreTest, DiscardsJudgeOnlyTheSpansHeldWhenMadeAsErasingDid) {
  std::mt19937 rng(3);
  SpanStore store;
  std::vector<Span> erased;  // the old store: in completion order, discards erase
  uint32_t next_name = 0;
  for (int round = 0; round < 400; ++round) {
    const uint32_t op = rng() % 4;
    if (op <= 1) {  // a batch: each thread's spans together, times anywhere in [0, 200000)
      for (int64_t tid : {1, 2}) {
        int64_t t = static_cast<int64_t>(rng() % 200000);
        for (int n = static_cast<int>(rng() % 40); n > 0; --n) {
          Span sp;
          sp.tid = tid;
          sp.begin_ns = t;
          sp.end_ns = t + (rng() % 8 == 0 ? 0 : static_cast<int64_t>(rng() % 5000));
          sp.name = next_name++;
          store.Add(sp);
          erased.push_back(sp);
          t = sp.end_ns + static_cast<int64_t>(rng() % 500);
        }
      }
    } else if (op == 2) {  // a discard, its time up or down
      const int64_t ns = static_cast<int64_t>(rng() % 200000);
      store.DiscardBefore(ns);
      erased.erase(std::remove_if(erased.begin(), erased.end(),
                                  [ns](const Span& sp) {
                                    return sp.end_ns < ns || (sp.end_ns == ns && sp.begin_ns < ns);
                                  }),
                   erased.end());
    } else {  // a cut anywhere
      const int64_t begin = static_cast<int64_t>(rng() % 200000), end = begin + static_cast<int64_t>(rng() % 40000);
      std::vector<Span> cut;
      store.Cut(begin, end, &cut, 0, false);
      std::map<int64_t, std::vector<uint32_t>> got, want;
      for (const Span& sp : cut) got[sp.tid].push_back(sp.name);
      int64_t earliest = end;
      for (const Span& sp : erased) {
        if ((sp.begin_ns < end && sp.end_ns > begin) ||
            (sp.begin_ns == sp.end_ns && sp.begin_ns >= begin && sp.begin_ns < end)) {
          want[sp.tid].push_back(sp.name);
        }
        if (sp.end_ns >= end) earliest = std::min(earliest, sp.begin_ns);
      }
      ASSERT_EQ(got, want) << "round " << round;
      ASSERT_EQ(store.EarliestBeginEndingFrom(end), earliest) << "round " << round;
    }
    ASSERT_GE(store.size(), erased.size());  // forgotten ones may wait behind a kept one
  }
}

// The same for instants and CPU samples (arrival order, each thread's
// together): each step's are those of every record kept, in arrival order,
// and what no later step can hold is let go.
TEST(RecordStoresTest, InstantsAndCpuSamplesOfEachShortStepAsReadingAll) {
  std::mt19937 rng(11);
  RecordStores stores;
  std::vector<std::pair<int64_t, uint32_t>> instants, samples;  // (tid, name) in arrival order, with times
  std::vector<int64_t> instant_ts, sample_ts;
  constexpr int64_t kStepNs = 30000;
  constexpr int kStepsAFlush = 25, kFlushes = 3;
  for (int flush = 0; flush < kFlushes; ++flush) {
    const int64_t from = flush * kStepsAFlush * kStepNs, to = from + kStepsAFlush * kStepNs;
    for (int64_t tid : {21, 22}) {
      for (int64_t t = from; t < to; t += 1 + static_cast<int64_t>(rng() % 1500)) {
        wire::Event e;
        e.ts_ns = t;
        if (rng() % 2 == 0) {
          e.name = static_cast<uint32_t>(instants.size());
          instants.push_back({tid, e.name});
          instant_ts.push_back(t);
          stores.AddInstant(tid, e);
        } else {
          e.name = static_cast<uint32_t>(samples.size());
          samples.push_back({tid, e.name});
          sample_ts.push_back(t);
          stores.AddCpuSample(tid, e);
        }
      }
    }
    for (int k = 0; k < kStepsAFlush; ++k) {
      const int64_t begin = from + k * kStepNs, end = begin + kStepNs;
      std::vector<Instant> got_i;
      std::vector<CpuSample> got_s;
      stores.CutInstants(begin, end, &got_i);
      stores.CutCpuSamples(begin, end, &got_s);
      std::vector<std::pair<int64_t, uint32_t>> gi, gs, wi, ws;
      for (const Instant& i : got_i) gi.push_back({i.tid, i.name});
      for (const CpuSample& c : got_s) gs.push_back({c.tid, c.object});  // the event's name
      for (size_t i = 0; i < instants.size(); ++i) {
        if (instant_ts[i] >= begin && instant_ts[i] < end) wi.push_back(instants[i]);
      }
      for (size_t i = 0; i < samples.size(); ++i) {
        if (sample_ts[i] >= begin && sample_ts[i] < end) ws.push_back(samples[i]);
      }
      ASSERT_EQ(gi, wi) << "step " << flush * kStepsAFlush + k;
      ASSERT_EQ(gs, ws) << "step " << flush * kStepsAFlush + k;
      stores.DiscardBefore(end);
    }
    EXPECT_EQ(stores.buffered(), 0u) << "flush " << flush;  // instants (and GPU records): all let go
  }
}

// The same for instants and CPU samples.
TEST(RecordStoresTest, DiscardsJudgeOnlyTheRecordsHeldWhenMadeAsErasingDid) {
  std::mt19937 rng(5);
  RecordStores stores;
  std::vector<std::pair<int64_t, uint32_t>> instants, samples;  // (ts, name), erased as the old store did
  uint32_t next_name = 0;
  for (int round = 0; round < 400; ++round) {
    const uint32_t op = rng() % 4;
    if (op <= 1) {
      for (int64_t tid : {1, 2}) {
        int64_t t = static_cast<int64_t>(rng() % 200000);
        for (int n = static_cast<int>(rng() % 40); n > 0; --n, t += static_cast<int64_t>(rng() % 3000)) {
          wire::Event e;
          e.ts_ns = t;
          e.name = next_name++;
          if (rng() % 2 == 0) {
            stores.AddInstant(tid, e);
            instants.push_back({t, e.name});
          } else {
            stores.AddCpuSample(tid, e);
            samples.push_back({t, e.name});
          }
        }
      }
    } else if (op == 2) {
      const int64_t ns = static_cast<int64_t>(rng() % 200000);
      stores.DiscardBefore(ns);
      auto before = [ns](const std::pair<int64_t, uint32_t>& r) { return r.first < ns; };
      instants.erase(std::remove_if(instants.begin(), instants.end(), before), instants.end());
      samples.erase(std::remove_if(samples.begin(), samples.end(), before), samples.end());
    } else {
      const int64_t begin = static_cast<int64_t>(rng() % 200000), end = begin + static_cast<int64_t>(rng() % 40000);
      std::vector<Instant> got_i;
      std::vector<CpuSample> got_s;
      stores.CutInstants(begin, end, &got_i);
      stores.CutCpuSamples(begin, end, &got_s);
      std::vector<uint32_t> gi, gs, wi, ws;
      for (const Instant& i : got_i) gi.push_back(i.name);
      for (const CpuSample& c : got_s) gs.push_back(c.object);  // the event's name
      for (const auto& [ts, name] : instants) {
        if (ts >= begin && ts < end) wi.push_back(name);
      }
      for (const auto& [ts, name] : samples) {
        if (ts >= begin && ts < end) ws.push_back(name);
      }
      ASSERT_EQ(gi, wi) << "round " << round;
      ASSERT_EQ(gs, ws) << "round " << round;
    }
  }
}

TEST(ClockFitTest, NoProbesMeansTimesAsTheyAre) {
  ClockFit fit;
  EXPECT_FALSE(fit.estimate().valid());
  EXPECT_EQ(fit.estimate().ToAggregator(123), 123);
  EXPECT_EQ(fit.estimate().FromAggregator(123), 123);
}

TEST(ClockFitTest, OffsetWithinTheStatedBound) {
  for (int64_t offset : {int64_t{-500} * 1000000000, int64_t{0}, int64_t{1234} * 1000000000}) {
    ClockFit fit;
    fit.Add(Probes(offset, 0, 5000000000, 1, 8));
    const ClockEstimate& e = fit.estimate();
    ASSERT_TRUE(e.valid());
    const int64_t error = std::llabs(e.offset_ns - offset);
    EXPECT_LE(error, e.bound_ns) << offset;
    EXPECT_LE(e.bound_ns, 40000);  // half the best round trip of the burst
    EXPECT_EQ(fit.estimate().FromAggregator(fit.estimate().ToAggregator(7000000000)), 7000000000);
  }
}

TEST(ClockFitTest, DriftIsFittedAcrossBursts) {
  ClockFit fit;
  const int64_t offset = 3000000000, from = 1000000000;
  fit.Add(Probes(offset, 50, from, 12, 4));  // 50 ppm over 11 s: 550 us apart at the ends
  const ClockEstimate& e = fit.estimate();
  EXPECT_NEAR(e.drift * 1e6, 50, 5);
  for (int64_t c : {from, from + 5000000000, from + 9000000000}) {
    const int64_t truth = c + offset + static_cast<int64_t>(50e-6 * (c - from));
    EXPECT_LE(std::llabs(fit.estimate().ToAggregator(c) - truth), e.bound_ns) << c;
  }
}

TEST_F(AggregatorTest, ProbesAreAnsweredAndTimesAligned) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  worker.OtherClock();
  Connect(ctl);
  Connect(worker);
  agg_->TakeOutgoing();
  Send(wire::Probe{2, 777}, 5000);
  const std::vector<Outgoing> out = agg_->TakeOutgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, 2u);
  const auto reply = std::get<wire::Control>(wire::Decode(out[0].bytes.data(), out[0].bytes.size()).message);
  EXPECT_EQ(reply.probe_t1, 777);
  EXPECT_EQ(reply.probe_t2, 5000);
  // The worker's clock is 1,000,000 ns behind: its work at 500-700 on its
  // clock is at 1000500-1000700 on the aggregator's, inside the step.
  worker.Push(1, 500, "work").Pop(1, 700);
  wire::Batch b = worker.Flush(900000);
  b.probes = {{1000, 1002000, 1002000, 3000}};  // 1 us each way: offset exactly 1,000,000
  Send(b);
  ctl.Push(1, 1000000, "step").Pop(1, 1001000);
  Send(ctl.Flush(1002000));
  Send(worker.Flush(5000));  // its watermark, on its clock, is past the step end
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  ASSERT_EQ(w->spans.size(), 1u);
  EXPECT_EQ(w->spans[0].begin_ns, 1000500);
  EXPECT_EQ(w->spans[0].end_ns, 1000700);
  EXPECT_FALSE(w->late);
}

// The controller's first probe burst arrives after its step closed but before
// the step is cut (a worker holds it back): the step is where the controller's
// own step range is on the clock as known at the cut, not where it was when
// its edges arrived, so that range is the step, unclipped, and its span and
// the step's duration agree to the nanosecond.
TEST_F(AggregatorTest, AStepIsPlacedWithTheControllersClockAsKnownWhenItIsCut) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  ctl.OtherClock();
  Connect(ctl);
  Connect(worker);
  ctl.Push(1, 1000000, "step").Pop(1, 1004000);
  Send(ctl.Flush(1005000));  // no probes yet: taken as the aggregator's clock
  agg_->Tick(0);
  EXPECT_TRUE(exporter_.StepNumbers().empty());  // the worker has not caught up
  wire::Batch probes = ctl.Flush(1006000);
  probes.probes = {{1000, 1002000, 1002000, 3000}};  // 1 us each way: 1,000,000 ahead
  Send(probes);
  Send(worker.Flush(3000000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& step = exporter_.steps[0];
  EXPECT_EQ(step.begin_ns, 2000000);
  EXPECT_EQ(step.end_ns, 2004000);
  const ProcessSlice* c = FindSlice(step, 1);
  ASSERT_EQ(c->spans.size(), 1u);
  EXPECT_EQ(c->spans[0].begin_ns, 2000000);
  EXPECT_EQ(c->spans[0].end_ns, 2004000);
  EXPECT_FALSE(c->spans[0].clipped_begin);
  EXPECT_FALSE(c->spans[0].clipped_end);
}

// A burst whose best round trip is far above the usual one is kept as
// evidence (counted), not fitted: over 12 s of good bursts, one read 150 ms
// late with a biased offset leaves the drift fit's bound at the good ones'.
TEST(ClockFitTest, ABurstFarSlowerThanUsualIsAnOutlierNotFitted) {
  const int64_t offset = 3000000000, from = 1000000000;
  ClockFit fit;
  std::vector<wire::ProbeSample> samples = Probes(offset, 0, from, 12, 4);
  const int64_t t1 = from + 12 * int64_t{1000000000};
  samples.push_back({t1, t1 + offset + 30000, t1 + offset + 32000, t1 + 150000000});  // answer read 150 ms late
  fit.Add(samples);
  const ClockEstimate& e = fit.estimate();
  EXPECT_EQ(e.outlier_bursts, 1);
  EXPECT_EQ(e.bursts, 12);
  EXPECT_LE(e.bound_ns, 100000);  // not the late burst's 75 ms
  EXPECT_LE(std::llabs(e.ToAggregator(t1) - (t1 + offset)), e.bound_ns);
}

// The probe thread answers a probe that carries the run's key, on real UDP
// sockets, echoing the nonce; a datagram without the key gets nothing
// (counted). Both ends read one clock here, so the sample's own interval
// (offset +- round trip / 2) holds the true offset, 0, however slow the
// machine: a kernel stamp moved wrongly onto CLOCK_MONOTONIC would not.
TEST(ProbeServerTest, AnswersProbesWithTheRunsKeyOnly) {
  ProbeServer server;
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", &error)) << error;
  ASSERT_NE(server.port(), 0);
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(server.port());
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  ASSERT_TRUE(probe::EnableRxTimestamps(fd));
  // Waits (up to a hang guard) for one answer; false when none comes.
  auto answer = [&](probe::Reply* reply, int64_t* rx, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[probe::kPacketBytes + 1];
    const ssize_t n = probe::ReceiveStamped(fd, buf, sizeof(buf), rx, nullptr, nullptr);
    return n >= 0 && probe::Decode(buf, static_cast<size_t>(n), reply);
  };
  char out[probe::kPacketBytes];
  probe::Encode(probe::Request{server.key() ^ 1, 7, 99, MonotonicNs()}, out);
  ASSERT_EQ(send(fd, out, sizeof(out), 0), static_cast<ssize_t>(sizeof(out)));
  const probe::Request req{server.key(), 7, 0xabcdef, MonotonicNs()};
  probe::Encode(req, out);
  ASSERT_EQ(send(fd, out, sizeof(out), 0), static_cast<ssize_t>(sizeof(out)));
  probe::Reply reply;
  int64_t t4 = 0;
  ASSERT_TRUE(answer(&reply, &t4, 60000));
  EXPECT_EQ(reply.nonce, 0xabcdefu);  // the keyless one came first and was not answered
  EXPECT_EQ(reply.t1, req.t1);
  const int64_t rtt = (t4 - req.t1) - (reply.t3 - reply.t2);
  const int64_t offset_x2 = (reply.t2 - req.t1) + (reply.t3 - t4);  // twice the sample's offset
  EXPECT_GE(rtt, 0);
  EXPECT_LE(std::llabs(offset_x2), rtt);  // |offset| <= rtt / 2
  EXPECT_FALSE(answer(&reply, &t4, 0));
  server.Stop();
  EXPECT_EQ(server.answered(), 1u);
  EXPECT_EQ(server.refused(), 1u);
  close(fd);
}

// An outlier that contradicts the fit is evidence it went wrong (a path
// that changed, a clock that stepped): every burst is fitted again, and the
// bound covers it.
TEST(ClockFitTest, AnOutlierThatContradictsTheFitBringsEveryBurstBack) {
  ClockFit fit;
  std::vector<wire::ProbeSample> samples;
  for (int64_t k = 0; k < 5; ++k) {  // offset 1,000,000 +- 1 us, a burst a second
    const int64_t t = 1000000000 + k * 1000000000;
    samples.push_back({t - 1000, t + 1000000, t + 1000000, t + 1000});
  }
  const int64_t t = 6000000000;  // then 400 us off, with a 100 us half round trip
  samples.push_back({t - 100000, t + 1400000, t + 1400000, t + 100000});
  fit.Add(samples);
  const ClockEstimate& e = fit.estimate();
  EXPECT_EQ(e.outlier_bursts, 0);
  EXPECT_EQ(e.bursts, 6);
  EXPECT_GE(e.bound_ns, 300000);  // it covers the late burst's interval, not 1 us
}

// ------------------------------------------------- clocks that hold steps

// A worker on another host whose clock is not known yet: the step waits for
// it (its watermark, on an unaligned clock, says nothing) and the aggregator
// asks it for a probe burst, at most every 200 ms; its burst comes and the
// step is written with its range where it happened.
TEST_F(AggregatorTest, AStepWaitsForAProcessWithNoClockEstimateAndAsksItForABurst) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  worker.OtherClock();
  Connect(ctl);
  Connect(worker);
  // The answer to each hello says whether the aggregator reads the
  // process's own clock (it then probes at its idle rate): the
  // controller's yes, the other host's worker's no.
  std::map<uint64_t, bool> same_clock;
  for (const Outgoing& o : agg_->TakeOutgoing()) {
    if (o.session == 0) continue;  // to every collector
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    same_clock[o.session] = same_clock[o.session] || c.same_clock;
  }
  EXPECT_EQ(same_clock, (std::map<uint64_t, bool>{{1, true}, {2, false}}));
  // The worker's clock is 1,000,000 ahead of the aggregator's: with no
  // estimate, its watermark (read as it is) says it is past the step.
  worker.Push(1, 2000500, "work").Pop(1, 2000700);
  Send(worker.Flush(2005000));
  ctl.Push(1, 1000000, "step").Pop(1, 1001000);
  Send(ctl.Flush(1002000), 10);
  auto probe_requests = [&] {
    std::vector<uint64_t> to;
    for (const Outgoing& o : agg_->TakeOutgoing()) {
      if (std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message).probe) to.push_back(o.session);
    }
    return to;
  };
  agg_->Tick(20);
  EXPECT_TRUE(exporter_.StepNumbers().empty());
  EXPECT_EQ(probe_requests(), (std::vector<uint64_t>{2}));  // the controller is on this clock: not asked
  agg_->Tick(100000000);
  EXPECT_TRUE(probe_requests().empty());  // 100 ms later: not yet again
  agg_->Tick(200000020);
  EXPECT_EQ(probe_requests(), (std::vector<uint64_t>{2}));
  wire::Batch b = worker.Flush(2006000);
  b.probes = {{2001000, 1002000, 1002000, 2003000}};  // 1 us each way: offset exactly -1,000,000
  Send(b, 200000030);
  agg_->Tick(200000040);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& step = exporter_.steps[0];
  EXPECT_EQ(step.reason, "complete");
  EXPECT_TRUE(step.clock_held);
  const ProcessSlice* w = FindSlice(step, 2);
  ASSERT_EQ(w->spans.size(), 1u);
  EXPECT_EQ(w->spans[0].begin_ns, 1000500);
  EXPECT_EQ(w->spans[0].end_ns, 1000700);
  EXPECT_EQ(w->clock_fitness, ClockFitness::kGood);
  EXPECT_EQ(w->process->clock().basis, ClockBasis::kProbes);
  const ProcessSlice* c = FindSlice(step, 1);
  EXPECT_EQ(c->process->clock().basis, ClockBasis::kSameClock);
  EXPECT_EQ(c->process->clock().bound_ns, 0);
  EXPECT_EQ(agg_->RunInfoNow().probe_requests, 2u);
}

// The grace runs out with no estimate from one worker and one too wide from
// another (a single burst read 150 ms late): the step is written, marked
// clock_unaligned, each named with why; never "complete".
TEST_F(AggregatorTest, AStepWhoseClocksNeverComeGoodIsMarkedAndSaysWhich) {
  Config config;
  config.flush.step_grace_ms = 1000;
  Init(config);
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector none(2, "worker", 0, 200);
  FakeCollector wide(3, "worker", 1, 300);
  none.OtherClock("host-b:1");
  wide.OtherClock("host-c:1");
  Connect(ctl);
  Connect(none);
  Connect(wide);
  Send(none.Flush(50000000));  // both flushed past the step (on any clock they could be on)
  wire::Batch b = wide.Flush(200000000);
  b.probes = {{1000, 1002000, 1002000, 150001000}};  // its answer read 150 ms late: bound 75 ms
  Send(b);
  ctl.Push(1, 1000000, "step").Pop(1, 41000000);  // 40 ms: allows 400 us
  Send(ctl.Flush(41000001), 10);
  agg_->Tick(999999999);
  EXPECT_TRUE(exporter_.StepNumbers().empty());
  agg_->Tick(1000000010);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& step = exporter_.steps[0];
  EXPECT_EQ(step.reason, "clock_unaligned");
  EXPECT_EQ(step.clock_allowed_bound_ns, 400000);
  EXPECT_EQ(FindSlice(step, 1)->clock_fitness, ClockFitness::kGood);
  EXPECT_EQ(FindSlice(step, 2)->clock_fitness, ClockFitness::kNone);
  EXPECT_EQ(FindSlice(step, 3)->clock_fitness, ClockFitness::kTooWide);
  const std::string summary = StepSummaryJson(step);
  EXPECT_NE(summary.find("\"reason\":\"clock_unaligned\""), std::string::npos);
  EXPECT_NE(summary.find("(worker, rank 0) / pid 200: no clock estimate"), std::string::npos) << summary;
  EXPECT_NE(summary.find("(worker, rank 1) / pid 300: clock error bound 75000 us exceeds the 400 us this step allows"),
            std::string::npos)
      << summary;
  EXPECT_EQ(agg_->RunInfoNow().steps_clock_unaligned, 1u);
  // They held one step through the grace: the next is not held for them
  // (a path that cannot give the bound costs one grace, not one per step),
  // but still marked; the run's notes say so once each.
  ctl.Push(1, 50000000, "step").Pop(1, 90000000);
  Send(ctl.Flush(90000001), 1000000020);
  Send(none.Flush(100000000), 1000000020);
  Send(wide.Flush(300000000), 1000000020);
  agg_->Tick(1000000030);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(exporter_.steps[1].reason, "clock_unaligned");
  EXPECT_FALSE(exporter_.steps[1].clock_held);
  const RunInfo run = agg_->RunInfoNow();
  EXPECT_EQ(
      std::count_if(run.config_notes.begin(), run.config_notes.end(),
                    [](const std::string& n) { return n.find("later steps do not wait for it") != std::string::npos; }),
      2);
  // One of them gets a good estimate: steps wait for it again.
  wire::Batch good = wide.Flush(300000001);
  good.probes = {{2000000000, 1926001000, 1926001000, 2000002000}};  // offset -73,999,000 +- 1 us
  Send(good, 1000000040);
  EXPECT_FALSE(agg_->processes().at(3)->clock_waived());
  EXPECT_TRUE(agg_->processes().at(2)->clock_waived());
}

// A process whose probes the run turned off is taken as it is, by choice:
// it holds no step, and says why (basis probes_off).
TEST_F(AggregatorTest, AProcessWithProbesOffHoldsNoStepAndSaysWhy) {
  Config config;
  config.clock.probe_interval_ms = 0;
  Init(config);
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  worker.OtherClock();
  Connect(ctl);
  Connect(worker);
  Send(worker.Flush(2000000));
  ctl.Push(1, 1000000, "step").Pop(1, 1001000);
  Send(ctl.Flush(1002000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(exporter_.steps[0].reason, "complete");
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  EXPECT_EQ(w->clock_fitness, ClockFitness::kExempt);
  EXPECT_EQ(w->process->clock().basis, ClockBasis::kProbesOff);
}

// A step written with an estimate (one burst, bound 50 us) that a later,
// tighter fit over 12 s of bursts shows was 500 us off (a constructed clock:
// a real one drifts): run.json says which step, which process, by how much.
TEST_F(AggregatorTest, AStepALaterEstimateShowsWasOffIsListedInTheRun) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  worker.OtherClock();
  Connect(ctl);
  Connect(worker);
  wire::Batch b = worker.Flush(5000);
  b.probes = {{1000, 1026000, 1026000, 101000}};  // offset 975,000 +- 50 us
  Send(b);
  ctl.Push(1, 1000000, "step").Pop(1, 2000000);
  Send(ctl.Flush(2000001));
  Send(worker.Flush(1500000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(exporter_.steps[0].reason, "complete");
  EXPECT_TRUE(agg_->RunInfoNow().clock_revisions.empty());
  wire::Batch later = worker.Flush(1600000);
  for (int64_t k = 1; k <= 12; ++k) {  // offset 475,000 +- 1 us, a burst a second
    const int64_t t = k * 1000000000;
    later.probes.push_back({t - 1000, t + 475000, t + 475000, t + 1000});
  }
  Send(later);
  const RunInfo run = agg_->RunInfoNow();
  ASSERT_EQ(run.clock_revisions.size(), 1u);
  EXPECT_EQ(run.clock_revisions[0].step, 1);
  EXPECT_EQ(run.clock_revisions[0].process, "node0 / proc (worker, rank 0) / pid 200");
  EXPECT_GT(run.clock_revisions[0].off_by_ns, 50000);
  EXPECT_EQ(run.clock_revisions[0].stated_bound_ns, exporter_.steps[0].processes[1].process->clock().bound_ns);
}

// The controller submits tasks 11 and 12 and gets their results; the worker's
// execution of 11 lies between, that of 12 starts before its submit (a clock
// misaligned by 300): one violation of 300.
TEST_F(AggregatorTest, CausalityChecksWorkerExecutionsAgainstTheControllersCalls) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  ctl.Push(1, 1000, "step");
  ctl.Mark(1, 1100, "ray.submit", 0).Mark(1, 1110, "ray.task", 11).Mark(1, 1500, "ray.got", 11);
  ctl.Mark(1, 1600, "ray.submit", 0).Mark(1, 1610, "ray.task", 12).Mark(1, 1900, "ray.got", 12);
  ctl.Pop(1, 2000);
  worker.Push(7, 1200, "update_actor", 11).Pop(7, 1400);
  worker.Push(7, 1300 + 0, "unrelated").Pop(7, 1350);  // no payload: not checked
  worker.Push(7, 1300 + 1, "gen", 99).Pop(7, 1302);    // a task this controller never submitted
  worker.Push(7, 1300 + 3, "x").Pop(7, 1304);
  worker.Push(7, 1300 + 5, "update_actor", 12).Pop(7, 1800);  // starts before its submit at 1600
  Send(ctl.Flush(2500));
  Send(worker.Flush(2500));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const auto& c = exporter_.steps[0].causality;
  EXPECT_EQ(c.checked, 2);
  EXPECT_EQ(c.violations, 1);
  EXPECT_EQ(c.max_violation_ns, 1600 - 1305);
}

// Always on, step 1 chosen up front, no trigger: the others figures only.
Config AlwaysOnWithStep1Chosen() {
  Config config;
  config.always_on.enabled = true;
  config.always_on.warmup_steps = 100;  // no trigger
  config.steps = IntSelection{false, {1}};
  return config;
}

// Always on: the clock causality check (summary.json's) runs for a step
// written in full, not for a figures-only one (no output of it holds it:
// it was 2 % of the aggregator's CPU always on).
TEST_F(AggregatorTest, AlwaysOnChecksCausalityOnlyInStepsWrittenInFull) {
  Init(AlwaysOnWithStep1Chosen());
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  for (int64_t k : {0, 1}) {  // steps 1 and 2, each with a Ray call the worker ran
    const int64_t t = k * 10000;
    ctl.Push(1, t + 1000, "step");
    ctl.Mark(1, t + 1100, "ray.submit", 0).Mark(1, t + 1110, "ray.task", 11 + k);
    ctl.Mark(1, t + 1500, "ray.got", 11 + k).Pop(1, t + 2000);
    worker.Push(7, t + 1200, "update_actor", 11 + k).Pop(7, t + 1400);
  }
  Send(ctl.Flush(30000));
  Send(worker.Flush(30000));
  agg_->Tick(30000);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(exporter_.steps[0].figures_only);
  EXPECT_EQ(exporter_.steps[0].causality.checked, 1);
  EXPECT_TRUE(exporter_.steps[1].figures_only);
  EXPECT_EQ(exporter_.steps[1].causality.checked, 0);
}

// What the profile proves tightens the probes where it is tighter, and only
// then: probes say 975,000 +- 50 us; calls say at least 1,005,000 and at
// most 1,015,000 (the truth, 1,008,000, is in both): 1,010,000 +- 5 us.
// Calls that contradict the probes leave them standing, said.
TEST(ClockFitTest, CausalityBoundsTightenTheProbesWhereTighterAndNeverContradictThem) {
  ClockFit fit;
  fit.Add({{1000, 1026000, 1026000, 101000}});  // offset 975,000 +- 50 us
  const ClockEstimate probes_only = fit.estimate();
  ASSERT_EQ(probes_only.offset_ns, 975000);
  const int64_t truth = 1008000;
  ASSERT_LE(std::llabs(probes_only.offset_ns - truth), probes_only.bound_ns);
  OffsetBound loose;  // wider than the probes: changes nothing
  loose.x_ns = 50000, loose.lo_ns = 900000, loose.hi_ns = 1100000;
  fit.AddBounds({loose});
  EXPECT_FALSE(fit.estimate().causality_tightened);
  EXPECT_EQ(fit.estimate().bound_ns, probes_only.bound_ns);
  OffsetBound after_submit, before_got;  // one side each
  after_submit.x_ns = 60000, after_submit.lo_ns = 1005000;
  before_got.x_ns = 70000, before_got.hi_ns = 1015000;
  fit.AddBounds({after_submit, before_got});
  const ClockEstimate& e = fit.estimate();
  EXPECT_TRUE(e.causality_tightened);
  EXPECT_EQ(e.causality_bounds, 3);
  EXPECT_LT(e.bound_ns, probes_only.bound_ns);
  EXPECT_LE(std::llabs(e.offset_ns - truth), e.bound_ns);
  EXPECT_EQ(e.offset_ns, 1010000);
  EXPECT_EQ(e.bound_ns, 5001);
  ClockFit contradicted;
  contradicted.Add({{1000, 1026000, 1026000, 101000}});
  OffsetBound far;
  far.x_ns = 60000, far.lo_ns = 2000000;
  contradicted.AddBounds({far});
  EXPECT_TRUE(contradicted.estimate().causality_conflict);
  EXPECT_FALSE(contradicted.estimate().causality_tightened);
  EXPECT_EQ(contradicted.estimate().offset_ns, 975000);
}

// A step's Ray calls tighten a worker's clock for the steps after it, not
// for itself: its causality check reads the estimate it was cut with.
TEST_F(AggregatorTest, RayCallsTightenAWorkersClockForTheStepsAfter) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  worker.OtherClock();
  Connect(ctl);
  Connect(worker);
  SendProbesAndAStepWithARayCall(ctl, worker);
  const ClockEstimate& before = agg_->processes().at(2)->clock();  // the probes' alone: the step is not cut yet
  ASSERT_TRUE(before.valid());
  ASSERT_GT(before.bound_ns, 20000);
  const int64_t before_bound_ns = before.bound_ns;
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(FindSlice(exporter_.steps[0], 2)->process->clock().bound_ns, before_bound_ns);
  EXPECT_EQ(exporter_.steps[0].causality.checked, 1);
  const ClockEstimate& after = agg_->processes().at(2)->clock();
  EXPECT_TRUE(after.causality_tightened);
  EXPECT_LE(after.bound_ns, 5001);
  EXPECT_LE(std::llabs(after.offset_ns - 1000000), after.bound_ns);
}

// A controller whose clock has no estimate proves nothing of a worker's
// (its marks are not on the aggregator's clock): the same calls that
// tighten the worker's clock above bound nothing here.
TEST_F(AggregatorTest, RayCallsOfAControllerWithNoClockEstimateBoundNothing) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  ctl.OtherClock("controller-host:1");
  worker.OtherClock();
  Connect(ctl);
  Connect(worker);
  SendProbesAndAStepWithARayCall(ctl, worker);
  agg_->Tick(Config().flush.step_grace_ms * 1000000);  // the controller's own clock holds it through the grace
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(exporter_.steps[0].reason, "clock_unaligned");
  const ClockEstimate& after = agg_->processes().at(2)->clock();
  EXPECT_EQ(after.causality_bounds, 0);
  EXPECT_FALSE(after.causality_tightened);
}

// Windows for workers open a step ahead of a selected step and close after it.
TEST_F(AggregatorTest, CaptureWindowsOpenAStepAheadOfSelectedSteps) {
  Init(ConfigFrom("steps: [3]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  Windows();  // the hello's answer: closed (step 1 is not selected)
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2100));
  EXPECT_THAT(Windows(), IsEmpty());
  ctl.Push(1, 3000, "step");
  Send(ctl.Flush(3100));
  EXPECT_EQ(Windows(), (std::vector<std::pair<int, int64_t>>{{1, 2}}));  // open while step 2 runs
  ctl.Pop(1, 4000).Push(1, 5000, "step");
  Send(ctl.Flush(5100));
  EXPECT_THAT(Windows(), IsEmpty());  // still open through step 3
  ctl.Pop(1, 6000);
  Send(ctl.Flush(6100));
  EXPECT_EQ(Windows(), (std::vector<std::pair<int, int64_t>>{{2, 4}}));  // closed after it
}

// One flush often carries a step's end and the next step's beginning (a
// controller that starts the next step at once): the window ends as the
// later edge says, open while step 2 runs ahead of selected step 3.
TEST_F(AggregatorTest, CaptureWindowFollowsEdgesInOneFlushInTheOrderTheyHappened) {
  Init(ConfigFrom("steps: [3]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  Windows();  // the hello's answer: closed
  ctl.Push(1, 1000, "step");
  Send(ctl.Flush(1100));
  ctl.Pop(1, 2000).Push(1, 2010, "step");  // step 1 ends, step 2 begins: one flush
  Send(ctl.Flush(2100));
  EXPECT_EQ(Windows(), (std::vector<std::pair<int, int64_t>>{{1, 2}}));       // open while step 2 runs
  ctl.Pop(1, 3000).Push(1, 3010, "step").Pop(1, 4000).Push(1, 4010, "step");  // steps 2, 3 end; 3, 4 begin
  Send(ctl.Flush(4100));
  EXPECT_EQ(Windows(), (std::vector<std::pair<int, int64_t>>{{2, 4}}));  // closed once step 3 ended
}

// A selected step that began before its window was sent (here the
// controller's first flush arrives after it began) says so: its workers'
// first moments in it may be missing. The next one, on time, says nothing.
TEST_F(AggregatorTest, AWindowSentAfterASelectedStepBeganIsSaid) {
  Init(ConfigFrom("steps: [2, 4]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 1000, "step").Pop(1, 2000).Push(1, 2010, "step").Pop(1, 3000);
  Send(ctl.Flush(3100), /*now_ns=*/5000);  // the window opens for step 1 (before 2) at 5000
  ctl.Push(1, 6000, "step");
  Send(ctl.Flush(6100), 6100);  // step 3 began: the window for step 4 opens at 6100
  ctl.Pop(1, 7000).Push(1, 7010, "step").Pop(1, 8000);
  Send(ctl.Flush(8100), 8100);
  agg_->Tick(9000);
  ASSERT_EQ(exporter_.steps.size(), 2u);
  EXPECT_EQ(exporter_.steps[0].step, 2);
  EXPECT_EQ(exporter_.steps[0].window_late_ns, 5000 - 2010);
  EXPECT_EQ(exporter_.steps[1].step, 4);
  EXPECT_EQ(exporter_.steps[1].window_late_ns, 0);
}

// A worker's own word on its arming: one whose window reached it 4 ms into
// step 2 (10 ms long) did not record that part of the step, and the summary
// says so (the aggregator sent the window on time: its own view says
// nothing). One that reports no arming (another trigger) gets no claim, nor
// one whose first batch went elsewhere (an aggregator restarted since: the
// edge that armed it is not known here).
TEST_F(AggregatorTest, AWorkerThatArmedAfterTheStepBeganIsSaidWithHowMuchItMissed) {
  Init(ConfigFrom("steps: [2]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector late(2, "worker", 0, 200);
  FakeCollector silent(3, "worker", 1, 300);
  FakeCollector resumed(4, "worker", 2, 400);
  Connect(ctl);
  Connect(late);
  Connect(silent);
  Connect(resumed);
  resumed.Flush(kMs);  // its batch seq 0, sent to the aggregator before this one
  wire::Batch r = resumed.Flush(31 * kMs);
  r.reports_arming = true;
  r.arming = {{30 * kMs + 20000, false}};
  Send(r, 15 * kMs);
  ctl.Push(1, 10 * kMs, "step").Pop(1, 20 * kMs).Push(1, 20 * kMs, "step").Pop(1, 30 * kMs);
  late.Push(7, 25 * kMs, "update_actor").Pop(7, 29 * kMs);
  wire::Batch b = late.Flush(31 * kMs);
  b.reports_arming = true;
  b.arming = {{24 * kMs, true}, {30 * kMs + 20000, false}};  // 4 ms into step 2; closed just after it
  Send(b, 15 * kMs);
  Send(silent.Flush(31 * kMs), 15 * kMs);
  Send(ctl.Flush(31 * kMs), 15 * kMs);
  agg_->Tick(32 * kMs);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const StepProfile& step = exporter_.steps[0];
  EXPECT_EQ(step.window_late_ns, 0);
  std::map<int64_t, int64_t> unarmed;  // by rank
  for (const ProcessSlice& p : step.processes) unarmed[p.process->identity().rank] = p.unarmed_ns;
  EXPECT_EQ(unarmed, (std::map<int64_t, int64_t>{{-1, -1}, {0, 4 * kMs}, {1, -1}, {2, -1}}));
  const std::string summary = StepSummaryJson(step);
  EXPECT_THAT(summary, HasSubstr("\"unarmed_ms\":4,"));
  EXPECT_THAT(summary, HasSubstr("(worker, rank 0) / pid 200: did not record 4.000 ms of this step (40 %)"));
  EXPECT_THAT(summary, Not(HasSubstr("pid 300: did not record")));
}

// armed_steps (run.json) from a process's arming edges: a step is armed
// when it recorded for any of it. Edges are kept to kMaxArmEdges: a span
// before the oldest one kept is not known, not guessed.
TEST(RecordStores, ArmedDuringKnowsOnlyTheSpanItsKeptEdgesCover) {
  RecordStores stores;
  wire::Batch b;
  b.seq = 0;
  b.reports_arming = true;
  const size_t edges = RecordStores::kMaxArmEdges + 10;  // armed in [10k ms, 10k ms + 1 ms) for each k
  for (size_t i = 0; i < edges; ++i) b.arming.push_back({static_cast<int64_t>(i / 2 * 10 + i % 2) * kMs, i % 2 == 0});
  stores.AddProgress(b);
  const int64_t last = static_cast<int64_t>(edges / 2 - 1) * 10 * kMs;  // the last window's begin
  EXPECT_EQ(stores.ArmedDuring(last - 5 * kMs, last + 5 * kMs, 0, INT64_MAX), 1);
  EXPECT_EQ(stores.ArmedDuring(last - 9 * kMs, last - 1 * kMs, 0, INT64_MAX), 0);
  EXPECT_EQ(stores.ArmedDuring(2 * kMs, 8 * kMs, 0, INT64_MAX), -1);  // its edges were forgotten
  EXPECT_EQ(stores.ArmedDuring(0, 5 * kMs, 0, INT64_MAX), -1);
  // Below the bound every span is known.
  RecordStores few;
  wire::Batch f;
  f.seq = 0;
  f.reports_arming = true;
  f.arming = {{10 * kMs, true}, {11 * kMs, false}};
  few.AddProgress(f);
  EXPECT_EQ(few.ArmedDuring(2 * kMs, 8 * kMs, 0, INT64_MAX), 0);
  EXPECT_EQ(few.ArmedDuring(8 * kMs, 12 * kMs, 0, INT64_MAX), 1);
}

// A step's run-queue wait is each reading's wait spread over the time since
// the reading before, where that overlaps the step: the reading after the
// step's end gives the step its share (before, the wait between the step's
// last look and its end went to no step). A reading without its interval (an
// older collector) stands for the time just before it, as before.
TEST(RecordStores, ARunQueueWaitIsSharedByTheStepsItsLookIntervalOverlaps) {
  RecordStores stores, older;  // `older`: from a collector that sends no interval
  auto look = [](RecordStores& into, int64_t ts_us, OffCpuReason reason, int64_t wait_us, int64_t since_us) {
    wire::Event e;
    e.ts_ns = ts_us * 1000;
    e.kind = static_cast<uint8_t>(EventKind::kOffCpuSample);
    e.value = 7;  // tid
    e.category = static_cast<uint32_t>(reason);
    e.domain = static_cast<uint32_t>(wait_us);
    e.name = static_cast<uint32_t>(since_us);
    into.AddOffCpu(e);
  };
  constexpr int64_t kUs = 1000;
  look(stores, 10'000, OffCpuReason::kCpuWait, 4'000, 10'000);  // [0, 10 ms): 4 ms
  look(stores, 20'000, OffCpuReason::kCpuWait, 2'000, 10'000);  // [10, 20 ms): 2 ms
  look(stores, 20'000, OffCpuReason::kSleep, 9'000, 0);         // not a run-queue wait
  look(stores, 40'000, OffCpuReason::kCpuWait, 6'000, 20'000);  // [20, 40 ms): 6 ms
  // Step [5 ms, 25 ms): half of the first look, all of the second, a quarter of the third.
  EXPECT_EQ(stores.RunQueueWaitNs(5'000 * kUs, 25'000 * kUs), (2'000 + 2'000 + 1'500) * kUs);
  // Steps side by side share the waits, nothing lost or counted twice.
  EXPECT_EQ(stores.RunQueueWaitNs(0, 25'000 * kUs) + stores.RunQueueWaitNs(25'000 * kUs, 50'000 * kUs), 12'000 * kUs);
  // A wait a microsecond's rounding above its interval is all of the interval.
  look(stores, 50'000, OffCpuReason::kCpuWait, 10'001, 10'000);
  EXPECT_EQ(stores.RunQueueWaitNs(45'000 * kUs, 60'000 * kUs), 5'000 * kUs);
  // No interval: the time just before the look, clipped at the step's begin; none after its end.
  look(older, 70'000, OffCpuReason::kCpuWait, 3'000, 0);
  EXPECT_EQ(older.RunQueueWaitNs(68'000 * kUs, 75'000 * kUs), 2'000 * kUs);
  EXPECT_EQ(older.RunQueueWaitNs(60'000 * kUs, 69'000 * kUs), 0);
}

// A measured call over 2 us was interrupted (or took a rare slow path):
// one would stand for sample_every calls and move the step's mean cost, and
// the in-place ratio with it, by far more than such calls cost. Left out of
// the costs and counted; the step's samples (CutSamples) leave it out too.
TEST(RecordStores, ACostSampleOverTwoMicrosecondsIsLeftOutAndCounted) {
  RecordStores stores;
  const auto push = static_cast<uint32_t>(EventKind::kRangePush);
  auto sample = [&](int64_t ts_ns, uint64_t ps) {
    wire::Event e;
    e.ts_ns = ts_ns;
    e.kind = static_cast<uint8_t>(EventKind::kCostSample);
    e.category = push;
    e.value = ps;
    stores.AddCostSample(e, /*after_calibration=*/false);
  };
  sample(100, 10'000);     // 10 ns
  sample(200, 3'645'000);  // 3.6 us: a dense step's outlier
  sample(300, 1'900'000);  // 1.9 us: kept
  sample(400, 30'000);
  EXPECT_EQ(stores.interrupted_samples(), 1u);
  EXPECT_EQ(stores.sample_totals()[push].n, 3u);
  EXPECT_DOUBLE_EQ(stores.sample_totals()[push].mean_ps(), (10'000 + 1'900'000 + 30'000) / 3.0);
  std::vector<CostSample> cut;
  stores.CutSamples(0, 1000, &cut);
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[1].ps, 1'900'000u);
}

TEST(RecordStores, TheUsualInPlaceCostIsTheFastChunksMedianNotTheSlowStretches) {
  // 20 chunks of 64 pushes: 12 at the usual speed (10-11 ns), 8 in a slow
  // stretch (19-20 ns). The usual cost is the fast ones' median, whatever
  // the order; the open chunk does not count. A chunk is its samples'
  // mean with each at most 8 times their median: 4 interrupted calls (2 us)
  // in 64 add 4 x 70 ns over 64 in place of 4 x 1.89 us.
  RecordStores stores;
  const auto push = static_cast<uint32_t>(EventKind::kRangePush);
  auto chunk = [&](uint64_t ps) {
    for (uint64_t i = 0; i < RecordStores::kSpeedChunk; ++i) {
      wire::Event e;
      e.ts_ns = 100;
      e.kind = static_cast<uint8_t>(EventKind::kCostSample);
      e.category = push;
      e.value = i % 16 == 0 ? 1'900'000 : ps;  // 4 in 64 interrupted
      stores.AddCostSample(e, /*after_calibration=*/false);
    }
  };
  for (int i = 0; i < 3; ++i) chunk(10'000);
  EXPECT_EQ(stores.UsualCosts()[push], 0.0);  // too few chunks yet
  for (int i = 0; i < 8; ++i) chunk(19'000 + 1'000 * (i % 2));
  for (int i = 0; i < 9; ++i) chunk(10'000 + 1'000 * (i % 2));
  EXPECT_EQ(stores.UsualCosts()[push], 10'000.0 + 4 * 70'000.0 / 64);  // 8 at 10 ns, 4 at 11 ns
  EXPECT_EQ(stores.UsualCosts()[static_cast<size_t>(EventKind::kRangePop)], 0.0);
}

TEST_F(AggregatorTest, SilentWorkerStopsHoldingStepsBack) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);  // then nothing: killed without a bye (os._exit, SIGKILL)
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500), 10 * kMs);
  agg_->Tick(1000 * kMs);
  EXPECT_THAT(exporter_.steps, IsEmpty());
  agg_->Tick(AggregatorStats::kSilentAfterNs + kMs);  // silent past it (3 s): gone, well before the 5 s grace
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(FindSlice(exporter_.steps[0], 2)->late);
}

TEST_F(AggregatorTest, AWorkerGoneWithoutAGoodbyeIsLostOnceAndLaterStepsLeaveItOut) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 1200, "work");  // then killed mid-range: no pop, no bye
  Send(worker.Flush(1500), 10 * kMs);
  ctl.Push(1, 1000, "step").Pop(1, 2000).Push(1, 3000, "step").Pop(1, 4000);
  Send(ctl.Flush(4100), 10 * kMs);
  agg_->Tick(10 * kMs + AggregatorStats::kSilentAfterNs + kMs);  // silent past kSilentAfterNs (3 s)
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  const ProcessSlice* died = FindSlice(exporter_.steps[0], 2);
  ASSERT_NE(died, nullptr);
  EXPECT_TRUE(died->late);
  EXPECT_TRUE(died->lost);
  ASSERT_EQ(died->spans.size(), 1u);
  EXPECT_EQ(died->spans[0].end_ns, 1500);  // where its data ends, not at the step end
  EXPECT_TRUE(died->spans[0].open);
  EXPECT_EQ(FindSlice(exporter_.steps[1], 2), nullptr);  // gone before step 2: not waited for, not shown
  EXPECT_EQ(exporter_.steps[1].reason, "complete");
  const std::vector<std::string> notes = agg_->TakeNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], ::testing::HasSubstr("went silent without a goodbye during step 1: lost"));
}

TEST_F(AggregatorTest, OversizedStringsFromTheWireAreCutAndCounted) {
  FakeCollector ctl(1, "controller", -1, 100);
  wire::Hello h = ctl.Hello();
  h.identity.labels["actor_class"] = std::string(100000, 'x');
  Send(h);
  const std::string big(10000, 'y');
  ctl.Push(1, 100, "step").Push(1, 200, big).Pop(1, 300).Pop(1, 400);
  Send(ctl.Flush(500));
  agg_->Tick(0);
  const ProcessTimeline& p = *agg_->processes().at(1);
  EXPECT_EQ(p.truncated_strings(), 2u);
  EXPECT_LE(p.identity().labels.at("actor_class").size(), ProcessNames::kMaxStringBytes + 32);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const ProcessSlice* slice = FindSlice(exporter_.steps[0], 1);
  ASSERT_NE(slice, nullptr);
  bool found = false;
  for (const Span& span : slice->spans) {
    const std::string name = p.String(span.name);
    if (name.rfind("yyyy", 0) == 0) {
      found = true;
      EXPECT_EQ(name, std::string(ProcessNames::kMaxStringBytes, 'y') + "...[10000 bytes]");
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(AggregatorTest, WatermarkExactlyAtStepEndIsEnough) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  Send(worker.Flush(2000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2000));
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
}

TEST_F(AggregatorTest, WorkerThatSaidByeDoesNotHoldStepsBack) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 1100, "work").Pop(1, 1200);
  Send(worker.Flush(1500));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  agg_->Tick(0);
  EXPECT_THAT(exporter_.steps, IsEmpty());
  Send(worker.Bye());
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(exporter_.steps[0].reason, "complete");
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  EXPECT_FALSE(w->late);
  EXPECT_EQ(SpanNames(w), (std::vector<std::string>{"work"}));
}

TEST_F(AggregatorTest, ConnectedWorkerWithNoBatchesHoldsStepsBack) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);  // hello only: watermark 0
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  agg_->Tick(0);
  EXPECT_THAT(exporter_.steps, IsEmpty());
}

TEST_F(AggregatorTest, GraceExpiryExportsWithLateWorker) {
  Init(ConfigFrom("flush:\n  step_grace_ms: 50\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  Send(worker.Flush(1500));
  const int64_t closed = 1000 * kMs;
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500), closed);
  agg_->Tick(closed + 49 * kMs);
  EXPECT_THAT(exporter_.steps, IsEmpty());
  agg_->Tick(closed + 50 * kMs);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  const StepProfile& p = exporter_.steps[0];
  EXPECT_EQ(p.reason, "grace_timeout");
  EXPECT_TRUE(FindSlice(p, 2)->late);
  EXPECT_FALSE(FindSlice(p, 1)->late);
  // Later data for the written step counts as a late batch, not a new export.
  worker.Push(1, 1800, "too_late").Pop(1, 1900);
  Send(worker.Flush(3000), closed + 60 * kMs);
  agg_->Tick(closed + 60 * kMs);
  EXPECT_EQ(exporter_.steps.size(), 1u);
  EXPECT_EQ(agg_->stats().late_batches, 1u);
}

TEST_F(AggregatorTest, GraceIsCountedFromWhenTheStepClosedNotFromItsTimestamps) {
  Init(ConfigFrom("flush:\n  step_grace_ms: 50\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  Send(worker.Flush(1500));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  ctl.Push(1, 3000, "step").Pop(1, 4000);
  Send(ctl.Flush(4500), 0);
  ctl.Push(1, 5000, "step").Pop(1, 6000);
  Send(ctl.Flush(6500), 30 * kMs);
  agg_->Tick(55 * kMs);  // steps 1, 2 past grace; step 3 not
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  agg_->Tick(80 * kMs);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2, 3}));
  for (const auto& s : exporter_.steps) EXPECT_EQ(s.reason, "grace_timeout");
}

TEST_F(AggregatorTest, FinishExportsRemainingStepsWithReasonFinal) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 1100, "work").Pop(1, 1200);
  Send(worker.Flush(2500));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  ctl.Push(1, 3000, "step").Pop(1, 4000);
  Send(ctl.Flush(4500));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));  // step 2 waits for the worker
  agg_->Finish(1);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2}));
  const StepProfile& p = exporter_.steps[1];
  EXPECT_EQ(p.reason, "final");
  EXPECT_TRUE(FindSlice(p, 2)->late);
  EXPECT_FALSE(FindSlice(p, 1)->late);
  EXPECT_TRUE(exporter_.last_run_final);
  EXPECT_EQ(exporter_.last_run_steps_written, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(exporter_.flushes, 1);
  EXPECT_EQ(exporter_.shutdowns, 1);
}

TEST_F(AggregatorTest, FinishWithEveryoneCaughtUpIsComplete) {
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  agg_->Finish(0);  // no Tick first
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(exporter_.steps[0].reason, "complete");
}

TEST_F(AggregatorTest, RunCompleteOnceControllerAndWorkersSaidBye) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  EXPECT_FALSE(agg_->ControllerDone());
  Send(ctl.Bye());
  EXPECT_TRUE(agg_->ControllerDone());
  EXPECT_FALSE(agg_->RunComplete());
  Send(worker.Bye());
  EXPECT_FALSE(agg_->RunComplete());  // step 1 still pending
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(agg_->RunComplete());
}

TEST_F(AggregatorTest, RunCompleteDoesNotWaitForLiveWorkersOnceStepsAreWritten) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  Send(worker.Flush(3000));  // flushed past the step, still running
  Send(ctl.Bye());
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(agg_->RunComplete());
}

// The run's config (config.h "One config per run"): decided at the
// controller's first Hello, sent to every collector, disagreements noted.
// What a controller's Hello carries: the keys its own config set.
std::string OwnKeysYaml(const std::string& text) {
  const ConfigResult r = ParseConfig(text, "own.yaml");
  return ConfigToYaml(r.config, &r.keys);
}

std::vector<std::pair<uint64_t, std::string>> RunConfigsSent(Aggregator* agg) {
  std::vector<std::pair<uint64_t, std::string>> out;  // (session, run_config) of each that carries one
  for (const Outgoing& o : agg->TakeOutgoing()) {
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    if (!c.run_config.empty()) out.emplace_back(o.session, c.run_config);
  }
  return out;
}

TEST_F(AggregatorTest, UnselectedProcessesAreLeftOutAndDoNotHoldStepsBack) {
  // The run's config (the controller's) selects rank 0: rank 3 is left out
  // whatever it says of itself, and a process's own word counts only before
  // the run's config is decided.
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector idle(2, "worker", 3, 200);
  FakeCollector early(3, "worker", 0, 300);
  wire::Hello unselected = early.Hello();
  unselected.selected = false;  // its own config leaves it out; the run's selects it
  Send(unselected);
  wire::Hello c = ctl.Hello();
  c.config = OwnKeysYaml("ranks: [0]\n");
  Send(c);
  Connect(idle);  // says selected (its own config): the run's says no
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  Send(early.Flush(2500));
  agg_->Tick(0);  // the unselected worker never flushed past the step: no wait
  ASSERT_EQ(exporter_.steps.size(), 1u);
  std::vector<uint64_t> in_step;
  for (const ProcessSlice& slice : exporter_.steps[0].processes) in_step.push_back(slice.process->hello().session);
  EXPECT_THAT(in_step, ::testing::UnorderedElementsAre(1u, 3u));
  EXPECT_EQ(exporter_.steps[0].reason, "complete");
}

TEST_F(AggregatorTest, TheControllersRunKeysGoOverTheAggregatorsAndItSaysWhereTheyDisagree) {
  const ConfigResult own = ParseConfig("steps: [3]\nranks: [1]\nflush: {step_grace_ms: 7}\n", "agg.yaml");
  agg_ = std::make_unique<Aggregator>(own.config, &exporter_, "agg.yaml", own.keys);
  FakeCollector worker(2, "worker", 0, 200), ctl(1, "controller", -1, 100);
  Connect(worker);
  EXPECT_THAT(RunConfigsSent(agg_.get()), IsEmpty());  // not decided before the controller
  wire::Hello c = ctl.Hello();
  c.config = OwnKeysYaml("steps: [2, 4]\ndiscrete: false\n");
  Send(c);
  const std::string run = ConfigToYaml(agg_->config());
  // Everyone connected so far, then the controller's own answer.
  EXPECT_EQ(RunConfigsSent(agg_.get()), (std::vector<std::pair<uint64_t, std::string>>{{0, run}, {1, run}}));
  EXPECT_EQ(agg_->config().steps.ToString(), "[2, 4]");
  EXPECT_EQ(agg_->config().ranks.ToString(), "[1]");  // the controller did not set it: the aggregator's
  EXPECT_EQ(agg_->config().flush.step_grace_ms, 7);   // not a run key: the aggregator's own
  const std::vector<std::string> notes = agg_->TakeNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "the controller's config (pid 100) disagrees with --config agg.yaml "
            "(steps: [3] vs [2, 4]): using the controller's");
  EXPECT_THAT(agg_->TakeNotes(), IsEmpty());
  FakeCollector late(3, "worker", 1, 300);
  Connect(late);  // a newcomer gets it with its window
  EXPECT_EQ(RunConfigsSent(agg_.get()), (std::vector<std::pair<uint64_t, std::string>>{{3, run}}));
  ctl.Push(1, 1000, "step").Pop(1, 2000).Push(1, 3000, "step").Pop(1, 4000);
  Send(ctl.Flush(4500));
  agg_->Tick(1000 * kMs);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  EXPECT_EQ(exporter_.steps[0].step, 2);
}

TEST_F(AggregatorTest, ASecondControllerIsToldItIsAWorkerOnceNoted) {
  FakeCollector ctl(1, "controller", -1, 100), child(2, "controller", -1, 200);
  Connect(ctl);
  agg_->TakeOutgoing();
  Connect(child);
  Connect(child);  // its Hello again (labels): told again, noted once
  std::vector<std::string> roles;
  for (const Outgoing& o : agg_->TakeOutgoing()) {
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    EXPECT_EQ(o.session, 2u);
    roles.push_back(c.role);
  }
  EXPECT_EQ(roles, (std::vector<std::string>{"worker", "worker"}));
  EXPECT_THAT(
      agg_->TakeNotes(),
      ::testing::ElementsAre(
          "pid 200 on node0 said hello as a controller too; pid 100 on node0 is the run's: it records as a worker"));
}

TEST_F(AggregatorTest, AControllerWithoutAConfigGetsTheAggregatorsWithoutANote) {
  Init(ConfigFrom("steps: [3]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);  // Hello.config empty: RLSCOPE_CONFIG was not set
  const auto sent = RunConfigsSent(agg_.get());
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(ParseConfig(sent[1].second, "sent").config.steps.ToString(), "[3]");
  EXPECT_THAT(agg_->TakeNotes(), IsEmpty());
}

TEST_F(AggregatorTest, RepeatedHelloUpdatesIdentityLabels) {
  FakeCollector worker(2, "worker", 0, 200);
  wire::Hello first = worker.Hello();
  first.identity.name = "ray::IDLE";  // a Ray worker's title before it became an actor
  Send(first);
  EXPECT_EQ(ProcessName(*agg_->processes().begin()->second), "ray::IDLE");
  wire::Hello later = worker.Hello();
  later.identity.name = "ray::IDLE";
  later.identity.labels = {
      {"actor_id", "a1"}, {"actor_class", "Learner"}, {"node_ip", "10.0.0.2"}, {"node_id", "0123456789abcdef"}};
  Send(later);
  ASSERT_EQ(agg_->processes().size(), 1u);
  const ProcessTimeline& p = *agg_->processes().begin()->second;
  EXPECT_EQ(p.identity().labels.at("actor_id"), "a1");
  EXPECT_EQ(ProcessLabel(p), "node 10.0.0.2 [01234567] / Learner (rank 0) / pid 200");
  EXPECT_EQ(ProcessName(p), "Learner");  // run.json processes[].name, once the class is known
  std::string json;
  JsonWriter w(&json);
  w.BeginObject();
  WriteIdentity(w, p.View(), true);
  w.EndObject();
  EXPECT_NE(json.find("\"name\":\"Learner\""), std::string::npos) << json;
  EXPECT_EQ(json.find("ray::IDLE"), std::string::npos) << json;
}

TEST_F(AggregatorTest, ExpectedProcessesThatNeverConnectAreNotProfiled) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  wire::Hello h = worker.Hello();
  h.identity.labels = {{"actor_id", "present"}};
  Send(h);
  wire::Expected ex;
  ex.session = 1;
  ex.processes = {{{"actor_id", "present"}, {"class_name", "Learner"}},
                  {{"actor_id", "absent"}, {"class_name", "Critic"}, {"node_id", "n2"}}};
  Send(ex);
  ASSERT_EQ(agg_->NotProfiled().size(), 1u);
  EXPECT_EQ(agg_->NotProfiled()[0].at("actor_id"), "absent");
  EXPECT_THAT(agg_->NotProfiled()[0].at("reason"), ::testing::HasSubstr("no process on its node connected"));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500));
  Send(worker.Flush(2500));
  // It may only be starting: the step waits for it, within the grace.
  const int64_t grace_ns = agg_->config().flush.step_grace_ms * 1000000;
  agg_->Tick(grace_ns - 1);
  EXPECT_TRUE(exporter_.steps.empty());
  agg_->Tick(grace_ns);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  ASSERT_EQ(exporter_.steps[0].not_profiled.size(), 1u);
  EXPECT_EQ(exporter_.steps[0].not_profiled[0].at("class_name"), "Critic");
  // Once: the next step does not wait for it again.
  ctl.Push(1, 3000, "step").Pop(1, 4000);
  Send(ctl.Flush(4500), grace_ns + 1);
  Send(worker.Flush(4500), grace_ns + 1);
  agg_->Tick(grace_ns + 1);
  ASSERT_EQ(exporter_.steps.size(), 2u);
  EXPECT_EQ(exporter_.steps[1].not_profiled.size(), 1u);
  // An Expected list from a process that is not the controller is ignored.
  wire::Expected bogus;
  bogus.session = 2;
  bogus.processes = {{{"actor_id", "x"}}};
  Send(bogus);
  EXPECT_EQ(agg_->NotProfiled().size(), 1u);
  // A process of its node connected: the node has the plugin, the actor's setup failed.
  h.identity.labels = {{"actor_id", "present"}, {"node_id", "n2"}};
  Send(h);
  EXPECT_THAT(agg_->NotProfiled()[0].at("reason"), ::testing::HasSubstr("other processes on its node connected"));
}

TEST_F(AggregatorTest, StepsWaitForAnExpectedProcessThatIsStillStarting) {
  // An actor is up, its collector not yet connected (calibrating, a loaded
  // host): a step that closes meanwhile waits for it and is written with it,
  // not with it listed as "not profiled".
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  wire::Expected ex;
  ex.session = 1;
  ex.processes = {{{"actor_id", "w0"}, {"class_name", "Learner"}, {"node_id", "n1"}}};
  Send(ex, 1000);
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(2500), 2000);
  agg_->Tick(3000);
  EXPECT_TRUE(exporter_.steps.empty());
  wire::Hello h = worker.Hello();
  h.identity.labels = {{"actor_id", "w0"}, {"node_id", "n1"}};
  Send(h, 4000);
  EXPECT_TRUE(agg_->NotProfiled().empty());
  Send(worker.Push(1, 1500, "compute").Pop(1, 1800).Flush(2500), 5000);
  agg_->Tick(5000);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  EXPECT_TRUE(exporter_.steps[0].not_profiled.empty());
  bool worker_in_step = false;
  for (const ProcessSlice& slice : exporter_.steps[0].processes) worker_in_step |= slice.process->identity().pid == 200;
  EXPECT_TRUE(worker_in_step);
}

TEST_F(AggregatorTest, OnlyStepsToBeWrittenWaitForAnExpectedProcessStillStarting) {
  Init(ConfigFrom("steps: [2]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  wire::Expected ex;
  ex.session = 1;
  ex.processes = {{{"actor_id", "late"}, {"class_name", "Learner"}, {"node_id", "n1"}}};
  Send(ex, 0);
  ctl.Push(1, 100, "step").Pop(1, 200);
  ctl.Push(1, 300, "step").Pop(1, 400);
  Send(ctl.Flush(500), 1000);
  agg_->Tick(1000);
  // Step 1 is not written: skipped at once (its release is not held);
  // step 2 waits for the learner.
  EXPECT_EQ(agg_->stats().steps_skipped, 1u);
  EXPECT_TRUE(exporter_.steps.empty());
  agg_->Tick(agg_->config().flush.step_grace_ms * 1000000);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{2}));
  EXPECT_EQ(exporter_.steps[0].not_profiled.size(), 1u);
}

// --------------------------------------------------------------- selection

TEST_F(AggregatorTest, OnlySelectedStepsAreExported) {
  Init(ConfigFrom("steps: [2]\n"));
  FakeCollector ctl(1, "controller", -1, 100);
  Connect(ctl);
  ctl.Push(1, 100, "step").Pop(1, 200);
  ctl.Push(1, 300, "step").Pop(1, 400);
  ctl.Push(1, 500, "step").Pop(1, 600);
  Send(ctl.Flush(1000));
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{2}));
  EXPECT_EQ(exporter_.steps[0].begin_ns, 300);
  EXPECT_EQ(agg_->stats().steps_seen, 3u);
  EXPECT_EQ(agg_->stats().steps_written, 1u);
  EXPECT_EQ(agg_->stats().steps_skipped, 2u);
  EXPECT_EQ(agg_->steps_written(), (std::vector<int64_t>{2}));
}

TEST_F(AggregatorTest, EmittedStepDiscardsWhatEndedBeforeIt) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 1100, "a").Pop(1, 1200);
  worker.Push(1, 1300, "b").Pop(1, 1900);
  worker.Mark(1, 1400, "m");
  worker.Push(1, 2500, "after").Pop(1, 2600);  // belongs to no step yet
  worker.Push(2, 1500, "long").Pop(2, 3500);   // outlives the step
  Send(worker.Flush(5000));
  const ProcessTimeline& wt = *agg_->processes().at(2);
  EXPECT_EQ(wt.buffered_spans(), 5u);  // 4 spans + 1 instant
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  EXPECT_EQ(agg_->processes().at(1)->buffered_spans(), 1u);
  agg_->Tick(0);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(wt.buffered_spans(), 2u);  // "after" and "long"
  EXPECT_EQ(agg_->processes().at(1)->buffered_spans(), 0u);
  // Skipped steps discard too.
  Init(ConfigFrom("steps: [5]\n"));
  FakeCollector c2(1, "controller", -1, 100);
  Connect(c2);
  c2.Push(1, 100, "x").Pop(1, 150);
  c2.Push(1, 100, "step").Pop(1, 200);
  Send(c2.Flush(1000));
  EXPECT_EQ(agg_->processes().at(1)->buffered_spans(), 2u);
  agg_->Tick(0);
  EXPECT_EQ(agg_->stats().steps_skipped, 1u);
  EXPECT_EQ(agg_->processes().at(1)->buffered_spans(), 0u);
}

// ------------------------------------------------------------- merge order

TEST_F(AggregatorTest, SpansSortedByThreadThenBeginThenLongerFirst) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  // Thread 2's events arrive first.
  worker.Push(2, 1100, "t2_outer").Push(2, 1200, "t2_inner").Pop(2, 1300).Pop(2, 1800);
  Send(worker.Flush(1000));
  // Thread 1, in a later batch: "pre" began before the step (clipped to 1000);
  // "outer" and "inner" begin together, the longer one encloses.
  worker.Push(1, 900, "pre")
      .Push(1, 1050, "outer")
      .Push(1, 1050, "inner")
      .Pop(1, 1500)
      .Push(1, 1600, "inner2")
      .Pop(1, 1700)
      .Pop(1, 1900)
      .Pop(1, 1950);
  worker.Mark(1, 1990, "m_late").Mark(2, 1010, "m_early");
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const ProcessSlice* w = FindSlice(exporter_.steps[0], 2);
  EXPECT_EQ(SpanNames(w), (std::vector<std::string>{"pre", "outer", "inner", "inner2", "t2_outer", "t2_inner"}));
  std::vector<int64_t> tids, begins, ends, depths;
  for (const Span& s : w->spans) {
    tids.push_back(s.tid);
    begins.push_back(s.begin_ns);
    ends.push_back(s.end_ns);
    depths.push_back(s.depth);
  }
  EXPECT_EQ(tids, (std::vector<int64_t>{1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(begins, (std::vector<int64_t>{1000, 1050, 1050, 1600, 1100, 1200}));
  EXPECT_EQ(ends, (std::vector<int64_t>{1950, 1900, 1500, 1700, 1800, 1300}));
  EXPECT_EQ(depths, (std::vector<int64_t>{0, 1, 2, 2, 0, 1}));
  EXPECT_TRUE(w->spans[0].clipped_begin);
  EXPECT_EQ(InstantNames(w), (std::vector<std::string>{"m_early", "m_late"}));
}

TEST_F(AggregatorTest, PushPopNestPerDomain) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  // Overlapping, not nested, but in different domains on one thread.
  worker.Push(1, 1100, "d0", std::nullopt, 0).Push(1, 1200, "d5", std::nullopt, 5);
  worker.Pop(1, 1300, 0).Pop(1, 1400, 5);
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  const ProcessSlice* w = FindSlice(exporter_.steps.at(0), 2);
  const Span* d0 = FindSpan(w, "d0");
  const Span* d5 = FindSpan(w, "d5");
  ASSERT_NE(d0, nullptr);
  ASSERT_NE(d5, nullptr);
  EXPECT_EQ(d0->end_ns, 1300);
  EXPECT_EQ(d5->end_ns, 1400);
  EXPECT_EQ(d5->depth, 0);
}

// ----------------------------------------------------- multi-process merge

TEST_F(AggregatorTest, MultiProcessStepHasOneSlicePerProcessAndLabelledTracks) {
  FakeCollector ctl(1, "controller", -1, 100, "head", "driver");
  FakeCollector w1(2, "worker", 1, 200, "node1", "train");
  FakeCollector w0(3, "worker", 0, 300, "node2", "train");
  Connect(w1);
  Connect(ctl);
  Connect(w0);
  w1.Push(200, 1100, "w1_fwd").Pop(200, 1200);
  w1.ThreadName(200, "MainThread");
  Send(w1.Flush(5000));
  w0.Push(300, 1300, "w0_fwd").Pop(300, 1400);
  Send(w0.Flush(5000));
  ctl.Push(100, 1000, "step").Pop(100, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const StepProfile& p = exporter_.steps[0];
  ASSERT_EQ(p.processes.size(), 3u);
  EXPECT_EQ(SpanNames(FindSlice(p, 1)), (std::vector<std::string>{"step"}));
  EXPECT_EQ(SpanNames(FindSlice(p, 2)), (std::vector<std::string>{"w1_fwd"}));
  EXPECT_EQ(SpanNames(FindSlice(p, 3)), (std::vector<std::string>{"w0_fwd"}));

  EXPECT_EQ(ProcessLabel(*agg_->processes().at(2)), "node1 / train (worker, rank 1) / pid 200");
  EXPECT_EQ(ProcessLabel(*agg_->processes().at(1)), "head / driver (controller) / pid 100");

  const std::map<uint64_t, int64_t> trace_pids = {{1, 100}, {2, 200}, {3, 300}};
  const std::string json = StepTraceJson(p, trace_pids);
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"process_name","pid":200,"tid":0,)"
                              R"("args":{"name":"node1 / train (worker, rank 1) / pid 200"}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"process_name","pid":300,"tid":0,)"
                              R"("args":{"name":"node2 / train (worker, rank 0) / pid 300"}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"process_name","pid":100,"tid":0,)"
                              R"("args":{"name":"head / driver (controller) / pid 100"}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"process_sort_index","pid":100,"tid":0,)"
                              R"("args":{"sort_index":0}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"process_sort_index","pid":200,"tid":0,)"
                              R"("args":{"sort_index":2}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"process_sort_index","pid":300,"tid":0,)"
                              R"("args":{"sort_index":1}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"M","name":"thread_name","pid":200,"tid":200,)"
                              R"("args":{"name":"MainThread"}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"X","name":"w1_fwd","cat":"nvtx","pid":200,"tid":200,)"
                              R"("ts":1.100,"dur":0.100,"args":{}})"));
  EXPECT_THAT(json, HasSubstr(R"("otherData":{"step":1,"begin_ns":1000,"end_ns":2000,)"
                              R"("reason":"complete")"));

  const std::string summary = StepSummaryJson(p);
  EXPECT_THAT(summary, HasSubstr(R"("totals":{"processes":3,"spans":3,"instants":0,"dropped":0})"));
  EXPECT_THAT(summary, HasSubstr(R"("late_processes":[])"));
}

TEST_F(AggregatorTest, TraceJsonMarksClippedOpenAndAsyncSpans) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector worker(2, "worker", 0, 200);
  Connect(ctl);
  Connect(worker);
  worker.Push(1, 900, "clipped").Pop(1, 1100);
  worker.Start(1, 1200, "async", 77).End(2, 1300, 77);
  worker.Push(3, 1500, "still_open", 9);
  worker.Mark(1, 1600, "tick");
  Send(worker.Flush(5000));
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const std::string json = StepTraceJson(exporter_.steps[0], {{1, 100}, {2, 200}});
  EXPECT_THAT(json, HasSubstr(R"({"ph":"X","name":"clipped","cat":"nvtx","pid":200,"tid":1,)"
                              R"("ts":1.000,"dur":0.100,"args":{"clipped_begin":true}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"b","name":"async","cat":"nvtx.async","id":77,"pid":200,)"
                              R"("tid":1,"ts":1.200,"args":{"end_tid":2}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"e","name":"async","cat":"nvtx.async","id":77,"pid":200,)"
                              R"("tid":1,"ts":1.300})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"X","name":"still_open","cat":"nvtx","pid":200,"tid":3,)"
                              R"("ts":1.500,"dur":0.500,)"
                              R"("args":{"payload":9,"clipped_end":true,"open":true}})"));
  EXPECT_THAT(json, HasSubstr(R"({"ph":"i","s":"t","name":"tick","cat":"nvtx","pid":200,"tid":1,)"
                              R"("ts":1.600})"));
}

// Lines of trace.json holding a process_name metadata event, as (pid, label).
std::map<int64_t, std::string> ProcessNames(const std::string& trace) {
  std::map<int64_t, std::string> out;
  static const std::regex re(R"re("name":"process_name","pid":(-?[0-9]+),"tid":0,"args":\{"name":"([^"]*)"\})re");
  for (auto it = std::sregex_iterator(trace.begin(), trace.end(), re); it != std::sregex_iterator(); ++it) {
    out[std::stoll((*it)[1].str())] = (*it)[2].str();
  }
  return out;
}

TEST_F(AggregatorTest, StepFilesGiveSamePidOnTwoHostsDistinctTracePids) {
  TempDir dir;
  const auto chrome = MakeStepFiles(dir.path(), {"json"}, 1);
  Aggregator agg(Config(), chrome.get());
  FakeCollector ctl(1, "controller", -1, 100, "head", "driver");
  FakeCollector a(2, "worker", 0, 4242, "hostA", "train");
  FakeCollector b(3, "worker", 1, 4242, "hostB", "train");
  for (const FakeCollector* c : {&ctl, &a, &b}) agg.OnMessage(c->Hello(), 0);
  a.Push(4242, 1100, "a_work").Pop(4242, 1200);
  b.Push(4242, 1300, "b_work").Pop(4242, 1400);
  agg.OnMessage(a.Flush(5000), 0);
  agg.OnMessage(b.Flush(5000), 0);
  ctl.Push(100, 1000, "step").Pop(100, 2000);
  ctl.Push(100, 3000, "step").Pop(100, 4000);
  agg.OnMessage(ctl.Flush(5000), 0);
  agg.Tick(0);
  EXPECT_EQ(agg.steps_written(), (std::vector<int64_t>{1, 2})) << chrome->last_error();
  agg.Finish(0);

  namespace fs = std::filesystem;
  const fs::path root(dir.path());
  EXPECT_TRUE(fs::exists(root / "step_1" / "trace.json"));
  EXPECT_TRUE(fs::exists(root / "step_1" / "summary.json"));
  EXPECT_TRUE(fs::exists(root / "step_2" / "trace.json"));
  EXPECT_TRUE(fs::exists(root / "step_2" / "summary.json"));
  EXPECT_TRUE(fs::exists(root / "run.json"));
  EXPECT_FALSE(fs::exists(root / "run.json.tmp"));
  EXPECT_FALSE(fs::exists(root / "step_1" / "trace.json.tmp"));

  const std::map<int64_t, std::string> names1 = ProcessNames(ReadFile((root / "step_1" / "trace.json").string()));
  ASSERT_EQ(names1.size(), 3u);
  EXPECT_EQ(names1.at(100), "head / driver (controller) / pid 100");
  // Both pid 4242; one keeps it, the other is moved; labels keep the real pid.
  std::vector<std::string> labels_4242;
  for (const auto& [pid, label] : names1) {
    if (pid != 100) {
      EXPECT_EQ(pid % 10000000, 4242) << pid;
      labels_4242.push_back(label);
    }
  }
  EXPECT_THAT(labels_4242, UnorderedElementsAre("hostA / train (worker, rank 0) / pid 4242",
                                                "hostB / train (worker, rank 1) / pid 4242"));
  // The mapping is stable across steps.
  EXPECT_EQ(ProcessNames(ReadFile((root / "step_2" / "trace.json").string())), names1);

  const std::string summary = ReadFile((root / "step_1" / "summary.json").string());
  EXPECT_THAT(summary, HasSubstr(R"("step":1,"begin_ns":1000,"end_ns":2000)"));
  EXPECT_THAT(summary, HasSubstr(R"("reason":"complete")"));
  EXPECT_THAT(summary, HasSubstr(R"("label":"hostB / train (worker, rank 1) / pid 4242")"));

  const std::string run = ReadFile((root / "run.json").string());
  EXPECT_THAT(run, HasSubstr(R"("format":"rlscope-ray run v1")"));
  EXPECT_THAT(run, HasSubstr(R"("final":true)"));
  EXPECT_THAT(run, HasSubstr(R"("steps_written":[1,2])"));
  EXPECT_THAT(run, HasSubstr(R"("steps_seen":2)"));
}

// -------------------------------------------------------------- robustness

TEST_F(AggregatorTest, GarbageFrameIsCountedAndRemembered) {
  const std::string garbage = "\xff\x00not msgpack at all";
  agg_->OnFrame(garbage.data(), garbage.size(), 0);
  EXPECT_EQ(agg_->stats().decode_errors, 1u);
  EXPECT_THAT(agg_->stats().last_decode_error, Not(IsEmpty()));
  EXPECT_EQ(agg_->stats().messages, 0u);
  EXPECT_TRUE(agg_->processes().empty());
  // A good frame afterwards still works, and the last error is kept.
  const std::string last = agg_->stats().last_decode_error;
  FakeCollector ctl(1, "controller", -1, 100);
  const std::string hello = wire::Encode(ctl.Hello());
  agg_->OnFrame(hello.data(), hello.size(), 0);
  EXPECT_EQ(agg_->processes().size(), 1u);
  EXPECT_EQ(agg_->stats().messages, 1u);
  EXPECT_EQ(agg_->stats().decode_errors, 1u);
  EXPECT_EQ(agg_->stats().last_decode_error, last);
  // A truncated frame is a second error.
  agg_->OnFrame(hello.data(), hello.size() / 2, 0);
  EXPECT_EQ(agg_->stats().decode_errors, 2u);
}

TEST_F(AggregatorTest, EncodedFramesRoundTripThroughOnFrame) {
  FakeCollector ctl(1, "controller", -1, 100);
  auto frame = [&](const wire::Message& m) {
    const std::string bytes = wire::Encode(m);
    agg_->OnFrame(bytes.data(), bytes.size(), 0);
  };
  frame(ctl.Hello());
  ctl.Push(1, 1000, "step", 4).Mark(1, 1500, "m").Pop(1, 2000);
  frame(ctl.Flush(2500));
  frame(ctl.Bye());
  agg_->Tick(0);
  EXPECT_EQ(agg_->stats().decode_errors, 0u);
  ASSERT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{4}));
  EXPECT_EQ(InstantNames(FindSlice(exporter_.steps[0], 1)), (std::vector<std::string>{"m"}));
  EXPECT_TRUE(agg_->ControllerDone());
}

TEST_F(AggregatorTest, BatchWithoutHelloIsKeptUnderUnidentifiedProcess) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector stray(9, "worker", 3, 900, "somewhere", "lost");
  Connect(ctl);
  stray.Push(1, 1100, "orphan_work").Pop(1, 1200);
  Send(stray.Flush(5000));  // no hello sent
  ASSERT_EQ(agg_->processes().count(9), 1u);
  const ProcessTimeline& p = *agg_->processes().at(9);
  EXPECT_EQ(p.identity().name, "unidentified");
  EXPECT_EQ(p.identity().host, "unknown");
  EXPECT_EQ(p.identity().role, "worker");
  EXPECT_EQ(p.events_received(), 2u);
  EXPECT_EQ(agg_->stats().events, 2u);
  ctl.Push(1, 1000, "step").Pop(1, 2000);
  Send(ctl.Flush(5000));
  // Its clock is unknown (no hello said where it runs, no probes): the step
  // waits for it through the grace, then says so.
  agg_->Tick(0);
  EXPECT_TRUE(exporter_.steps.empty());
  agg_->Tick(Config().flush.step_grace_ms * 1000000);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  EXPECT_EQ(exporter_.steps[0].reason, "clock_unaligned");
  EXPECT_EQ(exporter_.steps[0].processes.size(), 2u);
  EXPECT_EQ(SpanNames(FindSlice(exporter_.steps[0], 9)), (std::vector<std::string>{"orphan_work"}));
}

TEST_F(AggregatorTest, PopOnEmptyStackCountsUnmatched) {
  FakeCollector worker(2, "worker", 0, 200);
  Connect(worker);
  worker.Pop(1, 100);
  worker.Push(1, 200, "ok").Pop(1, 300).Pop(1, 400);
  worker.Pop(2, 500);
  Send(worker.Flush(1000));
  EXPECT_EQ(agg_->processes().at(2)->unmatched(), 3u);
  EXPECT_EQ(agg_->processes().at(2)->buffered_spans(), 1u);
}

TEST_F(AggregatorTest, EndWithNoStartCountsUnmatchedAtBye) {
  FakeCollector worker(2, "worker", 0, 200);
  Connect(worker);
  worker.End(1, 100, 555);
  Send(worker.Flush(1000));
  EXPECT_EQ(agg_->processes().at(2)->unmatched(), 0u);  // its start may still come
  Send(worker.Bye());
  EXPECT_EQ(agg_->processes().at(2)->unmatched(), 1u);
}

TEST_F(AggregatorTest, ByeForUnknownSessionIsIgnored) {
  wire::Bye bye;
  bye.session = 12345;
  Send(bye);
  EXPECT_TRUE(agg_->processes().empty());
  EXPECT_EQ(agg_->stats().messages, 1u);
}

TEST_F(AggregatorTest, OnlyTheFirstControllerDelimitsSteps) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector ctl2(5, "controller", -1, 500);
  Connect(ctl);
  Connect(ctl2);
  ctl2.Push(1, 100, "step").Pop(1, 200);
  Send(ctl2.Flush(1000));
  EXPECT_EQ(agg_->stats().steps_seen, 0u);
  ctl.Push(1, 300, "step").Pop(1, 400);
  Send(ctl.Flush(1000));
  EXPECT_EQ(agg_->stats().steps_seen, 1u);
}

TEST_F(AggregatorTest, RepeatedHelloKeepsTheTimeline) {
  FakeCollector worker(2, "worker", 0, 200);
  Connect(worker);
  worker.Push(1, 100, "kept").Pop(1, 200);
  Send(worker.Flush(1000));
  Connect(worker);
  ASSERT_EQ(agg_->processes().size(), 1u);
  EXPECT_EQ(agg_->processes().at(2)->buffered_spans(), 1u);
  EXPECT_EQ(agg_->processes().at(2)->watermark_ns(), 1000);
}

// ------------------------------------------------ overhead correction of steps

// Whole steps corrected through the Aggregator (CorrectStep): constructed
// timelines with known costs, every expected time worked out by hand.
class CorrectStepTest : public AggregatorTest {
 protected:
  // One controller thread (tid 1): step 1 over [1000, 5000] holding a range
  // "a" [2000, 3000] and a mark at 4000; push 100, pop 50, mark 10 ns.
  const StepProfile& RunSimpleStep(const std::string& config_yaml = "") {
    Init(ConfigFrom(config_yaml));
    FakeCollector ctl(1, "controller", -1, 100);
    ctl.Costs({{"push", 100}, {"pop", 50}, {"mark", 10}});
    Connect(ctl);
    ctl.Push(1, 1000, "step", 1).Push(1, 2000, "a").Pop(1, 3000).Mark(1, 4000, "m").Pop(1, 5000);
    Send(ctl.Flush(6000));
    Send(ctl.Bye());
    agg_->Tick(0);
    EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
    return exporter_.Step(1);
  }
};

TEST_F(CorrectStepTest, EveryEventAfterTheBeginCostsItsThreadIncludingTheStepsOwnEnd) {
  const StepProfile& step = RunSimpleStep();
  ASSERT_TRUE(step.corrected);
  const ProcessSlice* c = FindSlice(step, 1);
  ASSERT_NE(c, nullptr);
  // The step's own push paid before its begin; after it: a's push (100) and
  // pop (50), the mark (10), and the step's pop (50).
  EXPECT_EQ(c->overhead->total_ns, 210);
  EXPECT_EQ(c->overhead->events, 4u);
  EXPECT_EQ(step.corrected_end_ns, 5000 - 210);
  const Span* a = FindSpan(c, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->begin_ns, 2000 - 100);
  EXPECT_EQ(a->end_ns, 3000 - 150);
  EXPECT_EQ(a->raw_begin_ns, 2000);
  EXPECT_EQ(a->raw_end_ns, 3000);
  ASSERT_EQ(c->instants.size(), 1u);
  EXPECT_EQ(c->instants[0].ts_ns, 4000 - 160);
  const Span* s = FindSpan(c, "step");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->begin_ns, 1000);
  EXPECT_EQ(s->end_ns, 5000 - 210);
}

// The flush thread's CPU in the step (4,000 ns of its running totals
// between the step's begin and end) is not removed but stated: half of it,
// one standard deviation, the only part of this step's uncertainty.
TEST_F(CorrectStepTest, TheFlushThreadsCpuInTheStepIsStatedInTheUncertaintyNotRemoved) {
  Init(ConfigFrom(""));
  FakeCollector ctl(1, "controller", -1, 100);
  ctl.Costs({{"push", 100}, {"pop", 50}, {"mark", 10}});
  Connect(ctl);
  wire::Batch before = ctl.Flush(500);
  before.profiler_cpu_ns = 0;
  Send(before);
  ctl.Push(1, 1000, "step", 1).Push(1, 2000, "a").Pop(1, 3000).Mark(1, 4000, "m").Pop(1, 5000);
  wire::Batch after = ctl.Flush(5500);
  after.profiler_cpu_ns = 5000;  // 500 at the step's begin, 4,500 at its end
  Send(after);
  Send(ctl.Bye());
  agg_->Tick(0);
  const StepProfile& step = exporter_.Step(1);
  const ProcessSlice* c = FindSlice(step, 1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->profiler_cpu_ns, 4000);
  EXPECT_EQ(c->overhead->total_ns, 210);  // as without it
  EXPECT_EQ(step.corrected_end_ns, 5000 - 210);
  EXPECT_EQ(c->overhead->uncertainty_parts.threads_ns, 2000);
  EXPECT_EQ(c->overhead->uncertainty_ns, 2000);
  EXPECT_STREQ(c->overhead->uncertainty_parts.Largest(), "threads");
  EXPECT_EQ(step.correction_uncertainty_ns, 2000);
}

// Where the process runs on its recording threads (over the run so far its
// CPU samples on them, nothing else's, and their run-queue waits read), the
// flush thread took from the step at most those waits: the `threads` part is
// half the smaller of its CPU (4,000 ns) and the waits (1,000 ns in the
// step). Samples on a thread that records nothing (3 % of the sampled CPU),
// the recording thread off CPU for another reason (4 %), or a config under
// which other threads are not sampled or waits not read, leave it half the
// CPU; another thread's burst counts while among the last 256 samples.
class ThreadsPartTest : public CorrectStepTest {
 protected:
  // The step of the test above, after 64 CPU samples on its recording
  // thread 1 (and `others` on thread 7, which records nothing), with a
  // run-queue wait of thread 1 of 1 us spread over [1000, 5000] when `wait`.
  // `blocked_us`: thread 1 seen asleep that long before the step.
  // `early`: samples on thread 7 before thread 1's (a pool's start-up
  // spin), `job`: thread 1's.
  const ProcessSlice& Run(int others, bool wait, uint32_t blocked_us = 0, const std::string& config = "",
                          int early = 0, int job = 64, uint32_t wait_us = 1, int64_t cpu_total = 5000) {
    Init(ConfigFrom(config));
    ctl_.Costs({{"push", 100}, {"pop", 50}, {"mark", 10}});
    Connect(ctl_);
    ctl_.Push(1, 100, "warm-up").Pop(1, 150);
    for (int i = 0; i < early; ++i) ctl_.Sample(7, 160 + i, "libopenblas.so", "", 4000);
    for (int i = 0; i < job; ++i) ctl_.Sample(1, 200 + i, "libpython.so", "work", 4000);
    for (int i = 0; i < others; ++i) ctl_.Sample(7, 460 + i, "libgomp.so", "", 4000);
    if (blocked_us > 0) ctl_.OffCpu(99, 480, 1, OffCpuReason::kSleep, blocked_us);
    wire::Batch before = ctl_.Flush(500);
    before.profiler_cpu_ns = 0;
    Send(before);
    ctl_.Push(1, 1000, "step", 1).Push(1, 2000, "a").Pop(1, 3000).Mark(1, 4000, "m").Pop(1, 5000);
    if (wait) ctl_.OffCpu(99, 5000, 1, OffCpuReason::kCpuWait, wait_us, 4);
    wire::Batch after = ctl_.Flush(5500);
    after.profiler_cpu_ns = cpu_total;  // 4/5 of it in the step
    Send(after);
    Send(ctl_.Bye());
    agg_->Tick(0);
    const ProcessSlice* c = FindSlice(exporter_.Step(1), 1);
    EXPECT_NE(c, nullptr);
    return *c;
  }
  FakeCollector ctl_{1, "controller", -1, 100};
};

TEST_F(ThreadsPartTest, IsHalfTheRunQueueWaitsWhereTheProcessRunsOnItsRecordingThreads) {
  const ProcessSlice& c = Run(0, true);
  EXPECT_TRUE(c.runs_on_recording_threads);
  EXPECT_EQ(c.profiler_cpu_ns, 4000);
  EXPECT_EQ(c.run_queue_wait_ns, 1000);
  EXPECT_TRUE(c.overhead->threads_bounded_by_waits);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 500);
  EXPECT_EQ(c.overhead->total_ns, 210);  // nothing else moves
  EXPECT_EQ(exporter_.Step(1).correction_uncertainty_ns, 500);
}

TEST_F(ThreadsPartTest, IsHalfTheFlushThreadsCpuWhereAThreadThatRecordsNothingRuns) {
  const ProcessSlice& c = Run(2, true);  // 8 ms of 264 sampled: 3 %
  EXPECT_FALSE(c.runs_on_recording_threads);
  EXPECT_FALSE(c.overhead->threads_bounded_by_waits);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 2000);
}

TEST_F(ThreadsPartTest, IsHalfTheFlushThreadsCpuWhereTheWaitsAreNotRead) {
  const ProcessSlice& c = Run(0, false, 0, "cpu: {off_cpu_hz: 0}\n");
  EXPECT_FALSE(c.runs_on_recording_threads);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 2000);
}

TEST_F(ThreadsPartTest, IsHalfTheFlushThreadsCpuWhereOnlyRecordingThreadsAreSampled) {
  const ProcessSlice& c = Run(0, true, 0, "cpu: {threads: recording}\n");
  EXPECT_FALSE(c.runs_on_recording_threads);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 2000);
}

TEST_F(ThreadsPartTest, TheFlushThreadsCpuBoundsItWhereTheWaitsAreLonger) {
  const ProcessSlice& c = Run(0, true, 0, "", 0, 64, 1, 1000);  // 1 us of waits against 0.8 us of its CPU
  EXPECT_EQ(c.run_queue_wait_ns, 1000);
  EXPECT_EQ(c.profiler_cpu_ns, 800);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 400);
  EXPECT_TRUE(c.overhead->threads_bounded_by_waits);
}

TEST_F(ThreadsPartTest, NoWaitReadInTheStepIsNothingStated) {
  const ProcessSlice& c = Run(0, false);  // its one thread never waited for a CPU
  EXPECT_TRUE(c.runs_on_recording_threads);
  EXPECT_EQ(c.run_queue_wait_ns, 0);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 0);
}

TEST_F(ThreadsPartTest, IsHalfTheFlushThreadsCpuWhereItsRecordingThreadWaitsOnSomethingElse) {
  const ProcessSlice& c = Run(0, true, 10000);  // asleep 10 ms against 256 ms on a CPU: 3.8 %
  EXPECT_FALSE(c.runs_on_recording_threads);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 2000);
}

TEST_F(ThreadsPartTest, AnotherThreadsBurstAgesOutOfTheRecentSamples) {
  EXPECT_FALSE(Run(0, true, 0, "", 20, 200).runs_on_recording_threads);  // 20 of the last 220
}

TEST_F(ThreadsPartTest, AnotherThreadsBurstAgedOutLeavesTheBound) {
  const ProcessSlice& c = Run(0, true, 0, "", 20, 256);  // the last 256 all thread 1's
  EXPECT_TRUE(c.runs_on_recording_threads);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 500);
}

// Two processes on one host, both on their recording threads: the
// worker's flush thread (3,200 ns in the step: 4,000 between flushes at 500
// and 5,500) can take the controller's CPU (its thread waited 3,000 ns)
// while its own thread never waits. Per host: F 4,000 (800 + 3,200) against
// W 3,000, each part half its own CPU times 0.75 (per process it would read
// 400 and 0). Then the same with the worker's thread off CPU, asleep, in
// the step: no bound for either, each half its own CPU.
class TwoProcessThreadsPartTest : public CorrectStepTest {
 protected:
  const StepProfile& Run(bool worker_sleeps) {
    Init(ConfigFrom(""));
    FakeCollector ctl(1, "controller", -1, 100), other(5, "controller", -1, 500);
    for (FakeCollector* c : {&ctl, &other}) {
      c->Costs({{"push", 100}, {"pop", 50}});
      Connect(*c);
    }
    ctl.Push(1, 100, "warm-up").Pop(1, 150);
    other.Push(6, 100, "warm-up").Pop(6, 150);
    for (int i = 0; i < 64; ++i) {
      ctl.Sample(1, 200 + i, "libpython.so", "work", 4000);
      other.Sample(6, 200 + i, "libpython.so", "work", 4000);
    }
    for (FakeCollector* c : {&ctl, &other}) {
      wire::Batch b = c->Flush(500);
      b.profiler_cpu_ns = 0;
      Send(b);
    }
    ctl.Push(1, 1000, "step", 1).Pop(1, 5000);
    ctl.OffCpu(99, 5000, 1, OffCpuReason::kCpuWait, 3, 4);  // 3 us over [1000, 5000]
    other.Push(6, 2000, "generate").Pop(6, 4000);
    other.OffCpu(98, 5000, 6, OffCpuReason::kCpuWait, 0, 4);
    if (worker_sleeps) other.OffCpu(98, 4500, 6, OffCpuReason::kSleep, 1);  // 1 us of a 4 us step: 25 %
    wire::Batch b = ctl.Flush(5500);
    b.profiler_cpu_ns = 1000;
    Send(b);
    b = other.Flush(5500);
    b.profiler_cpu_ns = 4000;
    Send(b);
    for (FakeCollector* c : {&ctl, &other}) Send(c->Bye());
    agg_->Tick(0);
    return exporter_.Step(1);
  }
};

TEST_F(TwoProcessThreadsPartTest, TheBoundIsTheHostsWaitsOverItsFlushThreadsCpu) {
  const StepProfile& step = Run(false);
  const ProcessSlice *c = FindSlice(step, 1), *w = FindSlice(step, 5);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(c->run_queue_wait_ns, 3000);
  EXPECT_EQ(w->run_queue_wait_ns, 0);
  EXPECT_TRUE(c->overhead->threads_bounded_by_waits);
  EXPECT_EQ(c->overhead->uncertainty_parts.threads_ns, 300);
  EXPECT_EQ(w->overhead->uncertainty_parts.threads_ns, 1200);
  EXPECT_EQ(step.correction_uncertainty_parts.threads_ns, 1500);  // min(F, W) / 2
}

TEST_F(TwoProcessThreadsPartTest, OneProcessOffItsRecordingThreadsInTheStepLeavesEveryPartHalfTheCpu) {
  const StepProfile& step = Run(true);
  const ProcessSlice *c = FindSlice(step, 1), *w = FindSlice(step, 5);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->runs_on_recording_threads);  // of late: the sleep is 1 us against 256 ms
  EXPECT_FALSE(c->overhead->threads_bounded_by_waits);
  EXPECT_EQ(c->overhead->uncertainty_parts.threads_ns, 400);
  EXPECT_EQ(w->overhead->uncertainty_parts.threads_ns, 1600);
}

TEST_F(ThreadsPartTest, OneInFiftyOnAnotherThreadStillRunsOnItsRecordingThreads) {
  const ProcessSlice& c = Run(1, true);  // 4 ms of 260 sampled: 1.5 %
  EXPECT_TRUE(c.runs_on_recording_threads);
  EXPECT_EQ(c.overhead->uncertainty_parts.threads_ns, 500);
}

TEST_F(CorrectStepTest, ScaleMultipliesEveryCost) {
  const StepProfile& step = RunSimpleStep("correction: {scale: 2.5}\n");
  EXPECT_EQ(step.corrected_end_ns, 5000 - 525);
  EXPECT_EQ(FindSlice(step, 1)->overhead->total_ns, 525);
}

TEST_F(CorrectStepTest, CorrectionOffLeavesEveryTimeAsRecorded) {
  const StepProfile& step = RunSimpleStep("correction: {enabled: false}\n");
  EXPECT_FALSE(step.corrected);
  const ProcessSlice* c = FindSlice(step, 1);
  EXPECT_FALSE(c->overhead.has_value());
  const Span* a = FindSpan(c, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->begin_ns, 2000);
  EXPECT_EQ(a->end_ns, 3000);
  EXPECT_EQ(c->instants[0].ts_ns, 4000);
}

// The controller's sub-task "gen" [2000, 9000] got the result of Ray call 77
// (its "ray.got" mark at 8000). Worker A ran that call as "generate" [3000,
// 7000] with a nested "op"; worker B was busy on its own meanwhile. A's
// overhead in the window (600 ns) delayed the controller's wait; B's did not.
TEST_F(CorrectStepTest, TheControllerWaitsAsMuchLessAsTheCallItAwaitedWhenItsWorkerIsCorrected) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector a(2, "worker", 0, 200);
  FakeCollector b(3, "worker", 1, 300);
  ctl.Costs({{"push", 100}, {"pop", 50}, {"mark", 10}});
  a.Costs({{"push", 200}, {"pop", 100}});
  b.Costs({{"push", 1000}, {"pop", 1000}});
  for (auto* c : {&ctl, &a, &b}) Connect(*c);
  ctl.Push(1, 1000, "step", 1).Push(1, 2000, "gen").Mark(1, 8000, "ray.got", 77).Pop(1, 9000).Pop(1, 10000);
  a.Push(7, 3000, "generate", 77).Push(7, 4000, "op").Pop(7, 5000).Pop(7, 7000);
  b.Push(9, 3000, "own").Pop(9, 8500);
  for (auto* c : {&ctl, &a, &b}) {
    Send(c->Flush(20000));
    Send(c->Bye());
  }
  agg_->Tick(0);
  const StepProfile& step = exporter_.Step(1);
  const ProcessSlice* c = FindSlice(step, 1);
  const ProcessSlice* wa = FindSlice(step, 2);
  const ProcessSlice* wb = FindSlice(step, 3);
  ASSERT_TRUE(c && wa && wb);
  // Workers on their own.
  EXPECT_EQ(wa->overhead->total_ns, 600);
  EXPECT_EQ(wa->overhead->waits_ns, 0);
  const Span* generate = FindSpan(wa, "generate");
  ASSERT_NE(generate, nullptr);
  EXPECT_EQ(generate->begin_ns, 3000 - 200);
  EXPECT_EQ(generate->end_ns, 7000 - 600);
  const Span* own = FindSpan(wb, "own");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->end_ns, 8500 - 2000);
  // The controller: its own 210 ns, and a wait mark of 600 ns at gen's end.
  EXPECT_EQ(c->overhead->waits_ns, 600);
  EXPECT_EQ(c->overhead->total_ns, 810);
  EXPECT_EQ(c->overhead->events, 4u);  // the wait mark is not an event
  const Span* gen = FindSpan(c, "gen");
  ASSERT_NE(gen, nullptr);
  EXPECT_EQ(gen->begin_ns, 2000 - 100);
  EXPECT_EQ(gen->end_ns, 9000 - 760);
  EXPECT_GE(gen->end_ns, generate->end_ns);  // the wait still holds its call
  EXPECT_EQ(step.corrected_end_ns, 10000 - 810);
}

// The same with the controller's submit marks (ray.submit, then ray.task
// naming call 77): the worker, busy on its own earlier in the step ("prep",
// 3000 ns of overhead), then idle, starts the call when the call arrives:
// shifted by what the controller had paid by its submit (110 ns), not by
// its own past. The wait ends where the call's work did (12000). (Every
// event's cost fits in the time since the thread's previous one.)
TEST_F(CorrectStepTest, ACallStartsAfterItsSubmitOnceBothAreCorrected) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector a(2, "worker", 0, 200);
  ctl.Costs({{"push", 100}, {"pop", 50}, {"mark", 10}});
  a.Costs({{"push", 2000}, {"pop", 1000}});
  Connect(ctl);
  Connect(a);
  ctl.Push(1, 1000, "step", 1).Push(1, 2000, "gen").Mark(1, 2500, "ray.submit", 0).Mark(1, 2600, "ray.task", 77);
  ctl.Mark(1, 13000, "ray.got", 77).Pop(1, 14000).Pop(1, 15000);
  a.Push(7, 3100, "prep").Pop(7, 4200);
  a.Push(7, 6500, "generate", 77).Push(7, 9000, "op").Pop(7, 10500).Pop(7, 12000);
  for (auto* c : {&ctl, &a}) {
    Send(c->Flush(20000));
    Send(c->Bye());
  }
  agg_->Tick(0);
  const StepProfile& step = exporter_.Step(1);
  const ProcessSlice* c = FindSlice(step, 1);
  const ProcessSlice* w = FindSlice(step, 2);
  ASSERT_TRUE(c && w);
  const Span* prep = FindSpan(w, "prep");
  const Span* generate = FindSpan(w, "generate");
  const Span* op = FindSpan(w, "op");
  ASSERT_TRUE(prep && generate && op);
  EXPECT_EQ(prep->begin_ns, 3100 - 2000);
  EXPECT_EQ(prep->end_ns, 4200 - 3000);
  EXPECT_EQ(generate->begin_ns, 6500 - 110 - 2000);  // its own push, on top of the submit's shift
  EXPECT_EQ(op->begin_ns, 9000 - 110 - 4000);
  EXPECT_EQ(op->end_ns, 10500 - 110 - 5000);
  EXPECT_EQ(generate->end_ns, 12000 - 110 - 6000);
  EXPECT_EQ(w->overhead->total_ns, 9000);  // what it paid; moving the call costs nothing
  // The controller: 120 ns paid by 12000, so its own correction puts the
  // call's end at 11880; the call really ends at 5890: it waited 5990 more.
  EXPECT_EQ(c->overhead->waits_ns, 5990);
  EXPECT_EQ(c->overhead->total_ns, 230 + 5990);
  const Instant* submit = nullptr;
  const Instant* got = nullptr;
  for (const Instant& i : c->instants) {
    const std::string name = c->process->String(i.name);
    if (name == "ray.submit") submit = &i;
    if (name == "ray.got") got = &i;
  }
  ASSERT_TRUE(submit && got);
  EXPECT_EQ(submit->ts_ns, 2500 - 110);
  EXPECT_EQ(got->ts_ns, 13000 - 120 - 5990 - 10);
  const Span* gen = FindSpan(c, "gen");
  ASSERT_NE(gen, nullptr);
  EXPECT_EQ(gen->end_ns, 14000 - 6170);
  EXPECT_EQ(step.corrected_end_ns, 15000 - 6220);
  // Causal: submit <= the call's begin, its end <= got <= the window's end.
  EXPECT_LE(submit->ts_ns, generate->begin_ns);
  EXPECT_LE(generate->end_ns, got->ts_ns);
  EXPECT_LE(got->ts_ns, gen->end_ns);
  EXPECT_EQ(step.causality.checked, 1);
  EXPECT_EQ(step.causality.violations, 0);
}

// A worker woken by a pipe from the controller (no Ray call, no key links
// them; examples/verl/demo_local.py): "x" with a nested "z" early in the
// step (1200 ns of overhead), idle, then "y" begins 400 ns after the
// controller's "b" that asked for it. Its own past would shift y to before
// b; after the idle gap it carries the controller's shift at its begin (250
// ns: a's push and pop, b's push) instead, plus its own push. A range after
// a gap shorter than its thread's shift, or nested, carries what it paid.
TEST_F(CorrectStepTest, AnIdleWorkerStartsUnlinkedWorkNoEarlierForItsOwnPast) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector a(2, "worker", 0, 200);
  ctl.Costs({{"push", 100}, {"pop", 50}});
  a.Costs({{"push", 300}, {"pop", 300}});
  Connect(ctl);
  Connect(a);
  ctl.Push(1, 1000, "step", 1).Push(1, 2000, "a").Pop(1, 3000).Push(1, 10000, "b").Pop(1, 16000).Pop(1, 20000);
  a.Push(7, 2100, "x").Push(7, 2500, "z").Pop(7, 2900).Pop(7, 3300);
  a.Push(7, 10400, "y").Push(7, 12000, "n").Pop(7, 12500).Pop(7, 14000);
  a.Push(7, 14400, "after").Pop(7, 14800);  // 400 ns after y: no idle gap
  for (auto* c : {&ctl, &a}) {
    Send(c->Flush(30000));
    Send(c->Bye());
  }
  agg_->Tick(0);
  const StepProfile& step = exporter_.Step(1);
  const ProcessSlice* c = FindSlice(step, 1);
  const ProcessSlice* w = FindSlice(step, 2);
  ASSERT_TRUE(c && w);
  const Span* b = FindSpan(c, "b");
  const Span* x = FindSpan(w, "x");
  const Span* y = FindSpan(w, "y");
  const Span* n = FindSpan(w, "n");
  const Span* after = FindSpan(w, "after");
  ASSERT_TRUE(b && x && y && n && after);
  EXPECT_EQ(b->begin_ns, 10000 - 250);
  EXPECT_EQ(x->end_ns, 3300 - 1200);
  EXPECT_EQ(y->begin_ns, 10400 - 250 - 300);  // not 10400 - 1500
  EXPECT_GE(y->begin_ns, b->begin_ns);
  EXPECT_EQ(n->begin_ns, 12000 - 250 - 600);
  EXPECT_EQ(y->end_ns, 14000 - 250 - 1200);
  EXPECT_EQ(after->begin_ns, 14400 - 250 - 1500);  // the shift y left, and its push
  EXPECT_EQ(w->overhead->total_ns, 3000);          // what it paid; moving it costs nothing
}

TEST_F(CorrectStepTest, AWorkerRangeOpenAtTheStepsEndEndsWithTheCorrectedStep) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector w(2, "worker", 0, 200);
  ctl.Costs({{"push", 100}, {"pop", 100}});
  Connect(ctl);
  Connect(w);
  ctl.Push(1, 1000, "step", 1).Push(1, 2000, "x").Pop(1, 3000).Pop(1, 5000);
  w.Push(4, 4000, "still_running");
  Send(ctl.Flush(9000));
  Send(ctl.Bye());
  Send(w.Flush(9000));
  agg_->Tick(0);
  const StepProfile& step = exporter_.Step(1);
  EXPECT_EQ(step.corrected_end_ns, 5000 - 300);
  const Span* open = FindSpan(FindSlice(step, 2), "still_running");
  ASSERT_NE(open, nullptr);
  EXPECT_TRUE(open->clipped_end);
  EXPECT_EQ(open->begin_ns, 4000);  // the worker paid nothing
  EXPECT_EQ(open->end_ns, 5000 - 300);
}

TEST_F(CorrectStepTest, ASecondControllerIsCorrectedAsAWorkerAndDoesNotMoveTheStep) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector child(5, "controller", -1, 500);
  ctl.Costs({{"push", 100}, {"pop", 100}});
  child.Costs({{"push", 1000}, {"pop", 1000}});
  Connect(ctl);
  Connect(child);
  ctl.Push(1, 1000, "step", 1).Pop(1, 5000);
  child.Push(6, 2000, "generate").Pop(6, 3000);
  for (auto* c : {&ctl, &child}) {
    Send(c->Flush(9000));
    Send(c->Bye());
  }
  agg_->Tick(0);
  const StepProfile& step = exporter_.Step(1);
  EXPECT_EQ(step.corrected_end_ns, 5000 - 100);
  const ProcessSlice* ch = FindSlice(step, 5);
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(ch->overhead->total_ns, 2000);
  EXPECT_EQ(FindSpan(ch, "generate")->end_ns, 3000 - 2000);
}

}  // namespace
}  // namespace rlscope

// ------------------------------------------- strangers, replays, restarts

namespace rlscope {
namespace {

// Frames through OnFrame, as the daemon hands them over, from a connection.
class FrameTest : public AggregatorTest {
 protected:
  uint64_t Frame(const wire::Message& m, const std::string& peer, int64_t now_ns = 0) {
    const std::string bytes = wire::Encode(m);
    return agg_->OnFrame(bytes.data(), bytes.size(), now_ns, peer);
  }
  std::vector<wire::Control> ControlsTo(const std::string& peer) {
    std::vector<wire::Control> out;
    for (const Outgoing& o : agg_->TakeOutgoing()) {
      if (o.peer != peer) continue;
      out.push_back(std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message));
    }
    return out;
  }
};

TEST_F(FrameTest, WithASecretAHelloWithoutItIsRefusedToldSoOnceAndNothingElseIsTaken) {
  agg_->SetSecret("run-secret");
  FakeCollector stranger(9, "controller", -1, 900);
  EXPECT_EQ(Frame(stranger.Hello(), "peer-s"), 0u);
  stranger.Push(1, 100, "step").Pop(1, 200);
  EXPECT_EQ(Frame(stranger.Flush(1000), "peer-s"), 0u);
  const auto told = ControlsTo("peer-s");
  ASSERT_EQ(told.size(), 1u);  // "refused", and no request to say hello again
  EXPECT_EQ(told[0].role, wire::kRoleRefused);
  EXPECT_TRUE(agg_->processes().empty());
  EXPECT_EQ(agg_->stats().refused_hellos, 1u);
  EXPECT_EQ(agg_->stats().refused_frames, 2u);
  EXPECT_EQ(agg_->stats().steps_seen, 0u);  // it did not become the controller
}

TEST_F(FrameTest, ASessionsFramesAreTakenOnlyFromTheConnectionItsHelloCameOn) {
  agg_->SetSecret("run-secret");
  FakeCollector ctl(1, "controller", -1, 100);
  wire::Hello hello = ctl.Hello();
  hello.secret = "run-secret";
  EXPECT_EQ(Frame(hello, "peer-c"), 1u);
  agg_->TakeOutgoing();
  // A stranger that learnt the session: its goodbye and batch are refused.
  EXPECT_EQ(Frame(ctl.Bye(), "peer-s"), 0u);
  FakeCollector forged(1, "controller", -1, 100);
  forged.Push(1, 100, "step").Pop(1, 200);
  EXPECT_EQ(Frame(forged.Flush(1000), "peer-s"), 0u);
  EXPECT_FALSE(agg_->ControllerDone());
  EXPECT_EQ(agg_->stats().steps_seen, 0u);
  EXPECT_EQ(agg_->stats().refused_frames, 2u);
  // The real one carries on.
  ctl.Push(1, 100, "step").Pop(1, 200);
  EXPECT_EQ(Frame(ctl.Flush(1000), "peer-c"), 1u);
  EXPECT_EQ(agg_->stats().steps_seen, 1u);
}

TEST_F(FrameTest, AnUnknownSessionIsAskedToSayHelloAndItsReplayIsTakenOnce) {
  FakeCollector w(2, "worker", 0, 200);
  w.Push(1, 100, "a").Pop(1, 150);
  const wire::Batch first = w.Flush(160);
  // This aggregator restarted: it has not seen w's hello.
  EXPECT_EQ(Frame(first, "peer-w"), 0u);
  const auto asked = ControlsTo("peer-w");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_TRUE(asked[0].hello);
  // Hello again, then the replay: a batch of names, the spooled batch, and a
  // repeat of it (already applied: not again).
  EXPECT_EQ(Frame(w.Hello(), "peer-w2"), 2u);
  wire::Batch names;
  names.session = 2;
  names.seq = 50;
  names.strings = first.strings;
  EXPECT_EQ(Frame(names, "peer-w2"), 2u);
  EXPECT_EQ(Frame(first, "peer-w2"), 2u);
  EXPECT_EQ(Frame(first, "peer-w2"), 2u);
  EXPECT_EQ(agg_->stats().duplicate_frames, 1u);
  EXPECT_EQ(agg_->processes().at(2)->events_received(), 2u);
}

TEST_F(FrameTest, AnUpdatedHelloFromASessionNotKnownHereIsAskedForTheReplayFirst) {
  // Through a relay whose connection stayed up, a restarted aggregator hears
  // a collector's later hello (its labels changed) before any batch: binding
  // it then would skip the batches the collector sent the one before.
  FakeCollector w(2, "worker", 0, 200);
  w.Push(1, 100, "a").Pop(1, 150);
  const wire::Batch before = w.Flush(160);  // the previous aggregator had it, not released
  wire::Hello update = w.Hello();
  update.kind = wire::Hello::kUpdate;
  EXPECT_EQ(Frame(update, "peer-w"), 0u);
  const auto asked = ControlsTo("peer-w");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_TRUE(asked[0].hello);
  w.Push(1, 200, "b").Pop(1, 250);
  EXPECT_EQ(Frame(w.Flush(260), "peer-w"), 0u);  // newer batches wait for the replay too
  wire::Hello replay = w.Hello();
  replay.kind = wire::Hello::kReplay;
  EXPECT_EQ(Frame(replay, "peer-w"), 2u);
  EXPECT_EQ(Frame(before, "peer-w"), 2u);
  EXPECT_EQ(agg_->stats().duplicate_frames, 0u);
  EXPECT_EQ(agg_->processes().at(2)->events_received(), 2u);
  // Once known, an updated hello is taken as it comes.
  EXPECT_EQ(Frame(update, "peer-w"), 2u);
}

TEST_F(FrameTest, AnUpdatedHelloOnAnotherConnectionDoesNotTakeTheSessionFromItsReplay) {
  // A worker behind a relay exits while the root is down: its spool file
  // (the whole replay) and the live frames it sent before the exit (a later
  // hello among them) reach a restarted root through the same relay, in
  // whatever order a drain hands them over. Before: the live update took
  // the session, the rest of the file was refused and its batches counted
  // duplicates of the live ones, the live goodbye ended the process; steps
  // were written without most of its events and nothing said so.
  FakeCollector w(2, "worker", 0, 200);
  w.Push(1, 100, "a").Pop(1, 150);
  const wire::Batch first = w.Flush(160);
  w.Push(1, 200, "b").Pop(1, 250);
  const wire::Batch second = w.Flush(260);
  w.Push(1, 300, "c").Pop(1, 350);
  const wire::Batch third = w.Flush(360);
  wire::Hello replay = w.Hello(), update = w.Hello();
  replay.kind = wire::Hello::kReplay;
  update.kind = wire::Hello::kUpdate;
  EXPECT_EQ(Frame(replay, "relay|spool:w"), 2u);
  EXPECT_EQ(Frame(first, "relay|spool:w"), 2u);
  agg_->TakeOutgoing();
  EXPECT_EQ(Frame(update, "relay|w"), 0u);  // the live update, in the middle of the file
  const auto asked = ControlsTo("relay|w");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_TRUE(asked[0].hello);
  EXPECT_EQ(Frame(third, "relay|w"), 0u);
  EXPECT_EQ(Frame(wire::Bye{2, 6, 0}, "relay|w"), 0u);
  EXPECT_EQ(Frame(second, "relay|spool:w"), 2u);
  EXPECT_EQ(Frame(third, "relay|spool:w"), 2u);
  EXPECT_EQ(Frame(wire::Bye{2, 6, 0}, "relay|spool:w"), 2u);
  EXPECT_EQ(agg_->stats().duplicate_frames, 0u);
  EXPECT_EQ(agg_->processes().at(2)->events_received(), 6u);
  EXPECT_EQ(agg_->stats().last_refused, "a frame for a session that said hello on another connection");
  // On the connection it said hello on, an update is taken as it comes.
  EXPECT_EQ(Frame(update, "relay|spool:w"), 2u);
}

TEST_F(FrameTest, AGoodbyeIsAcknowledgedAndAFinishedRunTellsEveryCollectorItIsOver) {
  FakeCollector ctl(1, "controller", -1, 100), w(2, "worker", 0, 200);
  Frame(ctl.Hello(), "peer-c");
  Frame(w.Hello(), "peer-w");
  agg_->TakeOutgoing();
  Frame(wire::Bye{2, 10, 0}, "peer-w");
  auto out = agg_->TakeOutgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, 2u);
  EXPECT_TRUE(std::get<wire::Control>(wire::Decode(out[0].bytes.data(), out[0].bytes.size()).message).bye_ack);
  agg_->Finish(1000);
  out = agg_->TakeOutgoing();
  ASSERT_FALSE(out.empty());
  const auto over = std::get<wire::Control>(wire::Decode(out.back().bytes.data(), out.back().bytes.size()).message);
  EXPECT_EQ(out.back().session, 0u);  // to every collector
  EXPECT_EQ(over.release_ns, wire::kRunOver);
  // After it, a goodbye is still acknowledged; nothing else is taken in.
  Frame(wire::Bye{1, 10, 0}, "peer-c");
  out = agg_->TakeOutgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::get<wire::Control>(wire::Decode(out[0].bytes.data(), out[0].bytes.size()).message).bye_ack);
  EXPECT_FALSE(agg_->ControllerDone());
}

TEST_F(FrameTest, AResumedRunSkipsTheControllersReplayedStepsAndNumbersOnFromItsLast) {
  ResumePoint point;
  point.steps_written = {1, 2};
  point.steps_seen = 2;
  point.last_step = 2;
  point.controller_session = 1;
  point.controller_ns = 450;  // step 2's end on the controller's clock
  agg_->Resume(point);
  FakeCollector ctl(1, "controller", -1, 100);
  Frame(ctl.Hello(), "peer-c");
  // The replay starts inside step 2 (written already); step 3 was in flight.
  ctl.Push(1, 300, "step").Pop(1, 450);
  ctl.Push(1, 500, "step").Pop(1, 600);
  Frame(ctl.Flush(1000), "peer-c");
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{3}));
  EXPECT_EQ(agg_->steps_written(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(exporter_.last_run_steps_written, (std::vector<int64_t>{1, 2, 3}));
}

TEST_F(FrameTest, AResumedRunWaitsForItsProcessesToComeBackUntilTheGraceTime) {
  Config config;
  config.flush.step_grace_ms = 1000;
  Init(config);
  ResumePoint point;
  point.awaited = {2};
  agg_->Resume(point);
  FakeCollector ctl(1, "controller", -1, 100);
  Frame(ctl.Hello(), "peer-c");
  ctl.Push(1, 100, "step").Pop(1, 200);
  Frame(ctl.Flush(1000), "peer-c");
  agg_->Tick(500000000);
  EXPECT_TRUE(exporter_.steps.empty());  // worker 2 has not said hello again
  FakeCollector w(2, "worker", 0, 200);
  Frame(w.Hello(), "peer-w", 600000000);
  Frame(w.Flush(1000), "peer-w", 600000000);
  agg_->Tick(600000000);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1}));
}

// The release_ns each session was sent since the last call.
std::map<uint64_t, int64_t> Releases(Aggregator* agg) {
  std::map<uint64_t, int64_t> out;
  for (const Outgoing& o : agg->TakeOutgoing()) {
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    if (c.release_ns != 0) out[o.session] = c.release_ns;
  }
  return out;
}

// Every release sent since the last call, in order: (session, release_ns).
std::vector<std::pair<uint64_t, int64_t>> ReleaseList(Aggregator* agg) {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (const Outgoing& o : agg->TakeOutgoing()) {
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    if (c.release_ns != 0) out.emplace_back(o.session, c.release_ns);
  }
  return out;
}

// A batch whose clock is fitted: one answered probe, offset 0.
wire::Batch Fitted(wire::Batch b) {
  b.probes.push_back({10, 10, 10, 10});
  return b;
}

TEST_F(FrameTest, AWrittenStepReleasesWhatEachCollectorSpooledBeforeItsEndOrTheRangesAcrossIt) {
  FakeCollector ctl(1, "controller", -1, 100), w(2, "worker", 0, 200), unfitted(3, "worker", 1, 300);
  ctl.OtherClock("host-c:1");
  w.OtherClock("host-w:1");
  unfitted.OtherClock("host-u:1");
  const int64_t grace_ns = Config().flush.step_grace_ms * 1000000;  // the unfitted one holds each step through it
  Frame(ctl.Hello(), "peer-c");
  Frame(w.Hello(), "peer-w");
  Frame(unfitted.Hello(), "peer-u");
  ctl.Push(1, 100, "step").Pop(1, 200);
  w.Push(1, 120, "short").Pop(1, 130).Push(1, 150, "long");  // "long" stays open
  Frame(Fitted(ctl.Flush(1000)), "peer-c");
  Frame(Fitted(w.Flush(1000)), "peer-w");
  Frame(unfitted.Flush(1000), "peer-u");
  agg_->TakeOutgoing();
  agg_->Tick(grace_ns);
  // Each keeps what a replay needs to match every close it holds: the
  // controller its step (it ends at the release point), the worker the
  // message that opened "long"; the one whose clock is not fitted is told
  // nothing (its times cannot be placed yet).
  EXPECT_EQ(Releases(agg_.get()), (std::map<uint64_t, int64_t>{{1, 100}, {2, 150}}));
  // A range open across a whole step holds the spool no further back than
  // the previous step's end.
  ctl.Push(1, 300, "step").Pop(1, 400);
  Frame(ctl.Flush(1000), "peer-c");
  Frame(w.Flush(1000), "peer-w");
  agg_->Tick(2 * grace_ns);
  EXPECT_EQ(Releases(agg_.get()), (std::map<uint64_t, int64_t>{{1, 300}, {2, 200}}));
}

// Always on: only a step chosen up front has a flush barrier; a step
// written in full releases at once; figures-only steps (as skipped ones) at
// most every second, the latest one's points covering
// those before it, run.json first; the run's end puts the last step done
// in run.json.
TEST_F(FrameTest, FiguresOnlyStepsHaveNoBarrierAndReleaseAtMostOnceASecond) {
  Init(AlwaysOnWithStep1Chosen());
  FakeCollector ctl(1, "controller", -1, 100);
  Frame(ctl.Hello(), "peer-c");
  ctl.Push(1, 100, "step").Pop(1, 200).Push(1, 300, "step").Pop(1, 400).Push(1, 500, "step").Pop(1, 600);
  Frame(ctl.Flush(1000), "peer-c");
  // A flush barrier at the end of the step chosen up front only: the others'
  // records come with the collectors' own flushes.
  std::vector<int64_t> barriers;
  for (const Outgoing& o : agg_->TakeOutgoing()) {
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    if (c.flush != 0) barriers.push_back(c.step);
  }
  EXPECT_EQ(barriers, (std::vector<int64_t>{1}));
  const int runs_before = exporter_.runs;
  agg_->Tick(1000);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(agg_->stats().steps_figures_only, 2u);
  // Step 1, in full: released, run.json first; 2 and 3 wait.
  EXPECT_EQ(ReleaseList(agg_.get()), (std::vector<std::pair<uint64_t, int64_t>>{{1, 100}}));
  EXPECT_EQ(exporter_.runs, runs_before + 1);
  EXPECT_EQ(exporter_.last_run_last_step, 1);
  agg_->Tick(1000 + 999999999);  // not a second yet
  EXPECT_TRUE(ReleaseList(agg_.get()).empty());
  agg_->Tick(1000 + 1000000000);
  // One message: step 3's point, which covers step 2's.
  EXPECT_EQ(ReleaseList(agg_.get()), (std::vector<std::pair<uint64_t, int64_t>>{{1, 500}}));
  EXPECT_EQ(exporter_.last_run_last_step, 3);
  // A figures-only step at the run's end: its resume point in the final run.json.
  ctl.Push(1, 700, "step").Pop(1, 800);
  Frame(ctl.Flush(2000), "peer-c");
  agg_->Tick(1000 + 1000000001);
  EXPECT_TRUE(ReleaseList(agg_.get()).empty());
  agg_->Finish(1000 + 1000000002);
  EXPECT_TRUE(exporter_.last_run_final);
  EXPECT_EQ(exporter_.last_run_last_step, 4);
}

// ------------------------------------------------------ the export contract

// The files in `dir` (names only, sorted).
std::vector<std::string> FilesIn(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

size_t ThreadsOfThisProcess() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n;
}

StepProfile EmptyStep(int64_t n) {
  StepProfile step;
  step.step = n;
  step.begin_ns = 1000;
  step.end_ns = 2000;
  step.reason = "complete";
  return step;
}

TEST(StepFilesTest, TheFactoryBuildsOneOutputPerFormatAndRunJsonListsThem) {
  TempDir dir;
  const auto pf = MakeStepFiles(dir.path() + "/a", {"pftrace"}, 1);
  EXPECT_EQ(pf->formats(), (std::vector<std::string>{"pftrace"}));
  ASSERT_TRUE(pf->ExportStep(EmptyStep(1))) << pf->last_error();
  EXPECT_EQ(FilesIn(dir.path() + "/a/step_1"), (std::vector<std::string>{"summary.json", "trace.pftrace"}));
  // db is the run database follower's: listed, no file of the aggregator's.
  const auto jd = MakeStepFiles(dir.path() + "/b", {"db", "json"}, 1);
  EXPECT_EQ(jd->formats(), (std::vector<std::string>{"json", "db"}));
  ASSERT_TRUE(jd->ExportStep(EmptyStep(2))) << jd->last_error();
  EXPECT_EQ(FilesIn(dir.path() + "/b/step_2"), (std::vector<std::string>{"summary.json", "trace.json"}));
  RunInfo run;
  run.output_formats = jd->formats();
  ASSERT_TRUE(jd->ExportRun(run)) << jd->last_error();
  std::ifstream in(dir.path() + "/b/run.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, ::testing::HasSubstr(R"("output_formats":["json","db"])"));
  EXPECT_EQ(FilesIn(dir.path() + "/b"), (std::vector<std::string>{"figures.jsonl", "run.json", "step_2"}));
}

TEST(StepFilesTest, AStepWhoseDetailIsFiguresOnlyGetsNoTrace) {
  TempDir dir;
  const auto files = MakeStepFiles(dir.path(), {"json", "pftrace"}, 1);
  StepProfile figures = EmptyStep(3);
  figures.summary_only = true;  // chosen per step, after it ended
  ASSERT_TRUE(files->ExportStep(figures)) << files->last_error();
  ASSERT_TRUE(files->ExportStep(EmptyStep(4))) << files->last_error();
  EXPECT_EQ(FilesIn(dir.path() + "/step_3"), (std::vector<std::string>{"summary.json"}));
  EXPECT_EQ(FilesIn(dir.path() + "/step_4"), (std::vector<std::string>{"summary.json", "trace.json", "trace.pftrace"}));
}

// Always on: a figures-only step is one line of figures.jsonl and no
// directory; a full step has its directory and its line; a discrete
// capture has no line of its own (its step has one).
TEST(StepFilesTest, AFiguresOnlyStepIsALineOfFiguresJsonlAndNoDirectory) {
  TempDir dir;
  const auto files = MakeStepFiles(dir.path(), {"json", "pftrace"}, 1);
  StepProfile quiet = EmptyStep(3);
  quiet.figures_only = true;
  StepProfile slow = EmptyStep(4);
  slow.trigger = "slow: made so";
  StepProfile capture = EmptyStep(4);
  capture.capture = "gen";
  ASSERT_TRUE(files->ExportStep(quiet)) << files->last_error();
  ASSERT_TRUE(files->ExportStep(capture)) << files->last_error();
  ASSERT_TRUE(files->ExportStep(slow)) << files->last_error();
  ASSERT_TRUE(files->ExportRun(RunInfo{})) << files->last_error();  // the lines go out with it
  EXPECT_EQ(FilesIn(dir.path()), (std::vector<std::string>{"figures.jsonl", "run.json", "step_4"}));
  std::ifstream in(dir.path() + "/figures.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], ::testing::HasSubstr(R"({"step":3,"detail":"figures","trigger":null,)"));
  EXPECT_THAT(lines[1], ::testing::HasSubstr(R"({"step":4,"detail":"full","trigger":"slow: made so",)"));
}

// figures.jsonl's lines wait for the next run record (the aggregator's
// release point: a step's line is on disk before the resume point that says
// the step is done), then go out whole, in order, after ending a line a
// crash cut short; what is pending at shutdown goes out then.
TEST(StepFilesTest, FiguresLinesGoOutWithTheNextRunRecordAfterATornOne) {
  TempDir dir;
  const std::string path = dir.path() + "/figures.jsonl";
  std::ofstream(path) << R"({"step":1,"torn)";
  const auto files = MakeStepFiles(dir.path(), {"json"}, 1);
  auto read = [&] {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  for (int64_t n : {2, 3}) {
    StepProfile step = EmptyStep(n);
    step.figures_only = true;
    ASSERT_TRUE(files->ExportStep(step)) << files->last_error();
  }
  EXPECT_EQ(read(), R"({"step":1,"torn)");  // not yet
  ASSERT_TRUE(files->ExportRun(RunInfo{})) << files->last_error();
  std::vector<std::string> lines;
  std::istringstream text(read());
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << read();
  EXPECT_EQ(lines[0], R"({"step":1,"torn)");
  EXPECT_THAT(lines[1], ::testing::StartsWith(R"({"step":2,"detail":"figures",)"));
  EXPECT_THAT(lines[2], ::testing::StartsWith(R"({"step":3,"detail":"figures",)"));
  StepProfile last = EmptyStep(4);
  last.figures_only = true;
  ASSERT_TRUE(files->ExportStep(last)) << files->last_error();
  files->Shutdown();
  EXPECT_THAT(read(), ::testing::EndsWith("\n"));
  EXPECT_THAT(read(), ::testing::HasSubstr(R"({"step":4,"detail":"figures",)"));
}

// A line that cannot be written fails the run record that would say its
// step is done, which is then not written: nothing is released over it.
TEST(StepFilesTest, AFiguresLineThatCannotBeWrittenFailsTheRunRecord) {
  TempDir dir;
  const auto files = MakeStepFiles(dir.path(), {"json"}, 1);
  ASSERT_EQ(mkdir((dir.path() + "/figures.jsonl").c_str(), 0700), 0);  // no file can go there
  StepProfile step = EmptyStep(2);
  step.figures_only = true;
  ASSERT_TRUE(files->ExportStep(step)) << files->last_error();  // pending
  EXPECT_FALSE(files->ExportRun(RunInfo{}));
  EXPECT_THAT(files->last_error(), ::testing::HasSubstr("figures.jsonl"));
  EXPECT_EQ(FilesIn(dir.path()), (std::vector<std::string>{"figures.jsonl"}));  // no run.json
}

TEST(StepFilesTest, ShutdownStopsTheTraceWritersThreadAndLaterExportsFail) {
  TempDir dir;
  const size_t before = ThreadsOfThisProcess();
  const auto files = MakeStepFiles(dir.path(), {"json"}, 2);  // trace.json written on a thread of its own
  ASSERT_TRUE(files->ExportStep(EmptyStep(1))) << files->last_error();
  ASSERT_TRUE(files->ExportStep(EmptyStep(2))) << files->last_error();
  EXPECT_EQ(ThreadsOfThisProcess(), before + 1);  // one writer, kept from step to step
  files->Shutdown();
  EXPECT_EQ(ThreadsOfThisProcess(), before);
  EXPECT_FALSE(files->ExportStep(EmptyStep(3)));
  EXPECT_THAT(files->last_error(), ::testing::HasSubstr("shut down"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/step_3"));
  // Both steps written on the thread are whole, and the same as without it.
  const auto one = MakeStepFiles(dir.path() + "/one", {"json"}, 1);
  ASSERT_TRUE(one->ExportStep(EmptyStep(2)));
  std::ifstream a(dir.path() + "/step_2/trace.json"), b(dir.path() + "/one/step_2/trace.json");
  const std::string ta((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string tb((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(ta.empty());
  EXPECT_EQ(ta, tb);
}

TEST(StepFilesTest, AnOutputThatFailsLeavesNoFileAndSaysWhich) {
  class Failing : public Output {
   public:
    const char* step_file() const override { return "broken.bin"; }
    void WriteStep(const StepProfile&, const TracePids&, OutputSink* out) override {
      out->Write("half");
      throw std::runtime_error("cannot encode");
    }
  };
  TempDir dir;
  std::vector<std::unique_ptr<Output>> outputs;
  outputs.push_back(std::make_unique<Failing>());
  StepFiles files(dir.path(), std::move(outputs), {"broken"});
  EXPECT_FALSE(files.ExportStep(EmptyStep(1)));
  EXPECT_THAT(files.last_error(), ::testing::HasSubstr("broken.bin: cannot encode"));
  EXPECT_TRUE(FilesIn(dir.path() + "/step_1").empty());  // neither the file nor its temporary
}

// Always on: a resumed run keeps the steps its triggers picked and its
// count of figures-only steps (run.json says them for the whole run).
TEST(RunJsonTest, AResumedRunKeepsItsTriggeredStepsAndFiguresOnlyCount) {
  TempDir dir;
  const auto files = MakeStepFiles(dir.path(), {"json"}, 1);
  RunInfo run;
  run.steps_written = {3, 8};
  run.steps_triggered = {8};
  run.steps_figures_only = 10;
  run.last_step = 12;
  ASSERT_TRUE(files->ExportRun(run)) << files->last_error();
  std::string error;
  const std::optional<ResumePoint> p = ReadResumePoint(dir.path(), &error);
  ASSERT_TRUE(p.has_value()) << error;
  EXPECT_EQ(p->steps_triggered, (std::vector<int64_t>{8}));
  EXPECT_EQ(p->steps_figures_only, 10u);
  Aggregator again(Config(), files.get());
  again.Resume(*p);
  const RunInfo now = again.RunInfoNow();
  EXPECT_EQ(now.steps_written, (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(now.steps_triggered, (std::vector<int64_t>{8}));
  EXPECT_EQ(now.steps_figures_only, 10u);
}

// run.json both ways (run_json.h): what an unfinished run wrote there is
// what an aggregator started again on the directory takes up.
TEST(RunJsonTest, WhatAnUnfinishedRunWroteIsTheResumePointReadBack) {
  TempDir dir;
  const auto chrome = MakeStepFiles(dir.path(), {"json"}, 1);
  Aggregator agg(Config(), chrome.get());
  agg.SetSecret("s");
  FakeCollector ctl(1, "controller", -1, 100), w(2, "worker", 0, 200);
  agg.OnMessage(ctl.Hello(), 0);
  agg.OnMessage(w.Hello(), 0);
  ctl.Push(1, 100, "step").Pop(1, 200);
  w.Push(1, 120, "work").Pop(1, 130);
  agg.OnMessage(Fitted(ctl.Flush(1000)), 0);
  agg.OnMessage(Fitted(w.Flush(1000)), 0);
  agg.Tick(0);
  std::string error;
  const std::optional<ResumePoint> p = ReadResumePoint(dir.path(), &error);
  ASSERT_TRUE(p.has_value()) << error;
  EXPECT_EQ(p->steps_written, (std::vector<int64_t>{1}));
  EXPECT_EQ(p->steps_seen, 1u);
  EXPECT_EQ(p->last_step, 1);
  EXPECT_EQ(p->controller_session, 1u);
  EXPECT_EQ(p->controller_ns, 200);
  EXPECT_EQ(p->resumes, 0);
  EXPECT_EQ(p->run_key, RunKey("s"));
  EXPECT_EQ(p->run_id.size(), 16u);
  EXPECT_EQ(p->run_id, agg.run_id());
  EXPECT_EQ(p->awaited, (std::vector<uint64_t>{1, 2}));  // selected, no goodbye yet
  EXPECT_EQ(p->released, (std::map<uint64_t, int64_t>{{1, 100}, {2, 200}}));
  // Every run its own id; one taken up keeps the id it had.
  Aggregator again(Config(), chrome.get());
  EXPECT_NE(again.run_id(), agg.run_id());
  again.Resume(*p);
  EXPECT_EQ(again.run_id(), agg.run_id());
  agg.Finish(0);
  EXPECT_FALSE(ReadResumePoint(dir.path(), &error).has_value());  // final: nothing to take up
  EXPECT_TRUE(error.empty());
  std::ofstream(dir.path() + "/run.json") << "{not json";
  EXPECT_FALSE(ReadResumePoint(dir.path(), &error).has_value());
  EXPECT_FALSE(error.empty());
}

// Fails ExportStep for one step number.
class FailingExporter : public RecordingExporter {
 public:
  bool ExportStep(const StepProfile& step) noexcept override {
    if (step.step == fail_step) return false;
    return RecordingExporter::ExportStep(step);
  }
  int64_t fail_step = -1;
};

TEST(WriteErrorTest, AStepThatCannotBeWrittenStopsTheRunThereResumable) {
  FailingExporter exporter;
  exporter.fail_step = 2;
  Aggregator agg(Config(), &exporter);
  FakeCollector ctl(1, "controller", -1, 100);
  agg.OnMessage(ctl.Hello(), 0);
  ctl.Push(1, 100, "step").Pop(1, 200).Push(1, 300, "step").Pop(1, 400).Push(1, 500, "step").Pop(1, 600);
  agg.OnMessage(Fitted(ctl.Flush(1000)), 0);
  agg.TakeOutgoing();
  agg.Tick(0);
  // Step 1 written; step 2 failed; step 3 neither written nor released.
  EXPECT_EQ(exporter.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_EQ(agg.steps_written(), (std::vector<int64_t>{1}));
  EXPECT_EQ(agg.stats().write_errors, 1u);
  EXPECT_EQ(Releases(&agg), (std::map<uint64_t, int64_t>{{1, 100}}));
  agg.Tick(0);
  agg.Finish(0);
  EXPECT_EQ(exporter.StepNumbers(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(Releases(&agg).empty());
  EXPECT_FALSE(exporter.last_run_final);  // an aggregator started again takes it up
  EXPECT_EQ(exporter.last_run_steps_written, (std::vector<int64_t>{1}));
}

TEST_F(FrameTest, AResumedRunsControllerRoleIsOnlyForItsControllerBeforeTheRestart) {
  ResumePoint point;
  point.last_step = 2;
  point.controller_session = 1;
  point.controller_ns = 450;
  agg_->Resume(point);
  // A child that inherited the controller role says hello first.
  FakeCollector child(5, "controller", -1, 500), ctl(1, "controller", -1, 100);
  Frame(child.Hello(), "peer-x");
  std::string role;
  for (const Outgoing& o : agg_->TakeOutgoing()) {
    const auto c = std::get<wire::Control>(wire::Decode(o.bytes.data(), o.bytes.size()).message);
    if (o.session == 5 && !c.role.empty()) role = c.role;
  }
  EXPECT_EQ(role, names::kWorker);
  child.Push(1, 500, "step").Pop(1, 600);
  Frame(child.Flush(1000), "peer-x");
  EXPECT_EQ(agg_->stats().steps_seen, 0u);
  Frame(ctl.Hello(), "peer-c");
  ctl.Push(1, 500, "step").Pop(1, 600);
  Frame(ctl.Flush(1000), "peer-c");
  agg_->Tick(0);
  EXPECT_EQ(exporter_.StepNumbers(), (std::vector<int64_t>{3}));
}

TEST(ReleasePointTest, NoRangeAcrossItBeganBeforeIt) {
  FakeCollector w(2, "worker", 0, 200);
  w.Push(1, 50, "b").Push(1, 100, "a").Pop(1, 150).Pop(1, 300);  // b [50, 300] holds a [100, 150]
  w.Push(2, 120, "c").Pop(2, 250);                               // c [120, 250] on another thread
  w.Push(3, 10, "d").Pop(3, 20);
  ProcessTimeline p(w.Hello());
  p.Add(w.Flush(1000), nullptr);
  EXPECT_EQ(p.ReleasePoint(200), 50);  // c ends after 200: back to 120; b ends after 120: back to 50
  EXPECT_EQ(p.ReleasePoint(30), 30);   // d [10, 20] ended before it; the others began after
  EXPECT_EQ(p.ReleasePoint(400), 400);
  FakeCollector open(3, "worker", 0, 300);
  open.Push(1, 70, "still-open");
  ProcessTimeline q(open.Hello());
  q.Add(open.Flush(1000), nullptr);
  EXPECT_EQ(q.ReleasePoint(200), 70);
}

// DecodeAhead hands each frame's decoding in order, holds no more than
// kAhead undelivered, and stops without waiting for frames never taken.
TEST(DecodeAheadTest, FramesComeInOrderAndALeftOverDecoderStops) {
  FakeCollector w(2, "worker", 0, 200);
  std::vector<std::string> frames;
  for (int i = 0; i < 12; ++i) frames.push_back(wire::Encode(w.Push(1, 10 * i, "a").Pop(1, 10 * i + 5).Flush(100 * i)));
  frames[5] = "not a frame";
  std::vector<std::string_view> views(frames.begin(), frames.end());
  {
    DecodeAhead ahead(views);
    for (size_t i = 0; i < frames.size(); ++i) {
      const wire::DecodeResult r = ahead.Take(i);
      ASSERT_EQ(r.ok, i != 5) << i;
      if (r.ok) {
        EXPECT_EQ(std::get<wire::Batch>(r.message).watermark_ns, 100 * static_cast<int64_t>(i));
      }
    }
  }
  for (int taken = 0; taken < 3; ++taken) {  // destroyed with frames left: returns
    DecodeAhead ahead(views);
    for (int i = 0; i < taken; ++i) EXPECT_TRUE(ahead.Take(static_cast<size_t>(i)).ok);
  }
}

// A thread's cost marks stay in time order when a CPU sample taken after
// the flush thread read the event rings comes a flush before the events
// recorded just before it: a step's cut (a search by time) still finds them.
TEST(CutTest, CostMarksOfABlockBeginningBeforeTheLastEndedAreFound) {
  FakeCollector w(2, "worker", 0, 200);
  ProcessTimeline p(w.Hello());
  w.Sample(7, 2000, "libx.so", "", 1000);
  p.Add(w.Flush(2100), nullptr);
  w.Mark(7, 1500, "early").Mark(7, 2500, "late");
  p.Add(w.Flush(2600), nullptr);
  std::map<int64_t, std::vector<CostMark>> marks;
  p.CutCosts(1000, 1800, &marks);
  ASSERT_EQ(marks[7].size(), 1u);
  EXPECT_EQ(marks[7][0].ts_ns, 1500);
  marks.clear();
  p.CutCosts(1000, 3000, &marks);
  std::vector<int64_t> ts;
  for (const CostMark& m : marks[7]) ts.push_back(m.ts_ns);
  EXPECT_EQ(ts, (std::vector<int64_t>{1500, 2000, 2500}));
}

// Cut gives the completed spans thread by thread (threads in the order they
// first closed one, each's in completion order), however batches
// interleaved them, and only those in the step; one thread's as they are.
TEST(CutTest, CompletedSpansComeThreadByThreadInCompletionOrder) {
  FakeCollector w(2, "worker", 0, 200);
  ProcessTimeline p(w.Hello());
  w.Push(7, 1, "z").Pop(7, 2);  // before the step: left out, its room closed up
  for (int batch = 0; batch < 3; ++batch) {
    const int64_t t = 1000 * batch;
    w.Push(7, t + 10, "a").Pop(7, t + 20).Push(7, t + 30, "b").Pop(7, t + 40);
    w.Push(5, t + 15, "c").Push(5, t + 16, "d").Pop(5, t + 17).Pop(5, t + 50);  // d closes before c
    w.Push(9, t + 5, "e").Pop(9, t + 6);
    p.Add(w.Flush(t + 900), nullptr);
  }
  std::vector<Span> spans;
  std::vector<Instant> instants;
  p.Cut(8, 2045, &spans, &instants);
  std::vector<std::string> got;
  for (const Span& s : spans)
    got.push_back(std::to_string(s.tid) + ":" + p.String(s.name) + "@" + std::to_string(s.begin_ns));
  EXPECT_EQ(got, (std::vector<std::string>{"7:a@10", "7:b@30", "7:a@1010", "7:b@1030", "7:a@2010", "7:b@2030", "5:d@16",
                                           "5:c@15", "5:d@1016", "5:c@1015", "5:d@2016", "5:c@2015", "9:e@1005",
                                           "9:e@2005"}));
  // What is left of one thread after the others' are discarded.
  p.DiscardBefore(3000);
  w.Push(5, 3010, "f").Pop(5, 3020).Push(5, 3005, "g").Pop(5, 3030);
  p.Add(w.Flush(3900), nullptr);
  spans.clear();
  p.Cut(3000, 4000, &spans, &instants);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(std::string(p.String(spans[0].name)) + std::string(p.String(spans[1].name)), "fg");
}

TEST_F(FrameTest, AResumedRunLeavesOutWhatAReplayHoldsFromBeforeItsReleasePoint) {
  ResumePoint point;
  point.released = {{2, 150}};
  agg_->Resume(point);
  FakeCollector w(2, "worker", 0, 200);
  Frame(w.Hello(), "peer-w");
  // The replay's first message spans the release point: a pop whose push was
  // released, then a whole range after it.
  w.Pop(1, 130).Push(1, 160, "after").Pop(1, 170);
  Frame(w.Flush(1000), "peer-w");
  const ProcessTimeline& p = *agg_->processes().at(2);
  EXPECT_EQ(p.unmatched(), 0u);
  std::vector<Span> spans;
  std::vector<Instant> instants;
  p.Cut(0, 1000, &spans, &instants);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(std::string(p.String(spans[0].name)), "after");
}

// The CPU sampler's handler time, measured in place, comes as running
// totals (Batch::cpu_handler_*): kept as the run's (cpu_handler), and each
// batch that says more adds one figure, the mean of its new samples; an
// older batch (a replay), or one whose time did not grow (the collector's
// tick rate not known yet), adds nothing. On the wire and back.
TEST(ProfilerCpuTest, TheCpuSamplersHandlerTimeComesAsRunningTotals) {
  FakeCollector w(2, "worker", 0, 200);
  ProcessTimeline p(w.Hello());
  for (const auto& [samples, ps] : std::vector<std::pair<int64_t, int64_t>>{
           {10, 40'000'000}, {30, 160'000'000}, {10, 40'000'000}, {30, 160'000'000}, {35, 160'000'000}}) {
    wire::Batch b = w.Flush(samples * 10);
    b.cpu_handler_samples = samples;
    b.cpu_handler_ps = ps;
    p.Add(b, nullptr);
  }
  p.Add(w.Flush(500), nullptr);  // none said
  const HandlerStats& h = p.cpu_handler();
  EXPECT_EQ(h.samples, 30);
  EXPECT_EQ(h.ps, 160'000'000);
  ASSERT_EQ(h.per_flush.n, 2u);
  EXPECT_DOUBLE_EQ(h.per_flush.mean_ps(), (4'000'000 + 6'000'000) / 2.0);       // 4 us a sample, then 120 us / 20
  EXPECT_EQ(p.sample_totals()[static_cast<int>(EventKind::kCpuSample)].n, 0u);  // not a recording call's cost
  wire::Batch b = w.Flush(600);
  b.cpu_handler_samples = 1234;
  b.cpu_handler_ps = 5'678'000'000;
  const std::string bytes = wire::Encode(b);
  const auto& back = std::get<wire::Batch>(wire::Decode(bytes.data(), bytes.size()).message);
  EXPECT_EQ(back.cpu_handler_samples, 1234);
  EXPECT_EQ(back.cpu_handler_ps, 5'678'000'000);
  const std::string without = wire::Encode(w.Flush(700));
  EXPECT_EQ(std::get<wire::Batch>(wire::Decode(without.data(), without.size()).message).cpu_handler_samples, -1);
  wire::BatchWriter bad;  // not a count: refused, said where
  bad.Begin(2, 9, 800, 0);
  bad.CpuHandler(-3, 5);
  bad.Strings({});
  bad.ThreadNames({});
  bad.Categories({});
  bad.Gpu({});
  bad.Probes({});
  bad.Arming(false, {});
  bad.Memory({});
  bad.BeginThreads(0);
  const msgpack::sbuffer& bytes_bad = bad.Finish();
  const wire::DecodeResult r = wire::Decode(bytes_bad.data(), bytes_bad.size());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("batch.cpu_handler"), std::string::npos) << r.error;
}

TEST(ProfilerCpuTest, TheFlushThreadsCpuInAStepIsInterpolatedFromItsRunningTotals) {
  FakeCollector w(2, "worker", 0, 200);
  ProcessTimeline p(w.Hello());
  EXPECT_EQ(p.ProfilerCpuNs(0, 1000), -1);  // none sent
  for (const auto& [watermark, cpu] : std::vector<std::pair<int64_t, int64_t>>{{100, 10}, {200, 30}, {400, 70}}) {
    wire::Batch b = w.Flush(watermark);
    b.profiler_cpu_ns = cpu;
    p.Add(b, nullptr);
  }
  EXPECT_EQ(p.ProfilerCpuNs(100, 400), 60);
  EXPECT_EQ(p.ProfilerCpuNs(150, 300), 50 - 20);  // 20 at 150, 50 at 300
  EXPECT_EQ(p.ProfilerCpuNs(0, 100), 0);          // before the first total: nothing known to have run
  EXPECT_EQ(p.ProfilerCpuNs(400, 900), 0);
  // On the wire and back.
  wire::Batch b = w.Flush(500);
  b.profiler_cpu_ns = 123456789;
  const std::string bytes = wire::Encode(b);
  EXPECT_EQ(std::get<wire::Batch>(wire::Decode(bytes.data(), bytes.size()).message).profiler_cpu_ns, 123456789);
  const std::string without = wire::Encode(w.Flush(600));
  EXPECT_EQ(std::get<wire::Batch>(wire::Decode(without.data(), without.size()).message).profiler_cpu_ns, -1);
}

TEST(RunKeyTest, SameSecretSameKeyAndNoSecretNoKey) {
  EXPECT_EQ(RunKey("abc"), RunKey("abc"));
  EXPECT_NE(RunKey("abc"), RunKey("abd"));
  EXPECT_EQ(RunKey("abc").size(), 16u);
  EXPECT_EQ(RunKey(""), "");
}

}  // namespace
}  // namespace rlscope

// The writer every trace.json and summary goes through: escapes, integers at
// their limits and microseconds with three decimals, byte for byte.
TEST(JsonWriterTest, EscapesNumbersAndMicrosExactly) {
  std::string out;
  rlscope::JsonWriter w(&out);
  w.BeginObject()
      .Key("plain")
      .String("gen/update_actor")
      .Key("esc")
      .String(std::string("a\"b\\c\nd\re\tf\x01g", 13))
      .Key("i")
      .Int(INT64_MIN)
      .Key("u")
      .Uint(UINT64_MAX)
      .Key("z")
      .Int(0)
      .Key("us")
      .Micros(1234567)
      .Key("us0")
      .Micros(5)
      .Key("neg")
      .Micros(-1000)
      .Key("odd\"key")
      .Null()
      .Key("min")
      .Micros(INT64_MIN)
      .EndObject();
  EXPECT_EQ(out,
            "{\"plain\":\"gen/update_actor\",\"esc\":\"a\\\"b\\\\c\\nd\\re\\tf\\u0001g\","
            "\"i\":-9223372036854775808,\"u\":18446744073709551615,\"z\":0,\"us\":1234.567,\"us0\":0.005,"
            "\"neg\":-1.000,\"odd\\\"key\":null,\"min\":-9223372036854775.808}");
}

// The sorts that skip work (sorting.h) give what std::sort gives: runs of
// distinct keys merged, and inputs with equivalent elements (then sorted as
// before, so even their order among themselves is std::sort's).
// ChunkQueue against std::deque under the timeline's operations, at random:
// appends, pops, filters (remove_if + erase), front erases, inserts in the
// middle, clears; every element compared along the way, and copies, moves
// and both iterator kinds.
TEST(ChunkQueueTest, DoesWhatStdDequeDoesUnderTheTimelinesOperations) {
  struct Rec {  // 104 bytes, a Span's size: 157 to a chunk
    int64_t key = 0;
    int64_t pad[12] = {};
  };
  std::mt19937 rng(7);
  rlscope::ChunkQueue<Rec> q;
  std::deque<Rec> d;
  size_t compared = 0;
  for (int op = 0; op < 100000; ++op) {
    const uint32_t r = rng() % 20;
    if (r < 10) {
      Rec rec;
      rec.key = rng() % 1000;
      q.push_back(rec);
      d.push_back(rec);
    } else if (r < 13 && !d.empty()) {
      q.pop_front();
      d.pop_front();
    } else if (r == 13) {
      const int64_t below = rng() % 1000;
      auto gone = [below](const Rec& x) { return x.key < below; };
      q.erase(std::remove_if(q.begin(), q.end(), gone), q.end());
      d.erase(std::remove_if(d.begin(), d.end(), gone), d.end());
    } else if (r == 14) {
      const int64_t below = rng() % 300;
      auto gone = [below](const Rec& x) { return x.key < below; };
      q.erase(q.begin(), std::find_if_not(q.begin(), q.end(), gone));
      d.erase(d.begin(), std::find_if_not(d.begin(), d.end(), gone));
    } else if (r == 15) {
      const size_t at = rng() % (d.size() + 1);
      Rec rec;
      rec.key = 5000 + op;
      EXPECT_EQ(q.insert(q.begin() + static_cast<std::ptrdiff_t>(at), rec)->key, rec.key);
      d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), rec);
    } else if (r == 16 && rng() % 100 == 0) {
      q.clear();
      d.clear();
    }
    ASSERT_EQ(q.size(), d.size()) << "after operation " << op;
    if (op % 101 == 0) {
      for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(q[i].key, d[i].key) << "element " << i << ", operation " << op;
      compared += d.size();
    }
  }
  EXPECT_GT(compared, 10000u);
  const rlscope::ChunkQueue<Rec> copy = q;
  rlscope::ChunkQueue<Rec> moved = std::move(q);
  EXPECT_TRUE(q.empty());  // NOLINT(bugprone-use-after-move): a moved-from queue is empty
  ASSERT_EQ(copy.size(), d.size());
  ASSERT_EQ(moved.size(), d.size());
  EXPECT_TRUE(
      std::equal(copy.begin(), copy.end(), d.begin(), [](const Rec& a, const Rec& b) { return a.key == b.key; }));
  rlscope::ChunkQueue<Rec>::const_iterator it = moved.begin();  // an iterator converts to a const one
  EXPECT_EQ(static_cast<size_t>(moved.end() - it), d.size());
  if (!d.empty()) {
    EXPECT_EQ(moved.back().key, d.back().key);
  }
}

// Pages of [p, p + bytes) the kernel has mapped (mincore).
size_t ResidentPages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, in.data()) != 0) return 0;
  return static_cast<size_t>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

TEST(Prefault, MapsTheRangesWholePagesAndLeavesWhatIsThereAlone) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = size_t{40} << 20, written = (size_t{1} << 20) + 123;
  for (const bool second_core : {false, true}) {
    SCOPED_TRACE(second_core ? "two threads" : "one thread");
    auto* p =
        static_cast<unsigned char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(p, MAP_FAILED);
    for (size_t i = 0; i < written; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
    EXPECT_EQ(ResidentPages(p, bytes), (written + page - 1) / page);  // only what was written so far
    if (!rlscope::PrefaultForWrite(p + written, bytes - written, second_core)) {
      munmap(p, bytes);
      GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14): pages fault in as touched";
    }
    EXPECT_EQ(ResidentPages(p, bytes), bytes / page);
    size_t changed = 0;
    for (size_t i = 0; i < written; ++i) changed += p[i] != static_cast<unsigned char>(i * 7 + 1);
    for (size_t i = written; i < bytes; ++i) changed += p[i] != 0;
    EXPECT_EQ(changed, 0u);
    munmap(p, bytes);
  }
  std::vector<int64_t> v = {1, 2, 3};
  EXPECT_FALSE(rlscope::PrefaultCapacity(&v, true));  // too small to be worth a call
  v.reserve(size_t{1} << 20);                         // 8 MB
  EXPECT_TRUE(rlscope::PrefaultCapacity(&v, false));
  EXPECT_THAT(v, ::testing::ElementsAre(1, 2, 3));
}

TEST(Sorting, SortRunsMatchesStdSort) {
  struct Item {
    int key, payload;
  };
  auto less = [](const Item& a, const Item& b) { return a.key < b.key; };
  auto same = [](const std::vector<Item>& a, const std::vector<Item>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].key != b[i].key || a[i].payload != b[i].payload) return false;
    }
    return true;
  };
  std::srand(7);
  for (int round = 0; round < 200; ++round) {
    const int runs = 1 + round % 9, per_run = 1 + std::rand() % 300;
    const bool ties = round % 3 == 0;
    std::vector<Item> items;
    for (int r = 0; r < runs; ++r) {
      for (int i = 0; i < per_run; ++i) {
        // Run r holds keys r, r + runs, r + 2 runs...: distinct across runs unless `ties`.
        const int key = ties ? (i * runs + r) / 2 : i * runs + r;
        items.push_back({key, static_cast<int>(items.size())});
      }
    }
    if (round % 7 == 0) std::reverse(items.begin(), items.end());  // many short runs
    std::vector<Item> expected = items, runs_sorted = items, skipped = items;
    std::vector<Item> stable_expected = items, stable_runs = items;
    std::sort(expected.begin(), expected.end(), less);
    rlscope::SortRuns(&runs_sorted, less);
    rlscope::SortUnlessStrictlySorted(skipped.begin(), skipped.end(), less);
    std::stable_sort(stable_expected.begin(), stable_expected.end(), less);
    rlscope::StableSortRuns(&stable_runs, less);
    // SortRunsOrder: the permutation SortRuns applies, ties included.
    std::vector<Item> by_order;
    for (uint32_t i : rlscope::SortRunsOrder(items, less)) by_order.push_back(items[i]);
    EXPECT_TRUE(same(by_order, expected)) << "round " << round;
    EXPECT_TRUE(same(runs_sorted, expected)) << "round " << round;
    EXPECT_TRUE(same(skipped, expected)) << "round " << round;
    EXPECT_TRUE(same(stable_runs, stable_expected)) << "round " << round;
  }
}

// SortRunsGrouped gives what std::sort gives for a group-major order:
// threads' runs interleaved batch by batch, with and without equivalent
// elements, groups out of order, and more groups than it groups.
TEST(Sorting, SortRunsGroupedMatchesStdSort) {
  struct Item {
    int64_t group;
    int key, payload;
  };
  auto less = [](const Item& a, const Item& b) { return std::tie(a.group, a.key) < std::tie(b.group, b.key); };
  auto group = [](const Item& i) { return i.group; };
  std::srand(8);
  for (int round = 0; round < 200; ++round) {
    const int groups = round % 50 == 0 ? 300 : 1 + round % 6, batches = 1 + std::rand() % 8;
    const bool ties = round % 4 == 0, nested = round % 5 == 0;
    std::vector<Item> items;
    for (int b = 0; b < batches; ++b) {
      for (int g = 0; g < groups; ++g) {
        const int per = 1 + std::rand() % 40;
        for (int i = 0; i < per; ++i) {
          // Later batches later; `nested`: a batch's last item began before
          // the batch's first (a range closed after those it encloses).
          int key = b * 1000 + (ties ? i / 2 : i);
          if (nested && i == per - 1) key = b * 1000 - 1;
          items.push_back({(g * 7919) % 1000 - 500, key, static_cast<int>(items.size())});
        }
      }
    }
    std::vector<Item> expected = items, grouped = items;
    std::sort(expected.begin(), expected.end(), less);
    rlscope::SortRunsGrouped(&grouped, group, less);
    ASSERT_EQ(grouped.size(), expected.size());
    for (size_t i = 0; i < grouped.size(); ++i) {
      ASSERT_EQ(grouped[i].payload, expected[i].payload) << "round " << round << " at " << i;
    }
  }
}

// UpperBoundNear is std::upper_bound wherever its search starts.
TEST(Sorting, UpperBoundNearIsUpperBoundFromAnyHint) {
  std::srand(12);
  for (int round = 0; round < 50; ++round) {
    std::vector<int64_t> v(static_cast<size_t>(std::rand() % 70));
    int64_t x = 0;
    for (int64_t& e : v) e = x += std::rand() % 3;  // repeats too
    for (int k = 0; k < 300; ++k) {
      const int64_t t = std::rand() % (x + 4) - 2;
      const size_t hint = static_cast<size_t>(std::rand() % (v.size() + 3));  // out of range too
      const size_t want = static_cast<size_t>(std::upper_bound(v.begin(), v.end(), t) - v.begin());
      EXPECT_EQ(rlscope::UpperBoundNear(v.size(), t, hint, [&](size_t i) { return v[i]; }), want)
          << "round " << round << " t " << t << " hint " << hint;
    }
  }
}

// ThreadCosts::PaidPsNear is PaidPs wherever its search starts.
TEST(Sorting, PaidPsNearMatchesPaidPs) {
  rlscope::ThreadCosts costs;
  for (int i = 0; i < 1000; ++i) {
    costs.ts.push_back(100 + 10 * (i / 3));  // equal times too
    costs.cum_ps.push_back(7 * (i + 1));
  }
  std::srand(11);
  size_t hint = 0;
  for (int k = 0; k < 5000; ++k) {
    const int64_t t = std::rand() % 3600;
    if (k % 5 == 0) hint = static_cast<size_t>(std::rand() % 1200);  // out of range too
    EXPECT_EQ(costs.PaidPsNear(t, &hint), costs.PaidPs(t)) << "t " << t;
  }
}

namespace rlscope {
namespace {

// trace.json encoded on several threads is the one encoded on one, byte for
// byte (spans in pieces, in order), nested ranges and odd names included.
TEST_F(AggregatorTest, TraceJsonIsTheSameOnSeveralWorkers) {
  FakeCollector ctl(1, "controller", -1, 100);
  FakeCollector w(2, "worker", 0, 200);
  Connect(ctl);
  Connect(w);
  for (int64_t i = 0; i < 50000; ++i) {
    const int64_t tid = 200 + i % 3, ts = 1000 + i * 100;
    w.Push(tid, ts, i % 7 == 0 ? "odd \"name\"\n" : "range_" + std::to_string(i % 50)).Push(tid, ts + 10, "inner");
    w.Pop(tid, ts + 20).Pop(tid, ts + 50);
  }
  Send(w.Flush(10000000));
  ctl.Push(1, 500, "step").Pop(1, 9000000);
  Send(ctl.Flush(10000000));
  agg_->Tick(0);
  ASSERT_EQ(exporter_.steps.size(), 1u);
  const std::map<uint64_t, int64_t> pids = {{1, 100}, {2, 200}};
  const std::string one = StepTraceJson(exporter_.steps[0], pids, 1);
  EXPECT_GT(one.size(), 100000u * 50);
  EXPECT_TRUE(one == StepTraceJson(exporter_.steps[0], pids, 2));
  EXPECT_TRUE(one == StepTraceJson(exporter_.steps[0], pids, 4));
}

}  // namespace
// Frames taken together from hundreds of peers: the controller's messages
// and newcomers' hellos come first, every peer's in its own order.
TEST(PriorityOrderTest, ControllerAndNewcomersFirstEachPeersOrderKept) {
  FakeCollector ctl(1, "controller", -1, 100), old_worker(2, "worker", 0, 200), new_worker(3, "worker", 1, 300);
  const std::string batch = wire::Encode(old_worker.Push(1, 1000, "w", 0).Flush(2000));
  const std::string ctl_batch = wire::Encode(ctl.Push(1, 1000, "step", 0).Flush(2000));
  const std::string hello = wire::Encode(new_worker.Hello());
  const std::string new_batch = wire::Encode(new_worker.Flush(3000));
  EXPECT_EQ(wire::PeekType(hello), static_cast<uint8_t>(wire::MessageType::kHello));
  EXPECT_EQ(wire::PeekType(batch), static_cast<uint8_t>(wire::MessageType::kBatch));
  EXPECT_EQ(wire::PeekType("RLSC"), 0);
  // Read in this order: old worker, new worker's hello and batch, the
  // controller, the old worker again; one frame a message.
  const std::vector<std::string> bytes = {batch, hello, batch, new_batch, ctl_batch, batch};
  const std::vector<std::string> peers = {"old", "new", "old", "new", "ctl", "old"};
  const std::vector<bool> ends(6, true);
  EXPECT_EQ(Aggregator::PriorityOrder(bytes, peers, ends, "ctl"), (std::vector<size_t>{1, 3, 4, 0, 2, 5}));
  // With no controller known, the newcomer alone goes first.
  EXPECT_EQ(Aggregator::PriorityOrder(bytes, peers, ends, ""), (std::vector<size_t>{1, 3, 0, 2, 4, 5}));
  // A peer whose first message here is a batch keeps its place even if a
  // hello of its own follows (a hello again after a reconnect, behind what
  // it sent before).
  const std::vector<std::string> again = {batch, hello};
  EXPECT_EQ(Aggregator::PriorityOrder(again, {"x", "x"}, {true, true}, ""), (std::vector<size_t>{0, 1}));
}

// ---- Always on: triggers (triggers.h), on constructed steps.

namespace {

StepProfile TimedStep(int64_t n, int64_t begin_ms, int64_t duration_ms) {
  StepProfile s;
  s.step = n;
  s.begin_ns = begin_ms * kMs;
  s.end_ns = (begin_ms + duration_ms) * kMs;
  return s;
}

}  // namespace

TEST(StepTriggersTest, ASlowStepIsPickedWarmUpAndChosenStepsNeverAre) {
  Config::AlwaysOn config;
  config.slower_than = 1.5;
  config.min_slower_ms = 0;
  config.warmup_steps = 2;
  config.recent_steps = 4;
  config.memory_jump_mb = 0;
  StepTriggers t;
  int64_t at = 0;
  auto decide = [&](int64_t n, int64_t ms, bool chosen = false) {
    const std::string why = t.Decide(TimedStep(n, at, ms), chosen, config);
    at += ms;
    return why;
  };
  EXPECT_EQ(decide(1, 500), "");  // warm-up: never, however slow
  EXPECT_EQ(decide(2, 400), "");
  for (int64_t n = 3; n <= 5; ++n) EXPECT_EQ(decide(n, 100), "") << n;  // the baseline fills
  EXPECT_EQ(decide(6, 900, /*chosen=*/true), "");                       // chosen: full anyway, and no one's baseline
  const std::string why = decide(7, 160);
  EXPECT_THAT(why, ::testing::StartsWith("slow: 160.0 ms, 1.60 x the median of the 3 steps before (100.0 ms"));
  EXPECT_EQ(decide(8, 140), "");  // 1.4 x: not slow
  // The baseline is the last recent_steps eligible steps: 100, 100, 160, 140 -> median 140 (the upper middle).
  EXPECT_EQ(decide(9, 200), "");
  EXPECT_THAT(decide(10, 300), ::testing::StartsWith("slow: "));
}

TEST(StepTriggersTest, AStepIsTakenLessTheTimeItOverlappedAFullWrite) {
  Config::AlwaysOn config;
  config.warmup_steps = 0;
  config.memory_jump_mb = 0;
  config.min_slower_ms = 50;
  StepTriggers t;
  for (int64_t n = 1; n <= 3; ++n) EXPECT_EQ(t.Decide(TimedStep(n, n * 100, 100), false, config), "");
  EXPECT_THAT(t.Decide(TimedStep(4, 400, 400), false, config), ::testing::StartsWith("slow: 400.0 ms"));
  t.WroteFull(850 * kMs, 1150 * kMs);  // step 4 written from 850 to 1150 ms
  // 800-1200 ms: 400 ms, 300 of them beside the write: 100 ms of its own, not slow.
  EXPECT_EQ(t.Decide(TimedStep(5, 800, 400), false, config), "");
  // Slow beyond what the write took: picked, its time less the overlap.
  EXPECT_THAT(t.Decide(TimedStep(6, 1100, 400), false, config), ::testing::StartsWith("slow: 350.0 ms"));
  // 1.6 x, 60 ms over the median (100): picked; 149 ms is 49 over it: min_slower_ms holds it back.
  StepTriggers u;
  for (int64_t n = 1; n <= 3; ++n) EXPECT_EQ(u.Decide(TimedStep(n, n * 100, 100), false, config), "");
  EXPECT_EQ(u.Decide(TimedStep(4, 400, 149), false, config), "");
  EXPECT_THAT(u.Decide(TimedStep(5, 600, 160), false, config), ::testing::StartsWith("slow: 160.0 ms"));
}

// Always on, `steps` lists the steps written in full whatever happens; its
// default, all, lists none (every step in full is no always-on run).
TEST(StepTriggersTest, AlwaysOnEveryStepIsRecordedAndStepsChoosesWhichAreWrittenInFull) {
  Config c;
  EXPECT_TRUE(steps::ChosenUpFront(c, 7));  // without always_on: every recorded step is in full
  c.always_on.enabled = true;
  EXPECT_TRUE(steps::RecordedSteps(c).all);
  EXPECT_FALSE(steps::ChosenUpFront(c, 7));
  c.steps = IntSelection{false, {2, 7}};
  EXPECT_TRUE(steps::RecordedSteps(c).Contains(3));
  EXPECT_TRUE(steps::ChosenUpFront(c, 7));
  EXPECT_FALSE(steps::ChosenUpFront(c, 3));
  c.always_on.enabled = false;
  EXPECT_FALSE(steps::RecordedSteps(c).Contains(3));
}

TEST(StepTriggersTest, AMemoryJumpWithinAStepPicksIt) {
  Config::AlwaysOn config;
  config.warmup_steps = 0;
  config.slower_than = 0;  // off
  config.memory_jump_mb = 64;
  FakeCollector w(7, "worker", 0, 700);
  ProcessTimeline p(w.Hello());
  StepTriggers t;
  StepProfile step = TimedStep(1, 0, 100);
  ProcessSlice slice;
  slice.process = std::make_shared<const ProcessView>(p.View());
  slice.rss = {{10 * kMs, 100 << 20}, {50 * kMs, 163 << 20}, {90 * kMs, 120 << 20}};  // rose 63 MiB
  step.processes.push_back(slice);
  EXPECT_EQ(t.Decide(step, false, config), "");
  step.processes[0].rss[1].bytes = 164 << 20;
  EXPECT_THAT(t.Decide(step, false, config), ::testing::HasSubstr("resident memory rose 64 MiB within the step"));
  step.processes[0].rss = {{10 * kMs, 100 << 20}};
  step.processes[0].gpu_allocated[0] = {{10 * kMs, 0}, {20 * kMs, int64_t{1} << 30}};
  EXPECT_THAT(t.Decide(step, false, config), ::testing::HasSubstr("GPU 0 memory allocated rose 1024 MiB"));
}

}  // namespace rlscope
