#include "client/stream_assembler.hpp"

#include <gtest/gtest.h>

#include <set>

#include "parley/errors.hpp"

namespace parley::detail {
namespace {

std::string chunk(const std::string& delta, const std::string& finish = "null") {
  return R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":)" +
         delta + R"(,"finish_reason":)" + finish + "}]}";
}

ChatResult assemble(const std::vector<std::string>& chunks, bool done = true) {
  StreamAssembler a;
  for (const auto& c : chunks)
    a.addChunk(c);
  if (done) a.markDone();
  return a.finish();
}

// Calls each sent as id+name, then arguments by index, then arguments by id: every lookup of
// the call a chunk continues is by a hash, not a scan over the calls so far (80 000 calls took
// 38 s before); past kMaxToolCallsPerReply the reply is refused, streamed or whole.
TEST(StreamAssembler, ManyToolCallsUpToTheCap) {
  StreamAssembler a;
  for (size_t i = 0; i < kMaxToolCallsPerReply; ++i) {
    const std::string index = std::to_string(i);
    a.addChunk(chunk(R"({"tool_calls":[{"index":)" + index + R"(,"id":"c)" + index +
                     R"(","function":{"name":"f","arguments":"{\"n\":"}}]})"));
    a.addChunk(chunk(R"({"tool_calls":[{"index":)" + index + R"(,"function":{"arguments":")" +
                     index + R"("}}]})"));
    a.addChunk(chunk(R"({"tool_calls":[{"index":)" + index + R"(,"id":"c)" + index +
                     R"(","function":{"arguments":"}"}}]})"));
  }
  a.markDone();
  const ChatResult r = a.finish();
  ASSERT_EQ(r.message.toolCalls.size(), kMaxToolCallsPerReply);
  EXPECT_EQ(r.message.toolCalls[0].id, "c0");
  EXPECT_EQ(r.message.toolCalls[0].arguments, R"({"n":0})");
  EXPECT_EQ(r.message.toolCalls.back().arguments,
            R"({"n":)" + std::to_string(kMaxToolCallsPerReply - 1) + "}");

  StreamAssembler over;
  std::string calls;
  for (size_t i = 0; i <= kMaxToolCallsPerReply; ++i)
    calls += std::string(i ? "," : "") + R"({"index":)" + std::to_string(i) + R"(,"id":"c)" +
             std::to_string(i) + R"(","function":{"name":"f"}})";
  try {
    over.addChunk(chunk(R"({"tool_calls":[)" + calls + "]}"));
    FAIL() << "no error past the cap";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 10000 tool calls"), std::string::npos)
        << e.what();
  }
  std::string whole = R"({"choices":[{"message":{"role":"assistant","tool_calls":[)";
  for (size_t i = 0; i <= kMaxToolCallsPerReply; ++i)
    whole += std::string(i ? "," : "") + R"({"id":"c)" + std::to_string(i) +
             R"(","type":"function","function":{"name":"f","arguments":"{}"}})";
  whole += R"(]},"finish_reason":"tool_calls"}]})";
  EXPECT_THROW(resultFromCompletion(whole), ProtocolError);
}

TEST(StreamAssembler, ContentDeltasAndFinishReason) {
  StreamAssembler a;
  EXPECT_EQ(a.addChunk(chunk(R"({"role":"assistant","content":""})")).content, "");
  EXPECT_EQ(a.addChunk(chunk(R"({"content":"Hel"})")).content, "Hel");
  EXPECT_EQ(a.addChunk(chunk(R"({"content":"lo"})")).content, "lo");
  EXPECT_EQ(a.addChunk(chunk("{}", "\"stop\"")).finishReason, "stop");
  a.markDone();
  ChatResult r = a.finish();
  EXPECT_EQ(r.message.role, Role::Assistant);
  EXPECT_EQ(r.message.content, "Hello");
  EXPECT_EQ(r.finishReason, "stop");
  EXPECT_EQ(r.id, "chatcmpl-1");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.raw["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(r.raw["object"], "chat.completion");
  EXPECT_FALSE(r.usage);
}

TEST(StreamAssembler, StandardToolCallDeltas) {
  ChatResult r = assemble({
      chunk(R"({"role":"assistant","content":null})"),
      chunk(
          R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]})"),
      chunk(
          R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]})"),
      chunk("{}", "\"tool_calls\""),
  });
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0], (ToolCall{"call_a", "get_weather", R"({"city":"Paris"})"}));
  // Empty arguments are stored as "{}", as message.hpp's toJson sends them.
  EXPECT_EQ(r.message.toolCalls[1], (ToolCall{"call_b", "get_time", "{}"}));
  EXPECT_EQ(r.finishReason, "tool_calls");
  EXPECT_TRUE(r.raw["choices"][0]["message"]["content"].is_null());
}

