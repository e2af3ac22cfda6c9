// The breakdown engine and the overhead corrector on constructed timelines
// with known answers: overlaps, nesting, idle gaps, GPU streams overlapping
// each other, and the per-thread shift of overhead correction.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "aggregator/breakdown.h"
#include "aggregator/correction.h"
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
  EXPECT_EQ(o.cpu_gpu, 10);   // [20,30)
  EXPECT_EQ(o.cpu_only, 20 + 20);  // [0,20) + [60,80)
  EXPECT_EQ(o.gpu_only, 20);  // [30,50), counted once though two streams ran
  EXPECT_EQ(o.idle, 10 + 20);  // [50,60) + [80,100)
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
  EXPECT_EQ(c.total_ns(), 50);
  EXPECT_EQ(c.RemovedNs(1, 150, 350), 20);
}

TEST(Correction, EntryPointCostsApplyToOpeningEventsAndScale) {
  const CostModel model({{"push", 8}, {"pop", 8}, {"py_nvtx_push", 300}}, 0.5);
  const auto push = static_cast<uint8_t>(EventKind::kRangePush), pop = static_cast<uint8_t>(EventKind::kRangePop);
  EXPECT_EQ(model.CostPs(push, kFlagNone), 4000);
  EXPECT_EQ(model.CostPs(push, kFlagViaNvtxEx | kFlagHasPayload), 154000);
  EXPECT_EQ(model.CostPs(pop, kFlagNone), 4000);
  EXPECT_EQ(model.CostPs(200, kFlagNone), 0);  // unknown kinds cost nothing
  EXPECT_DOUBLE_EQ(model.costs_ns().at("py_nvtx_push"), 150.0);
}

}  // namespace
}  // namespace rlscope
