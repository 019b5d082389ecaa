// The ready trim trigger (compression.hpp) against `parley mock`: hysteresis makes the
// cache-destroying edits rare, and the cache-preserving mode keeps the pinned prefix.
#include <gtest/gtest.h>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/compression.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "printers.hpp"

namespace parley {
namespace {

constexpr int kTurns = 30;
constexpr int64_t kLimit = 1000;

class TrimTrigger : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::startMockServer(R"({"reply": {"content": "noted: {{last_user}}"}})");
  }

  ConversationManager conversation(TrimOptions trim) {
    ConversationOptions o;
    o.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(*server_));
    o.systemPrompt = "You keep a log of the expedition and answer in one line.";
    o.tokenLimit = kLimit;
    o.onTokenLimitExceeded = trimOldestTurns(trim);
    o.log = [this](const std::string& line) { logged_.push_back(line); };
    return ConversationManager(o);
  }

  static std::string prompt(int turn) {
    return "Day " + std::to_string(turn) +
           ": we walked along the river, counted the birds on the north bank, mended two "
           "tents and wrote the weather down before dark.";
  }

  // Runs kTurns turns; returns how many requests edited the previous request's prefix (a
  // cache-destroying edit, as the diagnostic of each run's first call sees it).
  int prefixEdits(ConversationManager& c) {
    int edits = 0;
    for (int turn = 1; turn <= kTurns; ++turn) {
      RunResult r = c.run(prompt(turn));
      if (r.cache && r.cache->firstDifference) ++edits;
      EXPECT_LE(c.countPromptTokens().tokens, kLimit + 200) << "turn " << turn;
    }
    return edits;
  }

  std::unique_ptr<mock::MockServer> server_;
  std::vector<std::string> logged_;
};

TEST_F(TrimTrigger, HysteresisMakesCacheDestroyingEditsRare) {
  ConversationManager every = conversation(TrimOptions{.lowWater = 1.0});
  const int withoutHysteresis = prefixEdits(every);
  ConversationManager rare = conversation(TrimOptions{.lowWater = 0.6});
  const int withHysteresis = prefixEdits(rare);
  RecordProperty("prefix_edits_without_hysteresis", withoutHysteresis);
  RecordProperty("prefix_edits_with_hysteresis", withHysteresis);
  // Without hysteresis, once the limit is reached every turn trims (about 80 tokens a turn
  // against a 1 000-token limit: from about turn 12 on).
  EXPECT_GE(withoutHysteresis, 12);
  // With it, each trim frees 40 % of the limit, about five turns' worth.
  EXPECT_GE(withHysteresis, 1);
  EXPECT_LE(withHysteresis, 6);
  EXPECT_TRUE(logged_.empty()) << logged_.front();
  // Both kept the system prompt and the latest turn.
  EXPECT_EQ(rare.getMessages().front().role, Role::System);
  EXPECT_EQ(rare.getMessages().at(rare.getMessageCount() - 2).content, prompt(kTurns));
}

// The cache-preserving mode: the first keepFirstTokens stay, and every trim leaves at least
// that prefix of the previous request reusable.
TEST_F(TrimTrigger, KeepFirstTokensPreservesTheCachedPrefix) {
  ConversationManager c = conversation(TrimOptions{.lowWater = 0.6, .keepFirstTokens = 200});
  std::vector<Message> pinned;
  for (int turn = 1; turn <= kTurns; ++turn) {
    RunResult r = c.run(prompt(turn));
    if (turn == 3) {
      const std::vector<Message> view = c.getMessages();
      int64_t tokens = 0;
      for (const Message& m : view) {
        if (tokens >= 200) break;
        tokens += countMessageTokens(m, TokenCounter()).tokens;
        pinned.push_back(m);
      }
    }
    if (r.cache && r.cache->firstDifference) {
      ASSERT_TRUE(r.cache->firstDifference->message);
      EXPECT_GE(*r.cache->firstDifference->message, pinned.size()) << "turn " << turn;
      EXPECT_GE(r.cache->reusablePrefixTokens, 200);
    }
  }
  const std::vector<Message> view = c.getMessages();
  ASSERT_GT(view.size(), pinned.size());
  EXPECT_EQ(std::vector<Message>(view.begin(), view.begin() + static_cast<long>(pinned.size())),
            pinned);
  EXPECT_LT(c.getMessageCount(), static_cast<size_t>(2 * kTurns));  // it did trim
}

// Explicit breakpoints: nothing up to the last marked message is trimmed.
TEST_F(TrimTrigger, KeepThroughLastBreakpoint) {
  ConversationManager c =
      conversation(TrimOptions{.lowWater = 0.6, .keepThroughLastBreakpoint = true});
  c.run(prompt(1));
  Message marked = Message::user(prompt(2));
  marked.extra["cache_control"] = true;
  c.run(std::vector<Message>{marked});
  for (int turn = 3; turn <= kTurns; ++turn)
    c.run(prompt(turn));
  const std::vector<Message> view = c.getMessages();
  ASSERT_GT(view.size(), 5u);
  EXPECT_EQ(view[3], marked);  // system, u1, a1, the marked prompt
  EXPECT_LT(view.size(), static_cast<size_t>(2 * kTurns));
}

TEST(TrimOptionsCheck, OutOfRangeIsRefused) {
  EXPECT_THROW(trimOldestTurns(TrimOptions{.lowWater = 0}), ValidationError);
  EXPECT_THROW(trimOldestTurns(TrimOptions{.lowWater = 1.5}), ValidationError);
  EXPECT_THROW(trimOldestTurns(TrimOptions{.keepFirstTokens = -1}), ValidationError);
}

}  // namespace
}  // namespace parley
