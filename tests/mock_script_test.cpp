// The mock server's script format, reply rendering and embeddings, without HTTP.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mock/chat_reply.hpp"
#include "mock/embeddings.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"

namespace parley::mock {
namespace {

using nlohmann::json;

// The ValidationError's what() for a script, or "" when it is accepted.
std::string scriptError(const std::string& text) {
  try {
    readScript(text, "s.jsonl");
  } catch (const ValidationError& e) {
    return e.what();
  }
  return "";
}

TEST(MockScript, ReadsRulesSkippingBlankAndCommentLines) {
  json rules =
      readScript("# comment\n\n{\"reply\":{\"content\":\"a\"}}\n  \n{\"error\":{\"status\":503}}");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0]["reply"]["content"], "a");
  EXPECT_EQ(rules[1]["error"]["status"], 503);
}

TEST(MockScript, InvalidJsonNamesTheLine) {
  std::string error =
      scriptError("{\"reply\":{\"content\":\"a\"}}\n\n{\"reply\": {\"content\": }\n");
  EXPECT_NE(error.find("s.jsonl:3"), std::string::npos) << error;
  EXPECT_NE(error.find("invalid JSON"), std::string::npos) << error;
}

TEST(MockScript, ErrorsNameTheFieldAndTheProblem) {
  struct Case {
    std::string rule;
    std::string field;
    std::string reason;
  };
  std::vector<Case> cases = {
      {R"({"replies":{"content":"a"}})", "s.jsonl:1: replies", "unknown key"},
      {R"({"match":{"user_contain":"x"},"reply":{"content":"a"}})", "match.user_contain",
       "unknown key"},
      {R"({"reply":{"tool_calls":[{"arguments":{}}]}})", "reply.tool_calls[0].name",
       "needs a name"},
      {R"({"reply":{"tool_calls":[{"name":7}]}})", "reply.tool_calls[0].name", "expected a string"},
      {R"({"reply":{"tool_calls":[{"name":"f","arguments":[1]}]}})",
       "reply.tool_calls[0].arguments", "object or a string"},
      {R"({"match":{"user_regex":"(unclosed"},"reply":{"content":"a"}})", "match.user_regex",
       "invalid regular expression"},
      {R"({"match":{"request":0},"reply":{"content":"a"}})", "match.request", "between 1"},
      {R"({"match":{"last_role":"robot"},"reply":{"content":"a"}})", "match.last_role",
       "expected system"},
      {R"({"reply":{"content":"a"},"error":{"status":500}})", "s.jsonl:1", "exactly one of"},
      {R"({"match":{}})", "s.jsonl:1", "exactly one of"},
      {R"({"reply":{}})", "reply", "needs content"},
      {R"({"error":{"message":"x"}})", "error.status", "needs an HTTP status"},
      {R"({"error":{"status":700}})", "error.status", "between 100 and 599"},
      {R"({"error":{"status":500,"body":"x","message":"y"}})", "error.body", "not both"},
      {R"({"error":{"status":429,"retry_after":[1]}})", "error.retry_after", "string or a number"},
      {R"({"error":{"status":500},"stream":{"omit_done":true}})", "stream", "no stream"},
      {R"({"reply":{"content":"a"},"stream":{"error":{"message":"x"}}})", "stream.error",
       "error_after"},
      {R"({"reply":{"content":"a"},"stream":{"chunk_delay_ms":-1}})", "stream.chunk_delay_ms",
       "between"},
      {R"({"reply":{"content":"a"},"stream":{"omit_done":"yes"}})", "stream.omit_done",
       "true or false"},
      {R"({"raw":[]})", "raw", "non-empty array"},
      {R"({"reply":{"content":"a"},"status":200})", "status", "only for raw"},
      {R"({"times":0,"reply":{"content":"a"}})", "times", "between 1"},
      {R"(["not an object"])", "s.jsonl:1", "JSON object"},
  };
  for (const auto& c : cases) {
    std::string error = scriptError(c.rule);
    EXPECT_NE(error.find(c.field), std::string::npos) << c.rule << " -> " << error;
    EXPECT_NE(error.find(c.reason), std::string::npos) << c.rule << " -> " << error;
  }
}

TEST(MockScript, CompileScriptNamesTheRuleNumber) {
  json rules = json::array({{{"reply", {{"content", "a"}}}}, {{"reply", {{"content", 5}}}}});
  try {
    compileScript(rules);
    FAIL() << "accepted a numeric content";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "rule 2: reply.content");
    EXPECT_EQ(e.reason(), "expected a string");
  }
  EXPECT_THROW(compileScript(json::object()), ValidationError);
}

TEST(MockScript, MissingFileIsAValidationErrorNamingThePath) {
  try {
    readScriptFile("/nonexistent/parley/script.jsonl");
    FAIL();
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "/nonexistent/parley/script.jsonl");
  }
}

