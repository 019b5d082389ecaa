// ConversationManager calling a real client against `parley mock` over loopback: one call, tool
// execution, the tool-call loop (stored as one assistant message per iteration), failures,
// streaming, tokens, compression.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <latch>
#include <mutex>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/compression.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "printers.hpp"
#include "wait_for_stop.hpp"

namespace parley {
namespace {

using namespace std::chrono_literals;

const char* kWeatherSchema =
    R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})";

class ConversationLoop : public ::testing::Test {
 protected:
  void startMock(const std::string& script) { server_ = testing::startMockServer(script); }

  std::shared_ptr<OpenAiClient> client(int maxRetries = 0) {
    return std::make_shared<OpenAiClient>(
        testing::mockClientOptions(*server_, "gpt-4o-mini", maxRetries));
  }

  ConversationOptions options(bool stream = false) {
    ConversationOptions o;
    o.llm = client();
    o.tools = tools_;
    o.systemPrompt = "You are terse.";
    o.stream = stream;
    o.log = [this](const std::string& line) {
      std::lock_guard lock(logMutex_);
      log_.push_back(line);
    };
    return o;
  }

  void addWeatherTool() {
    tools_->add("get_weather", "Current weather for a city", json::parse(kWeatherSchema),
                [](const json& args, ToolContext&) -> json {
                  return {{"city", args["city"]}, {"tempC", -3}};
                });
  }

  // Every assistant tool-call message is followed by exactly its results.
  static void expectWellFormed(const std::vector<Message>& view) {
    for (size_t i = 0; i < view.size(); ++i) {
      if (view[i].role != Role::Assistant || view[i].toolCalls.empty()) continue;
      for (size_t k = 0; k < view[i].toolCalls.size(); ++k) {
        ASSERT_LT(i + 1 + k, view.size()) << "tool results missing after message " << i;
        EXPECT_EQ(view[i + 1 + k].role, Role::Tool);
        EXPECT_EQ(view[i + 1 + k].toolCallId, view[i].toolCalls[k].id);
      }
    }
  }

  std::unique_ptr<mock::MockServer> server_;
  std::shared_ptr<ToolRegistry> tools_ = std::make_shared<ToolRegistry>();
  std::mutex logMutex_;
  std::vector<std::string> log_;
};

TEST_F(ConversationLoop, SystemPromptIsTheFirstMessage) {
  startMock(R"({"reply": {"content": "hi"}})");
  ConversationManager c(options());
  ASSERT_EQ(c.getMessageCount(), 1u);
  EXPECT_EQ(c.getMessages()[0], Message::system("You are terse."));
}

TEST_F(ConversationLoop, ExecuteLlmCallAppendsOneAssistantMessage) {
  startMock(
      R"({"reply": {"content": "Hello there", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}})");
  ConversationManager c(options());
  c.addMessage(Message::user("Hello"));
  ChatResult result = c.executeLlmCall();
  EXPECT_EQ(result.message.content, "Hello there");
  EXPECT_EQ(result.finishReason, "stop");
  ASSERT_EQ(c.getMessageCount(), 3u);
  // The reply keeps what its call cost (per-turn usage), and it is never sent back.
  Message expected = Message::assistant("Hello there");
  expected.usage = result.usage;
  ASSERT_TRUE(expected.usage.has_value());
  // Who answered (the model the server named) and when it was received are kept with the reply.
  expected.model = "gpt-4o-mini";
  ASSERT_TRUE(c.getMessages()[2].receivedAt.has_value());
  expected.receivedAt = c.getMessages()[2].receivedAt;
  EXPECT_EQ(expected.usage->promptTokens, 12);
  EXPECT_EQ(c.getMessages()[2], expected);
  // The request carried the view, and the tool definitions when there are tools.
  const json body = server_->requests().at(0)["body"];
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][1]["content"], "Hello");
  EXPECT_EQ(body["model"], "gpt-4o-mini");
  EXPECT_FALSE(body.contains("tools"));

  TokenUsageStats usage = c.getTokenUsage();
  ASSERT_TRUE(usage.lastRequest);
  EXPECT_EQ(usage.lastRequest->promptTokens, 12);
  EXPECT_EQ(usage.cumulative.totalTokens, 15);
  EXPECT_EQ(usage.context.contextTokens, 15);
  EXPECT_FALSE(usage.context.estimated);

  c.addMessage(Message::user("Again"));
  c.executeLlmCall();
  ASSERT_EQ(server_->requests().at(1)["body"]["messages"].size(), 4u);
  EXPECT_FALSE(server_->requests().at(1)["body"]["messages"][2].contains("usage"));
}

