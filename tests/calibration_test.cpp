// CalibratedCounter (tokens.hpp) on its own, and in a conversation against a `parley mock` whose
// prompt_tokens differ from the local count by about 30 % (MockOptions::promptTokensScale).
#include <gtest/gtest.h>

#include <cmath>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/tokens.hpp"

namespace parley {
namespace {

TEST(CalibratedCounter, LearnsABoundedMovingAverage) {
  CalibratedCounter c;
  EXPECT_EQ(c.ratio(), 1.0);
  EXPECT_EQ(c.calibrate(100), 100);
  c.observe(100, 130);
  EXPECT_DOUBLE_EQ(c.ratio(), 1.3);  // the first observation is taken whole
  c.observe(100, 150);
  EXPECT_DOUBLE_EQ(c.ratio(), 1.4);  // then weighted by half
  EXPECT_EQ(c.calibrate(1000), 1400);
  c.observe(100, 100'000);  // a wild report moves it to the bound at most
  EXPECT_LE(c.ratio(), 4.0);
  c.observe(5, 50);  // too few tokens to tell: ignored
  EXPECT_EQ(c.observations(), 3);
  EXPECT_THROW(CalibratedCounter(CalibratedCounter::Options{.weight = 0}), ValidationError);
  EXPECT_THROW(CalibratedCounter(CalibratedCounter::Options{.minRatio = 2}), ValidationError);
}

class CalibrationAgainstTheMock : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions o;
    o.script = mock::readScript(R"({"reply": {"content": "Noted."}})");
    o.promptTokensScale = 1.3;
    server_ = std::make_unique<mock::MockServer>(o);
    server_->start();
  }

  static std::string prompt(int turn) {
    std::string text = "Entry " + std::to_string(turn) + ".";
    for (int i = 0; i < 8; ++i)
      text += " The surveyors measured the northern ridge again and logged each reading twice.";
    return text;
  }

  std::unique_ptr<mock::MockServer> server_;
};

// The local count of each request, calibrated, against what the mock then reports: off by more
// than 20 % before the first reply, within 3 % from the third on.
TEST_F(CalibrationAgainstTheMock, ConvergesWithinThreePercent) {
  ConversationOptions o;
  o.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(*server_));
  o.systemPrompt = "You keep the survey log.";
  o.calibration = std::make_shared<CalibratedCounter>();
  ConversationManager c(o);
  std::vector<double> errors;
  for (int turn = 1; turn <= 8; ++turn) {
    const std::vector<Message> pending = {Message::user(prompt(turn))};
    const int64_t predicted = o.calibration->calibrate(c.countPromptTokens(pending).tokens);
    RunResult r = c.run(prompt(turn));
    ASSERT_TRUE(r.message.usage);
    const auto reported = static_cast<double>(r.message.usage->promptTokens);
    errors.push_back(std::abs(static_cast<double>(predicted) - reported) / reported);
  }
  EXPECT_GT(errors[0], 0.2) << "the mock should differ by about 30 % uncalibrated";
  for (size_t i = 2; i < errors.size(); ++i)
    EXPECT_LT(errors[i], 0.03) << "turn " << i + 1;
  // The mock counts ceil(bytes / 4) x 1.3: English prose runs about 5 bytes a token in
  // o200k_base, so the ratio learnt is above 1.3.
  EXPECT_GT(o.calibration->ratio(), 1.3);

  // The token-limit check uses it where usage does not cover the view: after an edit that
  // rewrites the prefix, the whole view is counted here, and scaled.
  applyContextOperation(c, ReplaceOp{1, Message::user(prompt(99))});
  const int64_t local = c.countPromptTokens().tokens;
  EXPECT_EQ(c.estimateContextTokens().contextTokens, o.calibration->calibrate(local));
}

}  // namespace
}  // namespace parley
