// LlmExecutor against `parley mock`: events of a request, tool calls over events (answered out
// of order, never, with an unknown id), many threads at once, snapshots, validation, cleanup.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/event_log.hpp"
#include "parley/executor.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "printers.hpp"
#include "store/sqlite_store.hpp"
#include "wait_for_stop.hpp"

namespace parley {
namespace {

using namespace std::chrono_literals;

const char* kToolScript = R"(
{"match": {"last_role": "tool"}, "reply": {"content": "got {{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "alpha", "arguments": {"x": 1}}, {"name": "beta", "arguments": {}}]}}
)";

// Records every event of the bus, in order, under a lock.
struct Recorder {
  explicit Recorder(EventBus& bus) {
    subs.push_back(bus.subscribe<LlmExecutionCompleted>([this](const LlmExecutionCompleted& e) {
      std::lock_guard lock(mutex);
      completed.push_back(e);
      order.push_back(e.type);
      traces.push_back(e.traceId);
    }));
    subs.push_back(bus.subscribe<LlmExecutionFailed>([this](const LlmExecutionFailed& e) {
      std::lock_guard lock(mutex);
      failed.push_back(e);
      order.push_back(e.type);
      traces.push_back(e.traceId);
    }));
    subs.push_back(bus.subscribe<MessageAdded>([this](const MessageAdded& e) {
      std::lock_guard lock(mutex);
      added.push_back(e.message);
      order.push_back(e.type);
      traces.push_back(e.traceId);
    }));
    subs.push_back(bus.subscribe<LlmStreamChunk>([this](const LlmStreamChunk& e) {
      std::lock_guard lock(mutex);
      chunks += e.content;
      order.push_back(e.type);
      traces.push_back(e.traceId);
    }));
    subs.push_back(bus.subscribe<ToolExecutionRequest>([this](const ToolExecutionRequest& e) {
      std::lock_guard lock(mutex);
      order.push_back(e.type);
      traces.push_back(e.traceId);
    }));
  }
  std::mutex mutex;
  std::vector<LlmExecutionCompleted> completed;
  std::vector<LlmExecutionFailed> failed;
  std::vector<Message> added;
  std::vector<std::string> order;
  std::vector<std::string> traces;
  std::string chunks;
  std::vector<Subscription> subs;
};

class Executor : public ::testing::Test {
 protected:
  void startMock(const std::string& script) {
    mock::MockOptions options;
    options.script = mock::readScript(script);
    options.threads = 48;
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
    ClientOptions client;
    client.baseUrl = server_->baseUrl();
    client.apiKey = "sk-test-secret";
    client.model = "gpt-4o-mini";
    client.maxRetries = 0;
    profiles_->add("default", client);
  }

  ExecutorOptions options(bool toolWorker = true) {
    ExecutorOptions o;
    o.profiles = profiles_;
    o.tools = tools_;
    o.toolWorker = toolWorker;
    o.log = [this](const std::string& line) {
      std::lock_guard lock(logMutex_);
      log_.push_back(line);
    };
    return o;
  }

  void addTools() {
    tools_->add("alpha", "first", nullptr,
                [](const json&, ToolContext&) -> json { return "A-by-registry"; });
    tools_->add("beta", "second", nullptr,
                [](const json&, ToolContext&) -> json { return "B-by-registry"; });
  }

  static LlmExecutionRequest request(const std::string& thread, const std::string& prompt) {
    LlmExecutionRequest r;
    r.workflowId = "wf-1";
    r.threadId = thread;
    r.nodeId = "llm-1";
    r.requestData.prompt = prompt;
    r.requestData.profileId = "default";
    return r;
  }

  bool logContains(const std::string& text) {
    std::lock_guard lock(logMutex_);
    for (const auto& line : log_)
      if (line.find(text) != std::string::npos) return true;
    return false;
  }

  static std::vector<Message> history(const nlohmann::json& snapshot) {
    return messagesFromJson(snapshot.at("messages"));
  }

  std::unique_ptr<mock::MockServer> server_;
  std::shared_ptr<ProfileRegistry> profiles_ = std::make_shared<ProfileRegistry>();
  std::shared_ptr<ToolRegistry> tools_ = std::make_shared<ToolRegistry>();
  std::mutex logMutex_;
  std::vector<std::string> log_;
  EventBus bus_;
};

TEST_F(Executor, RequestCompletesWithItsEvents) {
  startMock(R"({"reply": {"content": "Hello {{last_user}}"}})");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  auto r = request("thread-1", "there");
  r.traceId = "trace-42";
  bus_.publish(r);
  executor.waitIdle();

  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), 0u);
  ASSERT_EQ(rec.completed.size(), 1u);
  const auto& done = rec.completed[0];
  EXPECT_EQ(done.result.content, "Hello there");
  EXPECT_EQ(done.result.finishReason, "stop");
  EXPECT_EQ(done.result.iterations, 1);
  EXPECT_GT(done.result.usage.totalTokens, 0);
  EXPECT_EQ(done.nodeId, "llm-1");
  EXPECT_EQ(done.workflowId, "wf-1");
  EXPECT_EQ(done.threadId, "thread-1");
  EXPECT_EQ(done.updatedContext.json().at("format"), kSnapshotFormat);
  auto messages = history(done.updatedContext.json());
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], Message::user("there"));
  EXPECT_EQ(messages[1].content, "Hello there");
  EXPECT_EQ(rec.order, (std::vector<std::string>{"message_added", "message_added",
                                                 "llm_execution_completed"}));
  for (const auto& trace : rec.traces)
    EXPECT_EQ(trace, "trace-42");
}

TEST_F(Executor, StreamingPublishesChunksAndTheDirectApiReturnsTheResult) {
  startMock(R"({"reply": {"content": "one two three four"}})");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  auto r = request("s", "go");
  r.requestData.stream = true;
  LlmExecutionResult result = executor.execute(r);
  EXPECT_EQ(result.content, "one two three four");
  std::lock_guard lock(rec.mutex);
  EXPECT_EQ(rec.chunks, "one two three four");
  EXPECT_GE(std::count(rec.order.begin(), rec.order.end(), "llm_stream_chunk"), 4);
  // Every event of the request carries the trace id execute() gave it.
  ASSERT_FALSE(rec.traces.empty());
  EXPECT_FALSE(rec.traces[0].empty());
  for (const auto& trace : rec.traces)
    EXPECT_EQ(trace, rec.traces[0]);
}

TEST_F(Executor, DefaultToolWorkerRunsRegisteredTools) {
  startMock(kToolScript);
  addTools();
  LlmExecutor executor(bus_, options());
  auto result = executor.execute(request("t", "use tools"));
  EXPECT_EQ(result.content, "got A-by-registry; B-by-registry");
  ASSERT_EQ(result.toolCalls.size(), 2u);
  EXPECT_EQ(result.toolCalls[0].name, "alpha");
  EXPECT_EQ(result.iterations, 2);
}

// A tool's progress reports (ToolContext::progress) reach the bus as tool_execution_progress
// events under the request's ids, between the call's request and its result.
TEST_F(Executor, TheToolWorkerPublishesACallsProgress) {
  startMock(kToolScript);
  tools_->add("alpha", "first", nullptr, [](const json&, ToolContext& call) -> json {
    if (call.progress) {
      call.progress(call, "halfway", {{"step", 1}});
      call.progress(call, "done", json::array());  // not an object: published as {}
    }
    return "A";
  });
  tools_->add("beta", "second", nullptr, [](const json&, ToolContext&) -> json { return "B"; });
  std::mutex mutex;
  std::vector<ToolExecutionProgress> reports;
  std::vector<std::string> order;
  auto progressSub = bus_.subscribe<ToolExecutionProgress>([&](const ToolExecutionProgress& e) {
    std::lock_guard lock(mutex);
    reports.push_back(e);
    order.push_back(e.type + ":" + e.toolName);
  });
  auto doneSub = bus_.subscribe<ToolExecutionCompleted>([&](const ToolExecutionCompleted& e) {
    std::lock_guard lock(mutex);
    order.push_back(e.type + ":" + e.toolName);
  });
  LlmExecutor executor(bus_, options());
  const auto result = executor.execute(request("t", "use tools"));
  EXPECT_EQ(result.content, "got A; B");
  std::lock_guard lock(mutex);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].type, "tool_execution_progress");
  EXPECT_EQ(reports[0].workflowId, "wf-1");
  EXPECT_EQ(reports[0].threadId, "t");
  EXPECT_FALSE(reports[0].traceId.empty());
  EXPECT_EQ(reports[0].toolCallId, result.toolCalls[0].id);
  EXPECT_EQ(reports[0].message, "halfway");
  EXPECT_EQ(reports[0].data, json({{"step", 1}}));
  EXPECT_EQ(reports[1].data, json::object());
  const auto firstDone = std::find(order.begin(), order.end(), "tool_execution_completed:alpha");
  ASSERT_NE(firstDone, order.end());
  EXPECT_LT(std::find(order.begin(), order.end(), "tool_execution_progress:alpha"), firstDone);
}

