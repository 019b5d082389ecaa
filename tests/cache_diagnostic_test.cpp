// ConversationManager::diagnoseCache against `parley mock` over loopback: the prefix of the
// previous request that the next one reuses (exact tokens and bytes) and where they first
// differ, after each kind of context edit.
#include <gtest/gtest.h>

#include "mock/mock_server.hpp"
#include "mock/prompt_cache.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/compression.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/openai_client.hpp"
#include "parley/tokens.hpp"
#include "printers.hpp"

namespace parley {
namespace {

using nlohmann::json;

class CacheDiagnosis : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::startMockServer(
        R"({"reply": {"content": "echo {{last_user}}", "usage": {"prompt_tokens": 40, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 32}}}})");
  }

  ConversationOptions options() {
    ConversationOptions o;
    o.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(*server_));
    o.tools = tools_;
    o.systemPrompt = "You are terse.";
    return o;
  }

  // What the diagnostic must say for a prefix of `messages`: their exact tokens and JSON bytes.
  static std::pair<int64_t, int64_t> sizeOf(const std::vector<Message>& messages, size_t n) {
    int64_t tokens = 0;
    int64_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      tokens += countMessageTokens(messages[i], TokenCounter()).tokens;
      bytes += static_cast<int64_t>(encodeMessage(messages[i]).size());
    }
    return {tokens, bytes};
  }

  std::unique_ptr<mock::MockServer> server_;
  std::shared_ptr<ToolRegistry> tools_ = std::make_shared<ToolRegistry>();
};

TEST_F(CacheDiagnosis, UnknownBeforeTheFirstCall) {
  ConversationManager c(options());
  EXPECT_EQ(c.diagnoseCache({Message::user("hi")}), std::nullopt);
  RunResult first = c.run("hi");
  EXPECT_EQ(first.cache, std::nullopt);
}

// The next turn only appends: the whole previous prompt is reusable.
TEST_F(CacheDiagnosis, AnAppendedTurnReusesThePreviousPrompt) {
  ConversationManager c(options());
  c.run("first question");
  const std::vector<Message> sent = {c.getMessages()[0], c.getMessages()[1]};  // system, user
  auto d = c.diagnoseCache({Message::user("second question")});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->reusableMessages, 2u);
  EXPECT_EQ(std::make_pair(d->reusablePrefixTokens, d->reusablePrefixBytes), sizeOf(sent, 2));
  EXPECT_GT(d->reusablePrefixTokens, 0);
  EXPECT_FALSE(d->firstDifference);

  // run() reports the same, taken as its first call is sent.
  RunResult second = c.run("second question");
  ASSERT_TRUE(second.cache);
  EXPECT_EQ(second.cache->reusablePrefixTokens, d->reusablePrefixTokens);
  EXPECT_EQ(second.cache->reusableMessages, 2u);
}

// Each edit: where the request departs from the previous one, and what stays reusable.
TEST_F(CacheDiagnosis, EachContextEditSaysWhereThePrefixBreaks) {
  struct Case {
    const char* operation;
    size_t message;  // the first difference
    const char* field;
  };
  const Case cases[] = {
      // Keeps a1 u2 a2: the system prompt goes too, so the request now opens with a reply.
      {R"({"operation": "truncate", "truncate": {"keepLast": 3}})", 0, "role"},
      {R"({"operation": "replace", "replace": {"index": 1, "message": {"role": "user", "content": "changed"}}})",
       1, "content"},
      {R"({"operation": "insert", "insert": {"position": 1, "messages": [{"role": "assistant", "content": "note"}]}})",
       1, "role"},
      {R"({"operation": "filter", "filter": {"roles": ["user", "assistant"]}})", 0, "role"},
      {R"({"operation": "clear", "clear": {"keepSystemMessage": true}})", 1, "removed"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.operation);
    ConversationManager c(options());
    c.run("first question");
    c.run("second question");
    const std::vector<Message> before = c.getMessages();  // sys u1 a1 u2 a2
    applyContextOperation(c, parseContextOperation(json::parse(k.operation)));
    auto d = c.diagnoseCache();
    ASSERT_TRUE(d);
    ASSERT_TRUE(d->firstDifference);
    EXPECT_EQ(d->firstDifference->message, k.message);
    EXPECT_EQ(d->firstDifference->field, k.field);
    EXPECT_EQ(d->reusableMessages, k.message);
    EXPECT_EQ(std::make_pair(d->reusablePrefixTokens, d->reusablePrefixBytes),
              sizeOf(before, k.message));
    // Undoing the edit brings the whole prefix back.
    c.rollbackToBatch(0);
    d = c.diagnoseCache({Message::user("third")});
    ASSERT_TRUE(d);
    EXPECT_FALSE(d->firstDifference);
    EXPECT_EQ(d->reusableMessages, 4u);
  }
}

