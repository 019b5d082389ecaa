// PromptCounter (prompt_counter.hpp) against `parley mock`: the remote counts (Anthropic
// count_tokens, llama.cpp apply-template + tokenize) equal the prompt_tokens the mock then reports
// for the same request, the cache spares the second request, every cap and failure gives a clear
// error or the local fallback, and the token-limit check counts with it.
#include <gtest/gtest.h>

#include <chrono>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/anthropic_client.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/profiles.hpp"
#include "parley/prompt_counter.hpp"

namespace parley {
namespace {

using namespace std::chrono_literals;

const nlohmann::json kTools = nlohmann::json::parse(R"([{"type": "function", "function": {
  "name": "get_weather", "description": "The weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]}}}])");

// A history with a system prompt, a tool call and its result, then a new question.
ChatRequest historyRequest() {
  ChatRequest r;
  r.model = "m";
  Message call = Message::assistant("");
  call.toolCalls.push_back(ToolCall{"call_1", "get_weather", R"({"city": "Oslo"})"});
  r.messages = {Message::system("You report the weather, briefly and exactly."),
                Message::user("What is the weather in Oslo today? I am planning a long walk."),
                call,
                Message::tool("call_1", R"({"temp_c": 4, "sky": "overcast", "wind_kmh": 22})"),
                Message::user("And should I take an umbrella, given all that?")};
  r.tools = kTools;
  return r;
}

class PromptCounterAgainstTheMock : public ::testing::Test {
 protected:
  void start(const std::string& script = R"({"reply": {"content": "Noted."}})",
             double scale = 1.3) {
    mock::MockOptions o;
    o.script = mock::readScript(script);
    o.promptTokensScale = scale;
    server_ = std::make_unique<mock::MockServer>(o);
    server_->start();
  }
  void SetUp() override { start(); }

  ClientOptions client(Protocol protocol) const {
    ClientOptions c = testing::mockClientOptions(*server_);
    c.protocol = protocol;
    return c;
  }
  RemotePromptCounterOptions remote(RemoteCountApi api) const {
    RemotePromptCounterOptions o;
    o.client = client(api == RemoteCountApi::AnthropicCountTokens ? Protocol::Anthropic
                                                                  : Protocol::OpenAiChat);
    o.api = api;
    o.maxRetries = 0;
    return o;
  }
  std::vector<nlohmann::json> requestsTo(const std::string& path) const {
    std::vector<nlohmann::json> out;
    for (const auto& r : server_->requests())
      if (r["path"] == path) out.push_back(r);
    return out;
  }

