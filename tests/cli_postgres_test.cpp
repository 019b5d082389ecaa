// The command line on PostgreSQL: `--db postgresql://...` for `parley ask`, `parley chat` and
// `parley history`, against a throwaway cluster (the pg_cluster CTest fixture) and the mock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/postgres_store.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "pg_test_cluster.hpp"
#include "store/postgres_store.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::PgTestCluster;

class CliPostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The demo agent: calls the calculator when asked for arithmetic, echoes otherwise.
    server_ = std::make_unique<mock::MockServer>(mock::MockOptions{});
    server_->start();
    registerPostgresStore();  // for the checks that read the database back through openStore
    // A database of its own, named in a postgresql:// URL as a user would write it.
    PgTestCluster& cluster = PgTestCluster::shared();
    const std::string database = "cli_" + std::to_string(::getpid());
    cluster.execSql("DROP DATABASE IF EXISTS " + database);
    cluster.execSql("CREATE DATABASE " + database);
    url_ = std::string("postgresql://postgres:") + PgTestCluster::kPassword + "@/" + database +
           "?host=" + cluster.socketDir() + "&port=" + std::to_string(cluster.port());
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun run(std::vector<std::string> args, const std::string& input = "") {
    return testing::runCli(args, dir_, "OPENAI_BASE_URL=" + server_->baseUrl(), input);
  }

  std::unique_ptr<mock::MockServer> server_;
  std::string url_;
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("parley-cli-pg-" + std::to_string(::getpid()));
};

TEST_F(CliPostgresTest, AskChatAndHistoryShareOnePostgresThread) {
  CliRun first =
      run({"ask", "--db", url_, "--thread", "t1", "--tools", "demo", "what is (2 + 3) * 4"});
  ASSERT_EQ(first.exitCode, 0) << first.err;
  EXPECT_NE(first.out.find("20"), std::string::npos) << first.out;
  CliRun second = run({"ask", "--db", url_, "--thread", "t1", "and now?"});
  ASSERT_EQ(second.exitCode, 0) << second.err;

  // Both turns are in PostgreSQL, read back by the library itself: user, assistant with the
  // tool call, its result, the answer; then the second question and its reply.
  {
    auto store = openStore(url_);
    ASSERT_NE(dynamic_cast<PostgresStore*>(store.get()), nullptr);
    ConversationManager stored;
    loadConversation(*store, "t1", stored);
    const std::vector<Message> messages = stored.getMessages();
    ASSERT_EQ(messages.size(), 6u);
    EXPECT_EQ(messages[0].content, "what is (2 + 3) * 4");
    ASSERT_EQ(messages[1].toolCalls.size(), 1u);
    EXPECT_EQ(messages[1].toolCalls[0].name, "calculate");
    EXPECT_EQ(messages[2].role, Role::Tool);
    EXPECT_EQ(messages[4].content, "and now?");
    EXPECT_TRUE(messages[5].usage.has_value());  // per-reply usage survives the store
  }
  // The second request carried the stored history (4 messages) and its question.
  EXPECT_EQ(server_->requests().back()["body"]["messages"].size(), 5u);

  // chat resumes the thread, forks it, and both branches are stored.
  CliRun chat = run({"chat", "--db", url_, "--thread", "t1"}, "hello again\n/fork side\nbye\n");
  ASSERT_EQ(chat.exitCode, 0) << chat.err;
  EXPECT_NE(chat.out.find("forked: now on side"), std::string::npos) << chat.out;

  CliRun list = run({"history", "list", "--json", "--db", url_});
  ASSERT_EQ(list.exitCode, 0) << list.err;
  const json threads = json::parse(list.out);
  ASSERT_EQ(threads.size(), 2u) << list.out;
  const json& fork = threads[0]["id"] == "t1" ? threads[1] : threads[0];
  EXPECT_EQ(fork["parent_id"], "t1");

  CliRun exported = run({"history", "export", "t1", "--format", "json", "--db", url_});
  ASSERT_EQ(exported.exitCode, 0) << exported.err;
  const json snapshot = json::parse(exported.out);
  ASSERT_EQ(snapshot["messages"].size(), 8u) << exported.out;
  EXPECT_EQ(snapshot["messages"][6]["content"], "hello again");

  CliRun removed = run({"history", "rm", fork["id"].get<std::string>(), "--db", url_});
  ASSERT_EQ(removed.exitCode, 0) << removed.err;
  EXPECT_EQ(openStore(url_)->listThreads().size(), 1u);
}

TEST_F(CliPostgresTest, AnUnreachableDatabaseIsAClearFailure) {
  CliRun bad = run({"history", "list", "--db",
                    "postgresql://nobody@/none?host=" + (dir_ / "no-socket-here").string()});
  EXPECT_EQ(bad.exitCode, 1);
  EXPECT_NE(bad.err.find("parley: error:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("no-socket-here"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace parley
