// The host kit's turn settings (turn_defaults.hpp): their ranges, and what a configured
// conversation and a turn's RunOptions take from them. Each host's own test checks that it
// honours them (executor_test, worker_test, cli_ask_test, cli_worker_test).
#include "parley/turn_defaults.hpp"

#include <gtest/gtest.h>

#include "parley/errors.hpp"
#include "parley/prompt_counter.hpp"

namespace parley {
namespace {

using namespace std::chrono_literals;

std::string fieldOfError(const TurnDefaults& turn) {
  try {
    validateTurnDefaults(turn, "options.turn");
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "";
}

TEST(TurnDefaults, TheDefaultsAreValid) { EXPECT_EQ(fieldOfError(TurnDefaults{}), ""); }

TEST(TurnDefaults, ValuesOutOfRangeAreRefusedByName) {
  auto with = [](auto change) {
    TurnDefaults turn;
    change(turn);
    return fieldOfError(turn);
  };
  EXPECT_EQ(with([](TurnDefaults& t) { t.maxIterations = 0; }), "options.turn.maxIterations");
  EXPECT_EQ(with([](TurnDefaults& t) { t.maxIterations = TurnDefaults::kMaxIterations + 1; }),
            "options.turn.maxIterations");
  EXPECT_EQ(with([](TurnDefaults& t) { t.maxToolCallsPerReply = 0; }),
            "options.turn.maxToolCallsPerReply");
  EXPECT_EQ(with([](TurnDefaults& t) { t.maxToolConcurrency = 0; }),
            "options.turn.maxToolConcurrency");
  EXPECT_EQ(with([](TurnDefaults& t) { t.maxToolConcurrency = TurnDefaults::kMaxConcurrency + 1; }),
            "options.turn.maxToolConcurrency");
  EXPECT_EQ(with([](TurnDefaults& t) { t.tokenLimit = -1; }), "options.turn.tokenLimit");
  EXPECT_EQ(with([](TurnDefaults& t) { t.callTimeout = -1ms; }), "options.turn.callTimeout");
  EXPECT_EQ(with([](TurnDefaults& t) { t.turnTimeout = TurnDefaults::kMaxTimeout + 1ms; }),
            "options.turn.turnTimeout");
  EXPECT_EQ(with([](TurnDefaults& t) { t.budget.maxCostPerRun = -0.5; }),
            "options.turn.budget.maxCostPerRun");
  EXPECT_EQ(with([](TurnDefaults& t) { t.budget.maxCostPerThread = 1; }),
            "options.turn.budget.prices");
}

TEST(TurnDefaults, AConfiguredConversationTakesEverySetting) {
  TurnDefaults turn;
  turn.maxIterations = 3;
  turn.maxToolCallsPerReply = 5;
  turn.maxToolConcurrency = 2;
  turn.tokenLimit = 1234;
  turn.systemPrompt = "be brief";
  turn.budget.prices = std::make_shared<PriceTable>();
  turn.budget.maxCostPerRun = 0.25;
  ClientOptions profile;
  profile.model = "m-1";
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("t", "a tool", nullptr, [](const nlohmann::json&, ToolContext&) { return "x"; });
  ConversationOptions o = configureConversation(profile, nullptr, tools, turn);
  EXPECT_EQ(o.maxIterations, 3);
  EXPECT_EQ(o.maxToolCallsPerReply, 5);
  EXPECT_EQ(o.maxToolConcurrency, 2);
  EXPECT_EQ(o.tokenLimit, 1234);
  EXPECT_EQ(o.systemPrompt, "be brief");
  EXPECT_EQ(o.tools, tools);
  EXPECT_EQ(o.budget.maxCostPerRun, 0.25);
  EXPECT_EQ(o.budget.model, "m-1");  // the profile's model is priced
  EXPECT_EQ(o.promptCounter, nullptr);

  // An empty registry offers nothing; a remote-counting profile gets its counter.
  profile.tokenCounting = TokenCounting::RemoteOrLocal;
  profile.protocol = Protocol::Anthropic;
  o = configureConversation(profile, nullptr, std::make_shared<ToolRegistry>(), TurnDefaults{});
  EXPECT_EQ(o.tools, nullptr);
  EXPECT_NE(o.promptCounter, nullptr);

  turn.maxIterations = 0;
  EXPECT_THROW(configureConversation(profile, nullptr, nullptr, turn), ValidationError);
}

TEST(TurnDefaults, ATurnsRunOptionsCarryItsTimeouts) {
  TurnDefaults turn;
  RunOptions run = turnRunOptions(turn);
  EXPECT_FALSE(run.timeout.has_value());  // 0: none
  EXPECT_FALSE(run.turnTimeout.has_value());
  turn.callTimeout = 250ms;
  turn.turnTimeout = 2s;
  run = turnRunOptions(turn);
  EXPECT_EQ(run.timeout, 250ms);
  EXPECT_EQ(run.turnTimeout, 2s);
}

TEST(TurnDefaults, OneRuleSaysWhichAnswersApproveACall) {
  for (const nlohmann::json& yes : {nlohmann::json(true), nlohmann::json("yes"), nlohmann::json(" Y "),
                                    nlohmann::json("APPROVED"), nlohmann::json("ok"),
                                    nlohmann::json({{"approved", true}})}) {
    EXPECT_TRUE(isApproval(yes)) << yes.dump();
  }
  for (const nlohmann::json& no :
       {nlohmann::json(false), nlohmann::json("no"), nlohmann::json(""), nlohmann::json("yes please"),
        nlohmann::json({{"approved", "yes"}}), nlohmann::json(1), nlohmann::json(nullptr)}) {
    EXPECT_FALSE(isApproval(no)) << no.dump();
  }
}

}  // namespace
}  // namespace parley