TEST(StreamAssembler, SameIndexWithDifferentIdsStartsNewCalls) {
  // Ollama sends index 0 for every parallel call.
  ChatResult r = assemble({
      chunk(
          R"({"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"{\"x\":1}"}}]})"),
      chunk(
          R"({"tool_calls":[{"index":0,"id":"c2","function":{"name":"b","arguments":"{\"y\":2}"}}]})"),
      chunk("{}", "\"tool_calls\""),
  });
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0], (ToolCall{"c1", "a", R"({"x":1})"}));
  EXPECT_EQ(r.message.toolCalls[1], (ToolCall{"c2", "b", R"({"y":2})"}));
}

TEST(StreamAssembler, SeveralCallsInOneDeltaWithoutIndex) {
  ChatResult r = assemble({
      chunk(
          R"({"tool_calls":[{"id":"c1","function":{"name":"a","arguments":"{}"}},{"id":"c2","function":{"name":"b","arguments":"{\"q\":1}"}}]})"),
      chunk("{}", "\"tool_calls\""),
  });
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0], (ToolCall{"c1", "a", "{}"}));
  EXPECT_EQ(r.message.toolCalls[1], (ToolCall{"c2", "b", R"({"q":1})"}));
}

TEST(StreamAssembler, NoIndexNoIdContinuesTheLastCall) {
  ChatResult r = assemble({
      chunk(R"({"tool_calls":[{"function":{"name":"a","arguments":"{\"k\""}}]})"),
      chunk(R"({"tool_calls":[{"function":{"arguments":":1}"}}]})"),
      chunk(R"({"tool_calls":[{"function":{"name":"b","arguments":"{}"}}]})"),
      chunk("{}", "\"tool_calls\""),
  });
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0].name, "a");
  EXPECT_EQ(r.message.toolCalls[0].arguments, R"({"k":1})");
  EXPECT_EQ(r.message.toolCalls[1].name, "b");
}

TEST(StreamAssembler, MissingIdsAreGeneratedAndUnique) {
  StreamAssembler a;
  const StreamDelta& first = a.addChunk(chunk(
      R"({"tool_calls":[{"index":0,"function":{"name":"a","arguments":""}},{"index":1,"function":{"name":"b","arguments":""}}]})"));
  ASSERT_EQ(first.toolCalls.size(), 2u);
  EXPECT_EQ(first.toolCalls[0].id.rfind("call_", 0), 0u);
  const std::string firstId = first.toolCalls[0].id;
  a.addChunk(
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]})", "\"tool_calls\""));
  ChatResult r = a.finish();
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0].id, firstId);
  EXPECT_NE(r.message.toolCalls[0].id, r.message.toolCalls[1].id);
  EXPECT_EQ(r.message.toolCalls[0].id.size(), 29u);  // "call_" + 24
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i)
    ids.insert(generateToolCallId());
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(StreamAssembler, NameResentOnEveryChunkIsSetOnce) {
  StreamAssembler a;
  a.addChunk(chunk(
      R"({"tool_calls":[{"index":0,"id":"c1","function":{"name":"get_time","arguments":"{"}}]})"));
  const StreamDelta& second = a.addChunk(chunk(
      R"({"tool_calls":[{"index":0,"id":"c1","function":{"name":"get_time","arguments":"}"}}]})"));
  ASSERT_EQ(second.toolCalls.size(), 1u);
  EXPECT_EQ(second.toolCalls[0].name, "");  // reported once, on the chunk that started the call
  EXPECT_EQ(second.toolCalls[0].arguments, "}");
  a.addChunk(chunk("{}", "\"tool_calls\""));
  ChatResult r = a.finish();
  ASSERT_EQ(r.message.toolCalls.size(), 1u);
  EXPECT_EQ(r.message.toolCalls[0], (ToolCall{"c1", "get_time", "{}"}));
}

TEST(StreamAssembler, ArgumentsSentAsAnObject) {
  ChatResult r = assemble({
      chunk(
          R"({"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":{"a":[1,2]}}}]})"),
      chunk("{}", "\"tool_calls\""),
  });
  ASSERT_EQ(r.message.toolCalls.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(r.message.toolCalls[0].arguments),
            nlohmann::json::parse(R"({"a":[1,2]})"));
}

TEST(StreamAssembler, ReasoningIsKeptApartFromContent) {
  StreamAssembler a;
  EXPECT_EQ(a.addChunk(chunk(R"({"reasoning_content":"think "})")).reasoning, "think ");
  EXPECT_EQ(a.addChunk(chunk(R"({"reasoning":"more"})")).reasoning, "more");
  a.addChunk(chunk(R"({"content":"answer"})", "\"stop\""));
  ChatResult r = a.finish();
  EXPECT_EQ(r.message.content, "answer");
  EXPECT_EQ(r.message.extra["reasoning_content"], "think more");
}