  std::unique_ptr<mock::MockServer> server_;
};

TEST_F(PromptCounterAgainstTheMock, AnthropicCountEqualsTheReportedPromptTokens) {
  RemotePromptCounter counter(remote(RemoteCountApi::AnthropicCountTokens));
  const ChatRequest request = historyRequest();
  const PromptCount count = counter.count(request);
  EXPECT_TRUE(count.remote);
  EXPECT_FALSE(count.estimate);
  EXPECT_FALSE(count.cached);

  AnthropicClient llm(client(Protocol::Anthropic));
  const ChatResult reply = llm.generate(request);
  ASSERT_TRUE(reply.usage);
  EXPECT_EQ(count.tokens, reply.usage->promptTokens);

  const auto sent = requestsTo("/v1/messages/count_tokens");
  ASSERT_EQ(sent.size(), 1u);
  const nlohmann::json& body = sent[0]["body"];
  EXPECT_FALSE(body.contains("max_tokens")) << body.dump();
  EXPECT_EQ(body["model"], "m");
  EXPECT_TRUE(body.contains("system"));
  EXPECT_EQ(body["tools"][0]["name"], "get_weather");
  EXPECT_EQ(sent[0]["headers"]["x-api-key"], "sk-test");
  EXPECT_EQ(sent[0]["headers"]["anthropic-version"], "2023-06-01");
}

TEST_F(PromptCounterAgainstTheMock, LlamaCppCountEqualsTheReportedPromptTokens) {
  RemotePromptCounter counter(remote(RemoteCountApi::LlamaCppTokenize));
  const ChatRequest request = historyRequest();
  const PromptCount count = counter.count(request);
  EXPECT_TRUE(count.remote);
  EXPECT_FALSE(count.estimate);

  OpenAiClient llm(client(Protocol::OpenAiChat));
  const ChatResult reply = llm.generate(request);
  ASSERT_TRUE(reply.usage);
  EXPECT_EQ(count.tokens, reply.usage->promptTokens);

  // At the server's root, not under /v1; the template gets the messages and the tools.
  const auto rendered = requestsTo("/apply-template");
  ASSERT_EQ(rendered.size(), 1u);
  EXPECT_EQ(rendered[0]["body"]["messages"].size(), 5u);
  EXPECT_EQ(rendered[0]["body"]["tools"][0]["function"]["name"], "get_weather");
  const auto tokenized = requestsTo("/tokenize");
  ASSERT_EQ(tokenized.size(), 1u);
  EXPECT_EQ(tokenized[0]["body"]["add_special"], true);
  EXPECT_EQ(tokenized[0]["body"]["with_pieces"], false);
}

TEST_F(PromptCounterAgainstTheMock, TheSameRequestIsCountedOnce) {
  RemotePromptCounterOptions o = remote(RemoteCountApi::LlamaCppTokenize);
  o.cacheEntries = 1;
  RemotePromptCounter counter(o);
  const ChatRequest a = historyRequest();
  ChatRequest b = a;
  b.messages.push_back(Message::assistant("Yes."));
  b.messages.push_back(Message::user("Thanks."));

  const PromptCount first = counter.count(a);
  const size_t afterFirst = server_->requests().size();
  EXPECT_EQ(afterFirst, 2u);  // apply-template, tokenize
  const PromptCount second = counter.count(a);
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(server_->requests().size(), afterFirst) << "a cached count makes no request";

  const PromptCount other = counter.count(b);  // a different prompt: asked, and it evicts `a`
  EXPECT_FALSE(other.cached);
  EXPECT_GT(other.tokens, first.tokens);
  EXPECT_EQ(server_->requests().size(), afterFirst + 2);
  EXPECT_FALSE(counter.count(a).cached) << "one entry: `a` was evicted by `b`";
}

TEST_F(PromptCounterAgainstTheMock, ATimeoutIsAnErrorOrTheFallback) {
  start(
      R"({"match": {"endpoint": "count_tokens"}, "delay_ms": 60000, "raw": "{\"input_tokens\": 5}", "content_type": "application/json"})");
  RemotePromptCounterOptions o = remote(RemoteCountApi::AnthropicCountTokens);
  o.timeout = 200ms;
  EXPECT_THROW(RemotePromptCounter(o).count(historyRequest()), TimeoutError);

  o.fallback = RemoteCountFallback::Local;
  const PromptCount fallback = RemotePromptCounter(o).count(historyRequest());
  EXPECT_TRUE(fallback.estimate);
  EXPECT_FALSE(fallback.remote);
  EXPECT_FALSE(fallback.fallbackReason.empty());
  const PromptCount local = LocalPromptCounter().count(historyRequest());
  EXPECT_EQ(fallback.tokens, local.tokens);
}

TEST_F(PromptCounterAgainstTheMock, MalformedAndOversizedAnswersAreProtocolErrors) {
  start(
      R"({"match": {"endpoint": "count_tokens"}, "times": 1, "raw": "{\"tokens\": 12}", "content_type": "application/json"}
{"match": {"endpoint": "count_tokens"}, "times": 1, "raw": "{\"input_tokens\": 12, \"padding\": \"0123456789012345678901234567890123456789012345678901234567890123456789\"}", "content_type": "application/json"}
{"match": {"endpoint": "tokenize"}, "times": 1, "raw": "{\"count\": 3}", "content_type": "application/json"}
{"match": {"endpoint": "apply_template"}, "times": 1, "raw": "not json", "content_type": "application/json"})");
  RemotePromptCounterOptions anthropic = remote(RemoteCountApi::AnthropicCountTokens);
  anthropic.maxResponseBytes = 64;
  RemotePromptCounter a(anthropic);
  try {
    a.count(historyRequest());
    FAIL() << "no input_tokens";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("\"input_tokens\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.count(historyRequest()), ProtocolError) << "a reply over maxResponseBytes";

  RemotePromptCounter llama(remote(RemoteCountApi::LlamaCppTokenize));
  // apply-template answers first: not JSON; then tokenize, without its list.
  try {
    llama.count(historyRequest());
    FAIL() << "not JSON";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("not JSON"), std::string::npos) << e.what();
  }
  try {
    llama.count(historyRequest());
    FAIL() << "no tokens";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("\"tokens\""), std::string::npos) << e.what();
  }

  // A count over maxTokens (the mock's real answer this time).
  RemotePromptCounterOptions capped = remote(RemoteCountApi::LlamaCppTokenize);
  capped.maxTokens = 5;
  try {
    RemotePromptCounter(capped).count(historyRequest());
    FAIL() << "over the token cap";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("maxTokens"), std::string::npos) << e.what();
  }
}

TEST_F(PromptCounterAgainstTheMock, HttpErrorsKeepStatusAndBody) {
  start(
      R"({"match": {"endpoint": "tokenize"}, "error": {"status": 500, "body": "{\"error\": {\"message\": \"tokenizer down\"}}"}})");
  // A base URL whose root has no llama.cpp routes: 404.
  RemotePromptCounterOptions elsewhere = remote(RemoteCountApi::LlamaCppTokenize);
  elsewhere.client.baseUrl = server_->baseUrl() + "/nowhere";
  try {
    RemotePromptCounter(elsewhere).count(historyRequest());
    FAIL() << "404 expected";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 404);
  }
  RemotePromptCounter llama(remote(RemoteCountApi::LlamaCppTokenize));
  try {
    llama.count(historyRequest());
    FAIL() << "500 expected";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 500);
    EXPECT_NE(e.body().find("tokenizer down"), std::string::npos);
  }
  // With the fallback: the local count, flagged, and nothing cached (the next count asks again).
  RemotePromptCounterOptions o = remote(RemoteCountApi::LlamaCppTokenize);
  o.fallback = RemoteCountFallback::Local;
  RemotePromptCounter lenient(o);
  const PromptCount first = lenient.count(historyRequest());
  EXPECT_TRUE(first.estimate);
  EXPECT_NE(first.fallbackReason.find("500"), std::string::npos) << first.fallbackReason;
  const PromptCount second = lenient.count(historyRequest());  // the rule answers every time
  EXPECT_FALSE(second.cached);
  EXPECT_TRUE(second.estimate);
}

