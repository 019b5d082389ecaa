// `parley history` end to end: the real binary on a SQLite file the test fills directly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <sqlite3.h>

#include "cli_runner.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "store/sqlite_store.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

class HistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    SqliteStore store(db_);
    std::vector<Message> messages = {
        Message::system("You are terse."),
        Message::user("Is <b>2+2</b> four?"),
        Message::assistant("", {ToolCall{"call_1", "calculate", R"({"expression":"2+2"})"}}),
        Message::tool("call_1", R"({"result":4})"),
        Message::assistant("Yes, it is 4."),
    };
    store.createThread({.id = "t1", .title = "sums"}, messages);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun history(std::vector<std::string> args) {
    args.insert(args.begin(), "history");
    args.push_back("--db");
    args.push_back(db_);
    return testing::runCli(args, dir_);
  }

  std::string writeFile(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-history-test-" + std::to_string(::getpid()));
  std::string db_ = (dir_ / "history.db").string();
};

TEST_F(HistoryTest, SearchFindsMessagesAcrossThreads) {
  SqliteStore(db_).createThread({.id = "t2", .title = "more sums"},
                                std::vector<Message>{Message::user("what is 3+3, is it four?")});
  CliRun run = history({"search", "four"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("t1 \"sums\" #1 user: Is <b>2+2</b> [four]?"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("t2 \"more sums\" #0 user: what is 3+3, is it [four]?"), std::string::npos)
      << run.out;
  run = history({"search", "four", "--json", "--limit", "1"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json hits = json::parse(run.out);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0]["role"], "user");
  run = history({"search", "zebra"});
  EXPECT_EQ(run.exitCode, 0);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("no message matches"), std::string::npos);
  run = history({"search", "?!"});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("query: has no words"), std::string::npos) << run.err;
}

