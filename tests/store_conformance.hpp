// The ConversationStore conformance suite: every store passes the same tests. A store's test
// program defines a Backend (how to open a fresh, empty store; raw SQL access to check what is
// stored; the arguments of the writer process) and instantiates the suite with it:
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, StoreConformance, ::testing::Types<SqliteBackend>);
//
// Backend requirements:
//   Backend();                                 a fresh, empty database
//   std::unique_ptr<ConversationStore> open(); a new store object on that database
//   int64_t count(const std::string& sql);     runs "SELECT COUNT(*) ..." directly
//   void exec(const std::string& sql);         runs SQL directly (to damage the database)
//   std::vector<std::string> writerArgs();     "sqlite PATH" or "postgres CONNINFO"
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "child_process.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "store/thread_search.hpp"

namespace parley::testing {

// The message of the StoreError `fn` throws, or "<no StoreError>".
inline std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "<no StoreError>";
}

using nlohmann::json;

template <class Backend>
class StoreConformance : public ::testing::Test {
 protected:
  Backend backend;
  std::unique_ptr<ConversationStore> store = backend.open();

  static std::vector<Message> turn(const std::string& tag, int n) {
    std::vector<Message> messages;
    for (int i = 0; i < n; ++i) {
      messages.push_back(i % 2 ? Message::assistant(tag + std::to_string(i))
                               : Message::user(tag + std::to_string(i)));
    }
    return messages;
  }
  static std::vector<std::string> contents(const std::vector<Message>& messages) {
    std::vector<std::string> out;
    for (const auto& m : messages)
      out.push_back(m.content);
    return out;
  }
  int64_t messageRows() { return backend.count("SELECT COUNT(*) FROM parley_messages"); }

  std::unique_ptr<ChildProcess> writer(const std::string& thread, long turns,
                                       const std::string& tag, bool waitGo = false) {
    std::vector<std::string> argv = {PARLEY_STORE_WRITER};
    for (auto& a : backend.writerArgs())
      argv.push_back(a);
    argv.insert(argv.end(), {thread, std::to_string(turns), tag});
    if (waitGo) argv.push_back("--wait-go");
    return std::make_unique<ChildProcess>(argv);
  }

  // Checks that `messages` are whole turns of the writers' protocol (store_test_writer.cpp),
  // each writer's turns numbered 1, 2, ... in order; returns the last turn of each tag.
  static std::map<std::string, long> checkWholeTurns(const std::vector<Message>& messages) {
    std::map<std::string, long> last;
    size_t i = 0;
    while (i < messages.size()) {
      const std::string& first = messages[i].content;
      auto colon = first.find(':');
      EXPECT_NE(colon, std::string::npos) << first;
      if (colon == std::string::npos) return last;
      const std::string tag = first.substr(0, colon);
      const long k = last[tag] + 1;
      const long n = k % 3 + 1;
      for (long j = 0; j < n; ++j, ++i) {
        const std::string want = tag + ":" + std::to_string(k) + ":" + std::to_string(j);
        if (i >= messages.size() || messages[i].content != want) {
          ADD_FAILURE() << "message " << i << ": expected " << want << ", got "
                        << (i < messages.size() ? messages[i].content : "<end>");
          return last;
        }
      }
      last[tag] = k;
    }
    return last;
  }
};

TYPED_TEST_SUITE_P(StoreConformance);

TYPED_TEST_P(StoreConformance, CreatesAnEmptyThread) {
  json metadata = {{"owner", "ann"}};
  ThreadInfo info = this->store->createThread({.id = "a", .title = "first", .metadata = metadata});
  EXPECT_EQ(info.id, "a");
  EXPECT_EQ(info.version, 1);
  EXPECT_EQ(info.messageCount, 0);
  auto stored = this->store->threadInfo("a");
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->title, "first");
  EXPECT_EQ(stored->metadata, metadata);
  EXPECT_EQ(stored->parentId, "");
  EXPECT_EQ(stored->createdAt, info.createdAt);
  ThreadData data = this->store->loadThread("a");
  EXPECT_TRUE(data.messages.empty());
  EXPECT_TRUE(data.state.is_null());
}

TYPED_TEST_P(StoreConformance, GeneratesDistinctIds) {
  std::set<std::string> ids;
  for (int i = 0; i < 20; ++i)
    ids.insert(this->store->createThread().id);
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_EQ(this->store->listThreads().size(), 20u);
}

TYPED_TEST_P(StoreConformance, RefusesATakenIdAndBadOptions) {
  this->store->createThread({.id = "a"});
  EXPECT_THROW(this->store->createThread({.id = "a"}), StoreError);
  EXPECT_THROW(this->store->createThread({.id = std::string(300, 'x')}), ValidationError);
  EXPECT_THROW(this->store->createThread({.id = "bad\nid"}), ValidationError);
  EXPECT_THROW(this->store->createThread({.id = "b", .metadata = json::array({1})}),
               ValidationError);
  EXPECT_FALSE(this->store->threadInfo("b"));
}

TYPED_TEST_P(StoreConformance, AppendsTurnsAndLoadsThemInOrder) {
  this->store->createThread({.id = "a"});
  ConversationStore::Version v = 1;
  std::vector<std::string> expected;
  for (int t = 0; t < 5; ++t) {
    auto messages = this->turn("t" + std::to_string(t) + "-", t + 1);
    for (auto& m : messages)
      expected.push_back(m.content);
    v = this->store->appendTurn("a", messages, {{"turn", t}}, v);
    EXPECT_EQ(v, t + 2);
  }
  ThreadData data = this->store->loadThread("a");
  EXPECT_EQ(this->contents(data.messages), expected);
  EXPECT_EQ(data.state, json({{"turn", 4}}));
  EXPECT_EQ(data.info.version, 6);
  EXPECT_EQ(data.info.messageCount, static_cast<int64_t>(expected.size()));
  EXPECT_GE(data.info.updatedAt, data.info.createdAt);
}

