#include "parley/thread_pool.hpp"

#include <atomic>
#include <latch>
#include <memory>
#include <stdexcept>

#include <gtest/gtest.h>

namespace parley {
namespace {

TEST(ThreadPool, RunsEveryTask) {
  ThreadPool pool;
  constexpr int kTasks = 100;
  std::atomic<int> ran{0};
  std::latch done(kTasks);
  for (int i = 0; i < kTasks; ++i)
    pool.submit([&] {
      ran.fetch_add(1);
      done.count_down();
    });
  done.wait();
  EXPECT_EQ(ran.load(), kTasks);
}

TEST(ThreadPool, BlockedTaskDoesNotDelayOthers) {
  ThreadPool pool(ThreadPool::Options{.maxIdle = 1});
  std::latch release(1);
  std::latch blockedFinished(1);
  pool.submit([&] {
    release.wait();
    blockedFinished.count_down();
  });
  // Were tasks queued behind the blocked one, this would never complete.
  std::latch others(10);
  for (int i = 0; i < 10; ++i)
    pool.submit([&] { others.count_down(); });
  others.wait();
  EXPECT_GE(pool.threadCount(), 2u);
  release.count_down();
  blockedFinished.wait();
}

TEST(ThreadPool, TaskThatThrowsDoesNotStopThePool) {
  ThreadPool pool;
  std::latch threw(1);
  pool.submit([&] {
    threw.count_down();
    throw std::runtime_error("boom");
  });
  threw.wait();
  std::latch ran(1);
  pool.submit([&] { ran.count_down(); });
  ran.wait();
  SUCCEED();
}

TEST(ThreadPool, DestroyingThePoolDoesNotWaitForRunningTasks) {
  auto release = std::make_shared<std::latch>(1);
  auto finished = std::make_shared<std::latch>(1);
  auto started = std::make_shared<std::latch>(1);
  {
    ThreadPool pool;
    pool.submit([=] {
      started->count_down();
      release->wait();
      finished->count_down();
    });
    started->wait();
    EXPECT_EQ(pool.busyCount(), 1u);
  }  // returns while the task still waits; it keeps the pool's state alive
  release->count_down();
  finished->wait();
  SUCCEED();
}

TEST(ThreadPool, SharedPoolIsOneInstance) {
  EXPECT_EQ(ThreadPool::shared().get(), ThreadPool::shared().get());
}

}  // namespace
}  // namespace parley
