// lastmile — ThreadPool: the caller and the workers claim tasks from one counter; the caller
// waits only for tasks already claimed. After a run that asks for it a worker polls for the next
// one for a short while before it sleeps on a condition variable, so that the passes of a row
// split in chunks do not pay a wake-up each. Exceptions never leave a worker: the first is
// carried back to the caller of run().
#include "threading/thread_pool.hpp"

#include <pthread.h>

#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "float_environment.hpp"
#include "lastmile/error.hpp"

namespace lastmile::detail {
namespace {

int64_t now_ticks() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls done() for at most kPollBeforeSleep.
template <class Done>
void poll_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + ThreadPool::kPollBeforeSleep;
  while (!done()) {
    for (int i = 0; i < 64; ++i) relax();
    if (std::chrono::steady_clock::now() > until) return;
  }
}

// How many forks lie between this process and the one that loaded the library: a pool whose
// workers started in an earlier generation is a forked child's copy, its workers stayed in the
// parent. Process-wide, like the process id it stands for, and cheaper to read than getpid() on
// every run (a system call, about 140 ns on this project's machine). The handler is registered
// as the library loads, not at a first use: a function-local static's guard, held by a thread
// while it registers, would be inherited held by a child forked meanwhile, and hang its first
// pool. A pool made before that (from another file's static initialiser), or a registration
// that failed (out of memory), would leave forks unseen, as before.
std::atomic<uint64_t> forks_seen{0};
[[maybe_unused]] const int fork_handler_registered =
    pthread_atfork(nullptr, nullptr, [] { forks_seen.fetch_add(1, std::memory_order_relaxed); });

uint64_t fork_generation() { return forks_seen.load(std::memory_order_relaxed); }

}  // namespace

ThreadPool::ThreadPool(int num_threads) : fork_generation_(fork_generation()) {
  try {
    for (int w = 1; w < num_threads; ++w) workers_.emplace_back([this, w] { work(w); });
  } catch (const std::system_error& e) {
    stop_workers();
    throw Error(ErrorCode::internal, "config: cannot start worker thread " +
                                         std::to_string(workers_.size() + 1) + " of " +
                                         std::to_string(num_threads) + ": " + e.what());
  } catch (...) {
    stop_workers();
    throw;
  }
}

int ThreadPool::num_threads() const {
  return fork_generation_ == fork_generation() ? static_cast<int>(workers_.size()) + 1 : 1;
}

ThreadPool::~ThreadPool() {
  if (fork_generation_ != fork_generation()) leave_workers_behind();
  stop_workers();
}

// In a forked child: the workers stayed in the parent, where one may have held the mutex at the
// fork, and the condition variables count them as waiters (destroying one waited for them
// forever). Fresh ones take their places without the copies' destructors, and handles that own
// no thread take the workers' (joining those would reach threads of the parent): the pool is left
// with none, and runs its tasks in order on the caller, touching no lock.
void ThreadPool::leave_workers_behind() {
  std::construct_at(&mutex_);
  std::construct_at(&wake_);
  std::construct_at(&done_);
  for (std::thread& t : workers_) std::construct_at(&t);
  workers_.clear();
  running_.store(false, std::memory_order_relaxed);  // set by a thread that stayed in the parent
  fork_generation_ = fork_generation();
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::drain(uint32_t generation, const Run& run, int worker) {
  for (;;) {
    uint64_t claim = claim_.load(std::memory_order_relaxed);
    do {
      if ((claim >> 32) != generation || static_cast<int64_t>(claim & 0xffffffffu) >= run.num_tasks)
        return;
    } while (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
    if (int64_t none = 0;
        worker != 0 && first_worker_claim_at_.load(std::memory_order_relaxed) == none)
      first_worker_claim_at_.compare_exchange_strong(none, now_ticks(), std::memory_order_relaxed);
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        run.call(run.task, static_cast<int64_t>(claim & 0xffffffffu), worker);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);  // skip the tasks not yet begun
      }
    }
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == run.num_tasks) {
      std::lock_guard lock(mutex_);  // the caller tests finished_ under the lock: no lost wake
      done_.notify_one();
    }
  }
}

void ThreadPool::run_erased(int64_t num_tasks, void* task, Erased call, Idle idle) {
  last_worker_delay_ns_.store(-1, std::memory_order_relaxed);
  if (fork_generation_ != fork_generation()) [[unlikely]]
    leave_workers_behind();
  if (workers_.empty() || num_tasks <= 1 || num_tasks > int64_t{0xffffffff} ||  // 32-bit counter
      running_.exchange(true, std::memory_order_acquire)) {  // nested: the counters are taken
    for (int64_t i = 0; i < num_tasks; ++i) call(task, i, 0);
    return;
  }
  struct EndRun {
    std::atomic<bool>& running;
    ~EndRun() { running.store(false, std::memory_order_release); }
  } end_run{running_};
  Run run{task, call, num_tasks, idle};
  uint32_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    first_worker_claim_at_.store(0, std::memory_order_relaxed);
    published_at_ = now_ticks();
    generation = publish(run);
  }
  wake_.notify_all();  // no system call when every worker is still polling
  drain(generation, run, 0);
  // The tasks still running were claimed by workers already awake: poll for them before sleeping.
  auto finished = [&] { return finished_.load(std::memory_order_acquire) == num_tasks; };
  poll_until(finished);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, finished);
    error = std::exchange(error_, nullptr);
  }
  if (const int64_t at = first_worker_claim_at_.load(std::memory_order_relaxed); at != 0)
    last_worker_delay_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::duration(at - published_at_))
                                    .count(),
                                std::memory_order_relaxed);
  if (error) std::rethrow_exception(error);
}

// An empty run that asks the workers to poll afterwards: each wakes, finds no task to claim, and
// polls for the next generation.
void ThreadPool::wake() {
  if (workers_.empty() || fork_generation_ != fork_generation() ||
      running_.load(std::memory_order_acquire))
    return;
  {
    std::lock_guard lock(mutex_);
    publish(Run{nullptr, nullptr, 0, Idle::poll});
  }
  wake_.notify_all();
}

// `run` as the next generation, its task counter at 0; the workers see it once published_ moves
// (release: after the run and the counter). Returns the generation.
uint32_t ThreadPool::publish(const Run& run) {
  const uint32_t generation = ++generation_;
  run_ = run;
  claim_.store(uint64_t{generation} << 32, std::memory_order_relaxed);
  published_.store(generation, std::memory_order_release);
  return generation;
}

// Polls for a generation other than `seen` (after a run that asked for it), then sleeps until one
// comes; false when stopping.
bool ThreadPool::wait_for_run(uint32_t seen, Idle idle) {
  if (idle == Idle::poll)
    poll_until([&] { return published_.load(std::memory_order_acquire) != seen; });
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
  return !stopping_;
}

void ThreadPool::work(int worker) {
  // A worker inherits the floating-point environment of the thread that made the pool; tasks run
  // in IEEE's default, as the caller does inside a call (float_environment.hpp).
  const DefaultFloatEnvironment ieee;
  uint32_t seen = 0;
  Run run;
  while (wait_for_run(seen, run.idle)) {
    {
      std::lock_guard lock(mutex_);
      seen = generation_;
      run = run_;
    }
    drain(seen, run, worker);
  }
}

}  // namespace lastmile::detail
