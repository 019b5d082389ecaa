#include "parley/conversation_manager.hpp"

#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "parley/context_ops.hpp"
#include "parley/detail/persistent_vector.hpp"
#include "parley/errors.hpp"
#include "printers.hpp"

namespace parley {
namespace {

std::vector<std::string> contents(const std::vector<Message>& messages) {
  std::vector<std::string> out;
  for (const Message& m : messages)
    out.push_back(m.content);
  return out;
}

using Strings = std::vector<std::string>;
using Sizes = std::vector<size_t>;

// [system, user1, assistant1, user2, assistant2]
ConversationManager fiveMessages() {
  ConversationManager c;
  c.addMessage(Message::system("system"));
  c.addMessage(Message::user("user1"));
  c.addMessage(Message::assistant("assistant1"));
  c.addMessage(Message::user("user2"));
  c.addMessage(Message::assistant("assistant2"));
  return c;
}

TEST(PersistentVector, CopiesAreIndependentAcrossTrieLevels) {
  detail::PersistentVector<int> a;
  for (int i = 0; i < 5000; ++i)
    a.push_back(i);
  detail::PersistentVector<int> b = a;
  for (int i = 5000; i < 6000; ++i)
    b.push_back(-i);
  a.set(17, 1700);
  b.set(4999, 7);
  ASSERT_EQ(a.size(), 5000u);
  ASSERT_EQ(b.size(), 6000u);
  for (int i = 0; i < 5000; ++i) {
    EXPECT_EQ(a[i], i == 17 ? 1700 : i);
    EXPECT_EQ(b[i], i == 4999 ? 7 : i);
  }
  for (int i = 5000; i < 6000; ++i)
    EXPECT_EQ(b[i], -i);
  std::vector<int> slice;
  b.forEach(30, 70, [&](int v) { slice.push_back(v); });
  ASSERT_EQ(slice.size(), 40u);
  EXPECT_EQ(slice.front(), 30);
  EXPECT_EQ(slice.back(), 69);
}

TEST(PersistentVector, GrowsPastSeveralLevels) {
  detail::PersistentVector<uint32_t> v;
  const uint32_t n = 40000;  // > 32 * 32 * 32: four levels
  for (uint32_t i = 0; i < n; ++i)
    v.push_back(i * 3);
  for (uint32_t i = 0; i < n; i += 7)
    ASSERT_EQ(v[i], i * 3);
  EXPECT_EQ(v.toVector().size(), n);
}

TEST(ConversationManager, AddReturnsCountAndQueriesCopy) {
  ConversationManager c;
  EXPECT_EQ(c.addMessage(Message::user("a")), 1u);
  EXPECT_EQ(c.addMessages({Message::assistant("b"), Message::user("c")}), 3u);
  auto messages = c.getMessages();
  messages[0].content = "changed";
  EXPECT_EQ(contents(c.getMessages()), (Strings{"a", "b", "c"}));
}

TEST(ConversationManager, InvalidMessageAppendsNothing) {
  ConversationManager c = fiveMessages();
  EXPECT_THROW(c.addMessage(Message::user("")), ValidationError);
  try {
    c.addMessages({Message::user("ok"), Message::tool("", "result")});
    FAIL() << "expected ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "messages[1].tool_call_id");
  }
  EXPECT_EQ(c.getMessageCount(), 5u);
  EXPECT_EQ(c.storageSize(), 5u);
}

TEST(ConversationManager, RecentAndRangeQueries) {
  ConversationManager c = fiveMessages();
  EXPECT_EQ(contents(c.getRecentMessages(2)), (Strings{"user2", "assistant2"}));
  EXPECT_EQ(c.getRecentMessages(0).size(), 0u);
  EXPECT_EQ(c.getRecentMessages(99).size(), 5u);
  EXPECT_EQ(contents(c.getMessagesByRange(1, 3)), (Strings{"user1", "assistant1"}));
  EXPECT_EQ(c.getMessagesByRange(3, 99).size(), 2u);
  EXPECT_EQ(c.getMessagesByRange(4, 2).size(), 0u);
  EXPECT_EQ(c.getMessagesByRange(9, 12).size(), 0u);
}

TEST(ConversationManager, RoleQueries) {
  ConversationManager c = fiveMessages();
  EXPECT_EQ(contents(c.getMessagesByRole(Role::User)), (Strings{"user1", "user2"}));
  EXPECT_EQ(contents(c.filterMessagesByRole(Role::User)), (Strings{"user1", "user2"}));
  EXPECT_EQ(contents(c.getRecentMessagesByRole(Role::Assistant, 1)), (Strings{"assistant2"}));
  EXPECT_EQ(c.getRecentMessagesByRole(Role::Assistant, 9).size(), 2u);
  EXPECT_EQ(contents(c.getMessagesByRoleRange(Role::Assistant, 1, 5)), (Strings{"assistant2"}));
  EXPECT_EQ(c.getMessageCountByRole(Role::System), 1u);
  EXPECT_EQ(c.getMessageCountByRole(Role::Tool), 0u);
}

// The type-index queries answer with storage indices of the visible messages of one role, in
// view order, and stay true after a context operation hides part of the history.
TEST(ConversationManager, TypeIndexQueries) {
  ConversationManager c = fiveMessages();          // storage 0..4
  c.addMessage(Message::user("user3"));            // 5
  c.addMessage(Message::assistant("assistant3"));  // 6
  EXPECT_EQ(c.getIndicesByRole(Role::User), (Sizes{1, 3, 5}));
  EXPECT_EQ(c.getRecentIndicesByRole(Role::User, 2), (Sizes{3, 5}));
  EXPECT_EQ(c.getRecentIndicesByRole(Role::User, 9), (Sizes{1, 3, 5}));
  EXPECT_EQ(c.getRecentIndicesByRole(Role::User, 0), Sizes{});
  EXPECT_EQ(c.getIndicesByRoleRange(Role::Assistant, 1, 3), (Sizes{4, 6}));
  EXPECT_EQ(c.getIndicesByRoleRange(Role::Assistant, 2, 1), Sizes{});
  EXPECT_EQ(c.getIndicesByRoleRange(Role::Assistant, 7, 9), Sizes{});
  EXPECT_EQ(c.getIndicesByRole(Role::Tool), Sizes{});
  EXPECT_EQ(contents(c.getRecentMessages(2, Role::User)), (Strings{"user2", "user3"}));
  EXPECT_EQ(contents(c.getRecentMessages(5, Role::System)), (Strings{"system"}));

  // Keep the last three messages in view: storage keeps everything, the indices follow the view.
  TruncateOp keep;
  keep.keepLast = 3;
  applyContextOperation(c, keep);
  EXPECT_EQ(c.getIndicesByRole(Role::User), (Sizes{5}));
  EXPECT_EQ(c.getIndicesByRole(Role::Assistant), (Sizes{4, 6}));
  EXPECT_EQ(c.getRecentIndicesByRole(Role::Assistant, 1), (Sizes{6}));
  EXPECT_EQ(c.getIndicesByRole(Role::System), Sizes{});
  EXPECT_EQ(contents(c.getRecentMessages(3, Role::User)), (Strings{"user3"}));
  for (size_t i : c.getIndicesByRole(Role::Assistant)) {
    EXPECT_FALSE(c.isModified(i));
    EXPECT_EQ(c.getAllMessages()[i].role, Role::Assistant);
  }
  EXPECT_EQ(c.getIndicesByRole(Role::Assistant), c.getMarkMap().indicesFor(Role::Assistant));

  c.rollbackToBatch(0);
  EXPECT_EQ(c.getIndicesByRole(Role::User), (Sizes{1, 3, 5}));
}

TEST(ConversationManager, ReferenceBatchExample) {
  ConversationManager c = fiveMessages();
  c.startNewBatch(2);
  MessageMarkMap map = c.getMarkMap();
  EXPECT_EQ(map.batchBoundaries, (Sizes{0, 2}));
  EXPECT_EQ(map.boundaryToBatch, (Sizes{0, 1}));
  EXPECT_EQ(map.currentBatch, 1u);
  EXPECT_EQ(map.originalIndices, (Sizes{2, 3, 4}));
  EXPECT_EQ(contents(c.getMessages()), (Strings{"assistant1", "user2", "assistant2"}));
  EXPECT_TRUE(c.isModified(0));
  EXPECT_FALSE(c.isModified(3));

  c.rollbackToBatch(0);
  map = c.getMarkMap();
  EXPECT_EQ(map.batchBoundaries, (Sizes{0}));
  EXPECT_EQ(map.boundaryToBatch, (Sizes{0}));
  EXPECT_EQ(map.currentBatch, 0u);
  EXPECT_EQ(c.getMessages().size(), 5u);
  EXPECT_EQ(c.checkConsistency(), "");
}

TEST(ConversationManager, BatchBoundariesAreChecked) {
  ConversationManager c = fiveMessages();
  EXPECT_THROW(c.startNewBatch(6), ValidationError);
  c.startNewBatch(3);
  EXPECT_THROW(c.startNewBatch(2), ValidationError);  // boundaries never decrease
  c.startNewBatch(5);                                 // the end: an empty view
  EXPECT_EQ(c.getMessageCount(), 0u);
  EXPECT_THROW(c.rollbackToBatch(3), ValidationError);
  c.rollbackToBatch(1);
  EXPECT_EQ(contents(c.getMessages()), (Strings{"user2", "assistant2"}));
  EXPECT_THROW(c.isModified(5), ValidationError);
}

TEST(ConversationManager, RollbackRestoresTheExactEarlierView) {
  ConversationManager c = fiveMessages();
  applyContextOperation(c, ReplaceOp{1, Message::user("USER1")});
  const auto edited = c.getMessages();
  applyContextOperation(c, TruncateOp{.keepLast = 2});
  c.addMessage(Message::user("after"));
  c.rollbackToBatch(1);
  EXPECT_EQ(c.getMessages(), edited);
  EXPECT_EQ(contents(c.getMessagesByRole(Role::User)), (Strings{"USER1", "user2"}));
  EXPECT_EQ(c.storageSize(), 7u);  // nothing left storage
  EXPECT_EQ(c.checkConsistency(), "");
}

TEST(ConversationManager, ClearKeepsSystemMessagesByDefault) {
  ConversationManager c = fiveMessages();
  c.clearMessages();
  EXPECT_EQ(contents(c.getMessages()), (Strings{"system"}));
  c.rollbackToBatch(0);
  c.clearMessages(false);
  EXPECT_EQ(c.getMessageCount(), 0u);
  EXPECT_EQ(c.getMessageCountByRole(Role::System), 0u);
}

TEST(ConversationManager, CloneSharesPrefixAndEvolvesAlone) {
  ConversationManager a = fiveMessages();
  ConversationManager b = a.clone();
  a.addMessage(Message::user("only a"));
  b.addMessage(Message::user("only b"));
  applyContextOperation(b, TruncateOp{.keepLast = 1});
  EXPECT_EQ(contents(a.getRecentMessages(1)), (Strings{"only a"}));
  EXPECT_EQ(contents(b.getMessages()), (Strings{"only b"}));
  EXPECT_EQ(a.getMessageCount(), 6u);
  EXPECT_EQ(a.checkConsistency(), "");
  EXPECT_EQ(b.checkConsistency(), "");
}

TEST(ConversationManager, SnapshotRoundTripsTheWholeState) {
  ConversationManager a = fiveMessages();
  a.addMessage(Message::assistant("", {{"c1", "get_time", ""}}));
  a.addMessage(Message::tool("c1", "12:00"));
  applyContextOperation(a, TruncateOp{.removeFirst = 1});
  applyContextOperation(a, InsertOp{0, {Message::system("summary")}});
  json snapshot = a.createSnapshot();
  EXPECT_EQ(snapshot["format"], "parley.snapshot/1");

  ConversationManager b;
  b.restoreFromSnapshot(snapshot);
  EXPECT_EQ(b.getMessages(), a.getMessages());
  EXPECT_EQ(b.getAllMessages(), a.getAllMessages());
  EXPECT_EQ(b.getMarkMap(), a.getMarkMap());
  EXPECT_EQ(b.createSnapshot(), snapshot);
  b.rollbackToBatch(0);  // the saved views came along
  EXPECT_EQ(b.getMessageCount(), 7u);
}

TEST(ConversationManager, StateSnapshotStaysSmallForAContiguousView) {
  ConversationManager c;
  for (int i = 0; i < 1000; ++i)
    c.addMessage(Message::user("m" + std::to_string(i)));
  json state = c.createStateSnapshot();
  EXPECT_FALSE(state.contains("messages"));
  EXPECT_EQ(state["storageSize"], 1000);
  EXPECT_EQ(state["markMap"]["view"], json::parse("[[0, 1000]]"));
}

TEST(ConversationManager, SnapshotOfOtherFormatOrInconsistentIsRefused) {
  ConversationManager c = fiveMessages();
  const json good = c.createSnapshot();
  auto refusedField = [&](json doc) {
    ConversationManager target = fiveMessages();
    target.addMessage(Message::user("keep me"));
    try {
      target.restoreFromSnapshot(doc);
    } catch (const ValidationError& e) {
      EXPECT_EQ(target.getMessageCount(), 6u) << "state changed by a refused snapshot";
      return e.field();
    }
    return std::string("<accepted>");
  };
  json doc = good;
  doc["format"] = "parley.snapshot/2";
  EXPECT_EQ(refusedField(doc), "snapshot.format");
  doc = good;
  doc.erase("format");
  EXPECT_EQ(refusedField(doc), "snapshot.format");
  doc = good;
  doc["messages"][1]["role"] = "robot";
  EXPECT_EQ(refusedField(doc), "snapshot.messages[1].role");
  doc = good;
  doc["storageSize"] = 9;
  EXPECT_EQ(refusedField(doc), "snapshot.storageSize");
  doc = good;
  doc["markMap"]["view"] = json::parse("[[3, 5]]");
  EXPECT_EQ(refusedField(doc), "snapshot.markMap.view[0]");
  doc = good;
  doc["markMap"]["batchBoundaries"] = json::parse("[0, 2]");
  EXPECT_EQ(refusedField(doc), "snapshot.markMap.currentBatch");
  doc = good;
  doc["markMap"]["view"] = json::parse("[[0, 2], [1, 1]]");
  EXPECT_EQ(refusedField(doc), "snapshot.markMap.view");
  EXPECT_EQ(refusedField(json::array()), "snapshot");
}

TEST(ConversationManager, ReadersRunBesideOneWriter) {
  ConversationManager c;
  c.addMessage(Message::system("s"));
  constexpr int kReaders = 3;
  std::atomic<bool> done{false};
  std::latch started(kReaders);  // the writer starts once every reader has read once
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      bool first = true;
      while (first || !done.load()) {
        auto users = c.getRecentMessagesByRole(Role::User, 3);
        auto all = c.getMessages();
        EXPECT_LE(users.size(), 3u);
        EXPECT_GE(all.size(), 1u);
        if (first) started.count_down();
        first = false;
      }
    });
  }
  started.wait();
  for (int i = 0; i < 2000; ++i)
    c.addMessage(Message::user("u" + std::to_string(i)));
  done = true;
  for (auto& t : readers)
    t.join();
  EXPECT_EQ(c.getMessageCount(), 2001u);
  EXPECT_EQ(c.checkConsistency(), "");
}

TEST(ConversationManager, TokenAccountingWorksWithoutOptions) {
  ConversationManager c = fiveMessages();
  TokenCheck check = c.estimateContextTokens();
  EXPECT_GT(check.contextTokens, 5);
  EXPECT_TRUE(check.estimated);
  EXPECT_FALSE(check.overLimit);
  EXPECT_EQ(c.getTokenUsage().requests, 0);
}

TEST(ConversationManager, MovedManagerKeepsItsHistory) {
  ConversationManager a = fiveMessages();
  ConversationManager b = std::move(a);
  EXPECT_EQ(b.getMessageCount(), 5u);
}

}  // namespace
}  // namespace parley