TEST(MockScript, DemoScriptIsValidAndDocumentedText) {
  const json& demo = demoScript();
  ASSERT_GE(demo.size(), 5u);
  EXPECT_EQ(readScript(demoScriptText()), demo);
  EXPECT_NO_THROW(compileScript(demo));
}

json chatBody(std::vector<json> messages, std::vector<std::string> tools = {}) {
  json body = {{"model", "m"}, {"messages", messages}};
  for (const auto& t : tools) {
    body["tools"].push_back({{"type", "function"}, {"function", {{"name", t}}}});
  }
  return body;
}

TEST(MockScript, DescribeRequestReadsTurnsToolsAndTrailingToolResults) {
  json body = chatBody(
      {{{"role", "system"}, {"content", "be brief"}},
       {{"role", "user"}, {"content", "first"}},
       {{"role", "assistant"}, {"content", "ok"}},
       {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "second"}}})}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls",
         {{{"id", "c1"},
           {"type", "function"},
           {"function", {{"name", "get_time"}, {"arguments", "{}"}}}},
          {{"id", "c2"},
           {"type", "function"},
           {"function", {{"name", "get_weather"}, {"arguments", "{}"}}}}}}},
       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "noon"}},
       {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "sunny"}}},
      {"get_time", "get_weather"});
  ChatContext ctx = describeRequest(body, 7);
  EXPECT_EQ(ctx.requestNumber, 7);
  EXPECT_EQ(ctx.turn, 2);
  EXPECT_EQ(ctx.lastUser, "second");
  EXPECT_EQ(ctx.lastRole, "tool");
  EXPECT_EQ(ctx.toolResults, (std::vector<std::string>{"noon", "sunny"}));
  EXPECT_EQ(ctx.lastToolName, "get_weather");
  EXPECT_EQ(ctx.toolNames, (std::vector<std::string>{"get_time", "get_weather"}));
  EXPECT_FALSE(ctx.stream);

  EXPECT_THROW(describeRequest(json{{"model", "m"}}, 1), ValidationError);
  EXPECT_THROW(describeRequest(json{{"messages", {{{"content", "x"}}}}}, 1), ValidationError);
}

TEST(MockScript, MatchConditionsAllMustHold) {
  Script script = compileScript(readScript(
      R"js({"match":{"user_regex":"weather in (\\w+)","icase":true,"tool":"get_weather","request":[2,3]},"reply":{"content":"x"}})js"));
  ChatContext ctx = describeRequest(
      chatBody({{{"role", "user"}, {"content", "Weather IN Oslo"}}}, {"get_weather"}), 2);
  std::vector<std::string> groups;
  ASSERT_TRUE(matches(script[0].match, ctx, groups));
  EXPECT_EQ(groups.at(1), "Oslo");
  ctx.requestNumber = 4;
  EXPECT_FALSE(matches(script[0].match, ctx, groups));
  ctx.requestNumber = 3;
  ctx.toolNames.clear();
  EXPECT_FALSE(matches(script[0].match, ctx, groups));
}

TEST(MockScript, TemplatesExpandKnownPlaceholdersOnly) {
  ChatContext ctx;
  ctx.lastUser = "hi";
  ctx.requestNumber = 3;
  ctx.turn = 2;
  ctx.model = "m";
  ctx.toolResults = {"a", "b"};
  ctx.lastToolName = "f";
  std::string out = expandTemplate(
      "{{last_user}}|{{request}}|{{turn}}|{{model}}|{{last_tool}}|{{tool_results}}|"
      "{{last_tool_name}}|{{1}}|{{2}}|{{nope}}|{{",
      ctx, {"all", "g1"});
  EXPECT_EQ(out, "hi|3|2|m|b|a; b|f|g1||{{nope}}|{{");
}

