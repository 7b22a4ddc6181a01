// lastmile bench — medians in turns and the worker's start (see the header).
#include "timing.hpp"

#include <algorithm>
#include <thread>

#include "threading/thread_pool.hpp"

namespace lastmile::bench {
namespace {

double seconds(const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

std::vector<double> median_seconds_in_turns(const std::vector<std::function<void()>>& calls,
                                            std::chrono::microseconds pause) {
  for (const auto& call : calls) call();
  std::vector<std::vector<double>> times(calls.size());
  double first_total = 0;
  const bool paused = pause.count() > 0;
  const size_t min_rounds = paused ? 100 : 5, max_rounds = paused ? 100 : 25;
  while (times[0].size() < max_rounds && (times[0].size() < min_rounds || first_total < 0.3)) {
    // With pauses, odd rounds run the calls backwards: the first call after the previous
    // round's last ran about 10% faster than the rest (the same sampler in every place).
    const bool backwards = paused && times[0].size() % 2 == 1;
    for (size_t k = 0; k < calls.size(); ++k) {
      const size_t c = backwards ? calls.size() - 1 - k : k;
      if (paused) std::this_thread::sleep_for(pause);
      times[c].push_back(seconds(calls[c]));
    }
    first_total += times[0].back();
  }
  std::vector<double> medians;
  for (const auto& t : times) medians.push_back(median(t));
  return medians;
}

double median_seconds(const std::function<void()>& call) {
  return median_seconds_in_turns({call})[0];
}

std::optional<WorkerStart> worker_start(int threads) {
  if (threads < 2) return std::nullopt;
  detail::ThreadPool pool(threads);
  // Tasks long enough that the caller cannot take them all before a worker comes.
  auto task = [](int64_t, int) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(25);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  std::vector<double> delays;
  for (size_t run = 0; run < WorkerStart::kRuns; ++run) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pool.run(8 * threads, task);
    if (pool.last_worker_delay_ns() >= 0)
      delays.push_back(static_cast<double>(pool.last_worker_delay_ns()) / 1000);
  }
  WorkerStart start;
  start.measured = delays.size();
  if (!delays.empty()) start.median_us = median(delays);
  return start;
}

}  // namespace lastmile::bench