// A worker of the test's own: collects the requests and answers from another thread.
struct ManualWorker {
  explicit ManualWorker(EventBus& b) : bus(b) {
    sub = bus.subscribe<ToolExecutionRequest>([this](const ToolExecutionRequest& e) {
      std::lock_guard lock(mutex);
      requests.push_back(e);
      arrived.notify_all();
    });
  }
  ~ManualWorker() {
    for (auto& t : threads)
      t.join();
  }
  std::vector<ToolExecutionRequest> waitFor(size_t n) {
    std::unique_lock lock(mutex);
    arrived.wait(lock, [&] { return requests.size() >= n; });
    return requests;
  }
  void answer(const ToolExecutionRequest& r, const std::string& id, const std::string& value) {
    ToolExecutionCompleted done;
    done.workflowId = r.workflowId;
    done.threadId = r.threadId;
    done.traceId = r.traceId;
    done.toolCallId = id;
    done.result.success = true;
    done.result.result = value;
    bus.publish(done);
  }
  EventBus& bus;
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<ToolExecutionRequest> requests;
  std::vector<std::thread> threads;
  Subscription sub;
};

TEST_F(Executor, ToolResultsAnsweredOutOfOrderAreAppendedInCallOrder) {
  startMock(kToolScript);
  addTools();
  ManualWorker worker(bus_);
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options(/*toolWorker=*/false));
  auto r = request("t", "use tools");
  r.traceId = "trace-tools";
  bus_.publish(r);
  auto calls = worker.waitFor(2);
  ASSERT_EQ(calls[0].toolCall.name, "alpha");
  ASSERT_EQ(calls[1].toolCall.name, "beta");
  EXPECT_EQ(calls[0].traceId, "trace-tools");
  EXPECT_EQ(calls[0].executionOptions.timeout, options().toolCallTimeout);
  // Answer beta first, from another thread; then alpha, with an id nobody asked for between.
  std::thread answering([&] {
    worker.answer(calls[1], calls[1].toolCall.id, "B");
    worker.answer(calls[0], "no-such-call", "X");
    worker.answer(calls[0], calls[0].toolCall.id, "A");
    worker.answer(calls[0], calls[0].toolCall.id, "A-again");  // repeated: ignored
  });
  answering.join();
  executor.waitIdle();
  EXPECT_TRUE(logContains("no-such-call"));
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.completed.size(), 1u);
  EXPECT_EQ(rec.completed[0].result.content, "got A; B");
  auto messages = history(rec.completed[0].updatedContext.json());
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_EQ(messages[1].toolCalls.size(), 2u);
  EXPECT_EQ(messages[2].toolCallId, calls[0].toolCall.id);
  EXPECT_EQ(messages[2].content, "A");
  EXPECT_EQ(messages[3].toolCallId, calls[1].toolCall.id);
  EXPECT_EQ(messages[3].content, "B");
  for (const auto& trace : rec.traces)
    EXPECT_EQ(trace, "trace-tools");
}

const char* kFiveToolCalls = R"(
{"match": {"last_role": "tool"}, "reply": {"content": "got {{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "alpha", "arguments": {"n": "0"}}, {"name": "alpha", "arguments": {"n": "1"}}, {"name": "alpha", "arguments": {"n": "2"}}, {"name": "alpha", "arguments": {"n": "3"}}, {"name": "alpha", "arguments": {"n": "4"}}]}}
)";

// Answers tool calls, always the most recent one first, but only once a thread has as many
// calls outstanding as the cap allows (or as are left): so the cap is reached, and a call sent
// beyond it shows in `largest` (or stalls the worker) unless the answers happen to keep up;
// OnlyTheCapOfToolCallsGoesOutBeforeAnAnswer checks the bound without that race.
struct CappedWorker {
  CappedWorker(EventBus& b, size_t callsPerThread, size_t cap)
      : bus(b), perThread(callsPerThread), cap(cap) {
    sub = bus.subscribe<ToolExecutionRequest>([this](const ToolExecutionRequest& e) {
      std::lock_guard lock(mutex);
      auto& waiting = outstanding[e.threadId];
      waiting.push_back(e);
      largest[e.threadId] = std::max(largest[e.threadId], waiting.size());
      changed.notify_all();
    });
  }

  // Answers every call of `threads` threads; false if the calls stopped coming.
  bool answerAll(size_t threads) {
    std::unique_lock lock(mutex);
    size_t total = 0;
    while (total < threads * perThread) {
      std::string ready;
      auto full = [&] {
        for (auto& [thread, waiting] : outstanding) {
          const size_t left = perThread - answered[thread];
          if (!waiting.empty() && waiting.size() == std::min(cap, left)) {
            ready = thread;
            return true;
          }
        }
        return false;
      };
      // The bound only turns a broken executor into a failure instead of a hang.
      if (!changed.wait_for(lock, 10s, full)) return false;
      ToolExecutionRequest last = outstanding[ready].back();
      outstanding[ready].pop_back();
      ++answered[ready];
      ++total;
      lock.unlock();
      ToolExecutionCompleted done;
      done.threadId = last.threadId;
      done.traceId = last.traceId;
      done.toolCallId = last.toolCall.id;
      done.result.success = true;
      done.result.result = "v" + json::parse(last.toolCall.arguments).at("n").get<std::string>() +
                           "-" + last.threadId;
      bus.publish(done);
      lock.lock();
    }
    return true;
  }

  EventBus& bus;
  const size_t perThread;
  const size_t cap;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<ToolExecutionRequest>> outstanding;
  std::map<std::string, size_t> answered;
  std::map<std::string, size_t> largest;
  Subscription sub;
};

// Some servers number tool calls per reply ("functions.search:0" in every reply), so two
// threads wait for calls of the same id at once: each answer reaches its own thread.
TEST_F(Executor, ThreadsWhoseModelsReuseACallIdDoNotCollide) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "got {{tool_results}}"}}
{"reply": {"tool_calls": [{"id": "functions.search:0", "name": "alpha", "arguments": {}}]}}
)");
  addTools();
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<ToolExecutionRequest> waiting;
  Subscription sub = bus_.subscribe<ToolExecutionRequest>([&](const ToolExecutionRequest& e) {
    std::lock_guard lock(mutex);
    waiting.push_back(e);
    changed.notify_all();
  });
  LlmExecutor executor(bus_, options(/*toolWorker=*/false));
  auto first =
      std::async(std::launch::async, [&] { return executor.execute(request("t1", "go")); });
  auto second =
      std::async(std::launch::async, [&] { return executor.execute(request("t2", "go")); });
  {
    std::unique_lock lock(mutex);
    // The bound only turns a collision (one call refused, never sent) into a failure.
    ASSERT_TRUE(changed.wait_for(lock, 10s, [&] { return waiting.size() == 2; }))
        << "only " << waiting.size() << " call(s) went out";
  }
  for (const ToolExecutionRequest& e : waiting) {
    EXPECT_EQ(e.toolCall.id, "functions.search:0");
    ToolExecutionCompleted done;
    done.threadId = e.threadId;
    done.traceId = e.traceId;
    done.toolCallId = e.toolCall.id;
    done.result.success = true;
    done.result.result = "answer-for-" + e.threadId;
    bus_.publish(done);
  }
  EXPECT_NE(first.get().content.find("answer-for-t1"), std::string::npos);
  EXPECT_NE(second.get().content.find("answer-for-t2"), std::string::npos);
}

TEST_F(Executor, ToolCallsOfAThreadStayWithinTheCapAndKeepTheirOrder) {
  startMock(kFiveToolCalls);
  constexpr size_t kCalls = 5;
  constexpr size_t kCap = 2;
  const std::vector<std::string> threads = {"a", "b", "c"};
  CappedWorker worker(bus_, kCalls, kCap);
  Recorder rec(bus_);
  auto o = options(/*toolWorker=*/false);
  o.turn.maxToolConcurrency = static_cast<int>(kCap);
  LlmExecutor executor(bus_, o);
  for (const auto& thread : threads)
    bus_.publish(request(thread, "use tools"));
  ASSERT_TRUE(worker.answerAll(threads.size()));
  executor.waitIdle();

  {
    std::lock_guard lock(worker.mutex);
    for (const auto& thread : threads) {
      // Per thread, not per executor: every thread had its own kCap calls out at once.
      EXPECT_EQ(worker.largest[thread], kCap) << thread;
    }
  }
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), 0u);
  ASSERT_EQ(rec.completed.size(), threads.size());
  for (const auto& done : rec.completed) {
    const std::string& t = done.threadId;
    std::string expected = "got ";
    for (size_t n = 0; n < kCalls; ++n)
      expected += (n ? "; v" : "v") + std::to_string(n) + "-" + t;
    EXPECT_EQ(done.result.content, expected);
    auto messages = history(done.updatedContext.json());
    ASSERT_EQ(messages.size(), kCalls + 3);
    for (size_t n = 0; n < kCalls; ++n) {
      EXPECT_EQ(messages[2 + n].toolCallId, messages[1].toolCalls[n].id);
      EXPECT_EQ(messages[2 + n].content, "v" + std::to_string(n) + "-" + t);
    }
  }
}

