// `parley ask` with the tool loop, user tools and stored threads, end to end against the mock's
// demo agent (which calls get_weather, get_time and calculate when they are offered).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "child_process.hpp"
#include "cli_runner.hpp"
#include "demo_tools.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "parley/tools.hpp"
#include "store/sqlite_store.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

class AskToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<mock::MockServer>(mock::MockOptions{});  // the demo agent
    server_->start();
  }
  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun ask(std::vector<std::string> args) {
    args.insert(args.begin(), {"ask", "--base-url", server_->baseUrl()});
    return testing::runCli(args, dir_);
  }

  std::string writeFile(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(dir_);
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  // The tool message the model saw on the last request.
  json lastToolMessage() {
    const json body = server_->requests().back()["body"];
    for (auto it = body["messages"].rbegin(); it != body["messages"].rend(); ++it) {
      if ((*it)["role"] == "tool") return *it;
    }
    return nullptr;
  }

  // The peak memory (KiB) and exit code of `parley ask <args>`, run directly (no shell) so
  // that wait4() reports the process itself; its output goes to files in dir_.
  struct Measured {
    int exitCode = -1;
    long maxRssKib = 0;
    std::string err;
  };
  Measured askMeasured(std::vector<std::string> args) {
    args.insert(args.begin(), {"ask", "--base-url", server_->baseUrl()});
    std::filesystem::create_directories(dir_);
    const std::string errPath = (dir_ / "measured.err").string();
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int out = ::open("/dev/null", O_WRONLY);
      const int err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, 1);
      ::dup2(err, 2);
      testing::execCli(args);
    }
    Measured measured;
    int status = 0;
    rusage usage{};
    while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
    }
    measured.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    measured.maxRssKib = usage.ru_maxrss;
    std::ifstream in(errPath);
    measured.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return measured;
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-ask-tools-test-" + std::to_string(::getpid()));
};

