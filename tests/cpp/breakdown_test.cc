// The breakdown engine and the overhead corrector on constructed timelines
// with known answers: overlaps, nesting, idle gaps, GPU streams overlapping
// each other, and the per-thread shift of overhead correction.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "aggregator/attribution.h"
#include "aggregator/breakdown.h"
#include "aggregator/step_correction.h"
#include "native/event.h"

namespace rlscope {
namespace {

TEST(Breakdown, UnionMergesOverlapsAndNestingAndClips) {
  const auto u = UnionClipped({{50, 60}, {0, 10}, {5, 20}, {7, 8}, {20, 25}, {90, 200}}, 2, 100);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].begin, 2);
  EXPECT_EQ(u[0].end, 25);  // [0,10) + [5,20) + nested [7,8) + touching [20,25)
  EXPECT_EQ(u[1].begin, 50);
  EXPECT_EQ(u[2].end, 100);  // clipped
  EXPECT_EQ(TotalLength(u), 23 + 10 + 10);
}

TEST(Breakdown, SubtractRemovesWaitsInsideAndAcrossIntervals) {
  const auto d = Subtract({{0, 100}, {200, 300}}, {{10, 20}, {90, 210}, {250, 260}});
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 10}, {20, 90}, {210, 250}, {260, 300}};
  ASSERT_EQ(d.size(), want.size());
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].begin, want[i].first);
    EXPECT_EQ(d[i].end, want[i].second);
  }
}

TEST(Breakdown, ResourceOverlapSplitsCpuGpuBothAndIdle) {
  // Window [0, 100). CPU: [0,30) and nested [10,20) on another thread, then
  // [60,80). GPU: two streams overlapping each other, [20,40) and [25,50).
  const Overlap o = ResourceOverlap({{0, 30}, {10, 20}, {60, 80}}, {{20, 40}, {25, 50}}, 0, 100);
  EXPECT_EQ(o.cpu_gpu, 10);        // [20,30)
  EXPECT_EQ(o.cpu_only, 20 + 20);  // [0,20) + [60,80)
  EXPECT_EQ(o.gpu_only, 20);       // [30,50), counted once though two streams ran
  EXPECT_EQ(o.idle, 10 + 20);      // [50,60) + [80,100)
  EXPECT_EQ(o.cpu_only + o.gpu_only + o.cpu_gpu + o.idle, 100);
}

TEST(Breakdown, EmptyInputsAreAllIdle) {
  const Overlap o = ResourceOverlap({}, {}, 10, 40);
  EXPECT_EQ(o.idle, 30);
  EXPECT_EQ(o.cpu_only + o.gpu_only + o.cpu_gpu, 0);
}

TEST(Breakdown, NaiveUtilizationCountsBinsTouchedByAnyKernel) {
  // One 1-unit kernel in each of 2 of 4 bins: true busy 2 %, naive 50 %.
  const std::vector<Interval> gpu = {{10, 11}, {260, 261}};
  EXPECT_DOUBLE_EQ(NaiveUtilization(gpu, 0, 400, 100), 0.5);
  EXPECT_DOUBLE_EQ(NaiveUtilization({}, 0, 400, 100), 0.0);
  // A kernel spanning a bin edge touches both bins.
  EXPECT_DOUBLE_EQ(NaiveUtilization({{90, 110}}, 0, 400, 100), 0.5);
}

TEST(Correction, LaterEventsShiftAndEnclosingRangesShrink) {
  // push A @100, push B @200, pop B @300, pop A @400 on thread 1, each
  // costing 10 ns; thread 2 has one mark @250 costing 10 ns.
  const CostModel model({{"push", 10}, {"pop", 10}, {"mark", 10}}, 1.0);
  std::map<int64_t, std::vector<CostMark>> marks;
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  marks[1] = {{100, push, 0}, {200, push, 0}, {300, pop, 0}, {400, pop, 0}};
  marks[2] = {{250, static_cast<uint8_t>(EventKind::kMark), 0}};
  const Corrector c(marks, model, 50);
  EXPECT_EQ(c.Correct(1, 50), 50);  // the step's begin is the anchor
  EXPECT_EQ(c.Correct(1, 100), 90);
  EXPECT_EQ(c.Correct(1, 400), 360);
  // A [100,400] shrinks by the cost of the 3 events after its push; B by its pop's.
  EXPECT_EQ(c.Correct(1, 400) - c.Correct(1, 100), 300 - 30);
  EXPECT_EQ(c.Correct(1, 300) - c.Correct(1, 200), 100 - 10);
  // Threads are independent.
  EXPECT_EQ(c.Correct(2, 400), 390);
  EXPECT_EQ(c.overhead().total_ns, 50);
  EXPECT_EQ(c.RemovedNs(1, 150, 350), 20);
}

TEST(Correction, EntryPointCostsApplyToEachSideOfAPairAndScale) {
  const CostModel model(
      {{"push", 8}, {"pop", 8}, {"end", 6}, {"py_nvtx_push", 300}, {"py_nvtx_pop", 100}, {"py_nvtx_end", 50}}, 0.5);
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop),
             end = static_cast<uint8_t>(EventKind::kRangeEnd);
  EXPECT_EQ(model.CostPs(push, kFlagNone), 4000);
  EXPECT_EQ(model.CostPs(push, kFlagViaNvtxEx | kFlagHasPayload), 154000);
  EXPECT_EQ(model.CostPs(pop, kFlagNone), 4000);  // closes a range opened without the package
  EXPECT_EQ(model.CostPs(pop, kFlagViaNvtxEx), 54000);
  EXPECT_EQ(model.CallerPs(pop, kFlagViaNvtxEx), 50000);
  EXPECT_EQ(model.CostPs(end, kFlagViaNvtxEx), 28000);
  EXPECT_EQ(model.CostPs(200, kFlagNone), 0);  // unknown kinds cost nothing
  EXPECT_DOUBLE_EQ(model.used().ns.at("py_nvtx_push"), 150.0);
}

