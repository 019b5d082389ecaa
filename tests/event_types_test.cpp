// The one event vocabulary (event_names.hpp, event_types.hpp): one name per type, and one JSON
// form per payload that reads back to the same values, in snake_case only.
#include "parley/event_types.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <set>

#include "parley/errors.hpp"

namespace parley {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Every key of an object (nested objects too, but not inside values a caller owns) is snake_case.
void expectSnakeCase(const json& value, const std::string& where) {
  if (!value.is_object()) return;
  for (const auto& [key, inner] : value.items()) {
    for (char c : key)
      EXPECT_FALSE(std::isupper(static_cast<unsigned char>(c))) << where << ": key " << key;
    if (key != "parameters" && key != "result" && key != "partial" && key != "error_details" &&
        key != "message") {
      expectSnakeCase(inner, where + "." + key);
    }
  }
}

TEST(EventNames, EachTypeHasOneNameAndEachNameOneType) {
  std::set<std::string_view> names;
  for (EventType type : allEventTypes()) {
    const std::string_view name = eventName(type);
    EXPECT_TRUE(names.insert(name).second) << "two types are named " << name;
    ASSERT_TRUE(eventTypeFromName(name).has_value()) << name;
    EXPECT_EQ(*eventTypeFromName(name), type) << name;
    for (char c : name)
      EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || c == '_') << name;
  }
  EXPECT_EQ(names.size(), kEventTypeCount);
  EXPECT_EQ(eventName(EventType::ToolExecutionRequest), "tool_execution_request");
  EXPECT_EQ(eventName(EventType::RunCancelRequested), "run_cancel_requested");
  EXPECT_FALSE(eventTypeFromName("toolExecutionRequest").has_value());
  // The bus structs carry their type's name.
  EXPECT_EQ(MessageAdded().type, "message_added");
  EXPECT_EQ(UserInteractionResponded().type, "user_interaction_responded");
}

template <class E>
E roundTrip(const E& event) {
  const json j = eventToJson(event);
  expectSnakeCase(j, std::string(eventName(E::kEventType)));
  return eventFromJson<E>(j);
}