TEST_F(HistoryTest, ListShowsEveryThread) {
  SqliteStore(db_).forkThread("t1", 2, {.id = "t1-fork"});
  CliRun run = history({"list"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("t1  5 messages"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("t1-fork  2 messages"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("fork of t1 at 2"), std::string::npos) << run.out;
  CliRun asJson = history({"list", "--json"});
  ASSERT_EQ(asJson.exitCode, 0) << asJson.err;
  json list = json::parse(asJson.out);
  ASSERT_EQ(list.size(), 2u);
  // The thread used last comes first.
  EXPECT_EQ(list[0]["id"], "t1-fork");
  EXPECT_EQ(list[0]["parent_id"], "t1");
  EXPECT_EQ(list[1]["id"], "t1");
  EXPECT_EQ(list[1]["title"], "sums");
  CliRun limited = history({"list", "--json", "--limit", "1"});
  ASSERT_EQ(limited.exitCode, 0) << limited.err;
  EXPECT_EQ(json::parse(limited.out).size(), 1u);
}

// Appends a chain of `count` forks to t1 directly in the file (one transaction): fork i is
// "f<i>", a fork of the one before at its end; the last one adds a message of its own.
void addForkChain(const std::string& db, int count) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  std::string sql = "BEGIN;";
  for (int i = 1; i <= count; ++i) {
    const std::string parent = i == 1 ? "t1" : "f" + std::to_string(i - 1);
    const int messages = i == count ? 6 : 5;
    sql +=
        "INSERT INTO parley_threads (id, parent_id, fork_position, message_count, version, "
        "created_at, updated_at, title) VALUES ('f" +
        std::to_string(i) + "', '" + parent + "', 5, " + std::to_string(messages) + ", 1, " +
        std::to_string(1'000'000 + i) + ", " + std::to_string(1'000'000 + i) + ", '');";
  }
  sql += "INSERT INTO parley_messages (thread_id, seq, body) VALUES ('f" + std::to_string(count) +
         R"(', 5, '{"role":"user","content":"deepest"}');COMMIT;)";
  EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
}

TEST_F(HistoryTest, ADeepChainOfForksIsListedAndRead) {
  // Past the 10 000 forks a read used to give up at ("forks loop"), which broke the whole list.
  constexpr int kForks = 10'051;
  addForkChain(db_, kForks);
  CliRun list = history({"list", "--json"});
  ASSERT_EQ(list.exitCode, 0) << list.err;
  const json listed = json::parse(list.out);
  ASSERT_EQ(listed.size(), static_cast<std::size_t>(kForks + 1));
  std::map<std::string, json> byId;
  for (const json& item : listed)
    byId[item["id"].get<std::string>()] = item;
  EXPECT_EQ(byId["f" + std::to_string(kForks)]["message_count"], 6);
  EXPECT_EQ(byId["f" + std::to_string(kForks)]["parent_id"], "f" + std::to_string(kForks - 1));
  EXPECT_EQ(byId["f1"]["message_count"], 5);
  EXPECT_EQ(byId["t1"]["message_count"], 5);
  const ThreadData deepest = SqliteStore(db_).loadThread("f" + std::to_string(kForks));
  ASSERT_EQ(deepest.messages.size(), 6u);
  EXPECT_EQ(deepest.messages[0].content, "You are terse.");
  EXPECT_EQ(deepest.messages[5].content, "deepest");
  CliRun show = history({"show", "f" + std::to_string(kForks)});
  ASSERT_EQ(show.exitCode, 0) << show.err;
  EXPECT_NE(show.out.find("deepest"), std::string::npos) << show.out;
}

TEST_F(HistoryTest, AForkLoopIsADamagedStoreNotAHang) {
  addForkChain(db_, 3);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE parley_threads SET parent_id = 'f3' WHERE id = 'f1'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  try {
    SqliteStore(db_).loadThread("f3");
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("forks loop"), std::string::npos) << e.what();
  }
}

// A reply as the conversation keeps it: the model that wrote it and what it used.
Message reply(const std::string& text, const std::string& model, int64_t prompt,
              int64_t completion) {
  Message m = Message::assistant(text);
  m.model = model;
  m.receivedAt = std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  m.usage = TokenUsage{prompt, completion, prompt + completion, {}};
  return m;
}

TEST_F(HistoryTest, ListFiltersBySinceAndModelAndShowsTokensAndCost) {
  {
    SqliteStore store(db_);
    store.createThread(
        {.id = "old", .title = "last week"},
        std::vector<Message>{Message::user("a"), reply("b", "gpt-4o-mini-2024-07-18", 1000, 500)});
    store.createThread(
        {.id = "new", .title = "today"},
        std::vector<Message>{Message::user("c"), reply("d", "nobody-prices-me", 10, 5)});
  }
  // "old" was last used ten days ago.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &raw), SQLITE_OK);
  const auto tenDaysAgo =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() - std::chrono::hours(240)).time_since_epoch())
          .count();
  const std::string sql =
      "UPDATE parley_threads SET updated_at = " + std::to_string(tenDaysAgo) + " WHERE id = 'old'";
  ASSERT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  const std::string prices =
      writeFile("prices.toml", "[prices.\"gpt-4o-mini\"]\ninput = 1.0\noutput = 2.0\n");

  CliRun all = history({"list", "--json", "--prices", prices});
  ASSERT_EQ(all.exitCode, 0) << all.err;
  json list = json::parse(all.out);
  ASSERT_EQ(list.size(), 3u) << all.out;
  EXPECT_EQ(list[0]["id"], "new");
  EXPECT_EQ(list[1]["id"], "t1");
  EXPECT_EQ(list[2]["id"], "old");
  // Priced by the model each reply names (a dated name finds its family's price).
  EXPECT_EQ(list[2]["model"], "gpt-4o-mini-2024-07-18");
  EXPECT_EQ(list[2]["prompt_tokens"], 1000);
  EXPECT_EQ(list[2]["completion_tokens"], 500);
  EXPECT_DOUBLE_EQ(list[2]["cost_usd"].get<double>(), 0.002);
  EXPECT_EQ(list[2]["unpriced_replies"], 0);
  // Unpriced is null, never 0; a thread whose replies kept no usage has no cost either.
  EXPECT_TRUE(list[0]["cost_usd"].is_null());
  EXPECT_EQ(list[0]["unpriced_replies"], 1);
  EXPECT_TRUE(list[1]["cost_usd"].is_null());
  EXPECT_EQ(list[1]["replies_with_usage"], 0);
  EXPECT_TRUE(list[1]["model"].is_null());

  CliRun text = history({"list", "--prices", prices});
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("gpt-4o-mini-2024-07-18  1500 tokens  $0.002000  last week"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("nobody-prices-me  15 tokens  unpriced  today"), std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("$0.000000"), std::string::npos) << text.out;

  auto ids = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"list", "--json"});
    CliRun run = history(args);
    EXPECT_EQ(run.exitCode, 0) << run.err;
    std::vector<std::string> out;
    for (const json& t : json::parse(run.out.empty() ? "[]" : run.out))
      out.push_back(t["id"]);
    return out;
  };
  using Ids = std::vector<std::string>;
  EXPECT_EQ(ids({"--since", "7d"}), (Ids{"new", "t1"}));
  EXPECT_EQ(ids({"--since", "12h"}), (Ids{"new", "t1"}));
  EXPECT_EQ(ids({"--since", "2w"}), (Ids{"new", "t1", "old"}));
  EXPECT_EQ(ids({"--since", "2000-01-01"}), (Ids{"new", "t1", "old"}));
  EXPECT_EQ(ids({"--since", "2199-01-01T00:00:00Z"}), Ids{});
  EXPECT_EQ(ids({"--model", "gpt-4o-mini"}), (Ids{"old"}));
  EXPECT_EQ(ids({"--model", "gpt-4o"}), Ids{});  // not a dated version of gpt-4o
  EXPECT_EQ(ids({"--model", "nobody-prices-me", "--since", "1d"}), (Ids{"new"}));
  EXPECT_EQ(ids({"--limit", "2"}), (Ids{"new", "t1"}));
  EXPECT_EQ(ids({"--since", "2w", "--limit", "1", "--model", "gpt-4o-mini"}), (Ids{"old"}));

  EXPECT_EQ(ids({"--model", "gpt-4o-mini-20"}), Ids{});  // a name, not any prefix
  CliRun bad = history({"list", "--since", "yesterday"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--since: must be a date (2026-11-01)"), std::string::npos) << bad.err;
  CliRun badPrices =
      history({"list", "--prices", writeFile("bad.toml", "[prices.x]\ninput = 1\n")});
  EXPECT_NE(badPrices.exitCode, 0);
  EXPECT_NE(badPrices.err.find("bad.toml"), std::string::npos) << badPrices.err;
}

TEST_F(HistoryTest, ShowPrintsTheVisibleTurns) {
  CliRun run = history({"show", "t1"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("## User\n\nIs <b>2+2</b> four?"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("Tool call `calculate` [call_1]"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("Yes, it is 4."), std::string::npos) << run.out;
  CliRun missing = history({"show", "nope"});
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;
}

TEST_F(HistoryTest, ExportJsonIsTheSnapshotAndImportTakesItBack) {
  CliRun run = history({"export", "t1", "--format", "json"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  json snapshot = json::parse(run.out);
  SqliteStore store(db_);
  EXPECT_EQ(snapshot, exportThread(store, "t1"));
  ASSERT_EQ(snapshot["messages"].size(), 5u);
  EXPECT_EQ(snapshot["messages"][2]["tool_calls"][0]["function"]["name"], "calculate");

  const std::string file = writeFile("t1.json", run.out);
  CliRun imported = history({"import", file, "--id", "copy"});
  ASSERT_EQ(imported.exitCode, 0) << imported.err;
  EXPECT_EQ(imported.out, "copy\n");
  EXPECT_EQ(store.loadThread("copy").messages, store.loadThread("t1").messages);

  CliRun bad = history({"import", writeFile("bad.json", "{\"format\": \"other\"}")});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_EQ(store.listThreads().size(), 2u);
}

TEST_F(HistoryTest, ImportRefusesBrokenToolCallPairingOrRepairsIt) {
  // A tool message that answers no call (index 2), and a call whose result is missing (3).
  // Every model API refuses either history, so the thread could never be continued.
  const auto snapshotOf = [&](const std::vector<Message>& messages) {
    SqliteStore scratch((dir_ / "scratch.db").string());
    scratch.createThread({.id = "x"}, messages);
    json snapshot = exportThread(scratch, "x");
    scratch.deleteThread("x");
    return snapshot;
  };
  const Message system = Message::system("You are terse.");
  const Message user = Message::user("Is 2+2 four?");
  const Message answer = Message::assistant("Yes.");
  const json orphan = snapshotOf({system, user, Message::tool("call_9", "stray"), answer});
  const json unanswered = snapshotOf(
      {system, user, answer,
       Message::assistant("", {ToolCall{"call_1", "calculate", R"({"expression":"2+2"})"}})});
  struct Case {
    json snapshot;
    std::string error;
    size_t visibleAfterRepair;
  };
  const Case cases[] = {
      {orphan, "messages[2]: a tool message (tool_call_id \"call_9\") that answers no call", 3},
      {unanswered,
       "messages[3]: an assistant message whose tool calls (the first is \"call_1\") are not "
       "all followed by their results",
       3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    const std::string file = writeFile("broken.json", c.snapshot.dump());
    CliRun refused = history({"import", file, "--id", "broken"});
    EXPECT_EQ(refused.exitCode, 2);
    EXPECT_NE(refused.err.find(c.error), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("--repair"), std::string::npos) << refused.err;
    EXPECT_FALSE(SqliteStore(db_).threadInfo("broken"));

    CliRun repaired = history({"import", file, "--id", "broken", "--repair"});
    ASSERT_EQ(repaired.exitCode, 0) << repaired.err;
    EXPECT_NE(repaired.err.find("1 message(s) hidden"), std::string::npos) << repaired.err;
    ConversationManager loaded;
    SqliteStore store(db_);
    loadConversation(store, "broken", loaded);
    EXPECT_EQ(loaded.getAllMessages().size(), 4u);  // storage keeps the file's messages
    EXPECT_EQ(loaded.getMessages().size(), c.visibleAfterRepair);
    for (const Message& m : loaded.getMessages())
      EXPECT_NE(m.role, Role::Tool);
    EXPECT_EQ(history({"rm", "broken"}).exitCode, 0);
  }
}

TEST_F(HistoryTest, ExportMarkdownAndHtml) {
  CliRun md = history({"export", "t1", "--format", "markdown"});
  ASSERT_EQ(md.exitCode, 0) << md.err;
  EXPECT_EQ(md.out.rfind("# sums\n", 0), 0u) << md.out;  // the thread's title
  EXPECT_NE(md.out.find("## Assistant\n\nYes, it is 4."), std::string::npos) << md.out;

  CliRun html = history({"export", "t1", "--format", "html"});
  ASSERT_EQ(html.exitCode, 0) << html.err;
  EXPECT_EQ(html.out.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.out.find("Is &lt;b&gt;2+2&lt;/b&gt; four?"), std::string::npos) << html.out;
  EXPECT_EQ(html.out.find("<b>2+2"), std::string::npos);
  EXPECT_NE(html.out.find("<details><summary>tool call <code>calculate</code>"), std::string::npos)
      << html.out;
  EXPECT_EQ(html.out.find("<script"), std::string::npos);  // self-contained, static
  EXPECT_EQ(html.out.find("hidden by a context operation"), std::string::npos);

  CliRun wrong = history({"export", "t1", "--format", "pdf"});
  EXPECT_EQ(wrong.exitCode, 2);
}

TEST_F(HistoryTest, ApplyRunsContextOperationsAndSaves) {
  const std::string ops = writeFile(
      "ops.json",
      R"([{"operation": "filter", "filter": {"roles": ["system", "user", "assistant", "tool"]}},
          {"operation": "truncate", "truncate": {"keepLast": 1}}])");
  CliRun run = history({"apply", "t1", ops});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("truncate: 1 messages visible"), std::string::npos) << run.out;
  SqliteStore store(db_);
  ConversationManager manager;
  loadConversation(store, "t1", manager);
  ASSERT_EQ(manager.getMessageCount(), 1u);
  EXPECT_EQ(manager.getMessages()[0].content, "Yes, it is 4.");
  EXPECT_EQ(manager.storageSize(), 5u);  // hidden, not deleted

  CliRun html = history({"export", "t1", "--format", "html"});
  EXPECT_NE(html.out.find("hidden by a context operation"), std::string::npos);
  CliRun shown = history({"show", "t1"});
  EXPECT_EQ(shown.out.find("Is <b>2+2</b>"), std::string::npos) << shown.out;

  const int64_t version = store.threadInfo("t1")->version;
  CliRun bad = history({"apply", "t1", writeFile("bad.json", R"({"operation": "explode"})")});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("bad.json[0]"), std::string::npos) << bad.err;
  EXPECT_EQ(store.threadInfo("t1")->version, version);
}

TEST_F(HistoryTest, RmDeletesAThread) {
  CliRun run = history({"rm", "t1"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_FALSE(SqliteStore(db_).threadInfo("t1"));
  CliRun again = history({"rm", "t1"});
  EXPECT_EQ(again.exitCode, 1);
  EXPECT_NE(again.err.find("t1"), std::string::npos);
}

TEST_F(HistoryTest, DefaultDbIsInTheDataFolder) {
  const std::string env = "XDG_DATA_HOME=" + (dir_ / "data").string();
  const auto defaultDb = dir_ / "data" / "parley" / "parley.db";
  // Listing only reads: with nothing stored yet it lists nothing and creates nothing.
  CliRun empty = testing::runCli({"history", "list"}, dir_, env);
  ASSERT_EQ(empty.exitCode, 0) << empty.err;
  EXPECT_EQ(empty.out, "");
  EXPECT_FALSE(std::filesystem::exists(defaultDb));
  CliRun exported = history({"export", "t1", "--format", "json"});
  ASSERT_EQ(exported.exitCode, 0) << exported.err;
  const std::string snapshot = writeFile("t1.json", exported.out);
  CliRun imported = testing::runCli({"history", "import", snapshot, "--id", "copied"}, dir_, env);
  ASSERT_EQ(imported.exitCode, 0) << imported.err;
  EXPECT_TRUE(std::filesystem::exists(defaultDb));
  CliRun listed = testing::runCli({"history", "list"}, dir_, env);
  EXPECT_NE(listed.out.find("copied  5 messages"), std::string::npos) << listed.out;
}

// list, show and export open the store read-only: they work on a database this user may not
// write (here: owned by root, read by `nobody`; or made read-only when the test is not root).
TEST_F(HistoryTest, ReadOnlyDatabaseCanBeListedShownAndExported) {
  std::string asReader;
  if (::geteuid() == 0) {
    std::filesystem::permissions(dir_, std::filesystem::perms(0755));
    std::filesystem::permissions(db_, std::filesystem::perms(0644));
    asReader = "setpriv --reuid=nobody --regid=nogroup --clear-groups";
  } else {
    std::filesystem::permissions(db_, std::filesystem::perms(0444));
    std::filesystem::permissions(dir_, std::filesystem::perms(0555));
  }
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "history");
    args.insert(args.end(), {"--db", db_});
    return testing::runCli(args, dir_ / "scratch", asReader);
  };
  std::filesystem::create_directories(dir_ / "scratch");
  std::filesystem::permissions(dir_ / "scratch", std::filesystem::perms(0777));
  CliRun list = run({"list"});
  EXPECT_EQ(list.exitCode, 0) << list.err;
  EXPECT_NE(list.out.find("t1  5 messages"), std::string::npos) << list.out;
  CliRun show = run({"show", "t1"});
  EXPECT_EQ(show.exitCode, 0) << show.err;
  EXPECT_NE(show.out.find("Yes, it is 4."), std::string::npos) << show.out;
  CliRun exported = run({"export", "t1", "--format", "json"});
  EXPECT_EQ(exported.exitCode, 0) << exported.err;
  EXPECT_EQ(json::parse(exported.out).at("messages").size(), 5u);
  // A write is refused with the reason, and the thread is still there.
  CliRun rm = run({"rm", "t1"});
  EXPECT_EQ(rm.exitCode, 1);
  EXPECT_NE(rm.err.find("readonly"), std::string::npos) << rm.err;
  std::filesystem::permissions(dir_, std::filesystem::perms(0755));
  EXPECT_TRUE(SqliteStore(db_).threadInfo("t1"));
}

}  // namespace
}  // namespace parley
