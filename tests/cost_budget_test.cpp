// Cost budgets in ConversationManager against `parley mock` over loopback: a call that could go
// over maxCostPerRun or maxCostPerThread is refused before anything is sent (the mock sees no
// request, the history is unchanged); the exact prompt count and the max_tokens bound decide.
#include <gtest/gtest.h>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "printers.hpp"

namespace parley {
namespace {

using nlohmann::json;

// $1 per million tokens in and out: a cost in USD is tokens / 1e6.
std::shared_ptr<const PriceTable> onePerMillion() {
  auto table = std::make_shared<PriceTable>();
  table->set("m", {1, {}, {}, 1, {}, {}});
  return table;
}

class Budget : public ::testing::Test {
 protected:
  void startMock(const std::string& script) { server_ = testing::startMockServer(script); }

  ConversationOptions options(CostBudget budget) {
    ConversationOptions o;
    o.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(*server_));
    o.systemPrompt = "You are terse.";
    budget.prices = onePerMillion();
    budget.model = "m";
    o.budget = std::move(budget);
    return o;
  }

  // The exact prompt count of sending `view` then `prompt`, as countChatTokens counts it.
  static int64_t promptTokens(const ConversationManager& c, const std::string& prompt) {
    std::vector<Message> messages = c.getMessages();
    messages.push_back(Message::user(prompt));
    return countChatTokens(messages, json::array()).tokens;
  }