// With a limit between the local count and the server's, the check fires only with the remote
// counter, and reports the figure the server then reports as usage.
TEST_F(PromptCounterAgainstTheMock, TheTokenLimitCheckCountsRemotely) {
  std::string prompt = "Plan the walk.";
  for (int i = 0; i < 6; ++i)
    prompt += " The surveyors measured the northern ridge again and logged each reading twice.";
  ChatRequest probe;
  probe.model = "m";
  probe.messages = {Message::system("You plan walks."), Message::user(prompt)};
  RemotePromptCounter counter(remote(RemoteCountApi::LlamaCppTokenize));
  const int64_t remoteCount = counter.count(probe).tokens;
  const int64_t localCount = LocalPromptCounter().count(probe).tokens;
  ASSERT_GT(remoteCount, localCount) << "the mock (x1.3) should count more than o200k_base";
  server_->clearRequests();

  auto conversation = [&](std::shared_ptr<const PromptCounter> promptCounter,
                          std::vector<TokenCheck>& fired) {
    ConversationOptions o;
    o.llm = std::make_shared<OpenAiClient>(client(Protocol::OpenAiChat));
    o.request.model = "m";
    o.systemPrompt = "You plan walks.";
    o.tokenLimit = (localCount + remoteCount) / 2;
    o.promptCounter = std::move(promptCounter);
    o.onTokenLimitExceeded = [&fired](ConversationManager&, const TokenCheck& check) {
      fired.push_back(check);
    };
    return ConversationManager(o);
  };
  std::vector<TokenCheck> localFired;
  ConversationManager local = conversation(nullptr, localFired);
  local.run(prompt);
  EXPECT_TRUE(localFired.empty()) << "the local count is under the limit";

  std::vector<TokenCheck> remoteFired;
  ConversationManager byServer = conversation(
      std::make_shared<RemotePromptCounter>(remote(RemoteCountApi::LlamaCppTokenize)), remoteFired);
  const RunResult r = byServer.run(prompt);
  ASSERT_EQ(remoteFired.size(), 1u);
  EXPECT_TRUE(remoteFired[0].overLimit);
  EXPECT_FALSE(remoteFired[0].estimated);
  ASSERT_TRUE(r.message.usage);
  EXPECT_EQ(remoteFired[0].contextTokens, r.message.usage->promptTokens);
}

