// SplitWindow (src/threading/split_window.hpp): a call splits its lone row over the pool only when
// it starts within half the workers' poll after the previous call ended, and only while splitting
// has been the faster choice there.
#include "threading/split_window.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace lastmile_test {
namespace {

using lastmile::detail::SplitWindow;
using lastmile::detail::ThreadPool;
using std::chrono::microseconds;
using LoneRow = SplitWindow::LoneRow;

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
  window.call_ended(kStart, kStart, LoneRow::no);
  EXPECT_TRUE(window.is_open(kStart));
  EXPECT_TRUE(window.is_open(kStart + microseconds(10)));
  EXPECT_TRUE(window.is_open(kStart + SplitWindow::kWindow - microseconds(1)));
  EXPECT_FALSE(window.is_open(kStart + SplitWindow::kWindow));
  EXPECT_FALSE(window.is_open(kStart + microseconds(2000)));  // an engine's decode step: asleep
}

TEST(SplitWindow, CountsFromTheLastCallsEnd) {
  SplitWindow window;
  window.call_ended(kStart, kStart, LoneRow::no);
  window.call_ended(kStart + microseconds(2000), kStart + microseconds(2000),
                    LoneRow::in_order);  // a call in order after a pause
  EXPECT_TRUE(window.is_open(kStart + microseconds(2010)));
  EXPECT_FALSE(window.is_open(kStart + microseconds(2000) + SplitWindow::kWindow));
}

// Lone-row calls back to back, each taking `split_us` split and `in_order_us` in order, 1 us apart:
// the choices the window makes, in call order.
std::vector<LoneRow> back_to_back(SplitWindow& window, SplitWindow::Clock::time_point& t, int calls,
                                  int split_us, int in_order_us) {
  std::vector<LoneRow> choices;
  for (int c = 0; c < calls; ++c) {
    const LoneRow choice = window.should_split(t) ? LoneRow::split : LoneRow::in_order;
    const auto end = t + microseconds(choice == LoneRow::split ? split_us : in_order_us);
    window.call_ended(t, end, choice);
    choices.push_back(choice);
    t = end + microseconds(1);
  }
  return choices;
}

int count_of(const std::vector<LoneRow>& choices, LoneRow choice) {
  return static_cast<int>(std::count(choices.begin(), choices.end(), choice));
}

TEST(SplitWindow, TakesTheFasterChoiceOnceEachIsMeasured) {
  for (const bool split_faster : {true, false}) {
    SplitWindow window;
    auto t = kStart;
    window.call_ended(t, t, LoneRow::in_order);  // the first call: outside any window
    // Split until split is measured (its second call), then in order until that is.
    const std::vector<LoneRow> learning = back_to_back(window, t, 4, split_faster ? 6 : 12, 9);
    EXPECT_EQ(learning, (std::vector<LoneRow>{LoneRow::split, LoneRow::split, LoneRow::in_order,
                                              LoneRow::in_order}));
    const std::vector<LoneRow> after = back_to_back(window, t, 20, split_faster ? 6 : 12, 9);
    EXPECT_EQ(count_of(after, split_faster ? LoneRow::split : LoneRow::in_order), 20)
        << "split faster: " << split_faster;
  }
}

TEST(SplitWindow, ProbesTheSlowerChoiceTwiceInKProbeEveryCallsAndFollowsAChange) {
  SplitWindow window;
  auto t = kStart;
  window.call_ended(t, t, LoneRow::in_order);
  back_to_back(window, t, 4, 12, 9);  // learnt: in order is faster
  const std::vector<LoneRow> steady = back_to_back(window, t, 4 * SplitWindow::kProbeEvery, 12, 9);
  EXPECT_EQ(count_of(steady, LoneRow::split), 4 * 2);
  for (size_t c = 0; c + 1 < steady.size(); ++c) {  // probes come in twos
    if (steady[c] == LoneRow::split && (c == 0 || steady[c - 1] != LoneRow::split)) {
      EXPECT_EQ(steady[c + 1], LoneRow::split) << "call " << c;
    }
  }
  // Splitting turns faster (other rows): the probes' measured calls bring the average down.
  const std::vector<LoneRow> changed = back_to_back(window, t, 8 * SplitWindow::kProbeEvery, 3, 9);
  EXPECT_EQ(changed.back(), LoneRow::split);
  EXPECT_EQ(count_of(std::vector<LoneRow>(changed.end() - SplitWindow::kProbeEvery, changed.end()),
                     LoneRow::in_order),
            2);  // the in-order probes of the last round
}

// One call at t taking `us`, then t 1 us past its end.
void call(SplitWindow& window, SplitWindow::Clock::time_point& t, int us, LoneRow choice) {
  window.call_ended(t, t + microseconds(us), choice);
  t += microseconds(us + 1);
}

TEST(SplitWindow, MeasuresOnlyACallThatFollowsTheSameChoiceInTheWindow) {
  SplitWindow window;
  auto t = kStart;
  call(window, t, 0, LoneRow::in_order);
  // A split call after one in order pays the workers' wake-up (here 500 us): not measured, so the
  // next call splits again and its 6 us are split's time.
  call(window, t, 500, LoneRow::split);
  EXPECT_TRUE(window.should_split(t));
  call(window, t, 6, LoneRow::split);
  EXPECT_FALSE(window.should_split(t));  // in order, unmeasured: measure it
  call(window, t, 9, LoneRow::in_order);
  call(window, t, 9, LoneRow::in_order);
  EXPECT_TRUE(window.should_split(t));  // 6 us against 9
  // A call after a pause runs in order, and is not measured: a call of 1000 us in order there
  // leaves split the faster choice.
  t += microseconds(5000);
  EXPECT_FALSE(window.should_split(t));
  call(window, t, 1000, LoneRow::in_order);
  EXPECT_TRUE(window.should_split(t));
}

// One stalled call (the machine preempted it: 1 ms) among split's 6 us must not send the row to
// the slower choice: each choice's time is the median of its last three, not an average, which
// took some 500 calls at 9 us to forget such a call.
TEST(SplitWindow, OneStalledCallDoesNotChangeTheChoice) {
  SplitWindow window;
  auto t = kStart;
  call(window, t, 0, LoneRow::in_order);
  back_to_back(window, t, 4, 6, 9);       // learnt: split 6 us (once), in order 9
  call(window, t, 6, LoneRow::split);     // after a call in order: not measured
  call(window, t, 6, LoneRow::split);     // split's second time
  call(window, t, 1000, LoneRow::split);  // its third: measured, as it follows a split
  const std::vector<LoneRow> after = back_to_back(window, t, 20, 6, 9);
  EXPECT_EQ(count_of(after, LoneRow::split), 20);
}

TEST(SplitWindow, ACallOfSeveralRowsBreaksTheRunOfAChoice) {
  SplitWindow window;
  auto t = kStart;
  call(window, t, 0, LoneRow::in_order);
  call(window, t, 6, LoneRow::split);
  call(window, t, 20, LoneRow::no);  // rows side by side: the workers sleep after them
  // The next split pays a wake-up (400 us): it follows no split, so it is not measured.
  call(window, t, 400, LoneRow::split);
  call(window, t, 6, LoneRow::split);  // measured: split's first time
  call(window, t, 9, LoneRow::in_order);
  call(window, t, 9, LoneRow::in_order);
  EXPECT_TRUE(window.should_split(t));  // 6 against 9: the 400 us never counted
}

}  // namespace
}  // namespace lastmile_test
