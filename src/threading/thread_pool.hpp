// lastmile — a fixed pool of worker threads that run the rows of one call.
// Which worker runs which row is left to chance; no result may depend on it (rows are
// independent and every random number is keyed by request, DESIGN "Randomness").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lastmile::detail {

class ThreadPool {
 public:
  // The calling thread counts as one. Throws lastmile::Error when a thread cannot be started
  // (after stopping the ones that did).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls task(i, worker) once for each i in [0, num_tasks), worker in [0, num_threads()), and
  // returns when every call has returned. If a call throws, the remaining tasks are skipped and
  // the first exception is rethrown here, after all workers are idle. Allocates nothing.
  template <typename Task>
  void run(int64_t num_tasks, Task& task) {
    run_erased(num_tasks, &task, [](void* t, int64_t i, int w) { (*static_cast<Task*>(t))(i, w); });
  }

 private:
  using Erased = void (*)(void*, int64_t, int);
  void run_erased(int64_t num_tasks, void* task, Erased call);
  void work(int worker);
  void drain(int worker);
  void stop_workers();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stopping_ = false;
  void* task_ = nullptr;
  Erased call_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;  // the first exception of the current run
};

}  // namespace lastmile::detail
