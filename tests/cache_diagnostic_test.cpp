// ConversationManager::diagnoseCache against `parley mock` over loopback: the prefix of the
// previous request that the next one reuses (exact tokens and bytes) and where they first
// differ, after each kind of context edit.
#include <gtest/gtest.h>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
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

}  // namespace
}  // namespace parley
