// `parley chat` end to end in its line mode (stdin is not a terminal): a scripted session against
// the in-process mock (no endpoint configured) and against a test-run mock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/store.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

class ChatTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun chat(std::vector<std::string> args, const std::string& input,
              const std::string& env = "") {
    args.insert(args.begin(), {"chat", "--db", db_});
    return testing::runCli(args, dir_, env, input);
  }

  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("parley-chat-test-" + std::to_string(::getpid()));
  std::string db_ = (dir_ / "chat.db").string();
};

TEST_F(ChatTest, WithoutAnEndpointItTalksToTheBuiltInMock) {
  CliRun run = chat({}, "hello there\nweather in Paris\n/usage\n/quit\nnot read\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const std::string firstLine = run.out.substr(0, run.out.find('\n'));
  EXPECT_NE(firstLine.find("built-in mock"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("You said: hello there"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[tool] get_weather {\"city\":\"Paris\"}"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[tool] get_weather -> {\"city\":\"Paris\""), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("get_weather says:"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("all calls:"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("You said: not read"), std::string::npos) << run.out;

  // The session was saved: one thread, both turns whole.
  SqliteStore store(db_);
  auto threads = store.listThreads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].messageCount, 2 + 4);
}

TEST_F(ChatTest, ForkSwitchUndoSaveAndResume) {
  mock::MockServer server(mock::MockOptions{});
  server.start();
  const std::string snapshot = (dir_ / "snap.json").string();
  CliRun run = chat({"--base-url", server.baseUrl(), "--thread", "t1", "--system", "Be kind."},
                    "one\n/fork side\ntwo\n/branches\n/switch main\n/history\n"
                    "/truncate {\"keepLast\": 1}\n/undo\n/save " +
                        snapshot + "\n/bogus\n/switch nowhere\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("model gpt-4o-mini at " + server.baseUrl()), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("forked: now on side"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("* side"), std::string::npos) << run.out;
  // main's history does not hold the turn made on the fork.
  const size_t history = run.out.find("[0] system: Be kind.");
  ASSERT_NE(history, std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("[3] user: two", history), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("truncate: 1 messages visible"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("undone: 3 messages visible"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("error: /bogus: unknown command (try /help)"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("no branch \"nowhere\""), std::string::npos) << run.out;
  ASSERT_TRUE(std::filesystem::exists(snapshot));
  EXPECT_EQ(json::parse(std::ifstream(snapshot))["messages"].size(), 3u);

  // Resume: the next request carries the stored history.
  CliRun resumed = chat({"--base-url", server.baseUrl(), "--thread", "t1"}, "three\n");
  ASSERT_EQ(resumed.exitCode, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("thread t1 (resumed)"), std::string::npos) << resumed.out;
  const json messages = server.requests().back()["body"]["messages"];
  ASSERT_EQ(messages.size(), 4u) << messages.dump();
  EXPECT_EQ(messages[1]["content"], "one");
  EXPECT_EQ(messages[3]["content"], "three");

  // The fork is a stored thread of its own, forked from t1.
  SqliteStore store(db_);
  size_t forks = 0;
  for (const auto& info : store.listThreads()) {
    if (info.parentId == "t1") {
      ++forks;
      ConversationManager fork;
      store.load(info.id, fork);
      EXPECT_EQ(fork.getAllMessages().back().content, "You said: two");
    }
  }
  EXPECT_EQ(forks, 1u);
  server.stop();
}

}  // namespace
}  // namespace parley