TEST(Correction, EachEntryPointIsChargedItsOwnCallerSide) {
  // The `nvtx` package through NVTX (py_nvtx_*), through rlscope's entry
  // points for its functions (py_fast_*) and for its annotate
  // (py_annotate_*): one kind, three caller sides; a replacement's flag wins
  // over ViaNvtxEx (a fast pop closing a range the package opened).
  const CostModel model({{"push", 10},
                         {"pop", 10},
                         {"py_nvtx_push", 500},
                         {"py_fast_push", 40},
                         {"py_fast_pop", 20},
                         {"py_annotate_push", 70},
                         {"py_annotate_pop", 30},
                         {"py_range_push", 60},
                         {"py_range_pop", 25}},
                        1.0);
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  EXPECT_EQ(model.CostPs(push, kFlagViaNvtxEx), 510000);
  EXPECT_EQ(model.CostPs(push, kFlagViaNvtxFast | kFlagHasPayload), 50000);
  EXPECT_EQ(model.CostPs(push, kFlagViaNvtxAnnotate), 80000);
  EXPECT_EQ(model.CostPs(pop, kFlagViaNvtxFast | kFlagViaNvtxEx), 30000);
  EXPECT_EQ(model.CallerPs(pop, kFlagViaNvtxAnnotate), 30000);
  EXPECT_EQ(model.CostPs(pop, kFlagViaNvtxEx), 10000);  // no py_nvtx_pop given: nothing on that side
  EXPECT_EQ(model.used().sources.at("py_annotate_push"), "calibration");
  // rlscope_ray's own ranges (kFlagViaPyRange): their own caller side, a
  // replacement's flag winning over theirs as over ViaNvtxEx's.
  EXPECT_EQ(model.CostPs(push, kFlagViaPyRange | kFlagHasPayload), 70000);
  EXPECT_EQ(model.CallerPs(pop, kFlagViaPyRange), 25000);
  EXPECT_EQ(model.CostPs(pop, kFlagViaPyRange | kFlagViaNvtxFast), 30000);
  EXPECT_EQ(model.CostPs(push, kFlagNone), 10000);
}

TEST(Correction, TheUncertaintyIsItsPartsInQuadratureAndNamesTheLargest) {
  UncertaintyParts parts;
  EXPECT_EQ(parts.TotalNs(), 0);
  EXPECT_STREQ(parts.Largest(), "");
  parts.sampling_ns = 300;
  parts.calibration_ns = 400;
  EXPECT_EQ(parts.TotalNs(), 500);
  EXPECT_STREQ(parts.Largest(), "calibration");
  // Two processes: part by part, in quadrature but the model's (one choice
  // in every process), which adds.
  UncertaintyParts other;
  other.sampling_ns = 400;
  other.model_ns = 700;
  parts.model_ns = 500;
  parts.Add(other);
  EXPECT_EQ(parts.sampling_ns, 500);
  EXPECT_EQ(parts.calibration_ns, 400);
  EXPECT_EQ(parts.model_ns, 1200);
  EXPECT_EQ(parts.TotalNs(), 1360);  // sqrt(500^2 + 400^2 + 1200^2), rounded
  EXPECT_STREQ(parts.Largest(), "model");
  // The flush threads' CPU adds too (a spare core or none: one condition of a node).
  UncertaintyParts threads;
  threads.threads_ns = 900;
  parts.threads_ns = 800;
  parts.Add(threads);
  EXPECT_EQ(parts.threads_ns, 1700);
  EXPECT_EQ(parts.TotalNs(), 2177);  // sqrt(500^2 + 400^2 + 1200^2 + 1700^2), rounded
  EXPECT_STREQ(parts.Largest(), "threads");
}

TEST(Correction, MeasuredCostsComeFromTheStepThenTheRunThenTheCalibration) {
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop),
             mark = static_cast<uint8_t>(EventKind::kMark);
  KindSamples step, run;
  for (double ps : {90000.0, 110000.0, 100000.0, 100000.0}) step[push].Add(ps);  // 4: enough
  for (double ps : {50000.0, 50000.0, 50000.0}) step[pop].Add(ps);               // 3: too few
  for (double ps : {40000.0, 40000.0, 40000.0, 40000.0}) run[pop].Add(ps);
  const CostModel model({{"push", 10}, {"pop", 10}, {"mark", 10}}, 2.0, &step, &run);
  EXPECT_EQ(model.CostPs(push, kFlagNone), 200000);  // the step's mean, scaled
  EXPECT_EQ(model.CostPs(pop, kFlagNone), 80000);    // the run's
  EXPECT_EQ(model.CostPs(mark, kFlagNone), 20000);   // calibrated
  EXPECT_EQ(model.used().sources.at("push"), "step");
  EXPECT_EQ(model.used().sources.at("pop"), "run");
  EXPECT_EQ(model.used().sources.at("mark"), "calibration");
  // The mean's variance: s^2 / n, scaled by scale^2 (s^2 = 200e6 / 3 ps^2).
  EXPECT_NEAR(model.MeanVarPs2(push), (2e8 / 3) / 4 * (2.0 * 2.0), 1e-3);
  EXPECT_EQ(model.MeanVarPs2(pop), 0.0);
  EXPECT_EQ(model.used().measured.at("push").samples, 4u);
  EXPECT_DOUBLE_EQ(model.used().measured.at("push").mean_ns, 100.0);
}