TYPED_TEST_P(StoreConformance, KeepsEveryMessageFieldExactly) {
  Message assistant = Message::assistant(
      "", {{"call_1", "lookup", R"({"q": "a\"b\\c"})"}, {"call_2", "other", "{}"}});
  assistant.extra = {{"reasoning_content", "hmm, {\"x\": [1, 2]}"}};
  // A reply's metadata: who answered and when (to the millisecond, as stored).
  assistant.model = "gpt-4o-mini-2024-07-18";
  assistant.receivedAt =
      std::chrono::system_clock::time_point(std::chrono::milliseconds(1764000000123));
  Message user = Message::user(
      "quotes \" backslash \\ braces {} commas , newline\n tab\t "
      "unicode é 漢字 😀 nul " +
      std::string(1, '\0') + " end");
  user.name = "ann";
  std::vector<Message> messages = {Message::system("be brief"), user, assistant,
                                   Message::tool("call_1", "{\"ok\":true}"),
                                   Message::tool("call_2", "")};
  messages.back().content = "null";
  this->store->createThread({.id = "a"}, messages);
  EXPECT_EQ(this->store->loadThread("a").messages, messages);
}

TYPED_TEST_P(StoreConformance, RenamesAThreadWithoutATurn) {
  const std::vector<Message> messages = {Message::user("hi")};
  this->store->createThread({.id = "a", .title = "hi"}, messages);
  const ThreadInfo before = *this->store->threadInfo("a");
  EXPECT_TRUE(this->store->setThreadTitle("a", "Greetings, \u00e9t\u00e9 \"quoted\""));
  const ThreadInfo after = *this->store->threadInfo("a");
  EXPECT_EQ(after.title, "Greetings, \u00e9t\u00e9 \"quoted\"");
  EXPECT_EQ(after.version, before.version);
  EXPECT_EQ(after.updatedAt, before.updatedAt);
  EXPECT_EQ(this->store->loadThread("a").messages, messages);
  EXPECT_FALSE(this->store->setThreadTitle("nope", "x"));
  EXPECT_THROW(this->store->setThreadTitle("a", "two\nlines"), ValidationError);
  EXPECT_THROW(this->store->setThreadTitle("a", std::string(kMaxThreadTitleBytes + 1, 'x')),
               ValidationError);
  EXPECT_EQ(this->store->threadInfo("a")->title, "Greetings, \u00e9t\u00e9 \"quoted\"");
}

TYPED_TEST_P(StoreConformance, ListsNewestFirstAndFindsByTitleOrId) {
  using detail::searchThreadList;
  this->store->createThread({.id = "a", .title = "Weather in Oslo"});
  this->store->createThread({.id = "b", .title = "Cooking"});
  this->store->createThread({.id = "c", .title = "100%_done"});
  this->store->appendTurn("a", this->turn("x", 1), nullptr, 1);
  auto ids = [](const std::vector<ThreadInfo>& threads) {
    std::vector<std::string> out;
    for (const auto& t : threads)
      out.push_back(t.id);
    return out;
  };
  const auto newest = searchThreadList(*this->store, {.limit = 10});
  ASSERT_EQ(newest.size(), 3u);
  for (size_t i = 1; i < newest.size(); ++i) {
    EXPECT_TRUE(std::tie(newest[i - 1].updatedAt, newest[i - 1].id) >
                std::tie(newest[i].updatedAt, newest[i].id));
  }
  EXPECT_EQ(ids(searchThreadList(*this->store, {.limit = 1, .offset = 1})),
            std::vector<std::string>{newest[1].id});
  EXPECT_EQ(ids(searchThreadList(*this->store, {.limit = 10, .newestFirst = false})),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ids(searchThreadList(*this->store, {.limit = 10, .contains = "OSLO"})),
            std::vector<std::string>{"a"});
  // LIKE's wildcards are text here.
  EXPECT_EQ(ids(searchThreadList(*this->store, {.limit = 10, .contains = "%"})),
            std::vector<std::string>{"c"});
  EXPECT_EQ(ids(searchThreadList(*this->store, {.limit = 10, .contains = "_d"})),
            std::vector<std::string>{"c"});
  EXPECT_EQ(ids(searchThreadList(*this->store, {.limit = 10, .contains = "b"})),
            std::vector<std::string>{"b"});
  EXPECT_TRUE(searchThreadList(*this->store, {.limit = 10, .contains = "nowhere"}).empty());
  this->store->deleteThread("c");
  EXPECT_TRUE(searchThreadList(*this->store, {.limit = 10, .contains = "%"}).empty());
  EXPECT_THROW(searchThreadList(
                   *this->store,
                   {.limit = 10, .contains = std::string(detail::kMaxThreadSearchBytes + 1, 'x')}),
               ValidationError);
}

TYPED_TEST_P(StoreConformance, WritesOnlyTheNewRowsOfATurn) {
  this->store->createThread({.id = "a"}, this->turn("x", 50));
  EXPECT_EQ(this->messageRows(), 50);
  this->store->appendTurn("a", this->turn("y", 2), {{"s", 1}}, 1);
  EXPECT_EQ(this->messageRows(), 52);
  this->store->appendTurn("a", {}, {{"s", 2}}, 2);  // a state-only turn (a context edit)
  EXPECT_EQ(this->messageRows(), 52);
  EXPECT_EQ(this->store->loadThread("a").state, json({{"s", 2}}));
}

TYPED_TEST_P(StoreConformance, StaleVersionIsAConflictAndWritesNothing) {
  this->store->createThread({.id = "a"});
  auto other = this->backend.open();
  EXPECT_EQ(other->appendTurn("a", this->turn("w", 1), {{"by", "other"}}, 1), 2);
  EXPECT_THROW(this->store->appendTurn("a", this->turn("l", 2), {{"by", "me"}}, 1), StoreConflict);
  ThreadData data = this->store->loadThread("a");
  EXPECT_EQ(this->contents(data.messages), std::vector<std::string>{"w0"});
  EXPECT_EQ(data.state, json({{"by", "other"}}));
  EXPECT_EQ(data.info.version, 2);
  EXPECT_EQ(this->store->appendTurn("a", this->turn("l", 2), {{"by", "me"}}, 2), 3);
}

TYPED_TEST_P(StoreConformance, NullStateKeepsTheLastOne) {
  this->store->createThread({.id = "a"}, {}, json{{"k", 1}});
  this->store->appendTurn("a", this->turn("m", 1), nullptr, 1);
  EXPECT_EQ(this->store->loadThread("a").state, json({{"k", 1}}));
}

TYPED_TEST_P(StoreConformance, RefusesBadTurnsAndChangesNothing) {
  this->store->createThread({.id = "a"}, this->turn("m", 2));
  Message orphan;
  orphan.role = Role::Tool;
  orphan.content = "result";
  std::vector<Message> bad = {Message::user("fine"), orphan};
  try {
    this->store->appendTurn("a", bad, nullptr, 1);
    ADD_FAILURE() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "messages[1].tool_call_id");
  }
  Message invalidUtf8 = Message::user(std::string("bad \xff\xfe bytes"));
  EXPECT_THROW(this->store->appendTurn("a", {&invalidUtf8, 1}, nullptr, 1), ValidationError);
  EXPECT_THROW(this->store->appendTurn("a", this->turn("n", 1), {{"storageSize", 5}}, 1),
               ValidationError);
  EXPECT_THROW(this->store->appendTurn("a", this->turn("n", 1), json::array(), 1), ValidationError);
  ThreadData data = this->store->loadThread("a");
  EXPECT_EQ(data.info.version, 1);
  EXPECT_EQ(data.messages.size(), 2u);
  EXPECT_EQ(this->messageRows(), 2);
  EXPECT_EQ(this->store->appendTurn("a", this->turn("n", 1), {{"storageSize", 3}}, 1), 2);
}