TEST_F(Executor, OnlyTheCapOfToolCallsGoesOutBeforeAnAnswer) {
  startMock(kFiveToolCalls);
  constexpr size_t kCap = 3;
  const std::vector<std::string> threads = {"a", "b"};
  ManualWorker worker(bus_);  // records, never answers
  auto o = options(/*toolWorker=*/false);
  o.turn.maxToolConcurrency = static_cast<int>(kCap);
  LlmExecutor executor(bus_, o);
  for (const auto& thread : threads)
    bus_.publish(request(thread, "use tools"));
  worker.waitFor(kCap * threads.size());
  // A thread sends its calls from one loop and only then waits: once that wait is cancelled
  // and the executor is idle, every call it would send without an answer has been sent.
  for (const auto& thread : threads)
    EXPECT_TRUE(executor.cleanupThread(thread));
  executor.waitIdle();
  std::lock_guard lock(worker.mutex);
  std::map<std::string, size_t> sent;
  for (const auto& r : worker.requests)
    ++sent[r.threadId];
  for (const auto& thread : threads)
    EXPECT_EQ(sent[thread], kCap) << thread;
}

TEST_F(Executor, ATimedOutToolCallFreesItsSlotForTheNext) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "got {{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "alpha", "arguments": {"n": "0"}}, {"name": "alpha", "arguments": {"n": "1"}}, {"name": "alpha", "arguments": {"n": "2"}}]}}
)");
  // Answers every call but the first, inline; the first only times out.
  std::atomic<int> seen{0};
  auto sub = bus_.subscribe<ToolExecutionRequest>([&](const ToolExecutionRequest& e) {
    if (seen++ == 0) return;
    ToolExecutionCompleted done;
    done.threadId = e.threadId;
    done.toolCallId = e.toolCall.id;
    done.result.success = true;
    done.result.result = "v" + json::parse(e.toolCall.arguments).at("n").get<std::string>();
    bus_.publish(done);
  });
  auto o = options(/*toolWorker=*/false);
  o.turn.maxToolConcurrency = 1;
  o.toolCallTimeout = 100ms;
  LlmExecutor executor(bus_, o);
  auto result = executor.execute(request("t", "use tools"));
  EXPECT_EQ(seen.load(), 3);
  EXPECT_EQ(result.content.rfind("got {\"error\":", 0), 0u) << result.content;
  EXPECT_NE(result.content.find("did not answer"), std::string::npos) << result.content;
  EXPECT_EQ(result.content.substr(result.content.size() - 10), "\"}; v1; v2") << result.content;
}

TEST_F(Executor, ToolCallCapBelowOneIsRefused) {
  auto o = options();
  o.turn.maxToolConcurrency = 0;
  try {
    LlmExecutor executor(bus_, o);
    ADD_FAILURE() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "options.turn.maxToolConcurrency");
  }
}

TEST_F(Executor, AToolThatNeverAnswersGetsATimeoutErrorResult) {
  startMock(kToolScript);
  addTools();
  ManualWorker worker(bus_);
  auto o = options(false);
  o.toolCallTimeout = 150ms;
  LlmExecutor executor(bus_, o);
  auto r = request("t", "use tools");
  std::thread answering([&] {
    auto calls = worker.waitFor(2);
    worker.answer(calls[0], calls[0].toolCall.id, "A");  // beta never answers
  });
  auto result = executor.execute(r);
  answering.join();
  EXPECT_EQ(result.content.rfind("got A; {\"error\":", 0), 0u) << result.content;
  EXPECT_NE(result.content.find("did not answer"), std::string::npos);
  EXPECT_TRUE(logContains("did not answer"));
}

// Without a tool registry nothing answers a ToolExecutionRequest: a tool the model invents gets
// an error result at once instead of waiting the (here ten-minute) tool timeout.
TEST_F(Executor, WithoutAToolRegistryAnInventedToolIsRefusedAtOnce) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "after {{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "invented", "arguments": {}}]}}
)");
  Recorder rec(bus_);
  auto o = options();
  o.tools = nullptr;
  o.toolCallTimeout = std::chrono::minutes(10);
  LlmExecutor executor(bus_, o);
  auto result = executor.execute(request("t", "go"));
  EXPECT_EQ(result.content.rfind("after {\"error\":", 0), 0u) << result.content;
  EXPECT_NE(result.content.find("invented"), std::string::npos) << result.content;
  EXPECT_EQ(result.iterations, 2);
  std::lock_guard lock(rec.mutex);
  EXPECT_EQ(std::count(rec.order.begin(), rec.order.end(), "tool_execution_request"), 0);
}

// A failed request leaves the thread's history as it was: the prompt, the reply that asked for
// a tool and the tool's result are all dropped, so a retry does not send the prompt twice.
TEST_F(Executor, AFailedRequestIsRolledBack) {
  startMock(R"(
{"match": {"request": 3}, "error": {"status": 500, "message": "down"}}
{"match": {"last_role": "tool"}, "reply": {"content": "after {{tool_results}}"}}
{"match": {"user_contains": "use"}, "reply": {"tool_calls": [{"name": "alpha", "arguments": {}}]}}
{"reply": {"content": "ok {{last_user}}"}}
)");
  addTools();
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  EXPECT_EQ(executor.execute(request("r", "first")).content, "ok first");
  EXPECT_THROW(executor.execute(request("r", "use tools")), HttpError);  // the 3rd call: 500
  auto retried = executor.execute(request("r", "use tools"));
  EXPECT_EQ(retried.content, "after A-by-registry");
  const json body = server_->requests().back()["body"];
  std::vector<std::string> roles;
  for (const auto& m : body["messages"])
    roles.push_back(m["role"]);
  EXPECT_EQ(roles, (std::vector<std::string>{"user", "assistant", "user", "assistant", "tool"}))
      << body["messages"].dump();
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.completed.size(), 2u);
  EXPECT_EQ(history(rec.completed.back().updatedContext.json()).size(), 6u);
}

TEST_F(Executor, HundredThreadsAtOnceKeepTheirOwnHistories) {
  startMock(R"({"reply": {"content": "echo {{last_user}}"}})");
  Recorder rec(bus_);
  auto o = options();
  o.maxConcurrentThreads = 32;
  LlmExecutor executor(bus_, o);
  constexpr int kThreads = 100;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kThreads; ++i)
      bus_.publish(request("thread-" + std::to_string(i),
                           (round == 0 ? "first-" : "second-") + std::to_string(i)));
  }
  executor.waitIdle();
  EXPECT_EQ(executor.threadCount(), static_cast<size_t>(kThreads));
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), 0u) << rec.failed[0].error;
  ASSERT_EQ(rec.completed.size(), 2u * kThreads);
  std::map<std::string, nlohmann::json> last;
  std::map<std::string, int> count;
  for (const auto& done : rec.completed) {
    if (++count[done.threadId] == 2) last[done.threadId] = done.updatedContext.json();
  }
  ASSERT_EQ(last.size(), static_cast<size_t>(kThreads));
  for (int i = 0; i < kThreads; ++i) {
    const std::string n = std::to_string(i);
    auto messages = history(last["thread-" + n]);
    ASSERT_EQ(messages.size(), 4u) << "thread " << n;
    EXPECT_EQ(messages[0].content, "first-" + n);
    EXPECT_EQ(messages[1].content, "echo first-" + n);
    EXPECT_EQ(messages[2].content, "second-" + n);
    EXPECT_EQ(messages[3].content, "echo second-" + n);
  }
}