// New tool definitions come before every message: nothing is reusable.
TEST_F(CacheDiagnosis, ChangedToolsBreakTheWholePrefix) {
  ConversationManager c(options());
  c.run("first");
  tools_->add("lookup", "Looks things up", json::parse(R"({"type": "object"})"),
              [](const json&, ToolContext&) -> json { return "found"; });
  auto d = c.diagnoseCache({Message::user("second")});
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->firstDifference);
  EXPECT_EQ(d->firstDifference->message, std::nullopt);
  EXPECT_EQ(d->firstDifference->field, "tools");
  EXPECT_EQ(d->reusablePrefixTokens, 0);
}

// A snapshot keeps what the diagnostic needs: a restored conversation knows its previous request.
TEST_F(CacheDiagnosis, ARestoredConversationKnowsItsPreviousRequest) {
  ConversationManager c(options());
  c.run("first question");
  ConversationManager restored(options());
  restored.restoreFromSnapshot(c.createSnapshot());
  auto d = restored.diagnoseCache({Message::user("next")});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->reusableMessages, 2u);
  EXPECT_EQ(d->reusablePrefixTokens,
            c.diagnoseCache({Message::user("next")})->reusablePrefixTokens);
  EXPECT_EQ(toJson(*d).at("first_difference"), nullptr);
}

// Dry runs: the preview says what the operation would cost the cache and save, and the real
// operation then does exactly that; the history is untouched by the preview.
TEST_F(CacheDiagnosis, ADryRunPredictsTheOperationAndChangesNothing) {
  const char* operations[] = {
      R"({"operation": "truncate", "truncate": {"keepLast": 3}})",
      R"({"operation": "replace", "replace": {"index": 3, "message": {"role": "user", "content": "changed"}}})",
      R"({"operation": "insert", "insert": {"position": 4, "messages": [{"role": "user", "content": "note"}]}})",
      R"({"operation": "filter", "filter": {"roles": ["user", "assistant"]}})",
      R"({"operation": "clear", "clear": {"keepSystemMessage": true}})",
  };
  for (const char* text : operations) {
    SCOPED_TRACE(text);
    ConversationManager c(options());
    c.run("first question");
    c.run("second question");  // sys u1 a1 u2 a2; the previous request: sys u1 a1 u2
    const std::vector<Message> before = c.getMessages();
    const uint64_t revision = c.revision();
    const ContextOperation op = parseContextOperation(json::parse(text));
    const std::vector<Message> prompt = {Message::user("next")};
    const ContextOperationPreview p = previewContextOperation(c, op, prompt);
    EXPECT_EQ(c.revision(), revision);
    EXPECT_EQ(c.getMessages(), before);

    ASSERT_TRUE(p.cacheWithout);
    ASSERT_TRUE(p.cacheWith);
    EXPECT_EQ(p.cacheWithout->reusableMessages, 4u);
    EXPECT_EQ(p.destroyedPrefixTokens, sizeOf(before, 4).first - p.cacheWith->reusablePrefixTokens);
    EXPECT_EQ(p.destroyedPrefixBytes, sizeOf(before, 4).second - p.cacheWith->reusablePrefixBytes);
    EXPECT_EQ(p.promptTokensBefore, c.countPromptTokens(prompt).tokens);
    EXPECT_EQ(p.messagesBefore, 5u);

    applyContextOperation(c, op);
    const auto after = c.diagnoseCache(prompt);
    ASSERT_TRUE(after);
    EXPECT_EQ(after->reusablePrefixTokens, p.cacheWith->reusablePrefixTokens);
    EXPECT_EQ(after->reusableMessages, p.cacheWith->reusableMessages);
    EXPECT_EQ(p.promptTokensAfter, c.countPromptTokens(prompt).tokens);
    EXPECT_EQ(p.savedTokens, p.promptTokensBefore - p.promptTokensAfter);
    EXPECT_EQ(p.messagesAfter, c.getMessageCount());
    ASSERT_TRUE(p.firstChangedMessage);
    EXPECT_EQ(*p.firstChangedMessage, after->reusableMessages);
  }
}

