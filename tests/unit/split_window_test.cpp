// SplitWindow (src/threading/split_window.hpp): a call splits its lone row over the pool only when
// it starts within half the workers' poll after the previous call ended.
#include "threading/split_window.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace lastmile_test {
namespace {

using lastmile::detail::SplitWindow;
using lastmile::detail::ThreadPool;
using std::chrono::microseconds;

const SplitWindow::Clock::time_point kStart = SplitWindow::Clock::now();

TEST(SplitWindow, TheFirstCallRunsInOrder) {
  const SplitWindow window;  // the workers have never run: asleep
  EXPECT_FALSE(window.is_open(kStart));
  // Also at the clock's start, within kWindow of the default end time: only "no call yet" says no.
  EXPECT_FALSE(window.is_open(SplitWindow::Clock::time_point{}));
  EXPECT_FALSE(window.is_open(SplitWindow::Clock::time_point{} + microseconds(10)));
}

TEST(SplitWindow, OpensForACallThatFollowsWithinHalfThePoll) {
  static_assert(SplitWindow::kWindow == ThreadPool::kPollBeforeSleep / 2);
  SplitWindow window;
  window.call_ended(kStart);
  EXPECT_TRUE(window.is_open(kStart));
  EXPECT_TRUE(window.is_open(kStart + microseconds(10)));
  EXPECT_TRUE(window.is_open(kStart + SplitWindow::kWindow - microseconds(1)));
  EXPECT_FALSE(window.is_open(kStart + SplitWindow::kWindow));
  EXPECT_FALSE(window.is_open(kStart + microseconds(2000)));  // an engine's decode step: asleep
}

TEST(SplitWindow, CountsFromTheLastCallsEnd) {
  SplitWindow window;
  window.call_ended(kStart);
  window.call_ended(kStart + microseconds(2000));  // a call in order after a pause
  EXPECT_TRUE(window.is_open(kStart + microseconds(2010)));
  EXPECT_FALSE(window.is_open(kStart + microseconds(2000) + SplitWindow::kWindow));
}

}  // namespace
}  // namespace lastmile_test
