// EventBus: synchronous delivery in subscription order, RAII unsubscription, a throwing handler
// logged without stopping the others, unsubscribing from inside a handler, concurrent use.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "parley/events.hpp"

namespace parley {
namespace {

TEST(EventBus, DeliversSynchronouslyInSubscriptionOrder) {
  EventBus bus;
  std::vector<std::string> seen;
  std::thread::id handlerThread;
  auto first = bus.subscribe<MessageAdded>([&](const MessageAdded& e) {
    handlerThread = std::this_thread::get_id();
    seen.push_back("first:" + e.message.content);
  });
  auto second = bus.subscribe<MessageAdded>(
      [&](const MessageAdded& e) { seen.push_back("second:" + e.message.content); });
  auto other = bus.subscribe<LlmStreamChunk>([&](const LlmStreamChunk&) { seen.push_back("x"); });
  MessageAdded event;
  event.message = Message::user("hi");
  bus.publish(event);
  EXPECT_EQ(seen, (std::vector<std::string>{"first:hi", "second:hi"}));
  EXPECT_EQ(handlerThread, std::this_thread::get_id());
  EXPECT_EQ(event.type, "message_added");
  EXPECT_EQ(bus.subscriberCount<MessageAdded>(), 2u);
}

TEST(EventBus, SubscriptionUnsubscribesWhenDestroyed) {
  EventBus bus;
  int calls = 0;
  {
    auto sub = bus.subscribe<LlmStreamChunk>([&](const LlmStreamChunk&) { ++calls; });
    EXPECT_TRUE(sub.active());
    bus.publish(LlmStreamChunk{});
  }
  bus.publish(LlmStreamChunk{});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(bus.subscriberCount<LlmStreamChunk>(), 0u);

  auto moved = bus.subscribe<LlmStreamChunk>([&](const LlmStreamChunk&) { ++calls; });
  Subscription holder = std::move(moved);
  EXPECT_FALSE(moved.active());
  bus.publish(LlmStreamChunk{});
  EXPECT_EQ(calls, 2);
  holder.reset();
  holder.reset();  // idempotent
  bus.publish(LlmStreamChunk{});
  EXPECT_EQ(calls, 2);
}

TEST(EventBus, ThrowingHandlerIsLoggedAndOthersStillRun) {
  std::vector<std::string> log;
  EventBus bus([&](const std::string& line) { log.push_back(line); });
  int after = 0;
  auto bad = bus.subscribe<ToolExecutionFailed>(
      [](const ToolExecutionFailed&) { throw std::runtime_error("boom"); });
  auto good = bus.subscribe<ToolExecutionFailed>([&](const ToolExecutionFailed&) { ++after; });
  EXPECT_NO_THROW(bus.publish(ToolExecutionFailed{}));
  EXPECT_EQ(after, 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("boom"), std::string::npos);
  EXPECT_NE(log[0].find("tool_execution_failed"), std::string::npos);
}

TEST(EventBus, HandlerMayUnsubscribeItselfAndOthers) {
  EventBus bus;
  int selfCalls = 0;
  int otherCalls = 0;
  Subscription self;
  Subscription other;
  self = bus.subscribe<MessageAdded>([&](const MessageAdded&) {
    ++selfCalls;
    self.reset();   // must not wait for this very call
    other.reset();  // another handler, not running: unsubscribed before its turn
  });
  other = bus.subscribe<MessageAdded>([&](const MessageAdded&) { ++otherCalls; });
  bus.publish(MessageAdded{});
  bus.publish(MessageAdded{});
  EXPECT_EQ(selfCalls, 1);
  EXPECT_EQ(otherCalls, 0);
  EXPECT_EQ(bus.subscriberCount<MessageAdded>(), 0u);
}

TEST(EventBus, HandlerMayPublishAndSubscribe) {
  EventBus bus;
  int chunks = 0;
  std::vector<Subscription> later;
  auto sub = bus.subscribe<MessageAdded>([&](const MessageAdded&) {
    later.push_back(bus.subscribe<LlmStreamChunk>([&](const LlmStreamChunk&) { ++chunks; }));
    bus.publish(LlmStreamChunk{});
  });
  bus.publish(MessageAdded{});
  EXPECT_EQ(chunks, 1);
}

TEST(EventBus, SubscriptionMayOutliveTheBus) {
  Subscription sub;
  {
    EventBus bus;
    sub = bus.subscribe<MessageAdded>([](const MessageAdded&) {});
  }
  EXPECT_NO_FATAL_FAILURE(sub.reset());
}

TEST(EventBus, ConcurrentPublishersAndSubscribers) {
  EventBus bus;
  std::atomic<int> counted{0};
  auto counter = bus.subscribe<LlmStreamChunk>([&](const LlmStreamChunk&) { ++counted; });
  constexpr int kThreads = 4;
  constexpr int kEach = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        auto churn = bus.subscribe<LlmStreamChunk>([](const LlmStreamChunk&) {});
        bus.publish(LlmStreamChunk{});
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(counted.load(), kThreads * kEach);
  EXPECT_EQ(bus.subscriberCount<LlmStreamChunk>(), 1u);
}

TEST(EventBus, ResetWaitsForARunningHandlerOnAnotherThread) {
  EventBus bus;
  std::mutex m;
  std::condition_variable cv;
  bool entered = false;
  bool release = false;
  std::atomic<bool> finished{false};
  auto sub = bus.subscribe<MessageAdded>([&](const MessageAdded&) {
    {
      std::unique_lock lock(m);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    finished = true;
  });
  std::thread publisher([&] { bus.publish(MessageAdded{}); });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  std::thread releaser([&] {
    std::lock_guard lock(m);
    release = true;
    cv.notify_all();
  });
  sub.reset();
  // reset() returned: the running call must have finished.
  EXPECT_TRUE(finished.load());
  publisher.join();
  releaser.join();
}

}  // namespace
}  // namespace parley
