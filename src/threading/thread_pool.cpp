// lastmile — ThreadPool: workers sleep on a condition variable between calls and claim rows from
// an atomic counter during one. Exceptions never leave a worker: the first is carried back to
// the caller of run().
#include "threading/thread_pool.hpp"

#include <string>
#include <system_error>
#include <utility>

#include "lastmile/error.hpp"

namespace lastmile::detail {

ThreadPool::ThreadPool(int num_threads) {
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

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::drain(int worker) {
  for (int64_t i = next_.fetch_add(1); i < num_tasks_; i = next_.fetch_add(1)) {
    try {
      call_(task_, i, worker);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(num_tasks_);  // skip the rest
    }
  }
}

void ThreadPool::run_erased(int64_t num_tasks, void* task, Erased call) {
  if (workers_.empty() || num_tasks <= 1) {
    for (int64_t i = 0; i < num_tasks; ++i) call(task, i, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = task;
    call_ = call;
    num_tasks_ = num_tasks;
    next_.store(0);
    error_ = nullptr;
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  drain(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::work(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    drain(worker);
    {
      std::lock_guard lock(mutex_);
      --busy_;
    }
    done_.notify_one();
  }
}

}  // namespace lastmile::detail