TEST(MockReply, SplitPiecesKeepsUtf8CharactersWhole) {
  std::string text = "a\xC3\xA9\xE2\x82\xAC b";  // a é € space b
  for (std::size_t size = 1; size <= text.size(); ++size) {
    std::string joined;
    for (auto p : splitPieces(text, size)) {
      ASSERT_FALSE(p.empty());
      // No piece starts with a continuation byte.
      EXPECT_NE(static_cast<unsigned char>(p[0]) & 0xC0, 0x80) << "size " << size;
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
  auto words = splitPieces("Hello  big world", 0);
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[1], "  big");
}

// Parses the events of a rendered stream back into JSON objects.
std::vector<json> renderStream(const ConcreteReply& reply, bool includeUsage) {
  std::vector<json> out;
  forEachStreamEvent(reply, includeUsage, false, [&](std::string_view event) {
    EXPECT_EQ(event.substr(0, 6), "data: ");
    EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
    out.push_back(json::parse(event.substr(6)));
    return true;
  });
  return out;
}

TEST(MockReply, StreamReassemblesToTheNonStreamingMessage) {
  Script script = compileScript(readScript(
      R"({"reply":{"reasoning_content":"think \"hard\"","content":"Hi there, {{last_user}}!","chunk_size":3,"tool_calls":[{"name":"f","arguments":{"x":"{{last_user}}"}},{"id":"own","name":"g","arguments":"not json"}],"usage":{"prompt_tokens":11,"prompt_tokens_details":{"cached_tokens":2}}}})"));
  ChatContext ctx = describeRequest(chatBody({{{"role", "user"}, {"content", "Ann\n"}}}), 5);
  ConcreteReply reply = makeReply(*script[0].reply, ctx, {}, 1700000000);
  json full = json::parse(completionBody(reply));
  const json& message = full["choices"][0]["message"];
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["id"], "chatcmpl-mock-5");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(full["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(full["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(full["usage"]["total_tokens"], 11 + full["usage"]["completion_tokens"].get<int>());
  EXPECT_EQ(message["tool_calls"][0]["id"], "call_5_1");
  EXPECT_EQ(message["tool_calls"][1]["id"], "own");
  EXPECT_EQ(message["tool_calls"][1]["function"]["arguments"], "not json");

  std::vector<json> events = renderStream(reply, true);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content, reasoning;
  std::vector<json> calls;
  std::string finish;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_TRUE(e["usage"].is_null());
    const json& choice = e["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
    if (delta.contains("tool_calls")) {
      for (const auto& tc : delta["tool_calls"]) {
        std::size_t index = tc["index"];
        if (index == calls.size()) {
          calls.push_back({{"id", tc["id"]}, {"name", tc["function"]["name"]}, {"arguments", ""}});
          EXPECT_EQ(tc["type"], "function");
        }
        calls.at(index)["arguments"] = calls[index]["arguments"].get<std::string>() +
                                       tc["function"]["arguments"].get<std::string>();
      }
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, message["content"]);
  EXPECT_EQ(content, "Hi there, Ann\n!");
  EXPECT_EQ(reasoning, "think \"hard\"");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(calls[i]["id"], message["tool_calls"][i]["id"]);
    EXPECT_EQ(calls[i]["name"], message["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(calls[i]["arguments"], message["tool_calls"][i]["function"]["arguments"]);
  }
  EXPECT_EQ(json::parse(calls[0]["arguments"].get<std::string>()), json({{"x", "Ann\n"}}));
  const json& last = events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"], full["usage"]);

  // Without include_usage: no usage key and no usage chunk.
  std::vector<json> plain = renderStream(reply, false);
  EXPECT_EQ(plain.size() + 1, events.size());
  for (const auto& e : plain)
    EXPECT_FALSE(e.contains("usage"));
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    dot += a[i] * b[i];
  return dot;
}

TEST(MockEmbeddings, DeterministicNormalisedAndSimilarTextsCloser) {
  auto a = embedText("The cat sat on the mat", 256);
  auto b = embedText("the CAT sat on a mat!", 256);
  auto c = embedText("Quarterly revenue grew in Europe", 256);
  EXPECT_EQ(a, embedText("The cat sat on the mat", 256));
  EXPECT_NEAR(cosine(a, a), 1.0, 1e-5);
  EXPECT_GT(cosine(a, b), cosine(a, c));
  EXPECT_GT(cosine(a, b), 0.5);
  EXPECT_EQ(embedText("", 8), (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(MockEmbeddings, ResponseShapesAndErrors) {
  json r = embeddingsResponse({{"input", {"one two", "three"}}, {"model", "e"}, {"dimensions", 16}},
                              256);
  ASSERT_EQ(r["data"].size(), 2u);
  EXPECT_EQ(r["data"][1]["index"], 1);
  EXPECT_EQ(r["data"][0]["embedding"].size(), 16u);
  EXPECT_EQ(r["model"], "e");
  EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), 0);
  json b64 = embeddingsResponse({{"input", "one two"}, {"encoding_format", "base64"}}, 4);
  EXPECT_EQ(b64["data"][0]["embedding"].get<std::string>().size(), 24u);  // 16 bytes
  EXPECT_THROW(embeddingsResponse({{"model", "e"}}, 4), ValidationError);
  EXPECT_THROW(embeddingsResponse({{"input", ""}}, 4), ValidationError);
  EXPECT_THROW(embeddingsResponse({{"input", "x"}, {"dimensions", 0}}, 4), ValidationError);
  EXPECT_THROW(embeddingsResponse({{"input", "x"}, {"encoding_format", "hex"}}, 4),
               ValidationError);
}

}  // namespace
}  // namespace parley::mock