// A snapshot handed back (the frozen state, O(1)) and the same snapshot as a JSON document
// (from a file, another process) restore the same thread; a later request on the first thread
// does not change a snapshot taken before it, even one whose document is built afterwards.
TEST_F(Executor, RestoresAThreadFromASnapshot) {
  startMock(R"({"reply": {"content": "turn {{turn}}: {{last_user}}"}})");
  ContextSnapshot snapshot;
  Recorder rec(bus_);
  {
    LlmExecutor first(bus_, options());
    bus_.publish(request("a", "remember 7"));
    first.waitIdle();
    {
      std::lock_guard lock(rec.mutex);
      ASSERT_EQ(rec.completed.size(), 1u);
      EXPECT_EQ(rec.completed[0].result.content, "turn 1: remember 7");
      snapshot = rec.completed[0].updatedContext;
    }
    EXPECT_EQ(first.execute(request("a", "and 8")).content, "turn 2: and 8");
  }
  ASSERT_TRUE(snapshot.isObject());
  EXPECT_EQ(snapshot.messages().size(), 2u) << "taken before the second request";
  const std::vector<Message> frozen = history(snapshot.json());
  ASSERT_EQ(frozen.size(), 2u);
  EXPECT_EQ(frozen[0].content, "remember 7");
  EXPECT_EQ(frozen[1].content, "turn 1: remember 7");

  LlmExecutor second(bus_, options());
  const std::pair<const char*, ContextSnapshot> givens[] = {
      {"frozen", snapshot}, {"document", ContextSnapshot(snapshot.json())}};
  for (const auto& [thread, given] : givens) {
    SCOPED_TRACE(thread);
    auto r = request(thread, "what number?");
    r.contextSnapshot = given;
    EXPECT_EQ(second.execute(r).content, "turn 2: what number?");
    auto body = server_->requests().back()["body"];
    ASSERT_EQ(body["messages"].size(), 3u);
    EXPECT_EQ(body["messages"][0]["content"], "remember 7");
  }

  auto bad = request("c", "x");
  bad.contextSnapshot = nlohmann::json{{"format", "parley.snapshot/99"}};
  try {
    second.execute(bad);
    ADD_FAILURE() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "snapshot.format");
  }
}

TEST_F(Executor, ValidationFailuresNameTheField) {
  startMock(R"({"reply": {"content": "never"}})");
  addTools();
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  struct Case {
    std::string field;
    std::function<void(LlmExecutionRequest&)> breakIt;
  };
  const std::vector<Case> cases = {
      {"workflowId", [](auto& r) { r.workflowId.clear(); }},
      {"threadId", [](auto& r) { r.threadId.clear(); }},
      {"nodeId", [](auto& r) { r.nodeId.clear(); }},
      {"nodeType", [](auto& r) { r.nodeType = "teleport"; }},
      {"requestData.prompt", [](auto& r) { r.requestData.prompt.clear(); }},
      {"requestData.profileId", [](auto& r) { r.requestData.profileId.clear(); }},
      {"requestData.profileId", [](auto& r) { r.requestData.profileId = "nope"; }},
      {"requestData.tools[1]",
       [](auto& r) {
         r.requestData.tools = {"alpha", "gamma"};
       }},
      {"requestData.parameters", [](auto& r) { r.requestData.parameters = 3; }},
      {"contextSnapshot", [](auto& r) { r.contextSnapshot = nlohmann::json("text"); }},
  };
  for (const auto& c : cases) {
    auto r = request("v", "hello");
    c.breakIt(r);
    try {
      executor.execute(r);
      ADD_FAILURE() << c.field << ": no error";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), c.field);
    }
  }
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(rec.failed[i].errorDetails.at("kind"), "validation");
    EXPECT_EQ(rec.failed[i].errorDetails.at("field"), cases[i].field);
    EXPECT_FALSE(rec.failed[i].error.empty());
  }
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_EQ(executor.threadCount(), 0u);
}

TEST_F(Executor, AnHttpErrorCrossesTheEventsAsItself) {
  startMock(R"({"error": {"status": 429, "message": "slow down", "type": "rate_limit"}})");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  try {
    executor.execute(request("limited", "hi"));
    ADD_FAILURE() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 429);
    EXPECT_EQ(e.apiMessage(), "slow down");
    EXPECT_EQ(e.apiType(), "rate_limit");
    EXPECT_NE(e.body().find("slow down"), std::string::npos);
    EXPECT_TRUE(e.retryable());
  }
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), 1u);
  const nlohmann::json& details = rec.failed[0].errorDetails;
  EXPECT_EQ(details.at("kind"), "http");
  EXPECT_EQ(details.at("status"), 429);
  EXPECT_EQ(details.at("retryable"), true);
  EXPECT_EQ(details.at("message"), rec.failed[0].error);
}

TEST_F(Executor, CleanupWhileAToolCallIsPendingCancelsTheThread) {
  startMock(kToolScript);
  addTools();
  ManualWorker worker(bus_);  // never answers
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options(false));
  bus_.publish(request("t", "use tools"));
  bus_.publish(request("t", "queued behind"));
  worker.waitFor(2);
  EXPECT_TRUE(executor.cleanupThread("t"));
  executor.waitIdle();
  EXPECT_FALSE(executor.cleanupThread("t"));
  EXPECT_EQ(executor.threadCount(), 0u);
  std::lock_guard lock(rec.mutex);
  EXPECT_TRUE(rec.completed.empty());
  ASSERT_EQ(rec.failed.size(), 2u);
  for (const auto& f : rec.failed)
    EXPECT_EQ(f.errorDetails.at("kind"), "cancelled") << f.error;
  EXPECT_EQ(server_->requests().size(), 1u);
}

TEST_F(Executor, ContextProcessorNodeAppliesTheOperation) {
  startMock(R"({"reply": {"content": "ok {{last_user}}"}})");
  LlmExecutor executor(bus_, options());
  executor.execute(request("c", "one"));
  executor.execute(request("c", "two"));
  auto op = request("c", "");
  op.nodeType = "context_processor";
  op.requestData.parameters = {{"operation", "truncate"}, {"truncate", {{"keepLast", 2}}}};
  auto result = executor.execute(op);
  EXPECT_EQ(nlohmann::json::parse(result.content).at("messageCount"), 2);
  auto next = executor.execute(request("c", "three"));
  auto body = server_->requests().back()["body"];
  ASSERT_EQ(body["messages"].size(), 3u);
  EXPECT_EQ(body["messages"][0]["content"], "two");
}

// The read half of a context_processor node: the history, or a part of it chosen by count,
// role and range, read into the result (the conversation unchanged) or into the prompt of a
// model call.
TEST_F(Executor, ContextProcessorNodeReadsTheHistory) {
  startMock(R"({"reply": {"content": "ok {{last_user}}"}})");
  LlmExecutor executor(bus_, options());
  for (const char* prompt : {"one", "two", "three"})
    executor.execute(request("c", prompt));
  const auto read = [&](const json& spec) {
    auto op = request("c", "");
    op.nodeType = "context_processor";
    op.requestData.profileId.clear();
    op.requestData.parameters = {{"operation", "read"}, {"read", spec}};
    auto result = executor.execute(op);
    EXPECT_EQ(result.finishReason, "context_read");
    const json content = json::parse(result.content);
    EXPECT_EQ(content.at("operation"), "read");
    std::vector<std::string> texts;
    for (const Message& m : messagesFromJson(content.at("messages")))
      texts.push_back(m.content);
    EXPECT_EQ(content.at("messageCount"), texts.size());
    return texts;
  };
  using Texts = std::vector<std::string>;
  EXPECT_EQ(read(json::object()).size(), 6u);
  EXPECT_EQ(read({{"last", 2}}), (Texts{"three", "ok three"}));
  EXPECT_EQ(read({{"role", "user"}}), (Texts{"one", "two", "three"}));
  EXPECT_EQ(read({{"role", "assistant"}, {"last", 1}}), (Texts{"ok three"}));
  EXPECT_EQ(read({{"role", "user"}, {"range", {{"start", 1}, {"end", 3}}}}),
            (Texts{"two", "three"}));
  EXPECT_EQ(read({{"range", {{"start", 0}, {"end", 2}}}}), (Texts{"one", "ok one"}));
  const size_t calls = server_->requests().size();

  // Into the prompt: the read messages replace {{context}} in the prompt the model receives.
  auto summarise = request("c", "Summarise:\n{{context}}");
  summarise.nodeType = "context_processor";
  summarise.requestData.parameters = {
      {"operation", "read"}, {"read", {{"role", "user"}, {"last", 2}, {"into", "prompt"}}}};
  auto answer = executor.execute(summarise);
  ASSERT_EQ(server_->requests().size(), calls + 1);
  const json sent = server_->requests().back()["body"]["messages"];
  EXPECT_EQ(sent.back()["content"], "Summarise:\nuser: two\nuser: three");
  EXPECT_EQ(answer.content, "ok Summarise:\nuser: two\nuser: three");
  EXPECT_EQ(sent.size(), 7u);  // the history, then the prompt
  EXPECT_FALSE(server_->requests().back()["body"].contains("read"));
  EXPECT_FALSE(server_->requests().back()["body"].contains("operation"));

  // Bad specs fail naming the field.
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"last", -1}}, "requestData.parameters.read.last"},
      {{{"role", "robot"}}, "requestData.parameters.read.role"},
      {{{"last", 1}, {"range", {{"start", 0}, {"end", 1}}}}, "requestData.parameters.read"},
      {{{"into", "nowhere"}}, "requestData.parameters.read.into"},
      {{{"colour", "red"}}, "requestData.parameters.read.colour"},
  };
  for (const auto& [spec, field] : bad) {
    auto op = request("c", "");
    op.nodeType = "context_processor";
    op.requestData.parameters = {{"operation", "read"}, {"read", spec}};
    try {
      executor.execute(op);
      ADD_FAILURE() << spec.dump() << ": no error";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), field) << spec.dump();
    }
  }
  auto noPrompt = request("c", "");
  noPrompt.nodeType = "context_processor";
  noPrompt.requestData.parameters = {{"operation", "read"}, {"read", {{"into", "prompt"}}}};
  EXPECT_THROW(executor.execute(noPrompt), ValidationError);
}

