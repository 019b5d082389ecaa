// Command tools: tools files, and the processes they run (bounded output, EPIPE, UTF-8).
#include "parley/command_tools.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "parley/errors.hpp"

namespace parley {
namespace {

using nlohmann::json;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CommandToolsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string writeFile(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(dir_);
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  std::string errorOfLoad(const std::string& text) {
    try {
      loadToolsFile(writeFile("tools.toml", text), *registry_);
    } catch (const ValidationError& e) {
      return e.what();
    }
    return "";
  }

  ToolResult call(const std::string& name, const std::string& arguments = "{}") {
    ToolExecutor executor(registry_);
    return executor.execute({"c1", name, arguments});
  }

  std::shared_ptr<ToolRegistry> registry_ = std::make_shared<ToolRegistry>();
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-command-tools-test-" + std::to_string(::getpid()));
};

TEST_F(CommandToolsTest, AToolsFileRegistersCommandsThatGetTheirArgumentsOnStdin) {
  loadToolsFile(writeFile("tools.toml", R"(
[[tool]]
name = "shout"
description = "Upper-cases its arguments"
command = ["tr", "a-z", "A-Z"]
timeout_ms = 5000
max_result_bytes = 2048
[tool.parameters]
type = "object"
properties = { text = { type = "string" } }

[[tool]]
name = "words"
command = ["sh", "-c", "echo not json"]
parameters = '{"type": "object"}'
)"),
                *registry_);
  EXPECT_EQ(registry_->names(), (std::vector<std::string>{"shout", "words"}));
  EXPECT_EQ(registry_->find("shout")->options.maxResultBytes, 2048u);
  EXPECT_EQ(registry_->find("shout")->options.timeout, std::chrono::milliseconds(5000));
  EXPECT_EQ(registry_->find("shout")->description, "Upper-cases its arguments");

  ToolResult shout = call("shout", R"({"text": "hi"})");
  ASSERT_TRUE(shout.success) << shout.error;
  EXPECT_EQ(shout.result, json({{"TEXT", "HI"}}));  // JSON output stays JSON
  ToolResult words = call("words");
  ASSERT_TRUE(words.success) << words.error;
  EXPECT_EQ(words.result, "not json");  // anything else is text, without its last newline
}

TEST_F(CommandToolsTest, BadFilesNameTheFieldAndRegisterNothing) {
  registry_->add("taken", "", nullptr, [](const json&, ToolContext&) -> json { return 1; });
  const std::string ok = "[[tool]]\nname = \"ok\"\ncommand = [\"true\"]\n";
  struct Case {
    std::string text, error;
  };
  const Case cases[] = {
      {ok + "[[tool]]\nname = \"x\"\n", "tool[1].command: required"},
      {ok + "[[tool]]\nname = \"x\"\ncommand = [\"true\"]\ncolour = 1\n",
       "tool[1].colour: unknown key"},
      {ok + "[[tool]]\nname = \"x\"\ncommand = [\"true\"]\nmax_result_bytes = 10\n",
       "tool[1].max_result_bytes: must be an integer >= 1024"},
      {ok + "[[tool]]\nname = \"x\"\ncommand = [\"true\"]\ntimeout_ms = 0\n",
       "tool[1].timeout_ms: must be a positive integer"},
      {ok + "[[tool]]\nname = \"x\"\ncommand = [\"true\"]\nparameters = '" + std::string(200, '[') +
           std::string(200, ']') + "'\n",
       "tool[1].parameters: JSON nested deeper than 128 levels"},
      {ok + "[[tool]]\nname = \"taken\"\ncommand = [\"true\"]\n",
       "\"taken\" is already registered"},
      {ok + "[[tool]]\nname = \"ok\"\ncommand = [\"true\"]\n", "\"ok\" is already registered"},
      {"[[tool]]\nname = \n", "tools.toml:2:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string error = errorOfLoad(c.text);
    EXPECT_TRUE(contains(error, c.error)) << error;
    EXPECT_EQ(registry_->names(), std::vector<std::string>{"taken"});
  }
}

TEST_F(CommandToolsTest, ALongestTimeoutRunsTheCommand) {
  // 2^63 - 1 ms used to overflow into a deadline in the past: the command was killed at once.
  loadToolsFile(writeFile("tools.toml", R"(
[[tool]]
name = "ok"
command = ["echo", "fine"]
timeout_ms = 9223372036854775807
)"),
                *registry_);
  ToolResult result = call("ok");
  ASSERT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.result, "fine");
}

TEST_F(CommandToolsTest, ACommandThatDoesNotReadItsInputIsNotASignal) {
  // The arguments outgrow the pipe's buffer and the reader is gone: write() fails with EPIPE.
  // SIGPIPE is at its default action here, as in most applications: raised, it would end this
  // test program.
  ASSERT_EQ(::signal(SIGPIPE, SIG_DFL), SIG_DFL);
  addCommandTool(*registry_, {"ok", "", {"sh", "-c", "echo ok"}, nullptr, {}, {}});
  const std::string big = json{{"data", std::string(200'000, 'x')}}.dump();
  for (int i = 0; i < 3; ++i) {
    ToolResult result = call("ok", big);
    ASSERT_TRUE(result.success) << result.error;
    EXPECT_EQ(result.result, "ok");
  }
  // Small arguments lose the race only now and then: many calls in one batch.
  std::vector<ToolCall> calls;
  for (int i = 0; i < 200; ++i)
    calls.push_back({"c" + std::to_string(i), "ok", R"({"n": 1})"});
  ToolExecutor executor(registry_);
  for (const ToolResult& result : executor.executeAll(calls)) {
    ASSERT_TRUE(result.success) << result.error;
    EXPECT_EQ(result.result, "ok");
  }
}

TEST_F(CommandToolsTest, OutputPastTheCapKeepsHeadAndTail) {
  addCommandTool(*registry_, {"flood",
                              "",
                              {"sh", "-c",
                               "echo FIRST; head -c 30000000 /dev/zero | tr '\\0' y; "
                               "echo; echo LAST"},
                              nullptr,
                              {.maxResultBytes = 8192},
                              {}});
  ToolResult result = call("flood");
  ASSERT_TRUE(result.success) << result.error;
  const std::string content = result.content();
  EXPECT_LE(content.size(), 8192u);
  EXPECT_EQ(content.rfind("FIRST\n", 0), 0u);
  EXPECT_EQ(content.substr(content.size() - 5), "LAST\n");
  EXPECT_TRUE(contains(content, "bytes cut here: the output was 30000012 bytes")) << content;
}

TEST_F(CommandToolsTest, OutputThatIsNotUtf8IsRepairedAndSaysSo) {
  addCommandTool(*registry_, {"latin1", "", {"printf", "caf\\351 ok"}, nullptr, {}, {}});
  ToolResult result = call("latin1");
  ASSERT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.content().rfind("caf\xEF\xBF\xBD ok", 0), 0u) << result.content();
  EXPECT_TRUE(contains(result.content(), "not valid UTF-8")) << result.content();
}

TEST_F(CommandToolsTest, AFailureCarriesTheEndOfStderrOnly) {
  addCommandTool(*registry_, {"fails",
                              "",
                              {"sh", "-c",
                               "head -c 1000000 /dev/zero | tr '\\0' e >&2; "
                               "echo ' the real reason' >&2; exit 3"},
                              nullptr,
                              {},
                              {}});
  ToolResult result = call("fails");
  ASSERT_FALSE(result.success);
  EXPECT_TRUE(contains(result.error, "exited with status 3")) << result.error.substr(0, 200);
  EXPECT_TRUE(contains(result.error, "the real reason"));
  EXPECT_LT(result.error.size(), 9000u);
}

// Runs `script` (sh -c) as a tool command whose background child reports its pid on a FIFO,
// stops the call when `cancel` once that pid is known, and waits until that child is gone
// (a pidfd: it is not our child). Returns whether the child had created `late` by then.
bool backgroundChildOutlivesTheCall(const std::filesystem::path& dir, const std::string& script,
                                    bool cancel) {
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "ready").string();
  const std::string late = (dir / "late").string();
  std::filesystem::remove(fifo);
  std::filesystem::remove(late);
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::stop_source stop;
  ToolContext context;
  context.stopToken = stop.get_token();
  std::string error;
  std::thread run([&] {
    try {
      runToolCommand({"sh", "-c", script, "sh", fifo, late}, "", context);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  pid_t child = 0;
  std::ifstream(fifo) >> child;  // opens when the command does
  const int pidfd = child > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, child, 0)) : -1;
  if (cancel) stop.request_stop();
  run.join();
  if (cancel) {
    EXPECT_NE(error.find("was stopped"), std::string::npos) << error;
  }
  EXPECT_GT(child, 0);
  if (pidfd >= 0) {
    pollfd gone{pidfd, POLLIN, 0};
    EXPECT_EQ(::poll(&gone, 1, 10'000), 1) << "the background child is still running";
    ::close(pidfd);
  }
  return std::filesystem::exists(late);
}

TEST_F(CommandToolsTest, ACancelKillsWhatTheCommandStarted) {
  // The child would create the file a second after the cancel.
  EXPECT_FALSE(backgroundChildOutlivesTheCall(
      dir_, R"((sleep 1; touch "$2") & echo $! > "$1"; exec sleep 30)", true));
}

TEST_F(CommandToolsTest, ACommandThatExitsLeavesNothingRunning) {
  // The child lets go of stdout and stderr, so the call ends when the command does.
  EXPECT_FALSE(backgroundChildOutlivesTheCall(
      dir_, R"((exec >/dev/null 2>&1; sleep 1; touch "$2") & echo $! > "$1")", false));
}

TEST_F(CommandToolsTest, TheEnvironmentIsAnAllowList) {
  ::setenv("PARLEY_TEST_API_KEY", "sk-hidden", 1);
  ::setenv("PARLEY_TEST_NAMED", "shown", 1);
  ::setenv("LC_PARLEY_TEST", "kept", 1);
  loadToolsFile(writeFile("tools.toml", R"(
[[tool]]
name = "plain"
command = ["env"]

[[tool]]
name = "named"
command = ["env"]
env = ["PARLEY_TEST_API_KEY", "PARLEY_TEST_NAMED"]
)"),
                *registry_);
  const ToolResult plain = call("plain");
  ASSERT_TRUE(plain.success) << plain.error;
  const std::string seen = plain.result.get<std::string>();
  EXPECT_TRUE(contains(seen, "PATH=")) << seen;
  EXPECT_TRUE(contains(seen, "LC_PARLEY_TEST=kept")) << seen;
  EXPECT_FALSE(contains(seen, "sk-hidden")) << seen;
  EXPECT_FALSE(contains(seen, "PARLEY_TEST_NAMED")) << seen;
  const ToolResult named = call("named");
  ASSERT_TRUE(named.success) << named.error;
  EXPECT_TRUE(contains(named.result.get<std::string>(), "PARLEY_TEST_API_KEY=sk-hidden"));
  EXPECT_TRUE(contains(named.result.get<std::string>(), "PARLEY_TEST_NAMED=shown"));
  EXPECT_NE(errorOfLoad("[[tool]]\nname = \"x\"\ncommand = [\"env\"]\nenv = [\"A=B\"]\n")
                .find("tool[0].env"),
            std::string::npos);
  ::unsetenv("PARLEY_TEST_API_KEY");
  ::unsetenv("PARLEY_TEST_NAMED");
  ::unsetenv("LC_PARLEY_TEST");
}

TEST_F(CommandToolsTest, TheCommandStartsWithDefaultSignals) {
  // An ignored signal stays ignored across exec, and a blocked one stays blocked: an application
  // that ignores SIGPIPE (as the parley command line does) or blocks signals in its threads
  // must not hand that to the tools it runs.
  auto previous = ::signal(SIGPIPE, SIG_IGN);
  sigset_t usr1, before;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &before);
  ToolContext context;
  const std::string status = runToolCommand({"cat", "/proc/self/status"}, "", context);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::signal(SIGPIPE, previous);

  auto mask = [&](const std::string& name) {
    const auto at = status.find("\n" + name + ":\t");
    EXPECT_NE(at, std::string::npos) << name;
    return std::stoull(status.substr(at + name.size() + 3, 16), nullptr, 16);
  };
  EXPECT_EQ(mask("SigIgn") & (1ull << (SIGPIPE - 1)), 0u);
  EXPECT_EQ(mask("SigBlk"), 0u);
}

}  // namespace
}  // namespace parley

namespace parley {
namespace {

TEST_F(CommandToolsTest, IdempotentAndRequiresApprovalAreFlagsOfTheFile) {
  loadToolsFile(writeFile("tools.toml", R"(
[[tool]]
name = "count"
command = ["true"]
idempotent = true
requires_approval = true

[[tool]]
name = "plain"
command = ["true"]
)"),
                *registry_);
  EXPECT_TRUE(registry_->find("count")->options.idempotent);
  EXPECT_TRUE(registry_->find("count")->options.requiresApproval);
  EXPECT_FALSE(registry_->find("plain")->options.idempotent);
  EXPECT_FALSE(registry_->find("plain")->options.requiresApproval);

  auto fresh = std::make_shared<ToolRegistry>();
  registry_ = fresh;
  EXPECT_NE(errorOfLoad("[[tool]]\nname = \"x\"\ncommand = [\"true\"]\nidempotent = \"yes\"\n")
                .find("tool[0].idempotent: must be true or false"),
            std::string::npos);
  EXPECT_EQ(registry_->size(), 0u);
}

}  // namespace
}  // namespace parley
