// RowSchedule (src/threading/row_schedule.hpp): rows spread over the pool while it learns a
// worker's delay, then only when n r > w + r + 2 c at its estimates; the delay is learnt only
// from a call that follows a spread one; calls in order probe every kProbeEvery-th call.
#include "threading/row_schedule.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace lastmile_test {
namespace {

using lastmile::detail::RowSchedule;

constexpr double kUs = 1000;
constexpr double c = RowSchedule::kWakeCostNs;

// Two spread calls with rows of `row` ns and a worker `delay` ns late: the second one measures.
RowSchedule learnt(double row, double delay) {
  RowSchedule s;
  s.record(true, row, delay, 1000 * kUs);
  s.record(true, row, delay, 1000 * kUs);
  return s;
}

TEST(RowSchedule, SpreadsUntilItHasMeasuredAWorkersDelay) {
  RowSchedule s;
  EXPECT_TRUE(s.spread(2));
  s.record(true, 10 * kUs, 500 * kUs, 20 * kUs);  // the first call: the worker slept long
  EXPECT_TRUE(s.spread(2));                       // not measured yet: spreads again
  s.record(true, 10 * kUs, 20 * kUs, 20 * kUs);
  // Learnt r = 10 us and w = 20 us (not the first call's 500): spread iff 10 n > 30 us + 2c.
  const auto n_needed = static_cast<int64_t>((20 * kUs + 10 * kUs + 2 * c) / (10 * kUs));
  EXPECT_FALSE(s.spread(n_needed));
  EXPECT_TRUE(s.spread(n_needed + 1));
}

TEST(RowSchedule, ALateWorkerCountsAsLateAsTheWholeRun) {
  // No worker claimed a row in the second call: its delay was at least the run's 1 ms.
  RowSchedule s;
  s.record(true, 10 * kUs, 5 * kUs, 20 * kUs);
  s.record(true, 10 * kUs, -1, 1000 * kUs);
  EXPECT_FALSE(s.spread(100));  // 1 ms of rows does not beat 1 ms + 10 us + 2c
  EXPECT_TRUE(s.spread(103));
}

TEST(RowSchedule, EstimatesFollowNewMeasurementsByAQuarter) {
  RowSchedule s = learnt(10 * kUs, 20 * kUs);
  s.record(true, 10 * kUs, 100 * kUs, 1000 * kUs);  // w -> 20 + (100 - 20) / 4 = 40 us
  const auto n_needed = static_cast<int64_t>((40 * kUs + 10 * kUs + 2 * c) / (10 * kUs));
  EXPECT_FALSE(s.spread(n_needed));  // 6 rows: not with w = 40 us; yes with 60 (a half) or 100
  EXPECT_TRUE(s.spread(n_needed + 1));
  s.record(true, 30 * kUs, 40 * kUs, 1000 * kUs);  // r -> 10 + (30 - 10) / 4 = 15 us
  EXPECT_FALSE(s.spread(4));                       // 60 us of rows against 40 + 15 + 10
  EXPECT_TRUE(s.spread(5));
}

TEST(RowSchedule, CallsInOrderProbeEveryKProbeEveryThCallWithTwoSpreadCalls) {
  RowSchedule s = learnt(1 * kUs, 100 * kUs);  // four rows of 1 us stay in order
  std::vector<int> spread_calls;
  for (int call = 1; call <= 3 * RowSchedule::kProbeEvery; ++call) {
    const bool spread = s.spread(4);
    if (spread) spread_calls.push_back(call);
    s.record(spread, 1 * kUs, spread ? 100 * kUs : -1, 10 * kUs);
  }
  // The 32nd call in order spreads, and the one after it (which measures); 31 calls in order
  // later, the next probe.
  const int k = RowSchedule::kProbeEvery;
  EXPECT_EQ(spread_calls, (std::vector<int>{k, k + 1, 2 * k + 1, 2 * k + 2}));
}

TEST(RowSchedule, ACallThatSpreadsAfterCallsInOrderIsFollowedByOneThatMeasures) {
  RowSchedule s = learnt(10 * kUs, 20 * kUs);
  s.record(false, 10 * kUs, -1, 20 * kUs);  // two rows in order
  ASSERT_TRUE(s.spread(100));
  s.record(true, 10 * kUs, 900 * kUs, 1000 * kUs);  // after sleeping: not learnt
  EXPECT_TRUE(s.spread(2));                         // the next call measures
  s.record(true, 10 * kUs, 20 * kUs, 20 * kUs);
  // w stayed 20 us: five rows of 10 us spread (50 > 20 + 10 + 2c), which the 900 us learnt, even
  // by a quarter, would forbid; two do not.
  EXPECT_TRUE(s.spread(5));
  EXPECT_FALSE(s.spread(2));
}

TEST(RowSchedule, CountsCallsInOrderWithoutEnd) {
  // A sampler on one thread records calls in order for ever: the count stops at the probe's.
  RowSchedule s = learnt(1 * kUs, 100 * kUs);
  for (int call = 0; call < 100000; ++call) s.record(false, 1 * kUs, -1, 4 * kUs);
  EXPECT_TRUE(s.spread(4));  // a probe is due, and stays due
}

}  // namespace
}  // namespace lastmile_test