// A count that fails fails the call before anything is sent or added.
TEST_F(PromptCounterAgainstTheMock, AFailedCountLeavesTheHistoryAsItWas) {
  start(R"({"match": {"endpoint": "apply_template"}, "error": {"status": 503, "body": "{}"}}
{"reply": {"content": "Noted."}})");
  ConversationOptions o;
  o.llm = std::make_shared<OpenAiClient>(client(Protocol::OpenAiChat));
  o.request.model = "m";
  o.tokenLimit = 100000;
  o.promptCounter = std::make_shared<RemotePromptCounter>(remote(RemoteCountApi::LlamaCppTokenize));
  ConversationManager c(o);
  EXPECT_THROW(c.run("Hello"), HttpError);
  EXPECT_EQ(c.getAllMessages().size(), 0u);
  EXPECT_TRUE(requestsTo("/v1/chat/completions").empty());
}

TEST(MockCountingRules, AreCheckedWhenTheScriptIsRead) {
  EXPECT_THROW(mock::compileScript(mock::readScript(
                   R"({"match": {"endpoint": "tokenize"}, "reply": {"content": "x"}})")),
               ValidationError);
  EXPECT_THROW(mock::compileScript(mock::readScript(
                   R"({"match": {"endpoint": "detokenize"}, "error": {"status": 500}})")),
               ValidationError);
  EXPECT_EQ(mock::compileScript(
                mock::readScript(R"({"match": {"endpoint": "tokenize"}, "raw": "{}"})"))[0]
                .match.endpoint,
            "tokenize");
}

TEST(PromptCounterProfiles, TokenCountingChoosesTheCounter) {
  ProfileRegistry profiles;
  profiles.loadTomlString(R"(
[profiles.claude]
base_url = "http://127.0.0.1:9/v1"
protocol = "anthropic"
token_counting = "remote"
[profiles.llama]
base_url = "http://127.0.0.1:9/v1"
token_counting = "remote-or-local"
[profiles.plain]
base_url = "http://127.0.0.1:9/v1"
)");
  EXPECT_EQ(profiles.get("claude").tokenCounting, TokenCounting::Remote);
  EXPECT_EQ(makePromptCounter(profiles.get("claude"))->name(), "anthropic count_tokens");
  auto llama = makePromptCounter(profiles.get("llama"));
  EXPECT_EQ(llama->name(), "llama.cpp tokenize");
  EXPECT_EQ(dynamic_cast<const RemotePromptCounter&>(*llama).options().fallback,
            RemoteCountFallback::Local);
  EXPECT_EQ(makePromptCounter(profiles.get("plain"))->name(), "local");

  EXPECT_THROW(profiles.loadTomlString("[profiles.x]\ntoken_counting = \"exact\"\n"),
               ValidationError);
  EXPECT_THROW(profiles.loadTomlString(
                   "[profiles.x]\nprotocol = \"openai-responses\"\ntoken_counting = \"remote\"\n"),
               ValidationError);
  RemotePromptCounterOptions bad;
  bad.client.baseUrl = "http://127.0.0.1:9/v1";
  bad.timeout = 0ms;
  EXPECT_THROW(RemotePromptCounter{bad}, ValidationError);
}

}  // namespace
}  // namespace parley
