// ThreadPool (src/threading/thread_pool.hpp): each task runs once, on a valid worker, with the
// callable of its own run, whether workers are polling, asleep or late; the first exception comes
// back to the caller and the pool stays usable.
#include "threading/thread_pool.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace lastmile_test {
namespace {

using lastmile::detail::ThreadPool;

// Runs `tasks` tasks tagged `tag`; each writes the tag at its index. Returns whether every index
// below tasks got the tag exactly once, none above it was written, and workers were in range.
bool tagged_run(ThreadPool& pool, int64_t tasks, int tag, std::vector<std::atomic<int>>& hits) {
  for (auto& h : hits) h.store(0);
  std::atomic<bool> bad_worker{false};
  auto task = [&](int64_t i, int worker) {
    if (worker < 0 || worker >= pool.num_threads()) bad_worker = true;
    hits[static_cast<size_t>(i)].fetch_add(tag);
  };
  pool.run(tasks, task);
  for (int64_t i = 0; i < static_cast<int64_t>(hits.size()); ++i)
    if (hits[static_cast<size_t>(i)].load() != (i < tasks ? tag : 0)) return false;
  return !bad_worker;
}

TEST(ThreadPool, BackToBackRunsRunEachTaskOnceWithTheirOwnCallable) {
  // Runs follow each other while workers still poll or finish the previous one's claims: a late
  // worker must not run a task of the next run, nor an index past the run's count.
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(64);
  for (int r = 0; r < 20000; ++r) {
    const int64_t tasks = 2 + r % 61;
    ASSERT_TRUE(tagged_run(pool, tasks, 1 + r % 7, hits)) << "run " << r << ", " << tasks;
  }
}

TEST(ThreadPool, RunsAfterTheWorkersSleepStillRunEveryTask) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(16);
  for (int r = 0; r < 20; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // past the workers' polling
    ASSERT_TRUE(tagged_run(pool, 16, 3, hits)) << "run " << r;
  }
}

TEST(ThreadPool, AWakeRunsNoTaskAndTheRunAfterItRunsEachTaskOnce) {
  // wake() publishes an empty run: the workers it wakes must run nothing (not the last run's
  // tasks again), and the run that follows, while they poll or after they slept, loses none.
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(64);
  for (int r = 0; r < 3000; ++r) {
    const int64_t tasks = 2 + r % 61;
    ASSERT_TRUE(tagged_run(pool, tasks, 1 + r % 7, hits)) << "run " << r;
    for (auto& h : hits) h.store(0);
    pool.wake();
    if (r % 3 == 1) pool.wake();  // twice in a row
    if (r % 5 == 2) std::this_thread::sleep_for(std::chrono::microseconds(r % 300));
    for (auto& h : hits) ASSERT_EQ(h.load(), 0) << "after the wake of run " << r;
  }
}

TEST(ThreadPool, AWakeFromInsideATaskChangesNothing) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(32);
  auto task = [&](int64_t i, int) {
    pool.wake();  // a run is in progress: its claims must stay its own
    hits[static_cast<size_t>(i)].fetch_add(1);
  };
  for (int r = 0; r < 500; ++r) {
    for (auto& h : hits) h.store(0);
    pool.run(32, task);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "run " << r;
  }
}

TEST(ThreadPool, FirstExceptionComesBackAndThePoolStaysUsable) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  auto throwing = [&](int64_t i, int) {
    ran.fetch_add(1);
    if (i == 5) throw std::runtime_error("task 5");
  };
  EXPECT_THROW(
      {
        try {
          pool.run(40, throwing);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "task 5");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_GE(ran.load(), 1);  // tasks claimed before task 5 threw may be skipped
  std::vector<std::atomic<int>> hits(40);
  EXPECT_TRUE(tagged_run(pool, 40, 2, hits));
}

TEST(ThreadPool, ARunStartedInsideATaskRunsItsTasksInOrder) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> outer(8), inner(8 * 5);
  auto task = [&](int64_t i, int) {
    outer[static_cast<size_t>(i)].fetch_add(1);
    int64_t next = 0;
    auto nested = [&](int64_t j, int worker) {
      EXPECT_EQ(j, next++);  // in order, on this thread
      (void)worker;
      inner[static_cast<size_t>(i * 5 + j)].fetch_add(1);
    };
    pool.run(5, nested);
  };
  for (int r = 0; r < 200; ++r) {
    for (auto& h : outer) h.store(0);
    for (auto& h : inner) h.store(0);
    pool.run(8, task);
    for (auto& h : outer) ASSERT_EQ(h.load(), 1) << "run " << r;
    for (auto& h : inner) ASSERT_EQ(h.load(), 1) << "run " << r;
  }
}

TEST(ThreadPool, PollingRunsRunEachTaskOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(16);
  for (int r = 0; r < 2000; ++r) {
    for (auto& h : hits) h.store(0);
    auto task = [&](int64_t i, int) { hits[static_cast<size_t>(i)].fetch_add(1); };
    pool.run(16, task, ThreadPool::Idle::poll);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "run " << r;
  }
}

TEST(ThreadPool, ReportsHowLateItsFirstWorkerClaimedATask) {
  ThreadPool pool(2);
  // Task 0 holds the caller until a worker has claimed a task (or 10 s pass): one must have.
  std::atomic<bool> worker_ran{false};
  auto task = [&](int64_t i, int worker) {
    if (worker != 0) worker_ran = true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (i == 0 && !worker_ran && std::chrono::steady_clock::now() < until) {
    }
  };
  for (int r = 0; r < 5; ++r) {
    worker_ran = false;
    pool.run(4, task);
    ASSERT_TRUE(worker_ran);
    EXPECT_GE(pool.last_worker_delay_ns(), 0) << "run " << r;
    EXPECT_LT(pool.last_worker_delay_ns(), 10'000'000'000) << "run " << r;
  }
  auto caller_only = [](int64_t, int) {};
  pool.run(1, caller_only);  // one task runs on the caller
  EXPECT_EQ(pool.last_worker_delay_ns(), -1);
  ThreadPool one(1);
  one.run(4, caller_only);
  EXPECT_EQ(one.last_worker_delay_ns(), -1);
}

TEST(ThreadPool, OneThreadRunsTasksInOrderOnTheCaller) {
  ThreadPool pool(1);
  std::vector<int64_t> order;
  auto task = [&](int64_t i, int worker) {
    EXPECT_EQ(worker, 0);
    order.push_back(i);
  };
  pool.run(5, task);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(ThreadPool, AForkedChildRunsTheTasksInOrderAndDestroysThePool) {
  // The child has the pool's copy but not its workers, and its condition variables count
  // waiters that stayed in the parent: destroying one waited for them forever.
  auto pool = std::make_unique<ThreadPool>(3);
  std::vector<std::atomic<int>> hits(16);
  ASSERT_TRUE(tagged_run(*pool, 16, 1, hits));
  std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the workers asleep
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);                           // a hang ends the child by SIGALRM
    bool ok = pool->num_threads() == 1;  // before any run too
    for (int r = 0; r < 3 && ok; ++r) {
      std::vector<int64_t> order;
      auto task = [&](int64_t i, int worker) {
        ok = ok && worker == 0;
        order.push_back(i);
      };
      pool->wake();  // no worker to wake, no lock to touch
      pool->run(5, task);
      ok = ok && order == std::vector<int64_t>{0, 1, 2, 3, 4} && pool->num_threads() == 1;
    }
    pool.reset();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
  EXPECT_TRUE(tagged_run(*pool, 16, 2, hits));  // the parent's pool is untouched
}

}  // namespace
}  // namespace lastmile_test
