// What a new user meets first on the command line (issue 33): a mistyped command or option
// path is named, argument errors say who speaks, `ask` with nothing configured talks to the
// offline demo as `chat` does, a reader that stops reading is no error, and a piped chat says
// that a turn failed. The real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock_fixture.hpp"

namespace parley {
namespace {

using testing::CliRun;

class FirstUseTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun run(const std::vector<std::string>& args, const std::string& input = "") {
    return testing::runCli(args, dir_, "", input);
  }

  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-first-use-test-" + std::to_string(::getpid()));
};

TEST_F(FirstUseTest, AMistypedCommandIsNamedWithTheClosestOne) {
  const CliRun typo = run({"modles"});
  EXPECT_EQ(typo.exitCode, 2);
  EXPECT_NE(typo.err.find("parley: unknown command \"modles\" (did you mean models?)"),
            std::string::npos)
      << typo.err;
  const CliRun nothingClose = run({"frobnicate"});
  EXPECT_EQ(nothingClose.exitCode, 2);
  EXPECT_NE(nothingClose.err.find("parley: unknown command \"frobnicate\"; parley --help"),
            std::string::npos)
      << nothingClose.err;
}

TEST_F(FirstUseTest, ArgumentErrorsSayWhoSpeaks) {
  const CliRun bad = run({"ask", "--max-iterations", "many", "hi"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_EQ(bad.err.rfind("parley: ", 0), 0u) << bad.err;
}

TEST_F(FirstUseTest, AConfigPathThatIsNoFileAndAnUnknownProfileAreErrors) {
  const CliRun missing =
      run({"ask", "--config", (dir_ / "confg.toml").string(), "--no-save", "hi"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("--config: no such file: "), std::string::npos) << missing.err;
  EXPECT_EQ(missing.out, "");

  const std::string config = (dir_ / "config.toml").string();
  std::ofstream(config) << "[profiles.local]\nbase_url = \"http://127.0.0.1:1/v1\"\n";
  const CliRun unknown = run({"ask", "--config", config, "--profile", "remote", "--no-save", "hi"});
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("--profile: unknown profile \"remote\" (known: local)"),
            std::string::npos)
      << unknown.err;
  EXPECT_EQ(unknown.err.find("profileId"), std::string::npos) << unknown.err;
}

// As `parley chat` does: no endpoint anywhere, the demo agent answers offline (and the demo
// tools are offered), never a request to a real provider.
TEST_F(FirstUseTest, AskWithNothingConfiguredTalksToTheOfflineDemo) {
  const CliRun ask = run({"ask", "--no-save", "--format", "markdown", "what is 6 * 7"});
  ASSERT_EQ(ask.exitCode, 0) << ask.err;
  EXPECT_NE(ask.err.find("demo agent"), std::string::npos) << ask.err;
  EXPECT_NE(ask.out.find("calculate says: {\"expression\":\"6 * 7\",\"result\":42}"),
            std::string::npos)
      << ask.out;
}

// `parley history list | head`: the reader went away; nothing to report.
TEST_F(FirstUseTest, AReaderThatStopsReadingIsNoError) {
  auto server = testing::startMockServer(R"({"reply": {"content": "ok"}})");
  ASSERT_EQ(run({"ask", "--base-url", server->baseUrl(), "hello"}).exitCode, 0);
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  ::close(out[0]);  // nobody will read: every write fails with EPIPE
  const std::string errFile = (dir_ / "list-stderr").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    std::FILE* err = std::fopen(errFile.c_str(), "w");
    if (err) ::dup2(::fileno(err), STDERR_FILENO);
    ::setenv("XDG_DATA_HOME", (dir_ / "data").c_str(), 1);
    testing::execCli({"history", "list"});
  }
  ::close(out[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::ifstream err(errFile);
  const std::string text((std::istreambuf_iterator<char>(err)), {});
  EXPECT_EQ(text, "");
  server->stop();
}

TEST_F(FirstUseTest, APipedChatSaysThatATurnFailed) {
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  const CliRun chat =
      run({"chat", "--db", (dir_ / "chat.db").string(), "--base-url", "http://127.0.0.1:1/v1"},
          "hello\n/quit\n");
  EXPECT_EQ(chat.exitCode, 1) << chat.out << chat.err;
  EXPECT_NE(chat.out.find("error: "), std::string::npos) << chat.out;
}

}  // namespace
}  // namespace parley