TEST_F(ConversationLoop, FailedCallLeavesHistoryAsItWas) {
  startMock(R"({"error": {"status": 500, "message": "boom"}})");
  ConversationManager c(options());
  c.addMessage(Message::user("Hello"));
  const json before = c.createSnapshot();
  try {
    c.executeLlmCall();
    FAIL() << "expected HttpError";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 500);
    EXPECT_EQ(e.apiMessage(), "boom");
  }
  EXPECT_EQ(c.createSnapshot(), before);
  EXPECT_THROW(c.run("again"), HttpError);
  EXPECT_EQ(c.createSnapshot(), before) << "a run whose first call fails adds nothing";
}

TEST_F(ConversationLoop, EmptyReplyIsAnErrorAndAddsNothing) {
  startMock(R"({"reply": {"content": "", "finish_reason": "length"}})");
  ConversationManager c(options());
  c.addMessage(Message::user("Hello"));
  EXPECT_THROW(c.executeLlmCall(), ProtocolError);
  EXPECT_EQ(c.getMessageCount(), 2u);
}

TEST_F(ConversationLoop, NoModelAttachedIsAClearError) {
  ConversationManager c;
  c.addMessage(Message::user("Hello"));
  try {
    c.executeLlmCall();
    FAIL();
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "options.llm");
  }
}

TEST_F(ConversationLoop, ToolLoopStoresOneAssistantMessageThenResults) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "It is {{last_tool}}"}}
{"match": {"user_contains": "weather"}, "reply": {"content": "Checking.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}}
)");
  addWeatherTool();
  ConversationManager c(options());
  RunResult result = c.run("What is the weather in Oslo?");
  EXPECT_EQ(result.iterations, 2);
  EXPECT_EQ(result.finishReason, "stop");
  EXPECT_EQ(result.content, R"(It is {"city":"Oslo","tempC":-3})");
  ASSERT_EQ(result.toolResults.size(), 1u);
  EXPECT_TRUE(result.toolResults[0].success);

  auto view = c.getMessages();
  ASSERT_EQ(view.size(), 5u);
  EXPECT_EQ(view[1].role, Role::User);
  EXPECT_EQ(view[2].role, Role::Assistant);
  EXPECT_EQ(view[2].content, "Checking.");  // text and calls in ONE message
  ASSERT_EQ(view[2].toolCalls.size(), 1u);
  EXPECT_EQ(view[2].toolCalls[0].name, "get_weather");
  EXPECT_EQ(view[3], Message::tool(view[2].toolCalls[0].id, R"({"city":"Oslo","tempC":-3})"));
  EXPECT_EQ(view[4].content, result.content);
  // The second request sent the tool definitions and the tool result back.
  const json second = server_->requests().at(1)["body"];
  EXPECT_EQ(second["tools"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(second["messages"].size(), 4u);
  EXPECT_EQ(second["messages"][3]["role"], "tool");
}

TEST_F(ConversationLoop, ParallelToolsFinishingOutOfOrderComeBackInCallOrder) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "{{tool_results}}"}}
{"reply": {"tool_calls": [{"name": "step", "arguments": {"n": 1}}, {"name": "step", "arguments": {"n": 2}}, {"name": "step", "arguments": {"n": 3}}]}}
)");
  // Call 3 finishes first, then 2, then 1: each waits for the next one to finish.
  std::mutex mutex;
  std::condition_variable cv;
  int finished = 0;
  tools_->add("step", "", json::parse(R"({"type":"object","properties":{"n":{"type":"integer"}}})"),
              [&](const json& args, ToolContext&) -> json {
                const int n = args["n"].get<int>();
                std::unique_lock lock(mutex);
                cv.wait(lock, [&] { return finished == 3 - n; });
                ++finished;
                cv.notify_all();
                return "done " + std::to_string(n);
              });
  ConversationManager c(options());
  RunResult result = c.run("go");
  EXPECT_EQ(result.content, "done 1; done 2; done 3");
  auto tools = c.getMessagesByRole(Role::Tool);
  ASSERT_EQ(tools.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(tools[i].content, "done " + std::to_string(i + 1));
  expectWellFormed(c.getMessages());
}

