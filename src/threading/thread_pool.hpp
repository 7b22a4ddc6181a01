// lastmile — a fixed pool of worker threads that run the tasks of one call: the rows of a batch,
// or the vocab chunks of a row when a batch has fewer rows than threads.
// Which worker runs which task is left to chance; no result may depend on it (rows are
// independent, every random number is keyed by request, and a row's chunks merge in chunk order:
// DESIGN "Randomness").
#pragma once

#include <atomic>
#include <chrono>
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

  int num_threads() const;  // 1 in a forked child: its workers stayed in the parent

  // How long after the last run was published a worker claimed its first task (the wake-up a
  // sleeping worker costs), or -1 when the caller ran every task (or the run went in order).
  int64_t last_worker_delay_ns() const {
    return last_worker_delay_ns_.load(std::memory_order_relaxed);
  }

  // What the workers do after a run: sleep at once (the next run is the caller's next call), or
  // poll for the next run for kPollBeforeSleep first (runs that follow closely: the passes of one
  // row).
  enum class Idle { sleep, poll };
  // How long a worker polls for the next run after a run of Idle::poll (and the caller for tasks
  // still running) before sleeping: long enough to span the serial part between two passes of a
  // row, short enough that an idle engine's workers leave the cores within a tenth of a
  // millisecond.
  static constexpr std::chrono::microseconds kPollBeforeSleep{100};

  // Starts the sleeping workers now, to poll for the next run for kPollBeforeSleep: a caller with
  // serial work before a run (checking a batch) lets them wake during it, and the run that follows
  // within that time finds them polling. Allocates nothing; does nothing inside a run (from a
  // task) or in a forked child.
  void wake();

  // Calls task(i, worker) once for each i in [0, num_tasks), worker in [0, num_threads()), and
  // returns when every call has returned. If a call throws, the tasks not yet begun are skipped
  // and the first exception is rethrown here. The caller runs tasks too, so a run never waits
  // for a worker to wake: a worker that comes late finds the tasks taken. Allocates nothing.
  // One caller at a time (a Sampler's calls are not concurrent); a run started from inside a
  // task runs its tasks in order on the calling thread. In a child forked from the pool's process
  // the workers stayed behind: the pool runs every task in order on the caller there.
  template <typename Task>
  void run(int64_t num_tasks, Task& task, Idle idle = Idle::sleep) {
    run_erased(
        num_tasks, &task, [](void* t, int64_t i, int w) { (*static_cast<Task*>(t))(i, w); }, idle);
  }

 private:
  using Erased = void (*)(void*, int64_t, int);
  struct Run {
    void* task = nullptr;
    Erased call = nullptr;
    int64_t num_tasks = 0;
    Idle idle = Idle::sleep;
  };
  void run_erased(int64_t num_tasks, void* task, Erased call, Idle idle);
  uint32_t publish(const Run& run);  // mutex_ held
  void work(int worker);
  bool wait_for_run(uint32_t seen, Idle idle);
  void drain(uint32_t generation, const Run& run, int worker);
  void stop_workers();
  void leave_workers_behind();

  std::vector<std::thread> workers_;
  uint64_t fork_generation_;  // the process's fork generation when the workers started
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // Under mutex_: the current run and its generation, its first exception, stopping.
  Run run_;
  uint32_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  // The generation a worker polls before it sleeps, and the task counter of the current run:
  // generation << 32 | next task index. A worker claims a task only in the generation it woke
  // for, so a late one never runs a task of the next run with the previous run's callable. (The
  // generation wraps after 2^32 runs; a worker would have to stall between reading it and its
  // first claim for all of them to mistake one run for another.)
  std::atomic<uint32_t> published_{0};
  std::atomic<bool> running_{false};  // a run is in progress: a nested one runs in order
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> finished_{0};
  std::atomic<bool> failed_{false};
  // The current run's publication and its first claim by a worker (steady_clock ticks; 0: none).
  int64_t published_at_ = 0;
  std::atomic<int64_t> first_worker_claim_at_{0};
  std::atomic<int64_t> last_worker_delay_ns_{-1};  // atomic: runs nested in tasks set it too
};

}  // namespace lastmile::detail