// The in-place ratio weighs each kind by its samples in the step: a kind
// costed from the run (too few in the step) weighs what it has in the step,
// not the run's count. Here the run's 50 pushes are steps' own (600 ns
// against a 10 ns figure) and the step's 100 pops ran 1.2x theirs.
TEST(Correction, TheInPlaceRatioWeighsAKindCostedFromTheRunByItsSamplesInTheStep) {
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  const std::map<std::string, double> costs = {{"push", 10}, {"pop", 10}, {"py_nvtx_push", 500}};
  KindSamples step, run;
  for (int i = 0; i < 100; ++i) step[pop].Add(12'000);
  for (int i = 0; i < 50; ++i) run[push].Add(600'000);
  const CostModel none_in_step(costs, 1.0, &step, &run);
  EXPECT_EQ(none_in_step.used().sources.at("push"), "run");
  EXPECT_DOUBLE_EQ(none_in_step.table().in_place_ratio, 1.2);  // by the run's count it was 31,200 / 1,500 = 20.8
  EXPECT_EQ(none_in_step.CallerPs(push, kFlagViaNvtxEx), 600'000);
  step[push].Add(600'000);  // one of them in this step
  EXPECT_DOUBLE_EQ(CostModel(costs, 1.0, &step, &run).table().in_place_ratio, (600.0 + 1200) / (10 + 1000));
  EXPECT_DOUBLE_EQ(CostModel(costs, 1.0, nullptr, &run).table().in_place_ratio, 60.0);  // the run's own
  // A short step, its only sample its own push: too few to weigh by, the
  // run's weights (the run's pops at 1.2x, 400 of them, and its 50 pushes).
  KindSamples short_step, run2 = run;
  short_step[push].Add(600'000);
  for (int i = 0; i < 400; ++i) run2[pop].Add(12'000);
  EXPECT_DOUBLE_EQ(CostModel(costs, 1.0, &short_step, &run2).table().in_place_ratio,
                   (600.0 * 50 + 12 * 400) / (10.0 * 450));
}

TEST(Correction, TheCallerSideFollowsTheStepsSpeedAgainstTheRunsUsual) {
  // The recording calls cost 20 ns in place in this step where the run's
  // usual is 10: the process ran twice as slow as when its Python caller
  // side was calibrated (at the usual speed), so that side costs twice its
  // figure here. (No start-up figure of the collector's own costs: no
  // in-place ratio, which would scale py_nvtx_* in its place.)
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  const std::map<std::string, double> costs = {{"py_fast_push", 40}, {"py_fast_pop", 20}, {"py_nvtx_push", 500}};
  KindSamples slow;  // the step's own costs: their means
  for (int i = 0; i < 40; ++i) slow[push].Add(20'000), slow[pop].Add(20'000);
  SpeedSamples speed;
  speed.usual_ps[push] = speed.usual_ps[pop] = 10'000;
  speed.step_n[push] = speed.step_n[pop] = 40;
  speed.step_mean_ps[push] = 21'000, speed.step_mean_ps[pop] = 19'000;
  speed.step_se_ps[push] = 300, speed.step_se_ps[pop] = 400;
  const CostModel model(costs, 1.0, &slow, nullptr, nullptr, &speed);
  EXPECT_DOUBLE_EQ(model.table().speed_ratio, 2.0);
  EXPECT_EQ(model.CallerPs(push, kFlagViaNvtxFast), 80'000);
  EXPECT_EQ(model.CallerPs(pop, kFlagViaNvtxFast), 40'000);
  EXPECT_EQ(model.CostPs(push, kFlagViaNvtxFast), 100'000);  // the step's own cost, 20, plus 80
  EXPECT_EQ(model.used().sources.at("py_fast_push"), "calibration at step speed");
  EXPECT_EQ(model.CallerPs(push, kFlagViaNvtxEx), 1'000'000);
  // Its standard error (the means' weighted as they are, in quadrature,
  // over the weighted sum) is the model part of the uncertainty over the
  // caller side it scaled: rlscope's entry points' and, with no in-place
  // ratio, the package's own (py_nvtx_*, 100 pushes at 1 us).
  std::map<int64_t, std::vector<CostMark>> marks;
  for (int i = 0; i < 1000; ++i) {
    marks[1].push_back({1'000'000 + 2'000'000 * i, push, kFlagViaNvtxFast});
    marks[1].push_back({2'000'000 + 2'000'000 * i, pop, kFlagViaNvtxFast});
  }
  for (int i = 0; i < 100; ++i) marks[2].push_back({1'000'000 + 2'000'000 * i, push, kFlagViaNvtxEx});
  const double se = std::hypot(40.0 * 300, 40.0 * 400) / (40.0 * 21'000 + 40.0 * 19'000);
  EXPECT_NEAR(model.table().speed_rel_se, se, 1e-12);
  const Corrector c(marks, model, 0);
  EXPECT_EQ(c.overhead().caller_ns, 1000 * 120 + 100 * 1000);
  EXPECT_NEAR(c.overhead().uncertainty_parts.model_ns, (1000 * 120 + 100 * 1000) * se, 1.0);
  EXPECT_GT(c.overhead().uncertainty_parts.model_ns, 0);
  // Too few samples in the step: the figures as calibrated. A ratio far
  // off is clamped.
  SpeedSamples few = speed;
  few.step_n[push] = 31, few.step_n[pop] = 0;
  EXPECT_EQ(CostModel(costs, 1.0, &slow, nullptr, nullptr, &few).table().speed_ratio, 0.0);
  EXPECT_EQ(CostModel(costs, 1.0, &slow, nullptr, nullptr, &few).CallerPs(push, kFlagViaNvtxFast), 40'000);
  SpeedSamples stalled = speed;
  stalled.step_mean_ps[push] = stalled.step_mean_ps[pop] = 90'000;
  EXPECT_EQ(CostModel(costs, 1.0, &slow, nullptr, nullptr, &stalled).table().speed_ratio, CostModel::kMaxSpeedRatio);
  // No usual cost yet (the run's first chunks): none.
  SpeedSamples unknown = speed;
  unknown.usual_ps = {};
  EXPECT_EQ(CostModel(costs, 1.0, &slow, nullptr, nullptr, &unknown).table().speed_ratio, 0.0);
  EXPECT_EQ(CostModel(costs, 1.0, &slow).table().speed_ratio, 0.0);
}

TEST(Correction, TheUncertaintyIsTheSamplingErrorOfTheMeansTimesTheEvents) {
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  KindSamples step;
  for (int i = 0; i < 100; ++i) step[push].Add(i % 2 == 0 ? 50000.0 : 150000.0);  // s = 50.25 ns
  const CostModel model({{"pop", 10}}, 1.0, &step);
  std::map<int64_t, std::vector<CostMark>> marks;
  for (int i = 0; i < 1000; ++i) {
    marks[1].push_back({1000 + 2000 * i, push, 0});
    marks[1].push_back({2000 + 2000 * i, pop, 0});
  }
  const Corrector c(marks, model, 0);
  // 1000 pushes * sqrt(s^2 / 100 samples); the pops are calibrated (no error stated).
  const double s = std::sqrt(100.0 * 50000.0 * 50000.0 / 99.0);
  EXPECT_NEAR(c.overhead().uncertainty_ns, 1000.0 * s / 10.0 / 1000.0, 1.0);
  EXPECT_EQ(c.overhead().uncertainty_parts.sampling_ns, c.overhead().uncertainty_ns);  // the only part
  EXPECT_EQ(c.overhead().calibrated_events, 1000u);
  // No spread, no uncertainty.
  KindSamples exact;
  for (int i = 0; i < 10; ++i) exact[push].Add(70000.0);
  EXPECT_EQ(Corrector(marks, CostModel({{"pop", 10}}, 1.0, &exact), 0).overhead().uncertainty_ns, 0);
}

TEST(Correction, CostsThatDriftWithinAStepAreSaid) {
  using ::testing::HasSubstr;
  const auto push = static_cast<uint8_t>(EventKind::kRangePush);
  KindSamples first, second, noisy;
  for (int i = 0; i < 20; ++i) {
    first[push].Add(60000.0 + (i % 3) * 1000.0);
    second[push].Add(95000.0 + (i % 3) * 1000.0);
    noisy[push].Add(i % 2 == 0 ? 10000.0 : 160000.0);
  }
  EXPECT_THAT(CostDrift(first, second), HasSubstr("push costs drifted during the step: 61 ns in its first half"));
  EXPECT_EQ(CostDrift(first, first), "");
  EXPECT_EQ(CostDrift(noisy, second), "");  // within the noise
}

TEST(Correction, OnlyAwaitedCallsAreWaitedFor) {
  // Windows [100,200) and [300,400). The controller got call 11 at 195 and
  // call 12 at 390; call 13 at 250, between windows.
  const std::vector<WaitWindow> windows = {{100, 200, 1, ""}, {300, 400, 1, ""}};
  const auto awaited = AwaitedIn({{11, 195}, {12, 390}, {13, 250}}, windows);
  ASSERT_EQ(awaited.size(), 2u);
  EXPECT_EQ(awaited.at(11), 0u);
  EXPECT_EQ(awaited.at(12), 1u);
  // Worker thread 7 ran call 11 [110,190) and call 12 [310,395); thread 8
  // ran an unrelated range [120,199) (busy on its own, ended later) and a
  // range with a payload nobody awaited.
  auto span = [](int64_t b, int64_t e, int64_t tid, uint64_t payload, bool has_payload) {
    Span s;
    s.begin_ns = b, s.end_ns = e, s.tid = s.end_tid = tid, s.payload = payload, s.has_payload = has_payload;
    return s;
  };
  const std::vector<Span> spans = {span(110, 190, 7, 11, true), span(310, 395, 7, 12, true),
                                   span(120, 199, 8, 0, false), span(130, 198, 8, 99, true)};
  const auto last = LastWorkIn(spans, awaited, windows);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].end_ns, 190);
  EXPECT_EQ(last[0].tid, 7);
  EXPECT_EQ(last[1].end_ns, 395);
  EXPECT_EQ(LastWorkIn(spans, {}, windows)[0].end_ns, INT64_MIN);  // no calls awaited: no waits

  // Thread 7 paid 10 ns at 115, 130, 320 and 350; thread 8 at 150.
  const auto push = static_cast<uint8_t>(EventKind::kRangePush);
  const CostModel model({{"push", 10}}, 1.0);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[7] = {{115, push, 0}, {130, push, 0}, {320, push, 0}, {350, push, 0}};
  marks[8] = {{150, push, 0}};
  const Corrector worker(marks, model, 50);
  const auto none = [](int64_t) { return int64_t{0}; };          // a controller that paid nothing
  EXPECT_EQ(WaitShrinkNs({{&worker, last[0]}}, 100, none), 20);  // what thread 7 paid in the window
  EXPECT_EQ(WaitShrinkNs({{&worker, last[1]}}, 300, none), 20);
  // Another worker's awaited call ends at 185 with no overhead: the corrected
  // ends are 170 and 185, so the window ends only 5 ns earlier.
  EXPECT_EQ(WaitShrinkNs({{&worker, last[0]}, {nullptr, LastWork{185, 9}}}, 100, none), 5);
  EXPECT_EQ(WaitShrinkNs({{nullptr, LastWork{}}}, 100, none), 0);  // nothing awaited
  // The controller paid 3 ns before the window and 4 ns more in it: the
  // worker's (taken to start in step with it) then ends 3 + 20 ns earlier,
  // of which the controller's own correction already took 7.
  EXPECT_EQ(WaitShrinkNs({{&worker, last[0]}}, 100, [](int64_t t) { return t < 150 ? int64_t{3} : 7; }), 16);
}

TEST(Correction, ACallStartsWhenItsSubmitArrivesNotEarlierForTheWorkersOwnPast) {
  // Worker thread 7: its own range [100, 200] (push 40, pop 40), idle, then
  // a call [500, 700] (push 40 at 500, pop 40 at 700). The controller had
  // paid 15 ns when it submitted the call.
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  const CostModel model({{"push", 40}, {"pop", 40}}, 1.0);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[7] = {{100, push, 0}, {200, pop, 0}, {500, push, 0}, {700, pop, 0}};
  Corrector own(marks, model, 50);
  EXPECT_EQ(own.Correct(7, 500), 500 - 120);  // on its own: its past shifts the call
  Corrector w(marks, model, 50);
  ASSERT_TRUE(w.Reanchor(7, 500, 15));
  EXPECT_EQ(w.Correct(7, 200), 200 - 80);       // before the call: as before
  EXPECT_EQ(w.Correct(7, 500), 500 - 15 - 40);  // the submit's shift, and its own push
  EXPECT_EQ(w.Correct(7, 700), 700 - 15 - 80);
  EXPECT_EQ(w.RemovedNs(7, 0, 1000), 160);  // what it paid: re-anchoring costs nothing
  EXPECT_FALSE(w.Reanchor(7, 400, 0));      // calls in time order only
  // A thread busy until just before the call cannot start it before it was
  // free: after its range ending at 450 (corrected 370), the call (its push
  // paid in between) begins at 370 at the earliest, whatever the controller
  // paid.
  marks[7] = {{100, push, 0}, {450, pop, 0}, {500, push, 0}, {700, pop, 0}};
  Corrector busy(marks, model, 50);
  ASSERT_TRUE(busy.Reanchor(7, 500, 1000));
  EXPECT_EQ(busy.Correct(7, 450), 370);
  EXPECT_EQ(busy.Correct(7, 500), 370);

  // The controller's window [450, 800]: it submitted at 480 (shift 15) and
  // paid 5 ns more while it waited (shift 20 from 600 on). The call's work
  // ends at 700, corrected 605; the controller's own correction puts 700 at
  // 680: the window ends 75 ns earlier on top.
  const LastWork last{700, 7, 42};
  const auto controller = [](int64_t t) { return t < 600 ? int64_t{15} : 20; };
  EXPECT_EQ(WaitShrinkNs({{&w, last, true}}, 450, controller), 700 - 20 - (700 - 95));
}

// The corrector searches from hints (where the last search ended); its
// shifts and re-anchorings are their definitions (correction.h), computed
// here by brute force over the marks as charged, whatever order the
// questions come in.
TEST(Correction, ShiftsAndReanchoringsAreTheirDefinitionsWhateverTheOrderOfQuestions) {
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  const CostModel model({{"push", 40}, {"pop", 30}}, 1.0);
  std::srand(5);
  for (int round = 0; round < 20; ++round) {
    std::map<int64_t, std::vector<CostMark>> marks;
    int64_t t = 1000;
    for (int i = 0; i < 400; ++i) {
      t += std::rand() % 4 == 0 ? 0 : std::rand() % (round % 2 == 0 ? 200 : 5000);  // equal times too
      marks[7].push_back({t, i % 2 == 0 ? push : pop, 0});
    }
    Corrector c(marks, model, 900);
    const ThreadCosts& charged = c.overhead().threads.at(7);
    auto paid = [&](int64_t at) {  // ps paid at or before `at`
      int64_t ps = 0;
      for (size_t i = 0; i < charged.ts.size(); ++i) ps = charged.ts[i] <= at ? charged.cum_ps[i] : ps;
      return ps;
    };
    std::vector<std::pair<int64_t, int64_t>> anchors;  // (ts, base_ps)
    auto shift_ps = [&](int64_t at) {
      for (auto a = anchors.rbegin(); a != anchors.rend(); ++a) {
        if (a->first <= at) return a->second + paid(at) - paid(a->first - 1);
      }
      return paid(at);
    };
    auto last_before = [&](int64_t at) {  // the thread's last mark before `at`, or none
      std::optional<int64_t> last;
      for (int64_t ts : charged.ts) last = ts < at ? std::optional<int64_t>(ts) : last;
      return last;
    };
    auto reanchor = [&](int64_t begin, int64_t caller_ns) {
      if (!anchors.empty() && begin <= anchors.back().first) return false;
      const std::optional<int64_t> free = last_before(begin);
      const int64_t free_ns = free ? *free : 900, free_shift_ps = free ? shift_ps(*free) : 0;
      const int64_t base =
          std::min(caller_ns * 1000, (begin - free_ns) * 1000 + free_shift_ps - (paid(begin) - paid(begin - 1)));
      anchors.emplace_back(begin, std::max<int64_t>(0, base));
      return true;
    };
    for (int64_t begin = 1000; begin < t; begin += 1 + std::rand() % 3000) {
      const int64_t caller_ns = std::rand() % 200;
      if (std::rand() % 3 == 0) {
        ASSERT_EQ(c.Reanchor(7, begin, caller_ns), reanchor(begin, caller_ns)) << "round " << round;
        continue;
      }
      const std::optional<int64_t> prev = last_before(begin);
      const int64_t carried_ns = prev ? shift_ps(*prev) / 1000 : 0;
      const bool idle = prev && carried_ns > caller_ns && begin - *prev > carried_ns;
      ASSERT_EQ(c.ReanchorAfterIdle(7, begin, caller_ns), idle && reanchor(begin, caller_ns)) << "round " << round;
    }
    Corrector::ThreadShift view = c.ShiftOf(7);
    for (int k = 0; k < 3000; ++k) {  // in time order, then anywhere
      const int64_t at = k < 1500 ? 900 + k * (t - 900) / 1500 : 800 + std::rand() % (t - 700);
      ASSERT_EQ(view.Correct(at), at - shift_ps(at) / 1000) << "round " << round << " at " << at;
      ASSERT_EQ(c.Correct(7, at), at - shift_ps(at) / 1000) << "round " << round << " at " << at;
    }
  }
}

TEST(Correction, AnEventCostsAtMostTheTimeSinceItsThreadsPreviousMark) {
  // Costs calibrated on a busier machine: 40 ns a push, but the pushes came
  // 25 ns apart. Each is charged what passed, no more: times keep their order.
  const auto push = static_cast<uint8_t>(EventKind::kRangePush);
  const CostModel model({{"push", 40}}, 1.0);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[1] = {{100, push, 0}, {125, push, 0}, {150, push, 0}, {300, push, 0}};
  const Corrector c(marks, model, 50);
  EXPECT_EQ(c.Correct(1, 100), 60);  // 50 ns passed since the step began: 40 charged
  EXPECT_EQ(c.Correct(1, 125), 60);  // 25 ns passed: 25 charged
  EXPECT_EQ(c.Correct(1, 150), 60);
  EXPECT_EQ(c.Correct(1, 300), 170);  // 150 ns passed: 40
  EXPECT_EQ(c.overhead().capped, 2u);
  EXPECT_EQ(c.overhead().total_ns, 130);
  // What the model wanted beyond the gaps (15 + 15) is the spread between
  // its estimate and theirs: stated, in the systematic part.
  EXPECT_EQ(c.overhead().capped_ns, 30);
  EXPECT_EQ(c.overhead().systematic_ns, 30);
}

TEST(Correction, ACostSampleIsBoundedWithTheEventItTimed) {
  // A push costing 40 at 100 (60 ns since the step began) and its cost
  // sample costing 30 at 120, recorded right after it: the sample's own
  // 20 ns gap is shorter than its cost, but the two together had 80 ns
  // since the step began, so neither is capped: the sample's other 10 ns
  // are charged at the push, whose corrected time stays before the
  // sample's. A push whose gap its own cost fills leaves its sample only
  // the sample's gap: capped.
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), sample = static_cast<uint8_t>(EventKind::kCostSample);
  const CostModel model({{"push", 40}, {"sample", 30}}, 1.0);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[1] = {{100, push, 0}, {120, sample, 0}, {160, push, 0}, {175, sample, 0}};
  const Corrector c(marks, model, 40);
  EXPECT_EQ(c.Correct(1, 100), 50);  // 40 + the sample's 10 beyond its gap
  EXPECT_EQ(c.Correct(1, 120), 50);  // 40 + 30 removed of the 80 since the step began
  EXPECT_LE(c.Correct(1, 100), c.Correct(1, 120));
  EXPECT_EQ(c.Correct(1, 160), 50);  // 40 passed: 40 charged, no slack left
  EXPECT_EQ(c.Correct(1, 175), 50);  // 15 passed: 15 of the sample's 30
  EXPECT_EQ(c.overhead().events, 2u);
  EXPECT_EQ(c.overhead().capped, 1u);
  EXPECT_EQ(c.overhead().capped_ns, 15);
  EXPECT_EQ(c.overhead().total_ns, 40 + 30 + 40 + 15);
}

TEST(Correction, WaitMarksShiftTheControllerButAreNotEvents) {
  // Controller thread 1: a push at 100 (10 ns), its window ends at 200 where
  // it waited 5 ns on a worker's overhead; an event after that at 300.
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  const CostModel model({{"push", 10}, {"pop", 0}}, 1.0);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[1] = {{100, push, 0}, {200, pop, 0}, {200, 0, 0, 5000}, {300, push, 0}};
  const Corrector c(marks, model, 50);
  EXPECT_EQ(c.Correct(1, 199), 189);
  EXPECT_EQ(c.Correct(1, 200), 185);  // the window ends 5 ns earlier on top
  EXPECT_EQ(c.Correct(1, 300), 275);
  EXPECT_EQ(c.overhead().events, 3u);
  EXPECT_EQ(c.overhead().waits_ns, 5);
  EXPECT_EQ(c.overhead().total_ns, 25);
}

TEST(Correction, CpuSamplesAreChargedTheirCostButAreNotEvents) {
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), sample = static_cast<uint8_t>(EventKind::kCpuSample);
  const CostModel model({{"push", 10}, {"cpu_sample", 3}}, 1.0);
  EXPECT_EQ(model.CostPs(sample, 0), 3000);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[1] = {{100, push, 0}, {150, sample, 0}, {180, sample, 0}, {200, push, 0}};
  const Corrector c(marks, model, 50);
  EXPECT_EQ(c.Correct(1, 199), 199 - 10 - 6);
  EXPECT_EQ(c.overhead().events, 2u);
  EXPECT_EQ(c.overhead().cpu_samples, 2u);
  EXPECT_EQ(c.overhead().cpu_samples_ns, 6);
  EXPECT_EQ(c.overhead().calibrated_events, 2u);  // the pushes; samples are not recorded events
}

TEST(Correction, ACpuSampleCostsItsHandlersTimeInPlacePlusTheSignalsStartUpFigure) {
  // Start-up: 3 us a sample, of which the handler took 2 us (the rest, 1 us,
  // is the signal's delivery and return). In place the handler took 4.5 us
  // a sample (900 us over 200 samples, in four flushes of 1, 99, 50 and 50
  // samples: the mean is the totals', not the flushes' figures'): a sample
  // costs 5.5 us, from the run.
  const auto sample = static_cast<uint8_t>(EventKind::kCpuSample);
  const std::map<std::string, double> costs = {{"push", 10}, {"cpu_sample", 3000}, {"cpu_sample_handler", 2000}};
  HandlerStats run;
  for (const auto& [n, ps] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 9'000'000}, {99, 441'000'000}, {50, 225'000'000}, {50, 225'000'000}}) {
    run.samples += n;
    run.ps += ps;
    run.per_flush.Add(static_cast<double>(ps) / static_cast<double>(n));
  }
  const CostModel model(costs, 1.0, nullptr, nullptr, &run);
  EXPECT_EQ(model.CostPs(sample, 0), 5'500'000);
  EXPECT_EQ(model.table().own_source[sample], CostSource::kRun);
  EXPECT_GT(model.MeanVarPs2(sample), 0);
  EXPECT_EQ(model.used().sources.at("cpu_sample"), "run");
  EXPECT_DOUBLE_EQ(model.used().measured.at("cpu_sample").mean_ns, 4500);
  EXPECT_EQ(model.used().measured.at("cpu_sample").samples, 4u);  // flushes
  // Fewer than kMinSamples flushes' figures, or no start-up figure for the
  // handler's part: the start-up figure alone.
  HandlerStats few;
  few.samples = 100;
  few.ps = 900'000'000;
  few.per_flush.Add(9'000'000);
  EXPECT_EQ(CostModel(costs, 1.0, nullptr, nullptr, &few).CostPs(sample, 0), 3'000'000);
  EXPECT_EQ(CostModel({{"cpu_sample", 3000}}, 1.0, nullptr, nullptr, &run).CostPs(sample, 0), 3'000'000);
  // Scaled as every cost is.
  EXPECT_EQ(CostModel(costs, 2.0, nullptr, nullptr, &run).CostPs(sample, 0), 11'000'000);
  // The uncertainty's sampling part counts the step's CPU samples.
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[1] = {{100'000, sample, 0}, {200'000, sample, 0}};
  const Corrector c(marks, model, 0);
  EXPECT_EQ(c.overhead().cpu_samples_ns, 11'000);
  EXPECT_EQ(c.overhead().uncertainty_parts.sampling_ns, std::llround(2 * std::sqrt(model.MeanVarPs2(sample)) / 1000));
}

TEST(Correction, ACpuSampleDoesNotCapTheEventAfterIt) {
  // push @100 and @200 costing 90 each: a free CPU sample @195 (inside the
  // second push's recording call) leaves it its 90; a sample costing 20 @195
  // leaves it 80, so the two together take what passed since the first push.
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), sample = static_cast<uint8_t>(EventKind::kCpuSample);
  std::map<int64_t, std::vector<CostMark>> marks;
  marks[1] = {{100, push, 0}, {195, sample, 0}, {200, push, 0}};
  const Corrector free_samples(marks, CostModel({{"push", 90}}, 1.0), 0);
  EXPECT_EQ(free_samples.overhead().total_ns, 180);
  EXPECT_EQ(free_samples.overhead().capped, 0u);
  const Corrector costly(marks, CostModel({{"push", 90}, {"cpu_sample", 20}}, 1.0), 0);
  EXPECT_EQ(costly.Correct(1, 200) - costly.Correct(1, 100), 0);  // order kept, nothing more removed than passed
  EXPECT_EQ(costly.overhead().cpu_samples_ns, 20);
  EXPECT_EQ(costly.overhead().total_ns, 90 + 20 + 80);
}

// ---- Cross-stack attribution (attribution.h)

TEST(Attribution, ObjectPatternsMatchFileNamesStemsAndSitePackagesModules) {
  EXPECT_TRUE(MatchesObject("libtorch*", "/x/site-packages/torch/lib/libtorch_cpu.so"));
  EXPECT_TRUE(MatchesObject("libtorch*", "/x/site-packages/torch/lib/libtorch_python.so"));
  EXPECT_FALSE(MatchesObject("libtorch*", "/x/site-packages/numpy/core/_multiarray_umath.so"));
  EXPECT_TRUE(MatchesObject("mujoco", "/opt/mujoco/lib/libmujoco.so.3.1.6"));  // the library stem
  EXPECT_TRUE(
      MatchesObject("mujoco", "/v/lib/python3.11/site-packages/mujoco/_functions.cpython-311-x86_64-linux-gnu.so"));
  EXPECT_TRUE(MatchesObject("jaxlib", "/v/site-packages/jaxlib/xla_extension.so"));  // a package of the module path
  EXPECT_TRUE(MatchesObject("jax*", "/v/site-packages/jaxlib/xla_extension.so"));
  EXPECT_FALSE(MatchesObject("jax", "/v/site-packages/jaxlib/xla_extension.so"));  // bare: the package jax only
  EXPECT_TRUE(MatchesObject("torch._C", "/v/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so"));
  EXPECT_TRUE(
      MatchesObject("*/lib-dynload/*", "/py/lib/python3.11/lib-dynload/_struct.cpython-311-x86_64-linux-gnu.so"));
  EXPECT_TRUE(MatchesObject("python*", "/root/.pyenv/versions/3.11.7/bin/python3.11"));
  EXPECT_FALSE(MatchesObject("libcuda.*", "/usr/local/cuda/lib64/libcudart.so.13"));
  EXPECT_TRUE(MatchesObject("libcudart*", "/usr/local/cuda/lib64/libcudart.so.13"));
  EXPECT_FALSE(MatchesObject("mujoco", ""));
}

TEST(Attribution, ModulePatternsAreGlobsOrAPackageWithItsSubmodules) {
  EXPECT_TRUE(MatchesModule("gymnasium", "gymnasium"));
  EXPECT_TRUE(MatchesModule("gymnasium", "gymnasium.envs.classic_control.cartpole"));
  EXPECT_FALSE(MatchesModule("gym", "gymnasium.envs"));
  EXPECT_TRUE(MatchesModule("gymnasium.*", "gymnasium.envs"));
  EXPECT_FALSE(MatchesModule("gymnasium.*", "gymnasium"));
  EXPECT_TRUE(MatchesModule("*sim*", "my_simulator"));
}

TEST(Attribution, ClassifiesNativeCodeByTheFirstObjectOfItsStackThatNamesACategory) {
  Config::Attribution patterns;  // the defaults
  patterns.simulator = {"libsim*"};
  const AttributionRules rules(patterns);
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6", libm = "/lib/x86_64-linux-gnu/libm.so.6";
  const std::string python = "/usr/bin/python3.11", torch = "/v/site-packages/torch/lib/libtorch_cpu.so";
  // libc called from libtorch is the backend's; libm called from a simulator's library the simulator's.
  EXPECT_EQ(rules.Classify(libc, "", torch), CpuCategory::kBackend);
  EXPECT_EQ(rules.Classify(libm, "__main__", "/opt/libsim.so\n/usr/lib/libffi.so.8\n" + python),
            CpuCategory::kSimulator);
  // Its leaf alone (no stack walked): other native code, as before stacks.
  EXPECT_EQ(rules.Classify(libm, "__main__"), CpuCategory::kOther);
  // The walk stops at the interpreter: what called Python does not decide.
  EXPECT_EQ(rules.Classify(libc, "__main__", python + "\n" + torch), CpuCategory::kPython);
  // Reached through a native extension no pattern names: other native code.
  EXPECT_EQ(rules.Classify(libc, "__main__", "/v/site-packages/ext/_fast.so\n" + python), CpuCategory::kOther);
  // The first match wins, from the leaf outwards.
  EXPECT_EQ(rules.Classify(libc, "", "/opt/libsim.so\n" + torch), CpuCategory::kSimulator);
  EXPECT_EQ(rules.Classify(libc, "", torch + "\n/opt/libsim.so"), CpuCategory::kBackend);
  // The CUDA API and the profiler decide wherever in the chain.
  EXPECT_EQ(rules.Classify(libc, "", "/usr/lib/libcuda.so.1\n" + torch), CpuCategory::kCudaApi);
  EXPECT_EQ(rules.Classify(libc, "x", "/v/site-packages/rlscope_ray/librlscope_collector.so"), CpuCategory::kProfiler);
}

TEST(Attribution, ClassifiesByObjectThenPythonModuleWithTheConfigsPatterns) {
  Config::Attribution patterns;  // the defaults
  patterns.simulator = {"mujoco", "gymnasium"};
  const AttributionRules rules(patterns);
  const std::string libpython = "/py/lib/libpython3.11.so.1.0";
  EXPECT_EQ(rules.Classify(libpython, "__main__"), CpuCategory::kPython);
  EXPECT_EQ(rules.Classify("/py/bin/python3.11", ""), CpuCategory::kPython);  // a static interpreter
  EXPECT_EQ(rules.Classify(libpython, "gymnasium.envs.cartpole"), CpuCategory::kSimulator);
  // An environment's step is the simulator's, the backend and numerics it calls included.
  EXPECT_EQ(rules.Classify("/v/site-packages/torch/lib/libtorch_cpu.so", "gymnasium.envs"), CpuCategory::kSimulator);
  EXPECT_EQ(rules.Classify("/v/site-packages/numpy/core/_multiarray_umath.cpython-311.so", "gymnasium.envs"),
            CpuCategory::kSimulator);
  // numpy, scipy and their bundled BLAS are the backend elsewhere (defaults).
  EXPECT_EQ(rules.Classify("/v/site-packages/numpy/core/_multiarray_umath.cpython-311.so", "__main__"),
            CpuCategory::kBackend);
  EXPECT_EQ(rules.Classify("/v/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so", "__main__"),
            CpuCategory::kBackend);
  EXPECT_EQ(rules.Classify("/v/site-packages/some_ext/_fast.cpython-311.so", "__main__"), CpuCategory::kOther);
  EXPECT_EQ(rules.Classify("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "__main__"), CpuCategory::kCudaApi);
  EXPECT_EQ(rules.Classify("/opt/lib/libmujoco.so.3", ""), CpuCategory::kSimulator);
  EXPECT_EQ(rules.Classify("", ""), CpuCategory::kOther);  // an address in no shared object (generated code)
  // The profiler's own code, native or Python.
  EXPECT_EQ(rules.Classify("/v/site-packages/rlscope_ray/librlscope_collector.so", "__main__"), CpuCategory::kProfiler);
  EXPECT_EQ(rules.Classify("/v/site-packages/rlscope_ray/_native.cpython-311-x86_64-linux-gnu.so", "x"),
            CpuCategory::kProfiler);
  EXPECT_EQ(rules.Classify(libpython, "rlscope_ray.ray_worker"), CpuCategory::kProfiler);
  // A list replaces its default: libtorch is no backend without it.
  Config::Attribution jax_only;
  jax_only.backend = {"jax*"};
  EXPECT_EQ(AttributionRules(jax_only).Classify("/v/site-packages/torch/lib/libtorch_cpu.so", ""), CpuCategory::kOther);
  EXPECT_EQ(AttributionRules(jax_only).Classify(libpython, "jax._src.core"), CpuCategory::kBackend);
}

TEST(Attribution, SampledCpuTimeLiesJustBeforeEachSampleAfterTheThreadsPrevious) {
  // Thread 1 ran [0, 30) (samples of 10 at 10, 20, 30), slept, and ran 10
  // before its sample at 100. Thread 2's sample at 15 overlaps thread 1's
  // time: the union counts wall time once.
  const std::vector<CpuSample> samples = {
      {10, 1, 0, 0, 10, 0}, {15, 2, 0, 0, 10, 0}, {20, 1, 0, 0, 10, 0}, {30, 1, 0, 0, 10, 0}, {100, 1, 0, 0, 10, 0}};
  const std::vector<Interval> on = UnionClipped(SampledCpuIntervals(samples), 0, 200);
  ASSERT_EQ(on.size(), 2u);
  EXPECT_EQ(on[0].begin, 0);
  EXPECT_EQ(on[0].end, 30);
  EXPECT_EQ(on[1].begin, 90);
  EXPECT_EQ(on[1].end, 100);
}

TEST(Attribution, ALateSamplesBacklogCountsInTheWindowsItsThreadRanInBeforeIt) {
  // A thread sampled every 1 ms (weights of 1 ms) until 10 ms, then waiting
  // in short bursts the kernel's ticks missed, then busy from 700 ms: its
  // first sample there, at 735.5 ms, carries 92 periods (a soak saw this).
  // Before, the window [700, 1000) counted all 92 ms of it, more than the
  // thread could run there before the sample.
  constexpr int64_t kMs = 1000000;
  std::vector<CpuSample> samples;
  for (int64_t t = 1; t <= 10; ++t) samples.push_back({t * kMs, 1, 0, 0, kMs, 0});
  samples.push_back({735 * kMs + kMs / 2, 1, 0, 0, 92 * kMs, 0});
  samples.push_back({736 * kMs + kMs / 2, 1, 0, 0, kMs, 0});
  const std::vector<int64_t> from = SampleStarts(samples);
  ASSERT_EQ(from.size(), samples.size());
  EXPECT_EQ(from[10], 735 * kMs + kMs / 2 - 92 * kMs);  // just before it, after the previous sample
  auto in = [&](int64_t lo, int64_t hi) {
    int64_t ns = 0;
    for (size_t i = 0; i < samples.size(); ++i) ns += SampleNsIn(samples[i], from[i], kMs, lo, hi);
    return ns;
  };
  // The window it landed in: the period it came for, and the 34.5 ms of
  // its backlog there; the rest in the window before, none lost.
  EXPECT_EQ(in(700 * kMs, 1000 * kMs), kMs + 34 * kMs + kMs / 2 + kMs);
  EXPECT_EQ(in(10 * kMs + kMs / 2, 700 * kMs), 92 * kMs - kMs - 34 * kMs - kMs / 2);
  EXPECT_EQ(in(0, 2000 * kMs), 10 * kMs + 92 * kMs + kMs);
  // Samples that came in time count whole where they landed, as before:
  // [0, 5.5 ms) holds the samples at 1..5 ms.
  EXPECT_EQ(in(0, 5 * kMs + kMs / 2), 5 * kMs);
  // A backlog with no room before its sample (its previous sample less than
  // a period before) counts where it landed.
  const CpuSample crowded{20 * kMs, 1, 0, 0, 3 * kMs, 0};
  EXPECT_EQ(SampleNsIn(crowded, 19 * kMs + kMs / 2, kMs, 20 * kMs, 21 * kMs), 3 * kMs);
  EXPECT_EQ(SampleNsIn(crowded, 19 * kMs + kMs / 2, kMs, 0, 20 * kMs), 0);
}

TEST(Attribution, TheSamplingErrorIsBinomialOverTheEffectiveSamples) {
  Attribution a;
  a.ns[static_cast<size_t>(CpuCategory::kPython)] = 75;
  a.ns[static_cast<size_t>(CpuCategory::kBackend)] = 25;
  a.samples = 100;
  a.weight_sq_ns2 = 100;  // 100 samples of 1 ns
  EXPECT_DOUBLE_EQ(a.Share(CpuCategory::kPython), 0.75);
  EXPECT_NEAR(a.ErrorNs(CpuCategory::kPython), 100 * std::sqrt(0.75 * 0.25 / 100), 1e-9);
  a.weight_sq_ns2 = 400;  // the same CPU time in 25 samples of 4: twice the error
  EXPECT_NEAR(a.ErrorNs(CpuCategory::kBackend), 100 * std::sqrt(0.75 * 0.25 / 25), 1e-9);
}

}  // namespace
}  // namespace rlscope