TEST_F(ConversationLoop, SlowToolHitsItsTimeoutAndTheModelSeesTheError) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "tool said {{last_tool}}"}}
{"reply": {"tool_calls": [{"name": "slow", "arguments": {}}]}}
)");
  ToolOptions toolOptions;
  toolOptions.timeout = 50ms;
  tools_->add(
      "slow", "", json::object(),
      [](const json&, ToolContext& context) -> json {
        testing::waitForStop(context);
        return "late";
      },
      toolOptions);
  ConversationManager c(options());
  RunResult result = c.run("go");
  ASSERT_EQ(result.toolResults.size(), 1u);
  EXPECT_EQ(result.toolResults[0].errorKind, ToolErrorKind::Timeout);
  const std::string toolMessage = c.getMessagesByRole(Role::Tool).at(0).content;
  EXPECT_NE(json::parse(toolMessage).at("error").get<std::string>().find("did not finish"),
            std::string::npos)
      << toolMessage;
  EXPECT_EQ(result.content, "tool said " + toolMessage);
}

// One deadline for the whole turn: a tool that would run for a minute is stopped when the
// turn's time is up, and run() fails with a TimeoutError, however long each tool may run.
TEST_F(ConversationLoop, TurnTimeoutStopsASlowToolAndFailsTheTurn) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "done"}}
{"reply": {"tool_calls": [{"name": "slow", "arguments": {}}]}}
)");
  ToolOptions toolOptions;
  toolOptions.timeout = 60s;
  std::mutex mutex;
  std::condition_variable changed;
  bool stopped = false;
  tools_->add(
      "slow", "", json::object(),
      [&](const json&, ToolContext& context) -> json {
        testing::waitForStop(context);
        std::lock_guard lock(mutex);
        stopped = true;
        changed.notify_all();
        return "late";
      },
      toolOptions);
  ConversationManager c(options());
  RunOptions run;
  run.turnTimeout = 300ms;
  try {
    c.run("go", run);
    FAIL() << "the turn outlived its deadline";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("turn"), std::string::npos) << e.what();
  }
  {
    // The bound only turns a tool that was never stopped into a failure instead of a hang.
    std::unique_lock lock(mutex);
    EXPECT_TRUE(changed.wait_for(lock, 10s, [&] { return stopped; }));
  }
  EXPECT_EQ(server_->requests().size(), 1u);  // the model was not called again
  expectWellFormed(c.getMessages());          // the call has its (cancelled) result
  RunOptions bad;
  bad.turnTimeout = 0ms;
  EXPECT_THROW(c.run("x", bad), ValidationError);
}

// A reply asking for more calls than maxToolCallsPerReply: the first ones run, the rest get an
// error result the model reads, and every call still has its tool message.
TEST_F(ConversationLoop, ToolCallsPastTheCapPerReplyAreNotRun) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "ok"}}
{"reply": {"tool_calls": [{"name": "count", "arguments": {}}, {"name": "count", "arguments": {}}, {"name": "count", "arguments": {}}, {"name": "count", "arguments": {}}, {"name": "count", "arguments": {}}]}}
)");
  std::atomic<int> ran{0};
  tools_->add("count", "", json::object(),
              [&](const json&, ToolContext&) -> json { return ++ran; });
  ConversationOptions o = options();
  o.maxToolCallsPerReply = 2;
  ConversationManager c(o);
  RunResult result = c.run("go");
  EXPECT_EQ(ran.load(), 2);
  ASSERT_EQ(result.toolResults.size(), 5u);
  EXPECT_TRUE(result.toolResults[0].success);
  EXPECT_TRUE(result.toolResults[1].success);
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(result.toolResults[i].errorKind, ToolErrorKind::NotRun);
    EXPECT_NE(result.toolResults[i].error.find("at most 2"), std::string::npos);
  }
  EXPECT_EQ(c.getMessageCountByRole(Role::Tool), 5u);
  expectWellFormed(c.getMessages());
  o.maxToolCallsPerReply = 0;
  EXPECT_THROW(ConversationManager{o}, ValidationError);
}