TYPED_TEST_P(StoreConformance, UnknownThreadsAreErrors) {
  EXPECT_THROW(this->store->loadThread("nope"), StoreError);
  EXPECT_THROW(this->store->appendTurn("nope", this->turn("m", 1), nullptr, 1), StoreError);
  EXPECT_THROW(this->store->forkThread("nope", 0), StoreError);
  EXPECT_FALSE(this->store->threadInfo("nope"));
  EXPECT_FALSE(this->store->deleteThread("nope"));
  try {
    this->store->loadThread("nope");
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
}

TYPED_TEST_P(StoreConformance, ListsThreadsOldestFirstWithPagesAndForks) {
  for (const char* id : {"a", "b", "c", "d"})
    this->store->createThread({.id = id});
  this->store->appendTurn("b", this->turn("m", 3), nullptr, 1);
  this->store->forkThread("b", 2, {.id = "e", .title = "fork"});
  auto all = this->store->listThreads();
  std::vector<std::string> ids;
  for (auto& info : all)
    ids.push_back(info.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(all[1].messageCount, 3);
  EXPECT_EQ(all[1].version, 2);
  EXPECT_EQ(all[4].parentId, "b");
  EXPECT_EQ(all[4].forkPosition, 2);
  EXPECT_EQ(all[4].title, "fork");
  auto page = this->store->listThreads({.limit = 2, .offset = 1});
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "b");
  EXPECT_EQ(page[1].id, "c");
  auto forks = this->store->listThreads({.parentId = "b"});
  ASSERT_EQ(forks.size(), 1u);
  EXPECT_EQ(forks[0].id, "e");
}

TYPED_TEST_P(StoreConformance, ForkSharesThePrefixWithoutCopying) {
  this->store->createThread({.id = "p"}, this->turn("p", 6), json{{"of", "p"}});
  ThreadInfo fork = this->store->forkThread("p", 4, {.id = "f"});
  EXPECT_EQ(fork.messageCount, 4);
  EXPECT_EQ(fork.version, 1);
  EXPECT_EQ(this->messageRows(), 6);  // nothing copied
  this->store->appendTurn("f", this->turn("f", 2), nullptr, 1);
  this->store->appendTurn("p", this->turn("q", 1), nullptr, 1);
  EXPECT_EQ(this->contents(this->store->loadThread("f").messages),
            (std::vector<std::string>{"p0", "p1", "p2", "p3", "f0", "f1"}));
  EXPECT_EQ(this->contents(this->store->loadThread("p").messages),
            (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4", "p5", "q0"}));
  EXPECT_EQ(this->messageRows(), 9);
}

TYPED_TEST_P(StoreConformance, ForksOfForksReadTheRightAncestors) {
  this->store->createThread({.id = "p"}, this->turn("p", 6));
  this->store->forkThread("p", 4, {.id = "f1"});
  this->store->appendTurn("f1", this->turn("f", 3), nullptr, 1);  // p0..p3 f0 f1 f2
  this->store->forkThread("f1", 5, {.id = "f2"});                 // p0..p3 f0
  this->store->forkThread("f1", 2, {.id = "f3"});                 // p0 p1
  this->store->appendTurn("f2", this->turn("g", 1), nullptr, 1);
  EXPECT_EQ(this->contents(this->store->loadThread("f2").messages),
            (std::vector<std::string>{"p0", "p1", "p2", "p3", "f0", "g0"}));
  EXPECT_EQ(this->contents(this->store->loadThread("f3").messages),
            (std::vector<std::string>{"p0", "p1"}));
  EXPECT_EQ(this->store->forkThread("p", 0, {.id = "empty"}).messageCount, 0);
  EXPECT_TRUE(this->store->loadThread("empty").messages.empty());
}

TYPED_TEST_P(StoreConformance, ForkPositionAndState) {
  this->store->createThread({.id = "p"}, this->turn("p", 3), json{{"of", "p"}});
  EXPECT_THROW(this->store->forkThread("p", 4), ValidationError);
  EXPECT_THROW(this->store->forkThread("p", -1), ValidationError);
  EXPECT_THROW(this->store->forkThread("p", 2, {}, {{"storageSize", 3}}), ValidationError);
  EXPECT_EQ(this->store->listThreads().size(), 1u);
  auto whole = this->store->forkThread("p", 3);
  EXPECT_EQ(this->store->loadThread(whole.id).state, json({{"of", "p"}}));
  auto part = this->store->forkThread("p", 2);
  EXPECT_TRUE(this->store->loadThread(part.id).state.is_null());
  auto given = this->store->forkThread("p", 1, {}, {{"mine", true}});
  EXPECT_EQ(this->store->loadThread(given.id).state, json({{"mine", true}}));
}

TYPED_TEST_P(StoreConformance, DeletingAParentKeepsWhatItsForksNeed) {
  this->store->createThread({.id = "p"}, this->turn("p", 8));
  this->store->forkThread("p", 3, {.id = "f1"});
  this->store->forkThread("p", 5, {.id = "f2"});
  this->store->appendTurn("f2", this->turn("g", 2), nullptr, 1);
  this->store->forkThread("f2", 6, {.id = "f3"});
  EXPECT_TRUE(this->store->deleteThread("p"));
  EXPECT_FALSE(this->store->threadInfo("p"));
  EXPECT_THROW(this->store->loadThread("p"), StoreError);
  EXPECT_THROW(this->store->forkThread("p", 1), StoreError);
  EXPECT_EQ(this->messageRows(), 5 + 2);  // p's rows past the last fork position are gone
  EXPECT_EQ(this->contents(this->store->loadThread("f2").messages),
            (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4", "g0", "g1"}));
  EXPECT_TRUE(this->store->deleteThread("f2"));  // f3 still needs f2's g0
  EXPECT_EQ(this->contents(this->store->loadThread("f3").messages),
            (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4", "g0"}));
  EXPECT_TRUE(this->store->deleteThread("f3"));
  // Now only f1 needs p, and only p's first 3 rows.
  EXPECT_EQ(this->messageRows(), 3);
  EXPECT_EQ(this->contents(this->store->loadThread("f1").messages),
            (std::vector<std::string>{"p0", "p1", "p2"}));
  EXPECT_TRUE(this->store->deleteThread("f1"));
  EXPECT_FALSE(this->store->deleteThread("f1"));
  EXPECT_EQ(this->messageRows(), 0);
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_threads"), 0);
  EXPECT_TRUE(this->store->listThreads().empty());
}

TYPED_TEST_P(StoreConformance, DataOutlivesTheStoreObject) {
  this->store->createThread({.id = "a", .title = "t"}, this->turn("m", 3), json{{"k", 1}});
  this->store.reset();
  auto reopened = this->backend.open();
  ThreadData data = reopened->loadThread("a");
  EXPECT_EQ(this->contents(data.messages), (std::vector<std::string>{"m0", "m1", "m2"}));
  EXPECT_EQ(data.state, json({{"k", 1}}));
  EXPECT_EQ(data.info.title, "t");
}

TYPED_TEST_P(StoreConformance, ACorruptRowIsAClearError) {
  this->store->createThread({.id = "a"}, this->turn("m", 3));
  this->backend.exec("UPDATE parley_messages SET body = '{not json' WHERE seq = 1");
  try {
    this->store->loadThread("a");
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("message 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  this->backend.exec(R"(UPDATE parley_messages SET body = '{"role":"robot"}' WHERE seq = 1)");
  EXPECT_THROW(this->store->loadThread("a"), StoreError);
  this->backend.exec("DELETE FROM parley_messages WHERE seq = 1");
  try {
    this->store->loadThread("a");
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

TYPED_TEST_P(StoreConformance, RefusesANewerSchema) {
  this->store.reset();
  this->backend.exec("UPDATE parley_schema SET version = 99");
  try {
    this->backend.open();
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
  }
}

TYPED_TEST_P(StoreConformance, ThreadsOfOneProcessShareAStore) {
  constexpr int kThreads = 4, kTurns = 30;
  this->store->createThread({.id = "shared"});
  std::vector<std::thread> workers;
  std::atomic<int> conflicts{0};
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      const std::string own = "own" + std::to_string(w);
      this->store->createThread({.id = own});
      for (int t = 0; t < kTurns; ++t) {
        this->store->appendTurn(own, this->turn("m", 1), nullptr, t + 1);
        for (;;) {  // the shared thread: re-read the version after a conflict
          auto version = this->store->threadInfo("shared")->version;
          try {
            this->store->appendTurn("shared", this->turn(own + "-", 1), nullptr, version);
            break;
          } catch (const StoreConflict&) {
            ++conflicts;
          }
        }
      }
    });
  }
  for (auto& worker : workers)
    worker.join();
  for (int w = 0; w < kThreads; ++w) {
    EXPECT_EQ(this->store->threadInfo("own" + std::to_string(w))->messageCount, kTurns);
  }
  ThreadData shared = this->store->loadThread("shared");
  EXPECT_EQ(shared.messages.size(), size_t(kThreads * kTurns));
  EXPECT_EQ(shared.info.version, 1 + kThreads * kTurns);
}

// A writer process killed at random moments never loses a reported turn nor leaves half a one.
TYPED_TEST_P(StoreConformance, KilledWriterLosesNoCommittedTurn) {
  constexpr int kKills = 40;
  this->store->createThread({.id = "crash"});
  std::mt19937 random(std::random_device{}());
  long reported = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    auto child = this->writer("crash", 1'000'000, "w");
    const int reportsBeforeKill = 1 + static_cast<int>(random() % 6);
    for (int seen = 0; seen < reportsBeforeKill;) {
      auto line = child->readLine();
      ASSERT_TRUE(line) << "the writer stopped early (exit " << child->wait() << ")";
      if (line->rfind("committed ", 0) == 0) {
        reported = std::stol(line->substr(10));
        ++seen;
      }
    }
    // Not a synchronisation: a random extra delay moves the kill to a random point of a turn.
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
    child->kill(SIGKILL);
    while (auto line = child->readLine()) {  // reports written before the kill count too
      if (line->rfind("committed ", 0) == 0) reported = std::stol(line->substr(10));
    }
    EXPECT_EQ(child->wait(), 128 + SIGKILL);

    auto reopened = this->backend.open();
    ThreadData data = reopened->loadThread("crash");
    auto last = this->checkWholeTurns(data.messages);
    const long stored = last["w"];
    ASSERT_GE(stored, reported) << "a reported turn was lost (kill " << kill << ")";
    ASSERT_LE(stored, reported + 1) << "kill " << kill;  // at most one committed, not reported
    EXPECT_EQ(data.info.version, 1 + stored);
    EXPECT_EQ(data.state["last"], "w:" + std::to_string(stored));
    EXPECT_EQ(data.state["storageSize"], static_cast<int64_t>(data.messages.size()));
    reported = stored;
  }
}

TYPED_TEST_P(StoreConformance, EightProcessesOnEightThreadsLoseNothing) {
  constexpr int kWriters = 8;
  constexpr long kTurns = 200;
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int w = 0; w < kWriters; ++w) {
    this->store->createThread({.id = "th" + std::to_string(w)});
  }
  for (int w = 0; w < kWriters; ++w) {
    children.push_back(this->writer("th" + std::to_string(w), kTurns, "w" + std::to_string(w)));
  }
  for (int w = 0; w < kWriters; ++w) {
    long committed = 0;
    while (auto line = children[w]->readLine()) {
      if (line->rfind("committed ", 0) == 0) ++committed;
    }
    EXPECT_EQ(children[w]->wait(), 0) << "writer " << w;
    EXPECT_EQ(committed, kTurns) << "writer " << w;
  }
  for (int w = 0; w < kWriters; ++w) {
    ThreadData data = this->store->loadThread("th" + std::to_string(w));
    auto last = this->checkWholeTurns(data.messages);
    EXPECT_EQ(last.size(), 1u);
    EXPECT_EQ(last["w" + std::to_string(w)], kTurns);
    EXPECT_EQ(data.info.version, 1 + kTurns);
  }
}

TYPED_TEST_P(StoreConformance, TwoProcessesOnOneThreadConflictAndLoseNothing) {
  constexpr long kTurns = 150;
  this->store->createThread({.id = "same"});
  auto a = this->writer("same", kTurns, "a", true);
  auto b = this->writer("same", kTurns, "b", true);
  // Both read version 1 before either writes, so the first turn of one of them must conflict.
  EXPECT_EQ(a->readLine(), "ready");
  EXPECT_EQ(b->readLine(), "ready");
  a->writeLine("go");
  b->writeLine("go");
  std::vector<long long> versions;
  long conflicts = 0;
  for (auto* child : {a.get(), b.get()}) {
    while (auto line = child->readLine()) {
      std::istringstream words(*line);
      std::string word;
      long turn = 0;
      long long version = 0;
      words >> word >> turn >> version;
      if (word == "committed") versions.push_back(version);
      if (word == "conflict") ++conflicts;
    }
    EXPECT_EQ(child->wait(), 0);
  }
  EXPECT_GE(conflicts, 1);
  // Every version 2 .. 1 + 2 * kTurns was reported by exactly one writer.
  std::sort(versions.begin(), versions.end());
  ASSERT_EQ(versions.size(), size_t(2 * kTurns));
  for (size_t i = 0; i < versions.size(); ++i)
    EXPECT_EQ(versions[i], 2 + (long long)i);
  ThreadData data = this->store->loadThread("same");
  auto last = this->checkWholeTurns(data.messages);
  EXPECT_EQ(last["a"], kTurns);
  EXPECT_EQ(last["b"], kTurns);
  EXPECT_EQ(data.info.version, 1 + 2 * kTurns);
}

TYPED_TEST_P(StoreConformance, SavesAManagerTurnByTurnWritingOnlyWhatIsNew) {
  ConversationManager manager;
  manager.addMessage(Message::system("be brief"));
  manager.addMessage(Message::user("hello"));
  this->store->createThread({.id = "m"});
  auto v = saveConversation(*this->store, "m", manager, 1);
  EXPECT_EQ(v, 2);
  EXPECT_EQ(this->messageRows(), 2);
  manager.addMessage(Message::assistant("hi"));
  manager.addMessage(Message::user("more"));
  v = saveConversation(*this->store, "m", manager, v);
  EXPECT_EQ(this->messageRows(), 4);
  manager.clearMessages(true);  // a context edit: a new batch, no new storage
  v = saveConversation(*this->store, "m", manager, v);
  EXPECT_EQ(v, 4);
  EXPECT_EQ(this->messageRows(), 4);
  manager.addMessage(Message::user("again"));
  v = saveConversation(*this->store, "m", manager, v);

  ConversationManager loaded;
  EXPECT_EQ(loadConversation(*this->store, "m", loaded), v);
  EXPECT_EQ(loaded.getMessages(), manager.getMessages());
  EXPECT_EQ(loaded.getAllMessages(), manager.getAllMessages());
  EXPECT_EQ(loaded.getMarkMap(), manager.getMarkMap());
  EXPECT_EQ(loaded.getMessages().size(), 2u);  // the system prompt and "again"

  // A second writer that loaded the same version loses.
  loaded.addMessage(Message::assistant("from loaded"));
  manager.addMessage(Message::assistant("from manager"));
  EXPECT_EQ(saveConversation(*this->store, "m", loaded, v), v + 1);
  EXPECT_THROW(saveConversation(*this->store, "m", manager, v), StoreConflict);
  ConversationManager fresh;
  loadConversation(*this->store, "m", fresh);
  EXPECT_EQ(fresh.getMessages().back().content, "from loaded");
}

TYPED_TEST_P(StoreConformance, LoadRefusesADamagedStateAndLeavesTheManager) {
  this->store->createThread({.id = "a"}, this->turn("m", 2),
                            json{{"format", "parley.snapshot/1"}, {"markMap", "nonsense"}});
  ConversationManager manager;
  manager.addMessage(Message::user("mine"));
  EXPECT_THROW(loadConversation(*this->store, "a", manager), StoreError);
  EXPECT_EQ(manager.getMessages().size(), 1u);
  this->store->createThread({.id = "plain"}, this->turn("m", 3));
  loadConversation(*this->store, "plain", manager);  // no state: a plain history, all visible
  EXPECT_EQ(this->contents(manager.getMessages()), (std::vector<std::string>{"m0", "m1", "m2"}));
}

TYPED_TEST_P(StoreConformance, ExportsAndImportsSnapshots) {
  ConversationManager manager;
  manager.addMessages({Message::system("s"), Message::user("u1"), Message::assistant("a1")});
  manager.startNewBatch(1);
  manager.addMessage(Message::user("u2"));
  this->store->createThread({.id = "a"});
  saveConversation(*this->store, "a", manager, 1);
  json exported = exportThread(*this->store, "a");
  EXPECT_EQ(exported, manager.createSnapshot());
  ThreadInfo imported = importThread(*this->store, exported, {.id = "b", .title = "copy"});
  EXPECT_EQ(imported.messageCount, 4);
  ConversationManager loaded;
  loadConversation(*this->store, "b", loaded);
  EXPECT_EQ(loaded.getMessages(), manager.getMessages());
  EXPECT_EQ(loaded.getMarkMap(), manager.getMarkMap());
  EXPECT_EQ(this->store->threadInfo("b")->title, "copy");

  json bad = exported;
  bad["messages"][1]["role"] = "robot";
  try {
    importThread(*this->store, bad, {.id = "c"});
    ADD_FAILURE() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "snapshot.messages[1].role");
  }
  EXPECT_FALSE(this->store->threadInfo("c"));
}

TYPED_TEST_P(StoreConformance, AForkOfAManagerThreadRestoresItsView) {
  ConversationManager manager;
  manager.addMessages({Message::system("s"), Message::user("u1"), Message::assistant("a1")});
  manager.clearMessages(true);
  manager.addMessage(Message::user("u2"));
  this->store->createThread({.id = "p"});
  saveConversation(*this->store, "p", manager, 1);
  ThreadInfo fork = this->store->forkThread("p", 4, {.id = "f"});
  ConversationManager forked;
  auto version = loadConversation(*this->store, "f", forked);
  EXPECT_EQ(version, 1);
  EXPECT_EQ(forked.getMessages(), manager.getMessages());
  forked.addMessage(Message::assistant("in the fork"));
  EXPECT_EQ(saveConversation(*this->store, "f", forked, version), 2);
  EXPECT_EQ(this->messageRows(), 5);
  ConversationManager parent;
  loadConversation(*this->store, "p", parent);
  EXPECT_EQ(parent.getMessages(), manager.getMessages());
}

TYPED_TEST_P(StoreConformance, StoredThreadSavesEachTurnWithOneCall) {
  std::shared_ptr<ConversationStore> shared = std::move(this->store);
  ConversationManager manager;
  manager.addMessage(Message::system("s"));
  StoredThread thread(shared, "bound");
  EXPECT_FALSE(thread.attach(manager, {.title = "bound thread"}));
  EXPECT_EQ(thread.version(), 1);
  EXPECT_EQ(shared->threadInfo("bound")->title, "bound thread");
  EXPECT_EQ(shared->threadInfo("bound")->messageCount, 1);
  thread.save(manager);  // nothing new: nothing written
  EXPECT_EQ(thread.version(), 1);
  manager.addMessage(Message::user("u"));
  thread.save(manager);
  EXPECT_EQ(thread.version(), 2);
  EXPECT_EQ(this->messageRows(), 2);

  ConversationManager other;
  StoredThread second(shared, "bound");
  EXPECT_TRUE(second.attach(other));
  EXPECT_EQ(other.getMessages(), manager.getMessages());
  other.addMessage(Message::assistant("from second"));
  second.save(other);
  manager.addMessage(Message::assistant("from first"));
  EXPECT_THROW(thread.save(manager), StoreConflict);
  thread.load(manager);
  EXPECT_EQ(manager.getMessages().back().content, "from second");
  EXPECT_EQ(thread.version(), 3);
  EXPECT_THROW(StoredThread(shared, "never-attached").save(manager), StoreError);
}

TYPED_TEST_P(StoreConformance, AForkedStoredThreadKeepsACloneApart) {
  std::shared_ptr<ConversationStore> shared = std::move(this->store);
  auto thread = std::make_shared<StoredThread>(shared, "trunk");
  ConversationOptions options;
  options.persist = thread;
  ConversationManager trunk(options);
  thread->attach(trunk);
  trunk.addMessage(Message::user("shared"));  // not saved yet: fork() saves it first

  // A plain clone is not persisted: it must never write into the trunk's thread.
  EXPECT_EQ(trunk.clone().options().persist, nullptr);
  EXPECT_EQ(trunk.options().persist, thread);

  std::shared_ptr<StoredThread> branch = thread->fork(trunk, {.title = "branch"});
  ConversationManager fork = trunk.clone(branch);
  EXPECT_EQ(fork.options().persist, branch);
  EXPECT_EQ(shared->threadInfo("trunk")->messageCount, 1);
  const ThreadInfo info = *shared->threadInfo(branch->threadId());
  EXPECT_EQ(info.parentId, "trunk");
  EXPECT_EQ(info.title, "branch");

  fork.addMessage(Message::user("fork only"));
  branch->save(fork);
  trunk.addMessage(Message::user("trunk only"));
  thread->save(trunk);  // no conflict: the fork saved elsewhere
  ConversationManager trunkBack, forkBack;
  loadConversation(*shared, "trunk", trunkBack);
  loadConversation(*shared, branch->threadId(), forkBack);
  ASSERT_EQ(trunkBack.getMessageCount(), 2u);
  ASSERT_EQ(forkBack.getMessageCount(), 2u);
  EXPECT_EQ(trunkBack.getMessages()[1].content, "trunk only");
  EXPECT_EQ(forkBack.getMessages()[0].content, "shared");
  EXPECT_EQ(forkBack.getMessages()[1].content, "fork only");
}

// A save skips only when the manager holds the very state saved last: another manager that
// reached the same number of changes holds another history and is saved.
TYPED_TEST_P(StoreConformance, StoredThreadTellsManagersOfEqualRevisionApart) {
  std::shared_ptr<ConversationStore> shared = std::move(this->store);
  StoredThread thread(shared, "same");
  ConversationManager first;
  first.addMessage(Message::user("a"));
  first.addMessage(Message::assistant("b"));  // two changes
  thread.attach(first);
  EXPECT_EQ(thread.version(), 1);

  ConversationManager second;
  second.addMessages({Message::user("a"), Message::assistant("b")});
  second.addMessage(Message::user("c"));  // also two changes, one more message
  thread.save(second);
  EXPECT_EQ(thread.version(), 2);
  ASSERT_EQ(shared->threadInfo("same")->messageCount, 3);

  // An unchanged clone holds the state just saved: nothing to write.
  ConversationManager copy = second.clone();
  thread.save(copy);
  EXPECT_EQ(thread.version(), 2);
  copy.addMessage(Message::assistant("d"));
  thread.save(copy);
  EXPECT_EQ(thread.version(), 3);
  EXPECT_EQ(shared->threadInfo("same")->messageCount, 4);
}

TYPED_TEST_P(StoreConformance, SearchFindsMessagesByTheirWords) {
  ConversationStore& store = *this->store;
  store.createThread({.id = "a", .title = "Animals"},
                     std::vector<Message>{Message::user("Tell me about the quick brown fox"),
                                          Message::assistant("The fox is quick and clever.")});
  store.createThread({.id = "b"}, std::vector<Message>{Message::user("Un café, s'il vous plaît"),
                                                       Message::assistant("Voilà: one coffee")});
  store.appendTurn("b", std::vector<Message>{Message::user("and a FOX please")}, nullptr, 1);

  auto hits = store.searchMessages("quick fox");
  ASSERT_EQ(hits.size(), 2u);
  for (const auto& hit : hits) {
    EXPECT_EQ(hit.threadId, "a");
    EXPECT_NE(hit.snippet.find("[fox]"), std::string::npos) << hit.snippet;
  }
  EXPECT_EQ(hits[0].role == Role::User ? hits[0].position : hits[1].position, 0);

  hits = store.searchMessages("FOX");  // case is ignored; a later turn is indexed too
  EXPECT_EQ(hits.size(), 3u);
  hits = store.searchMessages("cafe");  // so are accents
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].threadId, "b");
  EXPECT_EQ(hits[0].role, Role::User);

  // Query syntax is text: quotes, operators and stars are not a query language.
  EXPECT_EQ(store.searchMessages("\"fox\" OR -coffee* NEAR(").size(), 0u);
  EXPECT_EQ(store.searchMessages("fox\"").size(), 3u);
  EXPECT_THROW(store.searchMessages("  ?! "), ValidationError);
  EXPECT_THROW(store.searchMessages("fox", {.limit = 0}), ValidationError);
  EXPECT_EQ(store.searchMessages("fox", {.limit = 1}).size(), 1u);

  // A fork's own messages are found under the fork; a deleted thread is not found.
  const ThreadInfo fork = store.forkThread("a", 1, {.id = "a-fork"});
  store.appendTurn("a-fork", std::vector<Message>{Message::user("a zebra now")}, nullptr,
                   fork.version);
  hits = store.searchMessages("zebra");
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].threadId, "a-fork");
  EXPECT_EQ(hits[0].position, 1);
  EXPECT_TRUE(store.deleteThread("b"));
  EXPECT_EQ(store.searchMessages("cafe").size(), 0u);
}

// A user message with an image, a picture by URL, audio and a pdf, whose bytes depend on `seed`.
inline Message partsMessage(char seed) {
  const std::string gif = "GIF89a\x02\x00\x03\x00" + std::string(40, seed);
  const std::string wav = std::string("RIFF\x24\x00\x00\x00WAVEfmt ", 16) + std::string(30, seed);
  return Message::user({Part::text("look "), Part::imageBytes(gif, "", ImageDetail::Low),
                        Part::imageUrl("https://example.test/a.png"), Part::audioBytes(wav),
                        Part::fileBytes("%PDF-1.4 " + std::string(50, seed), "a.pdf")});
}

TYPED_TEST_P(StoreConformance, PartsRoundTripWithTheirBytesInSharedBlobs) {
  const std::vector<Message> turn = {partsMessage('x'), Message::assistant("a cat")};
  this->store->createThread({.id = "a"}, turn);
  EXPECT_EQ(this->store->loadThread("a").messages, turn);
  const auto blobs = [&] { return this->backend.count("SELECT COUNT(*) FROM parley_blobs"); };
  EXPECT_EQ(blobs(), 3);  // the image, the audio and the pdf; the URL stays in the body
  // The body keeps references, not the bytes.
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_messages WHERE body LIKE "
                                "'%parley-blob:%'"),
            1);
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_messages WHERE body LIKE '%R0lGOD%'"),
            0);
  // A fork, another thread with the same bytes, and a resent picture share the blobs.
  this->store->forkThread("a", 1, {.id = "f"});
  this->store->appendTurn("f", std::vector<Message>{Message::assistant("fork")}, nullptr, 1);
  this->store->createThread({.id = "b"}, std::vector<Message>{partsMessage('x')});
  this->store->appendTurn("a", std::vector<Message>{partsMessage('x')}, nullptr, 1);
  EXPECT_EQ(blobs(), 3);
  EXPECT_EQ(this->store->loadThread("f").messages.front(), turn.front());
  EXPECT_EQ(this->store->loadThread("a").messages.back(), turn.front());
  // A write that fails leaves no blob behind.
  EXPECT_THROW(this->store->appendTurn("a", std::vector<Message>{partsMessage('y')}, nullptr, 1),
               StoreConflict);
  EXPECT_EQ(blobs(), 3);
  this->store->appendTurn("a", std::vector<Message>{partsMessage('y')}, nullptr, 2);
  EXPECT_EQ(blobs(), 6);
  // A message that claims a blob reference itself is refused, and nothing is written.
  Message forged = Message::user("x");
  forged.extra["content"] = json::parse(
      R"([{"type":"input_audio","input_audio":{"format":"wav","data":"parley-blob:00"}}])");
  EXPECT_THROW(this->store->appendTurn("a", std::vector<Message>{forged}, nullptr, 3),
               ValidationError);
  EXPECT_EQ(this->store->loadThread("a").info.version, 3);
  // A blob that went missing is a clear error naming it.
  this->backend.exec("DELETE FROM parley_blobs");
  try {
    this->store->loadThread("b");
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("blob"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

TYPED_TEST_P(StoreConformance, AVersion4DatabaseGainsTheBlobTable) {
  // Messages stored before parts existed (content arrays inline) load the same after the upgrade.
  Message old = Message::user("x");
  old.extra["content"] = json::parse(
      R"([{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGODlhAQABAAAAACw="}}])");
  this->store->createThread({.id = "old"}, std::vector<Message>{old});
  this->store.reset();
  this->backend.exec("DELETE FROM parley_blobs");
  this->backend.exec("DROP TABLE parley_blobs");
  this->backend.exec("DROP TABLE parley_assistant_versions");  // version 6's
  this->backend.exec("DROP TABLE parley_assistants");
  this->backend.exec("UPDATE parley_schema SET version = 4");
  this->backend.exec(
      "UPDATE parley_messages SET body = '{\"content\":[{\"text\":\"x\",\"type\":\"text\"},"
      "{\"image_url\":{\"url\":\"data:image/gif;base64,R0lGODlhAQABAAAAACw=\"},\"type\":"
      "\"image_url\"}],\"role\":\"user\"}'");
  this->store = this->backend.open();
  EXPECT_EQ(this->backend.count("SELECT MAX(version) FROM parley_schema"), kStoreSchemaVersion);
  EXPECT_EQ(this->store->loadThread("old").messages, std::vector<Message>{old});
  this->store->createThread({.id = "new"}, std::vector<Message>{partsMessage('z')});
  EXPECT_EQ(this->store->loadThread("new").messages, std::vector<Message>{partsMessage('z')});
  // And version 6's tables, made by the same upgrade.
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_assistants"), 0);
}

