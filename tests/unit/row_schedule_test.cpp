// RowSchedule (src/threading/row_schedule.hpp): rows spread over the pool while it learns a
// worker's delay, then only when n r > w + r + 2 c at its estimates; the delay is learnt only
// from a call that follows a spread one; calls in order probe after 1, 2, 4, ... and at most
// kProbeEvery calls in order, and after 1 again when a worker missed a spread call.
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

// The calls (numbered from 1) that spread over `calls` calls of `rows` rows of 1 us, each spread
// one measuring a worker `delay` ns late.
std::vector<int> spread_calls(RowSchedule& s, int calls, int64_t rows, double delay) {
  std::vector<int> spread;
  for (int call = 1; call <= calls; ++call) {
    const bool spreads = s.spread(rows);
    if (spreads) spread.push_back(call);
    s.record(spreads, 1 * kUs, spreads ? delay : -1, 10 * kUs);
  }
  return spread;
}

TEST(RowSchedule, ProbesComeAfter1Then2Then4UpToKProbeEveryCallsInOrder) {
  RowSchedule s = learnt(1 * kUs, 100 * kUs);  // four rows of 1 us stay in order
  // Each probe is two spread calls (the second measures) that send the rows back in order.
  static_assert(RowSchedule::kProbeEvery == 32);
  EXPECT_EQ(spread_calls(s, 110, 4, 100 * kUs),
            (std::vector<int>{2, 3, 6, 7, 12, 13, 22, 23, 40, 41, 74, 75, 108, 109}));
}

TEST(RowSchedule, SpreadCallsThatMeasuredTheWorkerKeepTheProbesBackOff) {
  RowSchedule s = learnt(1 * kUs, 100 * kUs);
  spread_calls(s, 110, 4, 100 * kUs);  // probes every 32 calls in order by now
  EXPECT_EQ(spread_calls(s, 3, 1000, 100 * kUs), (std::vector<int>{1, 2, 3}));  // 1 ms of rows
  // w was measured just now: the 4-row batches after them wait the 32 calls for their probe.
  EXPECT_EQ(spread_calls(s, 40, 4, 100 * kUs), (std::vector<int>{33, 34}));
}

TEST(RowSchedule, SpreadCallsThatEndWithNoWorkerStartTheProbesCountAgain) {
  RowSchedule s = learnt(1 * kUs, 100 * kUs);
  spread_calls(s, 110, 4, 100 * kUs);
  EXPECT_EQ(spread_calls(s, 2, 1000, 100 * kUs), (std::vector<int>{1, 2}));
  ASSERT_TRUE(s.spread(1000));
  s.record(true, 1 * kUs, -1, 1000 * kUs);  // no worker came: w is a lower bound
  EXPECT_EQ(spread_calls(s, 8, 4, 100 * kUs), (std::vector<int>{2, 3, 6, 7}));
}

TEST(RowSchedule, OneWorkerWithoutACoreForACallDoesNotKeepManyRowsInOrderLong) {
  // The bench saw it: the second call of 64 rows of 7.3 us found no worker in 738 us, which the
  // first value takes whole; its worker came 30 us late again afterwards. Two probes bring w down
  // to 430 us, and the rows spread again from the 6th call on (the 65th before the probes backed
  // off: one probe at the 32nd left w at 561 us).
  RowSchedule s;
  s.record(true, 7.3 * kUs, 8 * kUs, 900 * kUs);
  s.record(true, 7.3 * kUs, -1, 738 * kUs);
  std::vector<int> spread;
  for (int call = 1; call <= 40; ++call) {
    const bool spreads = s.spread(64);
    if (spreads) spread.push_back(call);
    s.record(spreads, 7.3 * kUs, spreads ? 30 * kUs : -1, spreads ? 250 * kUs : 467 * kUs);
  }
  std::vector<int> expected = {2, 3};
  for (int call = 6; call <= 40; ++call) expected.push_back(call);
  EXPECT_EQ(spread, expected);
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