// A reply that repeats a tool-call id (some servers' parsers do) made two calls: both run, each
// gets its own result, streamed or not; the reply is not lost to a validation error.
TEST_F(ConversationLoop, ARepeatedToolCallIdInOneReplyIsTwoCalls) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "ok"}}
{"reply": {"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}, {"id": "call_1", "name": "get_weather", "arguments": {"city": "Rome"}}]}}
)");
  addWeatherTool();
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    ConversationManager c(options(stream));
    RunResult result = c.run("weather?");
    EXPECT_EQ(result.content, "ok");
    ASSERT_EQ(result.toolCalls.size(), 2u);
    EXPECT_EQ(result.toolCalls[0].id, "call_1");
    EXPECT_NE(result.toolCalls[1].id, "call_1");
    EXPECT_EQ(json::parse(result.toolCalls[1].arguments).at("city"), "Rome");
    ASSERT_EQ(result.toolResults.size(), 2u);
    EXPECT_TRUE(result.toolResults[0].success);
    EXPECT_TRUE(result.toolResults[1].success);
    expectWellFormed(c.getMessages());
  }
}

// Tool calls run one by one outside run(): a call no visible message made is refused, and a
// stored conversation saves the turn only when every call of the message has its result.
TEST_F(ConversationLoop, ExecuteToolCallKeepsToolGroupsWhole) {
  startMock(
      R"({"reply": {"tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}, {"id": "c2", "name": "get_weather", "arguments": {"city": "Rome"}}]}})");
  addWeatherTool();
  const auto dir =
      std::filesystem::temp_directory_path() / ("parley-groups-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto store = openStore((dir / "t.db").string());
  auto thread = std::make_shared<StoredThread>(store, "t");
  ConversationOptions o = options();
  o.persist = thread;
  ConversationManager c(o);
  thread->attach(c);
  c.addMessage(Message::user("weather?"));
  ChatResult reply = c.executeLlmCall();
  ASSERT_EQ(reply.message.toolCalls.size(), 2u);
  EXPECT_THROW(c.executeToolCall({"nobody-made-this", "get_weather", R"({"city":"X"})"}),
               ValidationError);
  c.executeToolCall(reply.message.toolCalls[0]);
  EXPECT_EQ(store->threadInfo("t")->messageCount, 1);  // the system prompt: no half group
  c.executeToolCall(reply.message.toolCalls[1]);
  EXPECT_EQ(store->threadInfo("t")->messageCount, 5);  // system, user, the calls, two results
  EXPECT_THROW(c.executeToolCall(reply.message.toolCalls[1]), ValidationError);  // answered
  std::filesystem::remove_all(dir);
}

TEST_F(ConversationLoop, SchemaInvalidArgumentsAreRepairedByTheModel) {
  startMock(R"(
{"match": {"request": 1}, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": 5}}]}}
{"match": {"request": 2}, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}}
{"match": {"request": 3}, "reply": {"content": "{{last_tool}}"}}
)");
  addWeatherTool();
  ConversationManager c(options());
  RunResult result = c.run("weather?");
  EXPECT_EQ(result.iterations, 3);
  ASSERT_EQ(result.toolResults.size(), 2u);
  EXPECT_EQ(result.toolResults[0].errorKind, ToolErrorKind::InvalidArguments);
  EXPECT_NE(result.toolResults[0].error.find("city"), std::string::npos)
      << result.toolResults[0].error;
  EXPECT_TRUE(result.toolResults[1].success);
  EXPECT_EQ(result.content, R"({"city":"Oslo","tempC":-3})");
  // The model saw the error as the first tool message.
  const json second = server_->requests().at(1)["body"]["messages"];
  EXPECT_TRUE(json::parse(second.back()["content"].get<std::string>()).contains("error"));
}

