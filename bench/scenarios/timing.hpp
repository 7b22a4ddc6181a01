// lastmile bench — how the bench times: medians of calls taken in turns, so that calls compared
// with each other meet the same moments of a shared machine, and how late a sleeping worker
// thread joins a run.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace lastmile::bench {

// The median of `values` (the upper one of an even count).
double median(std::vector<double> values);

// Median seconds per call of each of `calls`, timed in turns (a, b, a, b, ...) so that every one
// meets the same moments of a shared machine: one warm-up round, then at least 5 rounds and 0.3 s
// of the first call's time (at most 25 rounds). With a pause, an untimed idle wait before every
// call, and 100 rounds (a call after a pause varies more).
std::vector<double> median_seconds_in_turns(const std::vector<std::function<void()>>& calls,
                                            std::chrono::microseconds pause = {});

// Median seconds per call: one warm-up call, then at least 5 calls and 0.3 s (at most 25 calls).
double median_seconds(const std::function<void()>& call);

// How late a worker asleep for a decode step's 1 ms starts a run: ThreadPool's
// last_worker_delay_ns (the first worker to claim a task) over kRuns runs, each of 8 tasks a thread
// of 25 us. A run the caller finished before any worker came measures nothing. Every call that
// spreads its rows pays this once: on the README's 2-core VM a median of 32-44 us in five bench
// runs, of a 64-row call of 32k tokens that took about 270 us (the waking caller also spends some
// 14 us in the system call); a call of 64 rows of 256k tokens took 1.4-1.6 ms.
struct WorkerStart {
  static constexpr size_t kRuns = 30;
  size_t measured = 0;  // runs that a worker joined
  double median_us = 0;
};

// nullopt on one thread: no worker to wake.
std::optional<WorkerStart> worker_start(int threads);

}  // namespace lastmile::bench