TEST_F(Executor, ShutdownRefusesNewRequests) {
  startMock(R"({"reply": {"content": "hi"}})");
  LlmExecutor executor(bus_, options());
  executor.execute(request("x", "a"));
  executor.shutdown();
  EXPECT_EQ(executor.threadCount(), 0u);
  EXPECT_THROW(executor.execute(request("x", "b")), CancelledError);
}

TEST_F(Executor, UserInteractionPausesTheThreadUntilTheAnswer) {
  startMock(R"({"reply": {"content": "Hello {{last_user}}"}})");
  std::mutex m;
  std::condition_variable cv;
  std::vector<UserInteractionRequested> asked;
  auto sub = bus_.subscribe<UserInteractionRequested>([&](const UserInteractionRequested& e) {
    std::lock_guard lock(m);
    asked.push_back(e);
    cv.notify_all();
  });
  LlmExecutor executor(bus_, options());
  auto r = request("u", "What is your name?");
  r.nodeType = "user_interaction";
  r.traceId = "trace-ui";
  std::thread user([&] {
    UserInteractionRequested question;
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return !asked.empty(); });
      question = asked[0];
    }
    UserInteractionResponded stray;
    stray.interactionId = "nobody-asked";
    stray.response = "?";
    bus_.publish(stray);
    UserInteractionResponded answer;
    answer.threadId = question.threadId;
    answer.traceId = question.traceId;
    answer.interactionId = question.interactionId;
    answer.response = "Ada";
    bus_.publish(answer);
  });
  auto result = executor.execute(r);
  user.join();
  EXPECT_EQ(result.content, "Hello Ada");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].prompt, "What is your name?");
  EXPECT_EQ(asked[0].traceId, "trace-ui");
  EXPECT_FALSE(asked[0].interactionId.empty());
  EXPECT_TRUE(logContains("nobody-asked"));
  auto body = server_->requests().back()["body"];
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["content"], "Ada");
}

// A user_interaction's timeoutMs is the executor's, not a model parameter: the body the model
// gets after the answer does not carry it (OpenAI refuses unknown fields with a 400).
TEST_F(Executor, AnInteractionsTimeoutStaysOutOfTheModelRequest) {
  startMock(R"({"reply": {"content": "Hello"}})");
  auto user = bus_.subscribe<UserInteractionRequested>([&](const UserInteractionRequested& e) {
    UserInteractionResponded answer;
    answer.threadId = e.threadId;
    answer.interactionId = e.interactionId;
    answer.response = "Ada";
    bus_.publish(answer);
  });
  LlmExecutor executor(bus_, options());
  auto r = request("u", "What is your name?");
  r.nodeType = "user_interaction";
  r.requestData.parameters = {{"timeoutMs", 5000}, {"temperature", 0.5}};
  EXPECT_EQ(executor.execute(r).content, "Hello");
  const json body = server_->requests().back()["body"];
  EXPECT_FALSE(body.contains("timeoutMs")) << body.dump();
  EXPECT_EQ(body.value("temperature", 0.0), 0.5);
}

// requestData.tools narrows what runs, not only what is offered: a model that names another
// registered tool gets an error result, and that tool never runs.
TEST_F(Executor, OnlyTheToolsOfferedToTheModelRun) {
  startMock(kToolScript);  // the model calls alpha and beta
  std::atomic<int> betaRan{0};
  tools_->add("alpha", "first", nullptr, [](const json&, ToolContext&) -> json { return "A"; });
  tools_->add("beta", "second", nullptr, [&](const json&, ToolContext&) -> json {
    ++betaRan;
    return "B";
  });
  LlmExecutor executor(bus_, options());
  auto r = request("t", "use tools");
  r.requestData.tools = {"alpha"};
  auto result = executor.execute(r);
  EXPECT_EQ(betaRan.load(), 0);
  EXPECT_EQ(result.content.rfind("got A; {\"error\":", 0), 0u) << result.content;
  EXPECT_NE(result.content.find("not offered"), std::string::npos) << result.content;
  const json offered = server_->requests().front()["body"]["tools"];
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_EQ(offered[0]["function"]["name"], "alpha");
}

TEST_F(Executor, UserInteractionWithoutAnAnswerTimesOut) {
  startMock(R"({"reply": {"content": "never"}})");
  LlmExecutor executor(bus_, options());
  Recorder rec(bus_);
  auto r = request("u", "Anyone?");
  r.nodeType = "user_interaction";
  r.requestData.profileId.clear();  // no model call after the answer
  r.requestData.parameters = {{"timeoutMs", 50}};
  EXPECT_THROW(executor.execute(r), TimeoutError);
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), 1u);
  EXPECT_EQ(rec.failed[0].errorDetails.at("kind"), "timeout");
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(Executor, ToolsNeedingApprovalAskFirstAndARejectionIsTheToolsError) {
  startMock(kToolScript);
  ToolOptions needsApproval;
  needsApproval.requiresApproval = true;
  tools_->add(
      "alpha", "first", nullptr, [](const json&, ToolContext&) -> json { return "A"; },
      needsApproval);
  tools_->add(
      "beta", "second", nullptr, [](const json&, ToolContext&) -> json { return "B"; },
      needsApproval);
  std::vector<std::string> asked;
  // Answers inline, on the executor's thread: alpha approved, beta rejected.
  auto user = bus_.subscribe<UserInteractionRequested>([&](const UserInteractionRequested& e) {
    asked.push_back(e.prompt);
    UserInteractionResponded answer;
    answer.threadId = e.threadId;
    answer.interactionId = e.interactionId;
    answer.response = e.prompt.find("alpha") != std::string::npos ? "yes" : "no";
    bus_.publish(answer);
  });
  LlmExecutor executor(bus_, options());
  auto result = executor.execute(request("t", "use tools"));
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_NE(asked[0].find("alpha"), std::string::npos);
  EXPECT_EQ(result.content.rfind("got A; {\"error\":", 0), 0u) << result.content;
  EXPECT_NE(result.content.find("rejected"), std::string::npos);
}

// The turn's settings (ExecutorOptions::turn, turn_defaults.hpp) hold in the executor as they do
// in every other host.
TEST_F(Executor, ACostBudgetRefusesACallBeforeAnythingIsSent) {
  startMock(R"({"reply": {"content": "never"}})");
  auto prices = std::make_shared<PriceTable>();
  ModelPrice price;
  price.output = 1000;  // the call's worst case: 4096 x $1000 / M = $4.096
  prices->set("gpt-4o-mini", price);
  auto o = options();
  o.turn.budget.prices = prices;
  o.turn.budget.maxCostPerRun = 1.0;
  LlmExecutor executor(bus_, o);
  try {
    executor.execute(request("b", "hello"));
    FAIL() << "the call over budget was made";
  } catch (const BudgetExceeded& e) {
    EXPECT_EQ(e.budget(), "maxCostPerRun");
  }
  EXPECT_TRUE(server_->requests().empty());
  // A limit without a price table is refused when the executor is made.
  auto unpriced = options();
  unpriced.turn.budget.maxCostPerRun = 1.0;
  EXPECT_THROW(LlmExecutor(bus_, unpriced), ValidationError);
}

TEST_F(Executor, ACallTimeoutBoundsEachModelCall) {
  startMock(R"({"delay_ms": 60000, "reply": {"content": "too late"}})");
  auto o = options();
  o.turn.callTimeout = 300ms;
  LlmExecutor executor(bus_, o);
  EXPECT_THROW(executor.execute(request("slow", "hello")), TimeoutError);
}