TEST_F(ConversationLoop, UnknownToolBecomesAnErrorResult) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "ok"}}
{"reply": {"tool_calls": [{"name": "launch_rockets", "arguments": {}}]}}
)");
  ConversationManager c(options());
  RunResult result = c.run("go");
  ASSERT_EQ(result.toolResults.size(), 1u);
  EXPECT_EQ(result.toolResults[0].errorKind, ToolErrorKind::UnknownTool);
  EXPECT_NE(c.getMessagesByRole(Role::Tool).at(0).content.find("launch_rockets"),
            std::string::npos);
  EXPECT_EQ(result.content, "ok");
}

TEST_F(ConversationLoop, StopsAtMaxIterations) {
  startMock(
      R"({"reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}})");
  addWeatherTool();
  ConversationOptions o = options();
  o.maxIterations = 3;
  ConversationManager c(o);
  RunResult result = c.run("loop forever");
  EXPECT_EQ(result.iterations, 3);
  EXPECT_EQ(result.finishReason, "max_iterations");
  EXPECT_EQ(server_->requests().size(), 3u);
  EXPECT_EQ(c.getMessageCountByRole(Role::Tool), 3u);
  expectWellFormed(c.getMessages());
  RunOptions once;
  once.maxIterations = 1;
  RunResult single = c.run("once more", once);
  EXPECT_EQ(single.iterations, 1);
  EXPECT_EQ(single.finishReason, "max_iterations");
}