TEST(EventTypes, EveryPayloadReadsBackAsItWasWritten) {
  LlmExecutionRequest request;
  request.nodeId = "n1";
  request.nodeType = "tool";
  request.requestData.prompt = "hi";
  request.requestData.tools = {"a", "b"};
  request.requestData.profileId = "p";
  request.requestData.parameters = {{"temperature", 0.5}, {"myKey", 1}};
  request.requestData.stream = true;
  auto r = roundTrip(request);
  EXPECT_EQ(r.nodeId, "n1");
  EXPECT_EQ(r.nodeType, "tool");
  EXPECT_EQ(r.requestData.prompt, "hi");
  EXPECT_EQ(r.requestData.tools, request.requestData.tools);
  EXPECT_EQ(r.requestData.profileId, "p");
  EXPECT_EQ(r.requestData.parameters, request.requestData.parameters);  // the caller's keys kept
  EXPECT_TRUE(r.requestData.stream);
  EXPECT_EQ(eventToJson(request)["has_context_snapshot"], false);

  LlmExecutionCompleted completed;
  completed.result.content = "done";
  completed.result.finishReason = "stop";
  completed.result.iterations = 2;
  completed.result.usage.promptTokens = 7;
  completed.result.usage.completionTokens = 3;
  completed.result.usage.totalTokens = 10;
  completed.result.toolCalls = {{"c1", "get", "{\"x\":1}"}};
  auto c = roundTrip(completed);
  EXPECT_EQ(c.result.content, "done");
  EXPECT_EQ(c.result.finishReason, "stop");
  EXPECT_EQ(c.result.iterations, 2);
  EXPECT_EQ(c.result.usage.totalTokens, 10);
  ASSERT_EQ(c.result.toolCalls.size(), 1u);
  EXPECT_EQ(c.result.toolCalls[0].arguments, "{\"x\":1}");
  EXPECT_FALSE(eventToJson(completed).contains("node_id"));  // empty: left out

  LlmExecutionFailed failed;
  failed.error = "boom";
  failed.errorDetails = {{"kind", "http"}, {"status", 500}};
  EXPECT_EQ(roundTrip(failed).errorDetails, failed.errorDetails);

  LlmStreamChunk chunk;
  chunk.iteration = 3;
  chunk.content = "He";
  chunk.reasoning = "hm";
  chunk.partial = {{"a", 1}};
  auto k = roundTrip(chunk);
  EXPECT_EQ(k.iteration, 3);
  EXPECT_EQ(k.content, "He");
  EXPECT_EQ(k.reasoning, "hm");
  EXPECT_EQ(k.partial, chunk.partial);

  StructuredOutputAttempt attempt;
  attempt.attempt = 2;
  attempt.rungAttempt = 2;
  attempt.rung = "tool";
  attempt.valid = true;
  attempt.errors = {"a: b"};
  attempt.errorCount = 5;
  auto a = roundTrip(attempt);
  EXPECT_EQ(a.rungAttempt, 2);
  EXPECT_EQ(a.errorCount, 5u);
  EXPECT_FALSE(a.usage.has_value());

  TokenLimitExceeded over;
  over.contextTokens = 900;
  over.tokenLimit = 800;
  EXPECT_EQ(roundTrip(over).contextTokens, 900);

  MessageAdded added;
  added.message = Message::user("q");
  added.index = 4;
  auto m = roundTrip(added);
  EXPECT_EQ(m.message.content, "q");
  EXPECT_EQ(m.index, 4);

  ToolExecutionRequest call;
  call.toolCall = {"c2", "t", "{}"};
  call.executionOptions.timeout = 1500ms;
  call.executionOptions.retries = 2;
  auto q = roundTrip(call);
  EXPECT_EQ(q.toolCall.name, "t");
  EXPECT_EQ(q.executionOptions.timeout, 1500ms);
  EXPECT_EQ(q.executionOptions.retries, 2);

  ToolExecutionCompleted ran;
  ran.toolCallId = "c2";
  ran.toolName = "t";
  ran.result.success = false;
  ran.result.error = "bad";
  ran.result.timedOut = true;
  auto d = roundTrip(ran);
  EXPECT_EQ(d.toolName, "t");
  EXPECT_FALSE(d.result.success);
  EXPECT_EQ(d.result.error, "bad");
  EXPECT_TRUE(d.result.timedOut);

  ToolExecutionFailed notRun;
  notRun.toolCallId = "c3";
  notRun.error = "no host";
  EXPECT_EQ(roundTrip(notRun).error, "no host");

  ToolExecutionProgress progress;
  progress.toolCallId = "c4";
  progress.toolName = "helper";
  progress.message = "half way";
  progress.data = {{"state", "TASK_STATE_WORKING"}, {"last_chunk", false}};
  auto p = roundTrip(progress);
  EXPECT_EQ(p.message, "half way");
  EXPECT_EQ(p.data, progress.data);

  UserInteractionRequested asked;
  asked.interactionId = "i";
  asked.prompt = "ok?";
  asked.kind = "approval";
  asked.timeout = 5s;
  auto u = roundTrip(asked);
  EXPECT_EQ(u.kind, "approval");
  EXPECT_EQ(u.timeout, 5s);

  UserInteractionResponded answered;
  answered.interactionId = "i";
  answered.response = "yes";
  EXPECT_EQ(roundTrip(answered).response, "yes");
}

TEST(EventTypes, TheHeaderIsSnakeCase) {
  MessageAdded e;
  e.workflowId = "wf";
  e.threadId = "t";
  e.traceId = "tr";
  const json h = eventHeaderToJson(e);
  EXPECT_EQ(h["type"], "message_added");
  EXPECT_EQ(h["workflow_id"], "wf");
  EXPECT_EQ(h["thread_id"], "t");
  EXPECT_EQ(h["trace_id"], "tr");
  EXPECT_FALSE(h.contains("span_id"));
  expectSnakeCase(h, "header");
}

TEST(EventTypes, AKeyOfTheWrongTypeIsAClearError) {
  try {
    eventFromJson<ToolExecutionRequest>(json({{"tool_call_id", 5}}));
    FAIL() << "a number was read as an id";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "payload.tool_call_id");
  }
  EXPECT_THROW(eventFromJson<MessageAdded>(json::array()), ValidationError);
  // Missing keys keep their defaults.
  EXPECT_EQ(eventFromJson<LlmStreamChunk>(json::object()).content, "");
}

}  // namespace
}  // namespace parley