TEST_F(Executor, ThePerReplyToolCapAndTheSystemPromptHold) {
  addTools();
  startMock(kToolScript);
  auto o = options();
  o.turn.maxToolCallsPerReply = 1;
  o.turn.systemPrompt = "be brief";
  LlmExecutor executor(bus_, o);
  Recorder recorder(bus_);
  executor.execute(request("cap", "go"));
  const auto body = server_->requests().front()["body"];
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][0]["content"], "be brief");
  std::lock_guard lock(recorder.mutex);
  std::vector<std::string> results;
  for (const auto& m : recorder.added)
    if (m.role == Role::Tool) results.push_back(m.content);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0], "A-by-registry");
  EXPECT_NE(results[1].find("error"), std::string::npos) << results[1];
}

TEST_F(Executor, OverTheTokenLimitPublishesTokenLimitExceeded) {
  startMock(R"({"reply": {"content": "a reply of several words"}})");
  std::vector<TokenLimitExceeded> seen;
  std::mutex m;
  auto sub = bus_.subscribe<TokenLimitExceeded>([&](const TokenLimitExceeded& e) {
    std::lock_guard lock(m);
    seen.push_back(e);
  });
  auto o = options();
  o.turn.tokenLimit = 1;
  LlmExecutor executor(bus_, o);
  auto first = request("k", "first");
  first.traceId = "trace-first";
  executor.execute(first);
  auto second = request("k", "second");
  second.traceId = "trace-limit";
  executor.execute(second);
  std::lock_guard lock(m);
  // The second call at least is over the limit (its view holds the first turn).
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().traceId, "trace-limit");
  EXPECT_EQ(seen.back().threadId, "k");
  EXPECT_EQ(seen.back().tokenLimit, 1);
  EXPECT_GT(seen.back().contextTokens, 1);
  for (const auto& e : seen)
    EXPECT_TRUE(e.traceId == "trace-first" || e.traceId == "trace-limit") << e.traceId;
}

// The check counts the prompt the request sends, so a long first prompt is over the limit.
TEST_F(Executor, ALongFirstPromptIsOverTheTokenLimit) {
  startMock(R"({"reply": {"content": "ok"}})");
  std::vector<TokenLimitExceeded> seen;
  std::mutex m;
  auto sub = bus_.subscribe<TokenLimitExceeded>([&](const TokenLimitExceeded& e) {
    std::lock_guard lock(m);
    seen.push_back(e);
  });
  auto o = options();
  o.turn.tokenLimit = 1000;
  LlmExecutor executor(bus_, o);
  std::string prompt;
  for (int i = 0; i < 8000; ++i)
    prompt += "word ";  // 40 000 characters
  EXPECT_EQ(executor.execute(request("long", prompt)).content, "ok");
  std::lock_guard lock(m);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].threadId, "long");
  EXPECT_GT(seen[0].contextTokens, 1000);
}

TEST_F(Executor, ThreadsPersistInTheStoreAcrossExecutors) {
  startMock(R"({"reply": {"content": "turn {{turn}}"}})");
  std::string dir = (std::filesystem::temp_directory_path() / "parley-exec-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  {
    auto store = std::make_shared<SqliteStore>(dir + "/threads.db");
    auto o = options();
    o.store = store;
    {
      LlmExecutor first(bus_, o);
      EXPECT_EQ(first.execute(request("kept", "one")).content, "turn 1");
    }
    LlmExecutor second(bus_, o);  // a new process, as far as the conversation knows
    EXPECT_EQ(second.execute(request("kept", "two")).content, "turn 2");
    EXPECT_EQ(store->loadThread("kept").messages.size(), 4u);
  }
  std::filesystem::remove_all(dir);
}

// The executor's state, and the store it holds, end with it, on the caller's thread: once the
// executor is gone nothing of it holds the database any more (which the caller may remove).
// Without the wait for its runner tasks, the last of them let the store go on a pool thread,
// after the destructor had returned, now and then (a test removing its directory failed).
TEST_F(Executor, TheStoreIsLetGoBeforeTheExecutorIsGone) {
  startMock(R"({"reply": {"content": "ok"}})");
  std::string dir = (std::filesystem::temp_directory_path() / "parley-exec-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> closed{0};  // 1: on the caller's thread, 2: on another
    {
      auto o = options();
      o.store = std::shared_ptr<ConversationStore>(
          new SqliteStore(dir + "/threads.db"), [&closed, caller](ConversationStore* store) {
            delete store;
            closed = std::this_thread::get_id() == caller ? 1 : 2;
          });
      LlmExecutor executor(bus_, std::move(o));
      EXPECT_EQ(executor.execute(request("t" + std::to_string(round), "hi")).content, "ok");
    }
    ASSERT_EQ(closed.load(), 1) << "round " << round << " (0: still open, 2: closed elsewhere)";
  }
  std::filesystem::remove_all(dir);
}

// With a store, a request's snapshot replaces the thread's conversation as a new batch: the
// first request of a thread is saved, and a later (shorter) snapshot is neither spliced onto
// the old messages nor a failed save after the model answered.
TEST_F(Executor, ASnapshotOfAStoredThreadIsSavedAsItsNewView) {
  startMock(R"({"reply": {"content": "turn {{turn}}: {{last_user}}"}})");
  std::string dir = (std::filesystem::temp_directory_path() / "parley-exec-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const auto snapshotOf = [](const std::vector<Message>& messages) {
    ConversationManager m;
    m.addMessages(messages);
    return m.createSnapshot();
  };
  const auto storedView = [&](ConversationStore& store) {
    ConversationManager loaded;
    loadConversation(store, "s", loaded);
    std::vector<std::string> texts;
    for (const Message& m : loaded.getMessages())
      texts.push_back(m.content);
    return texts;
  };
  {
    auto store = std::make_shared<SqliteStore>(dir + "/threads.db");
    auto o = options();
    o.store = store;
    LlmExecutor executor(bus_, o);
    auto first = request("s", "q1");
    first.contextSnapshot = snapshotOf(
        {Message::user("a"), Message::assistant("b"), Message::user("c"), Message::assistant("d")});
    EXPECT_EQ(executor.execute(first).content, "turn 3: q1");
    EXPECT_EQ(storedView(*store),
              (std::vector<std::string>{"a", "b", "c", "d", "q1", "turn 3: q1"}));
    auto shorter = request("s", "q2");
    shorter.contextSnapshot = snapshotOf({Message::user("x"), Message::assistant("y")});
    EXPECT_EQ(executor.execute(shorter).content, "turn 2: q2");
    EXPECT_EQ(storedView(*store), (std::vector<std::string>{"x", "y", "q2", "turn 2: q2"}));
    EXPECT_EQ(executor.execute(request("s", "q3")).content, "turn 3: q3");
    EXPECT_EQ(storedView(*store).size(), 6u);
  }
  std::filesystem::remove_all(dir);
}

// The default ToolWorker honours the request's executionOptions: a call the executor has timed
// out is stopped through its stop token, not left running for the tool's own minute.
TEST_F(Executor, TheToolWorkerStopsACallTheExecutorTimedOut) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "after {{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "slow", "arguments": {}}]}}
)");
  std::mutex mutex;
  std::condition_variable changed;
  bool stopped = false;
  ToolOptions own;
  own.timeout = std::chrono::minutes(1);
  tools_->add(
      "slow", "", nullptr,
      [&](const json&, ToolContext& context) -> json {
        testing::waitForStop(context);
        std::lock_guard lock(mutex);
        stopped = true;
        changed.notify_all();
        return "late";
      },
      own);
  auto o = options();
  o.toolCallTimeout = 200ms;
  LlmExecutor executor(bus_, o);
  auto result = executor.execute(request("t", "go"));
  // Whichever sees the 200 ms pass first answers: the executor ("did not answer within") or the
  // worker, which was given the same bound ("did not finish within").
  EXPECT_NE(result.content.find("within 200 ms"), std::string::npos) << result.content;
  std::unique_lock lock(mutex);
  // The bound only turns a call left running into a failure instead of a minute's wait.
  EXPECT_TRUE(changed.wait_for(lock, 10s, [&] { return stopped; }));
}

