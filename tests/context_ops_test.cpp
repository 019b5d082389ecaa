#include "parley/context_ops.hpp"

#include <gtest/gtest.h>

#include <random>

#include "parley/errors.hpp"
#include "printers.hpp"

namespace parley {
namespace {

using Strings = std::vector<std::string>;

Strings contents(const std::vector<Message>& messages) {
  Strings out;
  for (const Message& m : messages)
    out.push_back(m.content.empty() ? "<calls>" : m.content);
  return out;
}

ConversationManager fiveMessages() {
  ConversationManager c;
  c.addMessages({Message::system("system"), Message::user("user1"),
                 Message::assistant("assistant1"), Message::user("user2"),
                 Message::assistant("assistant2")});
  return c;
}

// [system, user, assistant(calls a, b), tool a, tool b, assistant]
ConversationManager withToolGroup() {
  ConversationManager c;
  c.addMessages({Message::system("system"), Message::user("weather?"),
                 Message::assistant("", {{"a", "get_weather", "{}"}, {"b", "get_time", "{}"}}),
                 Message::tool("a", "sunny"), Message::tool("b", "noon"),
                 Message::assistant("sunny at noon")});
  return c;
}

std::string errorField(ConversationManager& c, const ContextOperation& op) {
  const auto before = c.getMessages();
  const auto map = c.getMarkMap();
  try {
    applyContextOperation(c, op);
  } catch (const ValidationError& e) {
    EXPECT_EQ(c.getMessages(), before) << "a failed operation changed the view";
    EXPECT_EQ(c.getMarkMap(), map) << "a failed operation changed the mark map";
    return e.field();
  }
  return "<no error>";
}

std::string parseErrorField(const char* text) {
  try {
    parseContextOperation(json::parse(text));
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "<no error>";
}

TEST(Truncate, ReferenceRoleKeepLast) {
  ConversationManager c = fiveMessages();
  auto result = applyContextOperation(
      c, parseContextOperation(
             json::parse(R"({"operation":"truncate","truncate":{"role":"user","keepLast":1}})")));
  EXPECT_EQ(contents(c.getMessages()), (Strings{"user2"}));
  EXPECT_EQ(result.operation, "truncate");
  EXPECT_EQ(result.messageCount, 1u);
  EXPECT_EQ(c.getMessageCountByRole(Role::Assistant), 0u);
  EXPECT_EQ(c.checkConsistency(), "");
}

TEST(Truncate, KeepOtherRolesTruncatesWithinTheRole) {
  ConversationManager c = fiveMessages();
  applyContextOperation(c, TruncateOp{.keepLast = 1, .role = Role::User, .keepOtherRoles = true});
  EXPECT_EQ(contents(c.getMessages()), (Strings{"system", "assistant1", "user2", "assistant2"}));
}

TEST(Truncate, StepsApplyInOrder) {
  ConversationManager c = fiveMessages();
  // keepFirst 4 -> [s,u1,a1,u2]; keepLast 3 -> [u1,a1,u2]; removeFirst 1 -> [a1,u2];
  // removeLast 0 -> unchanged; range [1,2) -> [u2]
  applyContextOperation(c, TruncateOp{.keepFirst = 4,
                                      .keepLast = 3,
                                      .removeFirst = 1,
                                      .removeLast = 0,
                                      .range = TruncateOp::Range{1, 2}});
  EXPECT_EQ(contents(c.getMessages()), (Strings{"user2"}));
}

TEST(Truncate, ZeroAndLargeCounts) {
  ConversationManager c = fiveMessages();
  applyContextOperation(c, TruncateOp{.removeFirst = 0, .removeLast = 0});
  EXPECT_EQ(c.getMessageCount(), 5u);
  applyContextOperation(c, TruncateOp{.keepFirst = 99});
  EXPECT_EQ(c.getMessageCount(), 5u);
  applyContextOperation(c, TruncateOp{.removeLast = 99});
  EXPECT_EQ(c.getMessageCount(), 0u);
  c.rollbackToBatch(0);
  applyContextOperation(c, TruncateOp{.keepLast = 0});
  EXPECT_EQ(c.getMessageCount(), 0u);
}

TEST(Truncate, NegativeAndOutOfRangeValuesAreErrors) {
  ConversationManager c = fiveMessages();
  EXPECT_EQ(errorField(c, TruncateOp{.keepFirst = -1}), "truncate.keepFirst");
  EXPECT_EQ(errorField(c, TruncateOp{.keepLast = -2}), "truncate.keepLast");
  EXPECT_EQ(errorField(c, TruncateOp{.removeFirst = -1}), "truncate.removeFirst");
  EXPECT_EQ(errorField(c, TruncateOp{.removeLast = -1}), "truncate.removeLast");
  EXPECT_EQ(errorField(c, TruncateOp{.range = TruncateOp::Range{-1, 2}}), "truncate.range");
  EXPECT_EQ(errorField(c, TruncateOp{.range = TruncateOp::Range{3, 2}}), "truncate.range");
  EXPECT_EQ(errorField(c, TruncateOp{.range = TruncateOp::Range{0, 6}}), "truncate.range");
  EXPECT_EQ(errorField(c, TruncateOp{.keepFirst = 2, .range = TruncateOp::Range{0, 3}}),
            "truncate.range");  // only two messages are left at that step
  EXPECT_EQ(errorField(c, TruncateOp{.keepLast = 1, .keepOtherRoles = true}),
            "truncate.keepOtherRoles");
}

TEST(Insert, ReferencePositionOne) {
  ConversationManager c = fiveMessages();
  const auto old = c.getMessages();
  applyContextOperation(c, InsertOp{1, {Message::user("inserted")}});
  auto view = c.getMessages();
  ASSERT_EQ(view.size(), 6u);
  EXPECT_EQ(view[1].content, "inserted");
  EXPECT_EQ(view[2], old[1]);
  EXPECT_EQ(contents(c.getMessagesByRole(Role::User)), (Strings{"inserted", "user1", "user2"}));
  EXPECT_EQ(c.storageSize(), 6u);
}

TEST(Insert, MinusOneAppendsAndBadPositionsFail) {
  ConversationManager c = fiveMessages();
  applyContextOperation(c, InsertOp{-1, {Message::user("x"), Message::assistant("y")}});
  EXPECT_EQ(contents(c.getRecentMessages(2)), (Strings{"x", "y"}));
  EXPECT_EQ(errorField(c, InsertOp{8, {Message::user("z")}}), "insert.position");
  EXPECT_EQ(errorField(c, InsertOp{-2, {Message::user("z")}}), "insert.position");
  EXPECT_EQ(errorField(c, InsertOp{0, {}}), "insert.messages");
  EXPECT_EQ(errorField(c, InsertOp{0, {Message::user("ok"), Message::user("")}}),
            "insert.messages[1].content");
  EXPECT_EQ(c.storageSize(), 7u);  // the failed inserts stored nothing
}

TEST(Replace, ChangesEveryQueryIncludingRoleIndexes) {
  ConversationManager c = fiveMessages();
  applyContextOperation(c, ReplaceOp{3, Message::assistant("was user2")});
  EXPECT_EQ(c.getMessages()[3].content, "was user2");
  EXPECT_EQ(contents(c.getMessagesByRole(Role::User)), (Strings{"user1"}));
  EXPECT_EQ(contents(c.getMessagesByRole(Role::Assistant)),
            (Strings{"assistant1", "was user2", "assistant2"}));
  EXPECT_EQ(c.getMessageCountByRole(Role::Assistant), 3u);
  EXPECT_EQ(contents(c.getRecentMessagesByRole(Role::User, 1)), (Strings{"user1"}));
  EXPECT_EQ(c.getAllMessages()[3].content, "user2");  // storage keeps the original
  EXPECT_TRUE(c.isModified(3));
}

TEST(Replace, OutOfRangeIsAnError) {
  ConversationManager c = fiveMessages();
  EXPECT_EQ(errorField(c, ReplaceOp{5, Message::user("x")}), "replace.index");
  EXPECT_EQ(errorField(c, ReplaceOp{-1, Message::user("x")}), "replace.index");
  EXPECT_EQ(errorField(c, ReplaceOp{0, Message::tool("", "x")}), "replace.message.tool_call_id");
}

TEST(Filter, CriteriaCombine) {
  ConversationManager c = fiveMessages();
  applyContextOperation(c, FilterOp{{Role::User, Role::Assistant}, {"1", "2"}, {"assistant2"}});
  EXPECT_EQ(contents(c.getMessages()), (Strings{"user1", "assistant1", "user2"}));
  c.rollbackToBatch(0);
  applyContextOperation(c, FilterOp{{}, {}, {"user"}});
  EXPECT_EQ(contents(c.getMessages()), (Strings{"system", "assistant1", "assistant2"}));
}

TEST(Pairing, TruncateDropsACutToolGroupWhole) {
  ConversationManager c = withToolGroup();
  auto result = applyContextOperation(c, TruncateOp{.keepLast = 3});  // [tool a, tool b, final]
  EXPECT_EQ(contents(c.getMessages()), (Strings{"sunny at noon"}));
  EXPECT_EQ(result.removedForPairing, 2u);
  c.rollbackToBatch(0);
  applyContextOperation(c, TruncateOp{.keepFirst = 4});  // [s, u, calls, tool a]: b missing
  EXPECT_EQ(contents(c.getMessages()), (Strings{"system", "weather?"}));
}

TEST(Pairing, FilterAndClearRepair) {
  ConversationManager c = withToolGroup();
  applyContextOperation(c, FilterOp{{Role::Tool, Role::User}, {}, {}});
  EXPECT_EQ(contents(c.getMessages()), (Strings{"weather?"}));
  c.rollbackToBatch(0);
  applyContextOperation(c, FilterOp{{}, {}, {"noon"}});  // drops tool b and the final answer
  EXPECT_EQ(contents(c.getMessages()), (Strings{"system", "weather?"}));
}

TEST(Pairing, WholeGroupsSurvive) {
  ConversationManager c = withToolGroup();
  auto result = applyContextOperation(c, TruncateOp{.removeFirst = 1});
  EXPECT_EQ(result.removedForPairing, 0u);
  EXPECT_EQ(c.getMessageCount(), 5u);
  EXPECT_EQ(c.getMessageCountByRole(Role::Tool), 2u);
}

TEST(Pairing, InsertAndReplaceRefuseToBreakAGroup) {
  ConversationManager c = withToolGroup();
  EXPECT_EQ(errorField(c, InsertOp{3, {Message::user("between")}}), "insert.position");
  EXPECT_EQ(errorField(c, ReplaceOp{3, Message::user("no longer a result")}), "replace.message");
  EXPECT_EQ(errorField(c, ReplaceOp{2, Message::assistant("no calls")}), "replace.message");
  // A tool result for another call is refused too.
  EXPECT_EQ(errorField(c, ReplaceOp{4, Message::tool("zzz", "noon")}), "replace.message");
  // Edits that keep the group whole are fine.
  applyContextOperation(c, ReplaceOp{4, Message::tool("b", "1 pm")});
  applyContextOperation(c, InsertOp{5, {Message::user("thanks")}});
  EXPECT_EQ(contents(c.getRecentMessages(3)), (Strings{"1 pm", "thanks", "sunny at noon"}));
}

TEST(ParseContextOperation, ReadsTheSeedConfigs) {
  auto op = parseContextOperation(json::parse(
      R"({"operation":"truncate","truncate":{"keepFirst":1,"range":{"start":0,"end":1},"role":"assistant","keepOtherRoles":true}})"));
  const auto& t = std::get<TruncateOp>(op);
  EXPECT_EQ(t.keepFirst, 1);
  EXPECT_EQ(t.range->end, 1);
  EXPECT_EQ(t.role, Role::Assistant);
  EXPECT_TRUE(t.keepOtherRoles);
  op = parseContextOperation(json::parse(
      R"({"operation":"insert","insert":{"position":-1,"messages":[{"role":"user","content":"hi"}]}})"));
  EXPECT_EQ(std::get<InsertOp>(op).messages.at(0).content, "hi");
  op = parseContextOperation(json::parse(R"({"operation":"clear"})"));
  EXPECT_TRUE(std::get<ClearOp>(op).keepSystemMessage);
  op = parseContextOperation(json::parse(
      R"({"operation":"filter","filter":{"roles":["user","tool"],"contentExcludes":["x"]}})"));
  EXPECT_EQ(std::get<FilterOp>(op).roles, (std::vector<Role>{Role::User, Role::Tool}));
  // Round trip through toJson.
  EXPECT_EQ(toJson(parseContextOperation(toJson(op))), toJson(op));
}

TEST(ParseContextOperation, ErrorsNameTheField) {
  EXPECT_EQ(parseErrorField(R"([])"), "config");
  EXPECT_EQ(parseErrorField(R"({})"), "operation");
  EXPECT_EQ(parseErrorField(R"({"operation":"compress"})"), "operation");
  EXPECT_EQ(parseErrorField(R"({"operation":"truncate"})"), "truncate");
  EXPECT_EQ(parseErrorField(R"({"operation":"truncate","truncate":{"keeplast":5}})"),
            "truncate.keeplast");
  EXPECT_EQ(parseErrorField(R"({"operation":"truncate","truncate":{"keepLast":"5"}})"),
            "truncate.keepLast");
  EXPECT_EQ(parseErrorField(R"({"operation":"truncate","truncate":{"role":"robot"}})"),
            "truncate.role");
  EXPECT_EQ(parseErrorField(R"({"operation":"truncate","truncate":{"range":{"start":1}}})"),
            "truncate.range");
  EXPECT_EQ(parseErrorField(R"({"operation":"truncate","truncate":{},"filter":{}})"), "filter");
  EXPECT_EQ(parseErrorField(R"({"operation":"insert","insert":{"messages":[]}})"),
            "insert.position");
  EXPECT_EQ(parseErrorField(
                R"({"operation":"insert","insert":{"position":0,"messages":[{"role":"user"}]}})"),
            "insert.messages[0].content");
  EXPECT_EQ(parseErrorField(R"({"operation":"replace","replace":{"index":0}})"), "replace.message");
  EXPECT_EQ(parseErrorField(R"({"operation":"clear","clear":{"keepSystemMessage":1}})"),
            "clear.keepSystemMessage");
  EXPECT_EQ(parseErrorField(R"({"operation":"filter","filter":{"roles":"user"}})"), "filter.roles");
}

// Thousands of random sequences of appends and operations; after each step the store is
// consistent and every role query equals a naive filter of getMessages().
TEST(ContextOperations, RandomizedSequencesKeepEveryInvariant) {
  std::mt19937 rng(20261121);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  int toolCounter = 0;
  for (int sequence = 0; sequence < 300; ++sequence) {
    ConversationManager c;
    std::vector<ConversationManager> clones;
    for (int step = 0; step < 30; ++step) {
      const int size = static_cast<int>(c.getMessageCount());
      try {
        switch (pick(10)) {
          case 0:
          case 1:
          case 2:
            c.addMessage(Message::user("u" + std::to_string(step)));
            break;
          case 3: {
            std::string id = "t" + std::to_string(toolCounter++);
            c.addMessage(Message::assistant("", {{id, "f", "{}"}}));
            c.addMessage(Message::tool(id, "r" + std::to_string(step)));
            break;
          }
          case 4:
            c.addMessage(pick(2) ? Message::assistant("a" + std::to_string(step))
                                 : Message::system("s" + std::to_string(step)));
            break;
          case 5: {
            TruncateOp op;
            if (pick(2)) op.keepLast = pick(size + 2);
            if (pick(2)) op.removeFirst = pick(3);
            if (pick(3) == 0) op.role = kAllRoles[static_cast<size_t>(pick(4))];
            op.keepOtherRoles = op.role && pick(2);
            applyContextOperation(c, op);
            break;
          }
          case 6:
            applyContextOperation(c, InsertOp{pick(size + 2) - 1, {Message::user("ins")}});
            break;
          case 7:
            if (size > 0) applyContextOperation(c, ReplaceOp{pick(size), Message::user("rep")});
            break;
          case 8:
            applyContextOperation(c, FilterOp{{}, {}, {std::to_string(pick(10))}});
            break;
          case 9: {
            const auto batch = c.getMarkMap().currentBatch;
            if (pick(3) == 0) {
              clones.push_back(c.clone());
            } else {
              c.rollbackToBatch(static_cast<size_t>(pick(static_cast<int>(batch) + 1)));
            }
            break;
          }
        }
      } catch (const ValidationError&) {
        // A refused insert/replace (pairing) is fine; the invariants below must still hold.
      }
      ASSERT_EQ(c.checkConsistency(), "") << "sequence " << sequence << " step " << step;
      const MessageStore store = c.store();
      ASSERT_TRUE(pairingViolations(store, store.view().toVector()).empty())
          << "sequence " << sequence << " step " << step;
      const auto view = c.getMessages();
      for (Role role : kAllRoles) {
        std::vector<Message> naive;
        for (const Message& m : view) {
          if (m.role == role) naive.push_back(m);
        }
        ASSERT_EQ(c.getMessagesByRole(role), naive);
        ASSERT_EQ(c.filterMessagesByRole(role), naive);
        ASSERT_EQ(c.getMessageCountByRole(role), naive.size());
        const size_t k = static_cast<size_t>(pick(4));
        std::vector<Message> lastK(
            naive.end() - static_cast<std::ptrdiff_t>(std::min(k, naive.size())), naive.end());
        ASSERT_EQ(c.getRecentMessagesByRole(role, k), lastK);
      }
    }
    ConversationManager restored;
    restored.restoreFromSnapshot(c.createSnapshot());
    ASSERT_EQ(restored.getMessages(), c.getMessages());
    ASSERT_EQ(restored.getMarkMap(), c.getMarkMap());
    for (const auto& clone : clones)
      ASSERT_EQ(clone.checkConsistency(), "");
  }
}

}  // namespace
}  // namespace parley