TEST_F(CacheDiagnosis, ADryRunOfTruncateNamesWhatItDestroys) {
  ConversationManager c(options());
  c.run("first question");
  c.run("second question");
  const std::vector<Message> before = c.getMessages();
  const auto p = previewContextOperation(c, TruncateOp{.keepLast = 3});
  EXPECT_EQ(p.operation, "truncate");
  EXPECT_EQ(p.firstChangedMessage, 0u);
  EXPECT_EQ(p.destroyedPrefixTokens, sizeOf(before, 4).first);  // the whole previous prompt
  EXPECT_EQ(p.savedTokens, sizeOf(before, 2).first);            // sys and u1 go
  EXPECT_EQ(toJson(p).at("firstChangedMessage"), 0);
  // Appending keeps the prefix: nothing destroyed.
  const auto append = previewContextOperation(c, InsertOp{-1, {Message::user("more")}});
  EXPECT_EQ(append.firstChangedMessage, std::nullopt);
  EXPECT_EQ(append.destroyedPrefixTokens, 0);
  EXPECT_LT(append.savedTokens, 0);
}

// Summarize without calling the model: what the summary would replace.
TEST_F(CacheDiagnosis, ADryRunOfSummarizeCallsNoModel) {
  ConversationManager c(options());
  c.run("first question");
  c.run("second question");
  const size_t requests = server_->requests().size();
  const std::vector<Message> before = c.getMessages();
  const auto p = previewSummary(c);
  EXPECT_EQ(server_->requests().size(), requests);
  EXPECT_EQ(c.getMessages(), before);
  EXPECT_EQ(p.operation, "summarize");
  EXPECT_EQ(p.firstChangedMessage, 1u);  // after the system prompt
  EXPECT_EQ(p.messagesAfter, 4u);        // system, summary, u2, a2
  EXPECT_EQ(p.destroyedPrefixTokens, sizeOf(before, 4).first - sizeOf(before, 1).first);
  EXPECT_GT(p.savedTokens, 0);
}

// Without a previous request the destroyed prefix is the view's, from the first change on.
TEST_F(CacheDiagnosis, ADryRunWithoutAPreviousRequestMeasuresTheView) {
  ConversationManager c(options());
  c.addMessages({Message::user("one"), Message::assistant("two")});
  const std::vector<Message> before = c.getMessages();  // sys u a
  const auto p = previewContextOperation(c, ClearOp{});
  EXPECT_FALSE(p.cacheWithout);
  EXPECT_EQ(p.firstChangedMessage, 1u);
  int64_t tokens = 0;
  for (size_t i = 1; i < before.size(); ++i)
    tokens += countMessageTokens(before[i], TokenCounter()).tokens;
  EXPECT_EQ(p.destroyedPrefixTokens, tokens);
}

TEST(ContextOperationJson, DryRunIsAFlagOfTheOperation) {
  const json config = json::parse(R"({"operation": "clear", "clear": {}, "dryRun": true})");
  EXPECT_TRUE(isDryRun(config));
  EXPECT_NO_THROW(parseContextOperation(config));
  EXPECT_FALSE(isDryRun(json::parse(R"({"operation": "clear"})")));
  EXPECT_THROW(parseContextOperation(json::parse(R"({"operation": "clear", "dryRun": 1})")),
               ValidationError);
}