  std::unique_ptr<mock::MockServer> server_;
};

TEST_F(Budget, ARunOverItsBudgetIsRefusedBeforeAnyRequest) {
  startMock(R"({"reply": {"content": "ok"}})");
  CostBudget budget;
  budget.defaultMaxTokens = 100;
  ConversationManager probe(options(budget));
  const int64_t prompt = promptTokens(probe, "Hello there");
  ASSERT_GT(prompt, 5);
  const double worst = static_cast<double>(prompt + 100) / 1e6;

  budget.maxCostPerRun = worst * 0.999;
  ConversationManager c(options(budget));
  const json before = c.createSnapshot();
  try {
    c.run("Hello there");
    FAIL() << "the run was not refused";
  } catch (const BudgetExceeded& e) {
    EXPECT_EQ(e.budget(), "maxCostPerRun");
    EXPECT_DOUBLE_EQ(e.limitUsd(), worst * 0.999);
    EXPECT_NEAR(e.estimateUsd(), worst, 1e-15);
    const std::string what = e.what();
    EXPECT_NE(what.find("maxCostPerRun of $"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(prompt) + " prompt tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("max_tokens 100"), std::string::npos) << what;
    EXPECT_NE(what.find("nothing was sent"), std::string::npos) << what;
  }
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_EQ(c.createSnapshot(), before);

  // At the worst case exactly, the call goes, bounded by the max_tokens checked.
  budget.maxCostPerRun = worst;
  ConversationManager fits(options(budget));
  EXPECT_EQ(fits.run("Hello there").content, "ok");
  auto seen = server_->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["body"]["max_completion_tokens"], 100);
}

TEST_F(Budget, TheRequestsOwnMaxTokensIsTheBound) {
  startMock(R"({"reply": {"content": "ok"}})");
  CostBudget budget;
  ConversationManager probe(options(budget));
  const int64_t prompt = promptTokens(probe, "hi");
  budget.maxCostPerRun = static_cast<double>(prompt + 50) / 1e6;
  ConversationOptions o = options(budget);
  o.request.maxTokens = 51;
  ConversationManager over(o);
  EXPECT_THROW(over.run("hi"), BudgetExceeded);
  EXPECT_TRUE(server_->requests().empty());
  o.request.maxTokens = 50;
  ConversationManager fits(o);
  fits.run("hi");
  ASSERT_EQ(server_->requests().size(), 1u);
  EXPECT_EQ(server_->requests()[0]["body"]["max_completion_tokens"], 50);
}

TEST_F(Budget, TheThreadBudgetCountsEveryReplyBefore) {
  // Each reply reports 1000 + 100 tokens: $0.0011 at $1 per million.
  startMock(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}})");
  CostBudget budget;
  budget.defaultMaxTokens = 10;
  // Three turns spend $0.0033; a fourth could spend its ~50 prompt tokens + 10 more.
  budget.maxCostPerThread = 0.00333;
  ConversationManager c(options(budget));
  for (int turn = 0; turn < 3; ++turn)
    c.run("turn " + std::to_string(turn));
  EXPECT_NEAR(c.spentCost({1, {}, {}, 1, {}, {}}).thread, 0.0033, 1e-12);
  try {
    c.run("one more");
    FAIL() << "the fourth turn was not refused";
  } catch (const BudgetExceeded& e) {
    EXPECT_EQ(e.budget(), "maxCostPerThread");
    EXPECT_NE(std::string(e.what()).find("$0.003300 spent in this thread"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(server_->requests().size(), 3u);
}

TEST_F(Budget, ARunsBudgetCoversItsToolLoopAndANewPromptStartsAnew) {
  startMock(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "done", "usage": {"prompt_tokens": 10, "completion_tokens": 1}}}
{"match": {"user_contains": "and now"}, "reply": {"content": "fine", "usage": {"prompt_tokens": 10, "completion_tokens": 1}}}
{"reply": {"content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}}
)");
  CostBudget budget;
  budget.defaultMaxTokens = 500;
  budget.maxCostPerRun = 0.0015;  // the first call's $0.0011 leaves too little for a second
  ConversationOptions o = options(budget);
  o.tools = std::make_shared<ToolRegistry>();
  o.tools->add("get_weather", "Weather", json::parse(R"({"type": "object"})"),
               [](const json&, ToolContext&) -> json {
                 return {{"tempC", -3}};
               });
  ConversationManager c(o);
  EXPECT_THROW(c.run("weather?"), BudgetExceeded);
  // The complete iteration stays: the call and its result; the second call was never sent.
  EXPECT_EQ(server_->requests().size(), 1u);
  const auto view = c.getMessages();
  ASSERT_EQ(view.size(), 4u);
  EXPECT_EQ(view[3].role, Role::Tool);

  // A new prompt is a new run: nothing spent in it yet.
  server_->clearRequests();
  EXPECT_NO_THROW(c.run("and now?"));
  EXPECT_EQ(server_->requests().size(), 1u);
}

TEST_F(Budget, AnUnpricedModelCannotKeepABudget) {
  startMock(R"({"reply": {"content": "ok"}})");
  CostBudget budget;
  budget.maxCostPerRun = 100;
  ConversationOptions o = options(budget);
  o.request.model = "unknown-model";
  ConversationManager c(o);
  try {
    c.run("hi");
    FAIL() << "an unpriced model was sent to";
  } catch (const BudgetExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("unknown-model has no price"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(Budget, WithoutLimitsNothingIsCheckedOrChanged) {
  startMock(R"({"reply": {"content": "ok"}})");
  ConversationOptions o = options({});
  o.request.model = "unknown-model";
  ConversationManager c(o);
  c.run("hi");
  ASSERT_EQ(server_->requests().size(), 1u);
  EXPECT_FALSE(server_->requests()[0]["body"].contains("max_completion_tokens"));
}

TEST_F(Budget, PromptCountMatchesCountChatTokensWithTools) {
  startMock(R"({"reply": {"content": "ok"}})");
  ConversationOptions o = options({});
  o.tools = std::make_shared<ToolRegistry>();
  o.tools->add("get_weather", "Current weather for a city",
               json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})"),
               [](const json&, ToolContext&) -> json { return nullptr; });
  ConversationManager c(o);
  c.run("first");
  const std::vector<Message> pending = {Message::user("second question")};
  std::vector<Message> all = c.getMessages();
  all.insert(all.end(), pending.begin(), pending.end());
  EXPECT_EQ(c.countPromptTokens(pending), countChatTokens(all, o.tools->definitions()->tools));
}

}  // namespace
}  // namespace parley