TEST_F(Executor, ResponseCacheAnswersAnIdenticalRequestWithoutTheModel) {
  startMock(R"({"reply": {"content": "echo {{last_user}} #{{request}}"}})");
  std::mutex m;
  std::vector<LlmStreamChunk> chunks;
  auto sub = bus_.subscribe<LlmStreamChunk>([&](const LlmStreamChunk& e) {
    std::lock_guard lock(m);
    chunks.push_back(e);
  });
  auto o = options();
  o.responseCacheSize = 8;
  LlmExecutor executor(bus_, o);

  EXPECT_EQ(executor.execute(request("t1", "hello")).content, "echo hello #1");
  ASSERT_EQ(server_->requests().size(), 1u);
  // Another thread with the same (empty) history sends the same request: the model is not asked.
  LlmExecutionResult cached = executor.execute(request("t2", "hello"));
  EXPECT_EQ(cached.content, "echo hello #1");
  EXPECT_EQ(cached.finishReason, "stop");
  EXPECT_GT(cached.usage.totalTokens, 0);
  EXPECT_EQ(server_->requests().size(), 1u);
  // Streamed, it is one chunk with the whole content.
  auto streamed = request("t3", "hello");
  streamed.requestData.stream = true;
  EXPECT_EQ(executor.execute(streamed).content, "echo hello #1");
  EXPECT_EQ(server_->requests().size(), 1u);
  {
    std::lock_guard lock(m);
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_EQ(chunks[0].content, "echo hello #1");
    EXPECT_EQ(chunks[0].threadId, "t3");
  }
  // The reply is in the thread's history as if the model had answered.
  auto next = executor.execute(request("t2", "again"));
  EXPECT_EQ(next.content, "echo again #2");
  auto body = server_->requests().back()["body"];
  ASSERT_EQ(body["messages"].size(), 3u);
  EXPECT_EQ(body["messages"][1]["content"], "echo hello #1");

  // A different prompt, or the same one with another parameter, reaches the model.
  EXPECT_EQ(executor.execute(request("t4", "other")).content, "echo other #3");
  auto warmer = request("t5", "hello");
  warmer.requestData.parameters = {{"temperature", 0.9}};
  EXPECT_EQ(executor.execute(warmer).content, "echo hello #4");
  EXPECT_EQ(server_->requests().size(), 4u);
  auto stats = executor.responseCacheStats();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 4u);
  EXPECT_EQ(stats.size, 4u);
}

TEST_F(Executor, ThreadsReplayingACachedToolCallGetIdsOfTheirOwn) {
  startMock(kToolScript);
  addTools();
  Recorder rec(bus_);
  auto o = options();
  o.responseCacheSize = 64;
  LlmExecutor executor(bus_, o);
  ASSERT_EQ(executor.execute(request("first", "use tools")).content,
            "got A-by-registry; B-by-registry");
  ASSERT_EQ(server_->requests().size(), 2u);
  // Every thread's first call is the cached one (same empty history, same prompt); its tool
  // calls run concurrently with the other threads' and must not collide on their ids. The
  // second call differs per thread (the ids are in it), so it reaches the model.
  constexpr int kThreads = 20;
  for (int i = 0; i < kThreads; ++i)
    bus_.publish(request("t" + std::to_string(i), "use tools"));
  executor.waitIdle();
  EXPECT_EQ(server_->requests().size(), 2u + kThreads);
  EXPECT_EQ(executor.responseCacheStats().hits, static_cast<uint64_t>(kThreads));
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.failed.size(), 0u);
  ASSERT_EQ(rec.completed.size(), kThreads + 1u);
  std::set<std::string> ids;
  for (const auto& done : rec.completed) {
    EXPECT_EQ(done.result.content, "got A-by-registry; B-by-registry") << done.threadId;
    for (const auto& call : done.result.toolCalls)
      EXPECT_TRUE(ids.insert(call.id).second) << "tool call id " << call.id << " repeats";
  }
  EXPECT_EQ(ids.size(), 2u * (kThreads + 1));
  EXPECT_FALSE(logContains("duplicate"));
}

TEST_F(Executor, WithoutTheCacheEveryRequestReachesTheModel) {
  startMock(R"({"reply": {"content": "echo {{last_user}} #{{request}}"}})");
  LlmExecutor executor(bus_, options());
  EXPECT_EQ(executor.execute(request("t1", "hello")).content, "echo hello #1");
  EXPECT_EQ(executor.execute(request("t2", "hello")).content, "echo hello #2");
  EXPECT_EQ(server_->requests().size(), 2u);
  EXPECT_EQ(executor.responseCacheStats().hits, 0u);
}

TEST_F(Executor, EventLogWritesJsonLinesWithoutSecrets) {
  startMock(kToolScript);
  addTools();
  std::ostringstream out;
  EventLog eventLog(bus_, out);
  LlmExecutor executor(bus_, options());
  auto r = request("t", "use tools");
  r.traceId = "trace-log";
  r.requestData.parameters = {{"temperature", 0.5}, {"api_key", "sk-leak"}, {"max_tokens", 50}};
  executor.execute(r);
  std::istringstream lines(out.str());
  std::string line;
  std::vector<std::string> types;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("trace_id"), "trace-log");
    EXPECT_EQ(j.at("thread_id"), "t");
    EXPECT_FALSE(j.at("time").get<std::string>().empty());
    types.push_back(j.at("type"));
    if (j["type"] == "llm_execution_request") {
      EXPECT_EQ(j["parameters"]["api_key"], "[redacted]");
      EXPECT_EQ(j["parameters"]["max_tokens"], 50);
      EXPECT_EQ(j["profile_id"], "default");
    }
  }
  EXPECT_EQ(out.str().find("sk-leak"), std::string::npos);
  EXPECT_EQ(out.str().find("sk-test-secret"), std::string::npos);
  EXPECT_EQ(types.front(), "llm_execution_request");
  EXPECT_EQ(types.back(), "llm_execution_completed");
  EXPECT_EQ(std::count(types.begin(), types.end(), "tool_execution_request"), 2);
  EXPECT_EQ(std::count(types.begin(), types.end(), "tool_execution_completed"), 2);
}

// A worker that cannot run a tool says why as errorDetails (errorToJson), as a failed request
// does; the executor reads the message from it and counts a "timeout" kind as a timeout.
TEST_F(Executor, ToolExecutionFailedCarriesTheErrorAsJson) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "after {{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "alpha", "arguments": {}}]}}
)");
  addTools();
  std::ostringstream out;
  EventLog eventLog(bus_, out);
  auto worker = bus_.subscribe<ToolExecutionRequest>([&](const ToolExecutionRequest& e) {
    ToolExecutionFailed failed;
    failed.threadId = e.threadId;
    failed.traceId = e.traceId;
    failed.toolCallId = e.toolCall.id;
    failed.errorDetails = errorToJson(TimeoutError("the tool host did not answer"));
    bus_.publish(failed);
  });
  LlmExecutor executor(bus_, options(/*toolWorker=*/false));
  auto result = executor.execute(request("t", "go"));
  EXPECT_NE(result.content.find("the tool host did not answer"), std::string::npos)
      << result.content;
  const auto stats = executor.toolStats("t");
  ASSERT_EQ(stats.count("alpha"), 1u);
  EXPECT_EQ(stats.at("alpha").calls, 1u);
  EXPECT_EQ(stats.at("alpha").failures, 1u);
  EXPECT_EQ(stats.at("alpha").timeouts, 1u);
  EXPECT_TRUE(logContains("could not be run: the tool host did not answer"));
  bool logged = false;
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "tool_execution_failed") continue;
    logged = true;
    EXPECT_EQ(j["error_details"]["kind"], "timeout");
    EXPECT_EQ(j["error_details"]["message"], "the tool host did not answer");
  }
  EXPECT_TRUE(logged) << out.str();
}