TEST_F(ConversationLoop, FailureOnTheThirdIterationKeepsCompleteIterations) {
  startMock(R"(
{"match": {"request": 3}, "error": {"status": 400, "message": "context too long"}}
{"reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}}
)");
  addWeatherTool();
  ConversationManager c(options());
  EXPECT_THROW(c.run("weather?"), HttpError);
  auto view = c.getMessages();
  // system, user, (assistant + tool) x 2: two complete iterations, nothing dangling.
  ASSERT_EQ(view.size(), 6u);
  EXPECT_EQ(view.back().role, Role::Tool);
  expectWellFormed(view);
}

TEST_F(ConversationLoop, StreamingAndNonStreamingRunsStoreTheSameHistory) {
  const char* script = R"(
{"match": {"last_role": "tool"}, "reply": {"content": "It is {{last_tool}} in Oslo today", "chunk_size": 3}}
{"reply": {"content": "Let me look.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}}
)";
  addWeatherTool();
  startMock(script);
  ConversationManager plain(options(false));
  plain.run("weather?");
  startMock(script);  // a fresh server: the same ids and numbers
  std::string streamed;
  RunOptions runOptions;
  runOptions.onChunk = [&](const StreamDelta& d) {
    streamed += d.content;
    return true;
  };
  ConversationManager stream(options(true));
  RunResult result = stream.run("weather?", runOptions);
  // The same messages, but for the time each reply was received.
  auto withoutTimes = [](std::vector<Message> messages) {
    for (Message& m : messages) {
      if (m.role == Role::Assistant) {
        EXPECT_TRUE(m.receivedAt.has_value());
      }
      m.receivedAt.reset();
    }
    return messages;
  };
  EXPECT_EQ(withoutTimes(stream.getMessages()), withoutTimes(plain.getMessages()));
  EXPECT_EQ(streamed, "Let me look." + result.content);
  EXPECT_TRUE(server_->requests().at(0)["body"]["stream"].get<bool>());
}

TEST_F(ConversationLoop, ContextEstimateFollowsReportsAndEdits) {
  startMock(
      R"({"reply": {"content": "Fine.", "usage": {"prompt_tokens": 20, "completion_tokens": 2}}})");
  ConversationManager c(options());
  c.addMessage(Message::user("How are you?"));
  TokenCheck before = c.estimateContextTokens();
  EXPECT_TRUE(before.estimated);
  EXPECT_GT(before.contextTokens, 0);
  c.executeLlmCall();
  EXPECT_EQ(c.estimateContextTokens().contextTokens, 22);
  c.addMessage(Message::user("And now?"));
  TokenCheck after = c.estimateContextTokens();
  EXPECT_TRUE(after.estimated);
  EXPECT_GT(after.contextTokens, 22);  // the report plus the new message's estimate
  applyContextOperation(c, TruncateOp{.keepLast = 1});
  TokenCheck edited = c.estimateContextTokens();
  EXPECT_TRUE(edited.estimated);
  EXPECT_LT(edited.contextTokens, 22);  // the whole (small) view, estimated
  // Snapshots carry the counters.
  ConversationManager restored(options());
  restored.restoreFromSnapshot(c.createSnapshot());
  EXPECT_EQ(restored.getTokenUsage().cumulative.totalTokens, 22);
  EXPECT_EQ(restored.getTokenUsage().requests, 1);
}

// The visible context's size is the view's: the API's last report while the view still begins
// with the messages it was made for, the local count of the whole view otherwise, and so the
// same figure whenever the same view comes back (an undo).
TEST_F(ConversationLoop, ContextSizeFollowsTheViewThroughEditsAndUndo) {
  startMock(R"({"reply": {"content": "answer to {{last_user}}"}})");
  addWeatherTool();
  ConversationManager c(options());
  for (const char* prompt : {"one", "two", "three", "four"})
    c.run(prompt);
  ASSERT_EQ(c.getMessageCount(), 9u);
  const TokenUsageStats reported = c.getTokenUsage();
  ASSERT_TRUE(reported.lastRequest);
  const int64_t fullView =
      reported.lastRequest->promptTokens + reported.lastRequest->completionTokens;
  EXPECT_EQ(reported.context.contextTokens, fullView);
  EXPECT_FALSE(reported.context.estimated);

  // Three messages left in view: the report covers none of them; the local count of the view.
  applyContextOperation(c, TruncateOp{.keepLast = 3});
  ASSERT_EQ(c.getMessageCount(), 3u);
  const TokenCheck truncated = c.estimateContextTokens();
  EXPECT_TRUE(truncated.estimated);
  EXPECT_EQ(truncated.contextTokens,
            countChatTokens(c.getMessages(), tools_->definitions()->tools).tokens);

  // Undo: the same view as the report's, the same figure.
  c.rollbackToBatch(0);
  ASSERT_EQ(c.getMessageCount(), 9u);
  TokenCheck undone = c.estimateContextTokens();
  EXPECT_EQ(undone.contextTokens, fullView);
  EXPECT_FALSE(undone.estimated);

  // The same edit again gives the same figure as the first time.
  applyContextOperation(c, TruncateOp{.keepLast = 3});
  EXPECT_EQ(c.estimateContextTokens().contextTokens, truncated.contextTokens);
  c.rollbackToBatch(0);

  // A message added after the undo is counted locally on top of the report.
  c.addMessage(Message::user("five"));
  TokenCheck grown = c.estimateContextTokens();
  EXPECT_TRUE(grown.estimated);
  EXPECT_EQ(grown.contextTokens,
            fullView + countMessageTokens(Message::user("five"), TokenCounter()).tokens);
  // A snapshot keeps what the report covers.
  ConversationManager restored(options());
  restored.restoreFromSnapshot(c.createSnapshot());
  EXPECT_EQ(restored.estimateContextTokens().contextTokens, grown.contextTokens);
}

TEST_F(ConversationLoop, TriggerFiresOverTheLimitAndAFailingTriggerIsLogged) {
  startMock(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 500, "completion_tokens": 10}}})");
  int fired = 0;
  ConversationOptions o = options();
  o.tokenLimit = 100;
  o.onTokenLimitExceeded = [&](ConversationManager&, const TokenCheck& check) {
    ++fired;
    EXPECT_GT(check.contextTokens, 100);
    throw std::runtime_error("compressor down");
  };
  ConversationManager c(o);
  c.run("first");  // under the limit: no trigger
  EXPECT_EQ(fired, 0);
  c.run("second");  // 510 reported: over
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(c.getMessageCount(), 5u) << "the call went on";
  std::lock_guard lock(logMutex_);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("compressor down"), std::string::npos);
}

