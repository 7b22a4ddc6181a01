// lastmile — SplitWindow: whether a lone row's passes split over the thread pool, from how long
// ago the sampler's previous call ended and what split and unsplit lone rows took.
#pragma once

#include <algorithm>
#include <chrono>

#include "threading/thread_pool.hpp"

namespace lastmile::detail {

// A lone row's passes may split in vocab chunks over the pool. After a run of Idle::poll the
// workers poll for ThreadPool::kPollBeforeSleep, then sleep, and a sleeping one costs the caller
// a wake-up's system call and, when it claims a chunk late, a wait. On the README's 2-core VM, a
// lone 128k-token row 2 ms after the previous call (an engine's decode step) ran 3-7 us slower
// split than in order, whatever its sampling (greedy 23.9 against 17.0 us); back to back, split,
// temperature rows ran 1.6x faster and top-p ones 1.5x. So a call splits only when it starts
// within half that poll after the previous call ended: its workers most likely still poll, or
// (after a call in order, which woke none) it wakes them once for the calls that follow. Half,
// since their poll began at the previous call's last pass, before its serial tail. The gap is a
// proxy for the workers' state, not a reading of it: after a call whose rows ran side by side
// (Idle::sleep) they sleep at once, and a lone row within the window then pays one wake-up.
//
// Within the window, splitting is not always faster: on a Xeon of 2026-12-05 a 128k top-k/top-p
// row back to back took 1.3-1.5x longer split over two threads than in order (9.2 us; the row
// sat in the caller's L2, and the worker read its half from there). So the window also learns:
// each choice's time, the median of its last three lone-row calls that follow a call that made
// the same choice within the window (the workers then still poll, or the caller's core ran
// alone; a median, since one call the machine stalled must not send the row to the slower choice
// for the hundreds of calls an average took to forget it), and it takes the faster. Two of every
// kProbeEvery calls in the window take the other choice (the second measured), which keeps the
// slower one's time current as rows change. Results are the same either way: a row's chunks are
// fixed by its length and merged in chunk order.
class SplitWindow {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kWindow = ThreadPool::kPollBeforeSleep / 2;
  static constexpr int kProbeEvery = 32;

  // What a call did with its rows: not one row, or one row in order, or one row split.
  enum class LoneRow { no, in_order, split };

  // Whether a call starting at `now` is within the window: its workers most likely still poll.
  bool is_open(Clock::time_point now) const { return called_ && now - last_end_ < kWindow; }

  // Whether a call starting at `now` should split its lone row: within the window, the choice
  // whose time is unknown or shorter (the other while probing).
  bool should_split(Clock::time_point now) const {
    if (!is_open(now)) return false;
    if (split_.count == 0) return true;
    if (in_order_.count == 0) return false;
    const bool faster = split_.ns() <= in_order_.ns();
    return probe_left_ > 0 ? !faster : faster;
  }

  // A call that started at `start` (after should_split) ended at `end`.
  void call_ended(Clock::time_point start, Clock::time_point end, LoneRow lone) {
    const bool windowed = is_open(start);
    if (lone != LoneRow::no && windowed) {
      if (lone == last_) {  // the same choice as the call before, within its window: measured
        const auto ns = std::chrono::duration<double, std::nano>(end - start).count();
        (lone == LoneRow::split ? split_ : in_order_).add(ns);
      }
      if (probe_left_ > 0) --probe_left_;
      if (++windowed_calls_ == kProbeEvery) {  // the next two probe: two in every kProbeEvery
        windowed_calls_ = 0;
        probe_left_ = 2;
      }
    }
    last_ = windowed ? lone : LoneRow::no;  // outside the window the workers may have slept
    last_end_ = end;
    called_ = true;
  }

 private:
  // A choice's time: the median of its last three measured calls (of two, their mean).
  struct RecentTimes {
    double last[3] = {};
    int count = 0;  // measured so far, up to 3
    int next = 0;   // the slot the next one takes
    void add(double value) {
      last[next] = value;
      next = (next + 1) % 3;
      count = std::min(count + 1, 3);
    }
    double ns() const {
      if (count < 3) return count == 1 ? last[0] : (last[0] + last[1]) / 2;
      return std::max(std::min(last[0], last[1]), std::min(std::max(last[0], last[1]), last[2]));
    }
  };

  Clock::time_point last_end_{};
  bool called_ = false;
  LoneRow last_ = LoneRow::no;  // the previous call's lone row, if it was within its window
  RecentTimes split_, in_order_;
  int windowed_calls_ = 0;  // lone-row calls in the window since a probe was last due
  int probe_left_ = 0;      // calls left that take the slower choice
};

}  // namespace lastmile::detail