// Predicted against reported: the mock reports cached_tokens by its own prefix rule
// (docs/mock.md, "Prompt cache": whole leading messages equal to the previous request's, in its
// own token estimate, rounded down to 128-token blocks, nothing below 1024). parley's prediction
// is in exact tokens, so the relation asserted is on what both measure alike: the mock's figure
// is its rule applied to exactly the messages parley said were reusable.
class PredictedAgainstReported : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions o;
    o.script = mock::readScript(R"({"reply": {"content": "echo {{last_user}}"}})");
    server_ = std::make_unique<mock::MockServer>(o);
    server_->start();
  }

  ConversationManager conversation() {
    ConversationOptions o;
    o.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(*server_));
    // About 1 500 of the mock's tokens: above its 1 024-token minimum on its own.
    std::string system = "You answer questions about the archive. ";
    while (system.size() < 6000)
      system += "Every answer cites the shelf, the box and the folder of each document. ";
    o.systemPrompt = system;
    return ConversationManager(o);
  }

  // What the mock's rule gives for the first `messages` messages of the last request it saw.
  int64_t mockFigureFor(size_t messages) {
    const json body = server_->requests().back().at("body");
    const mock::ChatContext ctx = mock::describeRequest(body, 1);
    size_t bytes = 0;
    for (size_t i = 0; i < messages; ++i)
      bytes += ctx.messageBytes.at(i);
    return mock::cachedTokensForPrefix(bytes, mock::PromptCacheOptions{});
  }

  static int64_t cachedOf(const RunResult& r) {
    return r.message.usage ? billedTokens(*r.message.usage).cachedInput : -1;
  }

  std::unique_ptr<mock::MockServer> server_;
};

TEST_F(PredictedAgainstReported, AcrossEachContextOperation) {
  struct Case {
    const char* operation;  // null: none, the next turn only appends
    size_t reusable;        // messages parley must predict reusable (view: sys u1 a1 u2 a2 u3 a3)
  };
  const Case cases[] = {
      {nullptr, 6},  // the previous request: all but its reply
      {R"({"operation": "truncate", "truncate": {"keepLast": 4}})", 0},
      {R"({"operation": "replace", "replace": {"index": 3, "message": {"role": "user", "content": "changed"}}})",
       3},
      {R"({"operation": "insert", "insert": {"position": 5, "messages": [{"role": "user", "content": "note"}]}})",
       5},
      {R"({"operation": "filter", "filter": {"roles": ["user", "assistant"]}})", 0},
      {R"({"operation": "clear", "clear": {"keepSystemMessage": true}})", 1},
      {R"({"operation": "truncate", "truncate": {"removeLast": 2}})", 5},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.operation ? k.operation : "append");
    ConversationManager c = conversation();
    for (const char* prompt : {"where is the charter", "and the letters", "who wrote them"})
      c.run(prompt);
    if (k.operation) applyContextOperation(c, parseContextOperation(json::parse(k.operation)));
    RunResult next = c.run("one more question");
    ASSERT_TRUE(next.cache);
    EXPECT_EQ(next.cache->reusableMessages, k.reusable);
    // The reply's own usage as the server sent it (RunResult::usage is a sum without details).
    const int64_t reported = cachedOf(next);
    EXPECT_EQ(reported, mockFigureFor(k.reusable));
    // Both say the same thing about whether anything is reused: the long system prompt alone
    // is over the mock's minimum.
    EXPECT_EQ(reported > 0, next.cache->reusablePrefixTokens > 0);
    EXPECT_EQ(reported > 0, k.reusable > 0);
  }
}

// A script's own cached_tokens wins over the rule; a different prompt_cache_key starts cold.
TEST_F(PredictedAgainstReported, TheScriptOrAnotherKeyOverridesTheRule) {
  ConversationManager c = conversation();
  c.run("first");
  EXPECT_GT(cachedOf(c.run("second")), 0);
  ConversationOptions other = c.options();
  ClientOptions keyed = testing::mockClientOptions(*server_);
  keyed.promptCacheKey = "another-thread";
  other.llm = std::make_shared<OpenAiClient>(keyed);
  ConversationManager cold(other);
  EXPECT_EQ(cachedOf(cold.run("first")), 0);
  EXPECT_GT(cachedOf(cold.run("second")), 0);

  server_->setScript(mock::readScript(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens_details": {"cached_tokens": 7}}}})"));
  c.run("third");
  EXPECT_EQ(cachedOf(c.run("fourth")), 7);
}

}  // namespace
}  // namespace parley
