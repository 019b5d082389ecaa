// The process's one timer thread (model/deadline_timer.hpp): callbacks at their deadlines, in
// deadline order, none after its cancel, and a cancel waits for a callback under way.
#include "model/deadline_timer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <latch>
#include <thread>

namespace parley::detail {
namespace {

using Clock = DeadlineTimer::Clock;
using namespace std::chrono_literals;

TEST(DeadlineTimer, FiresInDeadlineOrderAndNeverAfterACancel) {
  auto& timer = DeadlineTimer::shared();
  std::atomic<bool> cancelledFired{false};
  std::promise<int> first, last;
  const auto now = Clock::now();
  // Scheduled in the other order than their deadlines.
  timer.schedule(now + 30ms, [&] { last.set_value(2); });
  const auto cancelled = timer.schedule(now + 20ms, [&] { cancelledFired = true; });
  timer.schedule(now + 10ms, [&] { first.set_value(1); });
  timer.cancel(cancelled);
  timer.cancel(cancelled);  // again: ignored
  auto firstDone = first.get_future();
  auto lastDone = last.get_future();
  EXPECT_EQ(firstDone.get(), 1);
  EXPECT_EQ(lastDone.get(), 2);  // the timer went past the cancelled deadline
  EXPECT_FALSE(cancelledFired.load());
}

TEST(DeadlineTimer, APassedDeadlineFiresAtOnce) {
  std::promise<void> fired;
  DeadlineTimer::shared().schedule(Clock::now() - 1h, [&] { fired.set_value(); });
  fired.get_future().get();  // returns: it fired
  SUCCEED();
}

TEST(DeadlineTimer, ACancelWaitsForTheCallbackUnderWay) {
  auto& timer = DeadlineTimer::shared();
  std::latch inside(1), release(1);
  std::atomic<bool> finished{false};
  const auto id = timer.schedule(Clock::now(), [&] {
    inside.count_down();
    release.wait();
    finished = true;
  });
  inside.wait();
  std::atomic<bool> sawFinished{false};
  std::thread canceller([&] {
    timer.cancel(id);
    sawFinished = finished.load();
  });
  release.count_down();
  canceller.join();
  EXPECT_TRUE(sawFinished.load());
}

// The thread waits for the first deadline while a cancel removes it and a sooner one wakes it:
// it must not read the removed deadline (ASan and TSan in CI: a heap-use-after-free before).
TEST(DeadlineTimer, TheDeadlineWaitedForMayBeCancelled) {
  auto& timer = DeadlineTimer::shared();
  std::atomic<bool> farFired{false};
  for (int i = 0; i < 100; ++i) {
    const auto far = timer.schedule(Clock::now() + 1h, [&] { farFired = true; });
    std::promise<void> passed;
    timer.schedule(Clock::now(), [&] { passed.set_value(); });
    passed.get_future().get();  // the thread goes back to waiting for `far`
    timer.cancel(far);
    std::promise<void> woke;
    timer.schedule(Clock::now(), [&] { woke.set_value(); });
    woke.get_future().get();
  }
  EXPECT_FALSE(farFired.load());
}

}  // namespace
}  // namespace parley::detail