TEST(DemoTools, CalculatorFollowsArithmetic) {
  using cli::evaluateExpression;
  EXPECT_DOUBLE_EQ(evaluateExpression("2 + 3 * 4"), 2 + 3 * 4);
  EXPECT_DOUBLE_EQ(evaluateExpression("(2 + 3) * 4"), (2 + 3) * 4);
  EXPECT_DOUBLE_EQ(evaluateExpression("-2 ^ 2"), std::pow(-2.0, 2.0));
  EXPECT_DOUBLE_EQ(evaluateExpression("2 ^ 3 ^ 2"), std::pow(2.0, 9.0));
  EXPECT_DOUBLE_EQ(evaluateExpression("7 % 4 - 1.5 / 3"), std::fmod(7.0, 4.0) - 1.5 / 3);
  for (const char* bad : {"", "2 +", "(1", "1 / 0", "2 x", "1..2"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(evaluateExpression(bad), ValidationError);
  }
}

TEST_F(AskToolsTest, DemoToolsRunInTheLoop) {
  CliRun run = ask({"--tools", "demo", "--json", "what is (2 + 3) * 4"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  json out = json::parse(run.out);
  EXPECT_EQ(out["finish_reason"], "stop");
  ASSERT_EQ(server_->requests().size(), 2u);  // the tool call, then the answer
  json tool = lastToolMessage();
  EXPECT_EQ(json::parse(tool["content"].get<std::string>())["result"], (2 + 3) * 4);
  EXPECT_NE(out["message"]["content"].get<std::string>().find("calculate says"), std::string::npos);
  // The tools were offered on every call.
  EXPECT_EQ(server_->requests().front()["body"]["tools"].size(), 3u);

  CliRun plain = ask({"--tools", "demo", "weather in Paris"});
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  EXPECT_NE(plain.err.find("[tool] get_weather {\"city\":\"Paris\"}"), std::string::npos)
      << plain.err;
  EXPECT_NE(plain.out.find("get_weather says:"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("Paris"), std::string::npos) << plain.out;
  // The fake weather is a function of the city.
  CliRun again = ask({"--tools", "demo", "--no-stream", "weather in Paris"});
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_EQ(again.out, plain.out);
}

TEST_F(AskToolsTest, MaxIterationsBoundsTheLoop) {
  CliRun run = ask({"--tools", "demo", "--max-iterations", "1", "--json", "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(json::parse(run.out)["finish_reason"], "max_iterations");
  EXPECT_EQ(server_->requests().size(), 1u);
  CliRun zero = ask({"--tools", "demo", "--max-iterations", "0", "x"});
  EXPECT_EQ(zero.exitCode, 2);
  EXPECT_NE(zero.err.find("--max-iterations"), std::string::npos) << zero.err;
}

TEST_F(AskToolsTest, ToolsFileCommandsGetArgumentsOnStdin) {
  const std::string file = writeFile("tools.toml", R"(
[[tool]]
name = "get_weather"
description = "Upper-cases its arguments"
command = ["tr", "a-z", "A-Z"]
[tool.parameters]
type = "object"
properties = { city = { type = "string" } }
required = ["city"]

[[tool]]
name = "get_time"
command = ["sh", "-c", "echo broken clock >&2; exit 3"]
)");
  CliRun run = ask({"--tools-file", file, "--json", "weather in Oslo"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(json::parse(lastToolMessage()["content"].get<std::string>()), json({{"CITY", "OSLO"}}));

  CliRun failing = ask({"--tools-file", file, "--json", "what time is it"});
  ASSERT_EQ(failing.exitCode, 0) << failing.err;
  const std::string error =
      json::parse(lastToolMessage()["content"].get<std::string>())["error"].get<std::string>();
  EXPECT_NE(error.find("exited with status 3: broken clock"), std::string::npos) << error;
}

TEST_F(AskToolsTest, ToolsFileTimeoutKillsTheCommand) {
  const std::string file = writeFile("slow.toml", R"(
[[tool]]
name = "get_time"
command = ["sleep", "30"]
timeout_ms = 200
)");
  CliRun run = ask({"--tools-file", file, "--json", "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json content = json::parse(lastToolMessage()["content"].get<std::string>());
  ASSERT_TRUE(content.contains("error")) << content;
}

// --timeout bounds the whole turn: a tool that would run for 30 s (and may, by its own
// timeout_ms) is stopped when the turn's second is up, and ask fails instead of exiting 0.
TEST_F(AskToolsTest, TimeoutBoundsTheWholeTurnToolsIncluded) {
  const std::string file = writeFile("slow.toml", R"(
[[tool]]
name = "get_time"
command = ["sleep", "30"]
timeout_ms = 60000
)");
  CliRun run = ask({"--tools-file", file, "--timeout", "1000", "what time is it"});
  EXPECT_EQ(run.exitCode, 1) << run.err;
  EXPECT_NE(run.err.find("did not finish within its timeout of 1000 ms"), std::string::npos)
      << run.err;
}

TEST_F(AskToolsTest, ToolOutputIsCappedAndReadInBoundedMemory) {
  // 40 MB of output: it used to take about 25 bytes of memory per byte (1 GB here), went to the
  // model whole and was echoed whole to stderr.
  const std::string file = writeFile("flood.toml", R"(
[[tool]]
name = "get_time"
command = ["sh", "-c", "echo BEGIN; head -c 40000000 /dev/zero | tr '\\0' z; echo; echo END"]
)");
  Measured run = askMeasured({"--tools-file", file, "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err.substr(0, 2000);
  EXPECT_LT(run.maxRssKib, 100 * 1024) << "peak memory of parley ask, KiB";
  const std::string content = lastToolMessage()["content"].get<std::string>();
  EXPECT_LE(content.size(), kDefaultMaxToolResultBytes);
  EXPECT_EQ(content.rfind("BEGIN\n", 0), 0u);
  EXPECT_EQ(content.substr(content.size() - 4), "END\n");
  EXPECT_NE(content.find("bytes cut here: the output was 40000011 bytes"), std::string::npos);
  // The CLI shows a one-line preview of it.
  EXPECT_LT(run.err.size(), 1000u) << run.err.substr(0, 2000);
  EXPECT_NE(run.err.find("[tool] get_time -> BEGIN zzz"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("... (" + std::to_string(content.size()) + " bytes)"), std::string::npos)
      << run.err;
}

TEST_F(AskToolsTest, ToolThatDoesNotReadItsArgumentsDoesNotKillParley) {
  // 200 KB of arguments outgrow the pipe; `echo ok` exits without reading them. Writing the
  // rest used to raise SIGPIPE and end parley with status 141.
  server_->setScript(mock::readScript(
      json{{"match", {{"last_role", "user"}}},
           {"reply",
            {{"tool_calls", json::array({{{"name", "get_time"},
                                          {"arguments", {{"pad", std::string(200'000, 'p')}}}}})}}}}
          .dump() +
      "\n" + R"({"reply": {"content": "tool said {{last_tool}}"}})"));
  const std::string file = writeFile("deaf.toml", R"(
[[tool]]
name = "get_time"
command = ["sh", "-c", "echo ok"]
)");
  CliRun run = ask({"--tools-file", file, "--json", "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err.substr(0, 2000);
  EXPECT_EQ(lastToolMessage()["content"], "ok");
  EXPECT_EQ(json::parse(run.out)["message"]["content"], "tool said ok");
}

TEST_F(AskToolsTest, ToolOutputThatIsNotUtf8IsRepairedNotAUsageError) {
  // It used to end the turn with exit 2 (bad command line) after the tool had run.
  const std::string file = writeFile("latin1.toml", R"(
[[tool]]
name = "get_time"
command = ["printf", "12:00 caf\\351"]
)");
  CliRun run = ask({"--tools-file", file, "--json", "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const std::string content = lastToolMessage()["content"].get<std::string>();
  EXPECT_EQ(content.rfind("12:00 caf\xEF\xBF\xBD", 0), 0u) << content;
  EXPECT_NE(content.find("not valid UTF-8"), std::string::npos) << content;
}

TEST_F(AskToolsTest, ToolsFileLongestTimeoutRunsTheCommand) {
  const std::string file = writeFile("forever.toml", R"(
[[tool]]
name = "get_time"
command = ["echo", "noon"]
timeout_ms = 9223372036854775807
)");
  CliRun run = ask({"--tools-file", file, "--json", "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(lastToolMessage()["content"], "noon");
}

TEST_F(AskToolsTest, BadToolsFileIsAUsageErrorNamingTheField) {
  const std::string file = writeFile("bad.toml", "[[tool]]\nname = \"x\"\n");
  CliRun run = ask({"--tools-file", file, "hi"});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("tool[0].command"), std::string::npos) << run.err;
  CliRun unknownSet = ask({"--tools", "kitchen", "hi"});
  EXPECT_EQ(unknownSet.exitCode, 2);
  EXPECT_NE(unknownSet.err.find("kitchen"), std::string::npos) << unknownSet.err;
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(AskToolsTest, ThreadContinuesAcrossRuns) {
  const std::string db = (dir_ / "chat.db").string();
  std::filesystem::create_directories(dir_);
  CliRun first = ask({"--db", db, "--thread", "t1", "--system", "Be brief.", "hello"});
  ASSERT_EQ(first.exitCode, 0) << first.err;
  CliRun second = ask({"--db", db, "--thread", "t1", "--tools", "demo", "what is 6 * 7"});
  ASSERT_EQ(second.exitCode, 0) << second.err;
  CliRun third = ask({"--db", db, "--thread", "t1", "and again"});
  ASSERT_EQ(third.exitCode, 0) << third.err;

  // The last request carried the whole history.
  const json messages = server_->requests().back()["body"]["messages"];
  ASSERT_EQ(messages.size(), 8u) << messages.dump();
  EXPECT_EQ(messages[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(messages[1]["content"], "hello");
  EXPECT_EQ(messages[2]["content"], "You said: hello");
  EXPECT_EQ(messages[3]["content"], "what is 6 * 7");
  EXPECT_EQ(messages[5]["role"], "tool");
  EXPECT_EQ(messages[7]["content"], "and again");

  // And the store holds every turn, whole.
  SqliteStore store(db);
  ConversationManager manager;
  loadConversation(store, "t1", manager);
  EXPECT_EQ(manager.getMessageCount(), 9u);
  EXPECT_EQ(manager.getAllMessages().back().content, "You said: and again");
}

TEST_F(AskToolsTest, FailedTurnLeavesTheThreadAsItWas) {
  const std::string db = (dir_ / "chat.db").string();
  std::filesystem::create_directories(dir_);
  ASSERT_EQ(ask({"--db", db, "--thread", "t2", "hello"}).exitCode, 0);
  server_->stop();
  CliRun failed = ask({"--db", db, "--thread", "t2", "lost"});
  EXPECT_EQ(failed.exitCode, 1);
  SqliteStore store(db);
  EXPECT_EQ(store.threadInfo("t2")->messageCount, 2);
}

TEST_F(AskToolsTest, KilledRunLeavesWholeTurnsOnly) {
  // The answer to a tool result never comes: the run is killed while it waits for it, after
  // the model asked for a tool and the tool ran.
  server_->setScript(mock::readScript(R"(
{"match": {"last_role": "tool"}, "delay_ms": 60000, "reply": {"content": "too late"}}
{"match": {"user_contains": "compute"}, "reply": {"tool_calls": [{"name": "calculate", "arguments": {"expression": "6*7"}}]}}
{"reply": {"content": "ok"}}
)"));
  const std::string db = (dir_ / "chat.db").string();
  std::filesystem::create_directories(dir_);
  ASSERT_EQ(ask({"--db", db, "--thread", "t", "hello"}).exitCode, 0);
  {
    testing::ChildProcess run({PARLEY_CLI_PATH, "ask", "--base-url", server_->baseUrl(), "--db", db,
                               "--thread", "t", "--tools", "demo", "compute"});
    run.closeInput();  // `ask` reads a stdin that is not a terminal to its end
    ASSERT_TRUE(server_->waitForRequests(3, std::chrono::seconds(30)));
    EXPECT_EQ(server_->requests().back()["body"]["messages"].back()["role"], "tool");
    run.kill(SIGKILL);
    EXPECT_EQ(run.wait(), 128 + SIGKILL);
  }
  // The stored thread holds the first turn only, whole; the next run continues from it.
  SqliteStore store(db);
  EXPECT_EQ(store.threadInfo("t")->messageCount, 2);
  ASSERT_EQ(ask({"--db", db, "--thread", "t", "again"}).exitCode, 0);
  EXPECT_EQ(server_->requests().back()["body"]["messages"].size(), 3u);
  EXPECT_EQ(SqliteStore(db).threadInfo("t")->messageCount, 4);
}

TEST_F(AskToolsTest, DbWithoutThreadStartsANewOne) {
  const std::string db = (dir_ / "chat.db").string();
  std::filesystem::create_directories(dir_);
  CliRun run = ask({"--db", db, "hi"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  SqliteStore store(db);
  auto threads = store.listThreads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(run.err.find("saved as thread " + threads[0].id), std::string::npos) << run.err;
  EXPECT_EQ(threads[0].messageCount, 2);
}

}  // namespace
}  // namespace parley