// Calls, failures, timeouts and time per tool, for one thread and for the whole executor.
TEST_F(Executor, ToolStatisticsPerThreadAndPerTool) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "after {{tool_results}}"}}
{"match": {"user_contains": "slow"}, "reply": {"tool_calls": [{"name": "slow", "arguments": {}}]}}
{"reply": {"tool_calls": [{"name": "alpha", "arguments": {}}, {"name": "broken", "arguments": {}}, {"name": "invented", "arguments": {}}]}}
)");
  tools_->add("alpha", "", nullptr, [](const json&, ToolContext&) -> json { return "A"; });
  tools_->add("broken", "", nullptr,
              [](const json&, ToolContext&) -> json { throw std::runtime_error("broke"); });
  tools_->add("slow", "", nullptr, [](const json&, ToolContext& context) -> json {
    testing::waitForStop(context);
    return "late";
  });
  auto o = options();
  o.toolCallTimeout = 100ms;
  LlmExecutor executor(bus_, o);
  executor.execute(request("s1", "use tools"));
  executor.execute(request("s1", "use tools again"));
  executor.execute(request("s2", "use tools"));
  executor.execute(request("s2", "be slow"));

  const auto s1 = executor.toolStats("s1");
  ASSERT_EQ(s1.size(), 3u);
  EXPECT_EQ(s1.at("alpha").calls, 2u);
  EXPECT_EQ(s1.at("alpha").failures, 0u);
  EXPECT_EQ(s1.at("broken").calls, 2u);
  EXPECT_EQ(s1.at("broken").failures, 2u);
  EXPECT_EQ(s1.at("broken").timeouts, 0u);
  EXPECT_EQ(s1.at("invented").failures, 2u);  // refused, never sent
  EXPECT_EQ(s1.at("invented").totalTime.count(), 0);
  const auto s2 = executor.toolStats("s2");
  EXPECT_EQ(s2.at("alpha").calls, 1u);
  EXPECT_EQ(s2.at("slow").calls, 1u);
  EXPECT_EQ(s2.at("slow").failures, 1u);
  EXPECT_EQ(s2.at("slow").timeouts, 1u);
  EXPECT_GE(s2.at("slow").totalTime, 100ms);  // it was waited for until its timeout
  const auto all = executor.toolStats();
  EXPECT_EQ(all.at("alpha").calls, 3u);
  EXPECT_EQ(all.at("broken").failures, 3u);
  EXPECT_TRUE(executor.toolStats("nobody").empty());

  EXPECT_TRUE(executor.cleanupThread("s1"));
  EXPECT_TRUE(executor.toolStats("s1").empty());
  EXPECT_EQ(executor.toolStats().at("alpha").calls, 3u);
}

// Each model call of a request has a span id of its own under the request's trace, carried by
// the events of that call: its chunks, its prompt and reply, the reply's tool calls and results.
TEST_F(Executor, EachModelCallHasItsOwnSpanUnderTheTrace) {
  startMock(kToolScript);
  addTools();
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> seen;  // event type (role), span id
  std::vector<Subscription> subs;
  subs.push_back(bus_.subscribe<LlmStreamChunk>([&](const LlmStreamChunk& e) {
    std::lock_guard lock(mutex);
    seen.emplace_back("chunk" + std::to_string(e.iteration), e.spanId);
  }));
  subs.push_back(bus_.subscribe<MessageAdded>([&](const MessageAdded& e) {
    std::lock_guard lock(mutex);
    seen.emplace_back(std::string(toString(e.message.role)), e.spanId);
  }));
  subs.push_back(bus_.subscribe<ToolExecutionRequest>([&](const ToolExecutionRequest& e) {
    std::lock_guard lock(mutex);
    seen.emplace_back("tool_request", e.spanId);
  }));
  subs.push_back(bus_.subscribe<ToolExecutionCompleted>([&](const ToolExecutionCompleted& e) {
    std::lock_guard lock(mutex);
    seen.emplace_back("tool_completed", e.spanId);
  }));
  std::string completedSpan = "unset";
  subs.push_back(bus_.subscribe<LlmExecutionCompleted>([&](const LlmExecutionCompleted& e) {
    std::lock_guard lock(mutex);
    completedSpan = e.spanId;
  }));
  LlmExecutor executor(bus_, options());
  auto r = request("t", "use tools");
  r.requestData.stream = true;
  executor.execute(r);
  decltype(seen) first;
  {
    std::lock_guard lock(mutex);
    first.swap(seen);
  }
  executor.execute(request("t", "use tools again"));

  std::lock_guard lock(mutex);
  // Call 1: the prompt, the reply with two tool calls, their round trips and results; call 2:
  // the streamed answer. Every event of call 1 comes before the first event of call 2.
  const std::vector<std::string> call1 = {
      "user",           "assistant",      "tool_request", "tool_request",
      "tool_completed", "tool_completed", "tool",         "tool"};
  ASSERT_GT(first.size(), call1.size());
  const std::string span1 = first[0].second;
  EXPECT_EQ(span1.rfind("sp-", 0), 0u) << span1;
  std::multiset<std::string> kinds;
  for (size_t i = 0; i < call1.size(); ++i) {
    kinds.insert(first[i].first);
    EXPECT_EQ(first[i].second, span1) << first[i].first;
  }
  EXPECT_EQ(kinds, std::multiset<std::string>(call1.begin(), call1.end()));
  const std::string span2 = first[call1.size()].second;
  EXPECT_NE(span2, span1);
  for (size_t i = call1.size(); i < first.size(); ++i) {
    EXPECT_TRUE(first[i].first == "chunk2" || first[i].first == "assistant") << first[i].first;
    EXPECT_EQ(first[i].second, span2) << first[i].first;
  }
  EXPECT_EQ(first.back().first, "assistant");
  // The next request's calls have spans of their own.
  std::set<std::string> later;
  for (const auto& [what, span] : seen) {
    EXPECT_FALSE(span.empty()) << what;
    later.insert(span);
  }
  EXPECT_EQ(later.size(), 2u);
  EXPECT_FALSE(later.count(span1) || later.count(span2));
  EXPECT_TRUE(completedSpan.empty()) << completedSpan;
}

// A failed request is written to the log (stderr when none is set) unless logErrors is off.
TEST_F(Executor, FailuresAreLoggedUnlessTurnedOff) {
  startMock(R"({"error": {"status": 429, "message": "slow down"}})");
  {
    LlmExecutor executor(bus_, options());
    auto r = request("limited", "hi");
    r.traceId = "trace-logged";
    EXPECT_THROW(executor.execute(r), HttpError);
  }
  EXPECT_TRUE(logContains("trace-logged"));
  EXPECT_TRUE(logContains("slow down"));
  auto o = options();
  o.logErrors = false;
  LlmExecutor quiet(bus_, o);
  auto r = request("limited", "hi");
  r.traceId = "trace-quiet";
  EXPECT_THROW(quiet.execute(r), HttpError);
  EXPECT_FALSE(logContains("trace-quiet"));
}

// A "tool" node runs one tool directly: the call and its result join the thread as a call and
// its answer, so the next model call sees them; a tool's error is its result, as in the loop.
TEST_F(Executor, AToolNodeRunsOneToolDirectly) {
  startMock(R"({"reply": {"content": "model saw {{request}} requests"}})");
  std::atomic<int> runs{0};
  tools_->add("lookup", "", nullptr, [&](const json& args, ToolContext&) -> json {
    ++runs;
    return {{"found", args.at("key")}};
  });
  tools_->add("broken", "", nullptr,
              [](const json&, ToolContext&) -> json { throw std::runtime_error("disk on fire"); });
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  auto node = request("t", "");
  node.nodeType = "tool";
  node.requestData.profileId.clear();
  node.requestData.parameters = {{"tool", "lookup"}, {"arguments", {{"key", "k1"}}}};
  auto result = executor.execute(node);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(json::parse(result.content), (json{{"found", "k1"}}));
  EXPECT_EQ(result.finishReason, "tool");
  EXPECT_EQ(result.iterations, 0);
  ASSERT_EQ(result.toolCalls.size(), 1u);
  EXPECT_EQ(result.toolCalls[0].name, "lookup");
  EXPECT_TRUE(server_->requests().empty());

  node.requestData.parameters = {{"tool", "broken"}};
  auto failed = executor.execute(node);
  EXPECT_EQ(failed.finishReason, "tool_error");
  EXPECT_NE(failed.content.find("disk on fire"), std::string::npos) << failed.content;

  // The next llm node sends both calls and their results, paired.
  executor.execute(request("t", "what did the tools say?"));
  const json messages = server_->requests().back()["body"]["messages"];
  ASSERT_EQ(messages.size(), 5u) << messages.dump();
  EXPECT_EQ(messages[0]["tool_calls"][0]["function"]["name"], "lookup");
  EXPECT_EQ(messages[1]["role"], "tool");
  EXPECT_EQ(messages[1]["tool_call_id"], messages[0]["tool_calls"][0]["id"]);
  EXPECT_EQ(messages[3]["role"], "tool");
  {
    std::lock_guard lock(rec.mutex);
    EXPECT_EQ(rec.failed.size(), 0u);
  }

  // Bad tool nodes fail naming the field; nothing runs.
  const std::vector<std::pair<json, std::string>> bad = {
      {json::object(), "requestData.parameters.tool"},
      {{{"tool", 3}}, "requestData.parameters.tool"},
      {{{"tool", "missing"}}, "requestData.parameters.tool"},
      {{{"tool", "lookup"}, {"arguments", "k1"}}, "requestData.parameters.arguments"},
  };
  for (const auto& [parameters, field] : bad) {
    node.requestData.parameters = parameters;
    try {
      executor.execute(node);
      ADD_FAILURE() << parameters.dump() << ": no error";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), field) << parameters.dump();
    }
  }
  EXPECT_EQ(runs.load(), 1);
}

}  // namespace
}  // namespace parley