// The check before a call counts the request about to be sent: the view, the new prompt and
// the tool definitions. A long first prompt is over the limit although the view is small.
TEST_F(ConversationLoop, TheTokenCheckCountsThePromptAboutToBeSent) {
  startMock(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 9000, "completion_tokens": 1}}})");
  addWeatherTool();
  std::vector<TokenCheck> fired;
  ConversationOptions o = options();
  o.tokenLimit = 1000;
  o.onTokenLimitExceeded = [&](ConversationManager& m, const TokenCheck& check) {
    fired.push_back(check);
    EXPECT_EQ(m.getMessageCount(), 1u) << "the prompt is not in the history yet";
  };
  ConversationManager c(o);
  std::string prompt;
  for (int i = 0; i < 8000; ++i)
    prompt += "word ";                                       // 40 000 characters
  ASSERT_LT(c.estimateContextTokens().contextTokens, 1000);  // the view alone is small
  c.run(prompt);
  ASSERT_EQ(fired.size(), 1u);
  const TokenCounter counter;
  const int64_t expected =
      countChatTokens({Message::system("You are terse."), Message::user(prompt)},
                      tools_->definitions()->tools, counter)
          .tokens;
  EXPECT_EQ(fired[0].contextTokens, expected);
  EXPECT_GT(fired[0].contextTokens, 1000);
  EXPECT_TRUE(fired[0].overLimit);
  EXPECT_TRUE(fired[0].estimated);
  EXPECT_EQ(c.getMessageCount(), 3u) << "the call went on";

  // Executed as single steps, the pending prompt is counted the same way.
  ConversationManager steps(o);
  steps.executeLlmCall({Message::user(prompt)}, {});
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[1].contextTokens, expected);
}

// The cumulative total is prompt + completion, always, even when a server reports a total
// that differs (some count cached or reasoning tokens in it); the last request keeps the
// server's own figure.
TEST_F(ConversationLoop, CumulativeTotalIsPromptPlusCompletion) {
  startMock(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 20}}})");
  ConversationManager c(options());
  RunResult first = c.run("one");
  EXPECT_EQ(first.usage.totalTokens, 14);
  c.run("two");
  const TokenUsageStats usage = c.getTokenUsage();
  ASSERT_TRUE(usage.lastRequest);
  EXPECT_EQ(usage.lastRequest->totalTokens, 20);  // as reported
  EXPECT_EQ(usage.cumulative.promptTokens, 20);
  EXPECT_EQ(usage.cumulative.completionTokens, 8);
  EXPECT_EQ(usage.cumulative.totalTokens, 28);
  // A snapshot whose cumulative total disagrees is read the same way.
  nlohmann::json snapshot = c.createSnapshot();
  snapshot["tokenUsage"]["cumulative"]["total_tokens"] = 99;
  ConversationManager restored(options());
  restored.restoreFromSnapshot(snapshot);
  EXPECT_EQ(restored.getTokenUsage().cumulative.totalTokens, 28);
}

// A trigger that throws something that is not a std::exception is logged too, and the call
// goes on.
TEST_F(ConversationLoop, ATriggerThrowingANonStandardExceptionIsLoggedAndTheCallGoesOn) {
  startMock(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 500, "completion_tokens": 10}}})");
  int fired = 0;
  ConversationOptions o = options();
  o.tokenLimit = 100;
  o.onTokenLimitExceeded = [&](ConversationManager&, const TokenCheck&) {
    ++fired;
    throw 42;
  };
  ConversationManager c(o);
  c.run("first");
  EXPECT_EQ(fired, 0);
  RunResult second;
  ASSERT_NO_THROW(second = c.run("second"));
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(second.content, "ok");
  EXPECT_EQ(c.getMessageCount(), 5u) << "the call went on";
  std::lock_guard lock(logMutex_);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("token-limit trigger failed"), std::string::npos) << log_[0];
}