REGISTER_TYPED_TEST_SUITE_P(
    StoreConformance, PartsRoundTripWithTheirBytesInSharedBlobs, AVersion4DatabaseGainsTheBlobTable,
    CreatesAnEmptyThread, SearchFindsMessagesByTheirWords, ListsNewestFirstAndFindsByTitleOrId,
    GeneratesDistinctIds, RefusesATakenIdAndBadOptions, AppendsTurnsAndLoadsThemInOrder,
    KeepsEveryMessageFieldExactly, RenamesAThreadWithoutATurn, WritesOnlyTheNewRowsOfATurn,
    StaleVersionIsAConflictAndWritesNothing, NullStateKeepsTheLastOne,
    RefusesBadTurnsAndChangesNothing, UnknownThreadsAreErrors,
    ListsThreadsOldestFirstWithPagesAndForks, ForkSharesThePrefixWithoutCopying,
    ForksOfForksReadTheRightAncestors, ForkPositionAndState, DeletingAParentKeepsWhatItsForksNeed,
    DataOutlivesTheStoreObject, ACorruptRowIsAClearError, RefusesANewerSchema,
    ThreadsOfOneProcessShareAStore, KilledWriterLosesNoCommittedTurn,
    EightProcessesOnEightThreadsLoseNothing, TwoProcessesOnOneThreadConflictAndLoseNothing,
    SavesAManagerTurnByTurnWritingOnlyWhatIsNew, LoadRefusesADamagedStateAndLeavesTheManager,
    ExportsAndImportsSnapshots, AForkOfAManagerThreadRestoresItsView,
    StoredThreadSavesEachTurnWithOneCall, AForkedStoredThreadKeepsACloneApart,
    StoredThreadTellsManagersOfEqualRevisionApart);

}  // namespace parley::testing
