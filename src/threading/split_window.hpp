// lastmile — SplitWindow: whether a lone row's passes split over the thread pool, from how long
// ago the sampler's previous call ended.
#pragma once

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
// Results are the same either way: a row's chunks are fixed by its length and merged in chunk
// order.
class SplitWindow {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kWindow = ThreadPool::kPollBeforeSleep / 2;

  // Whether a call starting at `now` should split its lone row.
  bool is_open(Clock::time_point now) const { return called_ && now - last_end_ < kWindow; }
  void call_ended(Clock::time_point now) {
    last_end_ = now;
    called_ = true;
  }

 private:
  Clock::time_point last_end_{};
  bool called_ = false;
};

}  // namespace lastmile::detail