TEST(StreamAssembler, UsageInAFinalChunkWithEmptyOrNullChoices) {
  for (const char* choices : {"[]", "null"}) {
    StreamAssembler a;
    a.addChunk(R"({"id":"x","choices":[]})");  // nothing before the first delta
    a.addChunk(chunk(R"({"content":"hi"})", "\"stop\""));
    const StreamDelta& last = a.addChunk(
        std::string(R"({"id":"x","choices":)") + choices +
        R"(,"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":3}}})");
    ASSERT_TRUE(last.usage);
    a.markDone();
    ChatResult r = a.finish();
    ASSERT_TRUE(r.usage);
    EXPECT_EQ(r.usage->promptTokens, 7);
    EXPECT_EQ(r.usage->completionTokens, 2);
    EXPECT_EQ(r.usage->totalTokens, 9);
    EXPECT_EQ(r.usage->raw["prompt_tokens_details"]["cached_tokens"], 3);
    EXPECT_EQ(r.raw["usage"]["total_tokens"], 9);
    EXPECT_EQ(r.message.content, "hi");
  }
}

TEST(StreamAssembler, ToolCallsDecideOverFinishReasonStop) {
  ChatResult r = assemble({
      chunk(R"({"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]})"),
      chunk("{}", "\"stop\""),
  });
  EXPECT_EQ(r.finishReason, "tool_calls");
  EXPECT_EQ(r.reportedFinishReason, "stop");
  // "length" is kept: the arguments may be cut short and the caller must know.
  ChatResult cut = assemble({
      chunk(R"({"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{\"a"}}]})"),
      chunk("{}", "\"length\""),
  });
  EXPECT_EQ(cut.finishReason, "length");
}

TEST(StreamAssembler, ErrorObjectInTheStreamIsAnHttpError) {
  StreamAssembler a;
  a.addChunk(chunk(R"({"content":"par"})"));
  try {
    a.addChunk(R"({"error":{"message":"overloaded","type":"server_error","code":503}})");
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.apiMessage(), "overloaded");
    EXPECT_EQ(e.apiType(), "server_error");
    EXPECT_EQ(e.status(), 503);
  }
}

TEST(StreamAssembler, StreamCutShortIsAProtocolError) {
  StreamAssembler a;
  a.addChunk(chunk(R"({"content":"partial"})"));
  EXPECT_THROW(a.finish(), ProtocolError);
  // [DONE] without a finish reason, or a finish reason without [DONE], is a complete reply.
  EXPECT_EQ(assemble({chunk(R"({"content":"a"})")}, true).message.content, "a");
  EXPECT_EQ(assemble({chunk(R"({"content":"b"})", "\"stop\"")}, false).message.content, "b");
}

TEST(StreamAssembler, MalformedChunkIsAProtocolError) {
  StreamAssembler a;
  EXPECT_THROW(a.addChunk(R"({"choices":[{"delta":{"content":"x"})"), ProtocolError);
  StreamAssembler b;
  EXPECT_THROW(b.addChunk("not json"), ProtocolError);
}

TEST(StreamAssembler, OtherChoicesAreIgnored) {
  ChatResult r = assemble({
      R"({"choices":[{"index":0,"delta":{"content":"zero"},"finish_reason":null},{"index":1,"delta":{"content":"one"},"finish_reason":null}]})",
      chunk("{}", "\"stop\""),
  });
  EXPECT_EQ(r.message.content, "zero");
}

TEST(CompletionBody, ReadsAWholeResponseWithTheSameTolerance) {
  ChatResult r = resultFromCompletion(R"({
    "id": "chatcmpl-9", "object": "chat.completion", "model": "m2",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
      "content": null, "reasoning_content": "hmm",
      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ""}}]}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4}})");
  EXPECT_EQ(r.id, "chatcmpl-9");
  EXPECT_EQ(r.model, "m2");
  EXPECT_EQ(r.message.content, "");
  ASSERT_EQ(r.message.toolCalls.size(), 1u);
  EXPECT_EQ(r.message.toolCalls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.message.toolCalls[0].arguments, "{}");
  EXPECT_EQ(r.message.extra["reasoning_content"], "hmm");
  EXPECT_EQ(r.finishReason, "tool_calls");
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->totalTokens, 7);
  EXPECT_THROW(resultFromCompletion(R"({"choices": []})"), ProtocolError);
  EXPECT_THROW(resultFromCompletion("<html>"), ProtocolError);
  EXPECT_THROW(resultFromCompletion(R"({"error": {"message": "bad"}})"), HttpError);
}

}  // namespace
}  // namespace parley::detail