TEST_F(ConversationLoop, SummarizeAndTruncateCompressesAndTheRunContinues) {
  startMock(R"(
{"match": {"user_contains": "Summarize the conversation"}, "reply": {"content": "User asked about A, B and C.", "usage": {"prompt_tokens": 50, "completion_tokens": 8}}}
{"reply": {"content": "answer to {{last_user}}", "usage": {"prompt_tokens": 300, "completion_tokens": 10}}}
)");
  ConversationOptions o = options();
  o.tokenLimit = 200;
  o.onTokenLimitExceeded = summarizeAndTruncate();
  ConversationManager c(o);
  c.run("A");
  c.run("B");  // the first run reported 310 tokens: the trigger summarizes before this call
  auto view = c.getMessages();
  ASSERT_EQ(view.size(), 6u) << toJson(view).dump();
  EXPECT_EQ(view[0], Message::system("You are terse."));
  EXPECT_EQ(view[1].role, Role::System);
  EXPECT_NE(view[1].content.find("User asked about A, B and C."), std::string::npos);
  EXPECT_EQ(view[2], Message::user("A"));  // the last turn is kept
  EXPECT_EQ(view[3].content, "answer to A");
  EXPECT_EQ(view[4], Message::user("B"));
  EXPECT_EQ(view[5].content, "answer to B");
  EXPECT_EQ(c.getTokenUsage().cumulative.promptTokens, 300 + 50 + 300);
  // The compression is a batch: rollback restores the full view (without the later turn).
  c.rollbackToBatch(0);
  EXPECT_EQ(c.getMessageCount(), 3u);
}

TEST_F(ConversationLoop, PersistSavesEachWholeTurnAndNothingOnFailure) {
  startMock(R"(
{"match": {"user_contains": "broken"}, "error": {"status": 400, "message": "no"}}
{"match": {"last_role": "tool"}, "reply": {"content": "It is {{last_tool}}"}}
{"match": {"user_contains": "weather"}, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}}
)");
  addWeatherTool();
  const auto dir =
      std::filesystem::temp_directory_path() / ("parley-persist-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::shared_ptr<ConversationStore> store = openStore((dir / "chats.db").string());
  auto thread = std::make_shared<StoredThread>(store, "t1");
  ConversationOptions o = options();
  o.persist = thread;
  ConversationManager c(o);
  thread->attach(c);
  c.run("weather?");
  EXPECT_EQ(store->threadInfo("t1")->messageCount, 5);
  const auto version = thread->version();
  EXPECT_THROW(c.run("broken"), HttpError);
  EXPECT_EQ(thread->version(), version) << "a failed call saves nothing";

  ConversationManager reloaded(options());
  StoredThread(store, "t1").load(reloaded);
  EXPECT_EQ(reloaded.getMessages(), c.getMessages());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace parley

namespace parley {
namespace {

// run(input) with a journaled first reply (a durable run resuming its turn): the model is not
// asked for that reply, its calls run, and the loop goes on from their results.
TEST_F(ConversationLoop, RunTakesInputMessagesAndAGivenFirstReply) {
  startMock(R"({"match": {"last_role": "tool"}, "reply": {"content": "It is {{last_tool}}"}})");
  addWeatherTool();
  ConversationManager c(options());
  Message reply = Message::assistant("");
  reply.toolCalls = {{"call_9", "get_weather", R"({"city":"Oslo"})"}};
  RunOptions ro;
  ro.firstReply = reply;
  std::vector<std::string> added;
  ro.onMessage = [&](const Message& m) { added.push_back(std::string(toString(m.role))); };
  RunResult r = c.run({Message::user("weather?"), Message::user("in Oslo")}, ro);
  EXPECT_EQ(r.iterations, 2);
  EXPECT_EQ(server_->requests().size(), 1u);  // only the answer after the tool result
  EXPECT_EQ(r.content, R"(It is {"city":"Oslo","tempC":-3})");
  EXPECT_EQ(added, (std::vector<std::string>{"user", "user", "assistant", "tool", "assistant"}));
  expectWellFormed(c.getMessages());

  // Empty input goes on from the history; a first reply that is not the model's is refused.
  RunOptions bad;
  bad.firstReply = Message::user("not a reply");
  const size_t before = c.storageSize();
  EXPECT_THROW(c.run(std::vector<Message>{}, bad), ValidationError);
  EXPECT_EQ(c.storageSize(), before);
}

}  // namespace
}  // namespace parley
