// `parley chat` end to end in its line mode (stdin is not a terminal): a scripted session against
// the in-process mock (no endpoint configured) and against a test-run mock.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "png_fixture.hpp"
#include "store/sqlite_store.hpp"

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
  EXPECT_EQ(run.out.find("[cost"), std::string::npos) << run.out;  // the demo costs nothing

  // The session was saved: one thread, both turns whole.
  SqliteStore store(db_);
  auto threads = store.listThreads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].messageCount, 2 + 4);
}

// /usage's context follows the view: a local count after /truncate, the API's report again
// after /undo brings back the view it was made for.
TEST_F(ChatTest, UsageContextFollowsTheViewThroughTruncateAndUndo) {
  CliRun run = chat({},
                    "hello\nweather in Paris\nhow are you\nthanks\n/usage\n"
                    "/truncate {\"keepLast\": 3}\n/usage\n/undo\n/usage\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  std::vector<std::string> context;
  for (size_t at = run.out.find("context: "); at != std::string::npos;
       at = run.out.find("context: ", at + 1))
    context.push_back(run.out.substr(at, run.out.find('\n', at) - at));
  ASSERT_EQ(context.size(), 3u) << run.out;
  EXPECT_EQ(context[0].find("(est.)"), std::string::npos) << context[0];
  EXPECT_NE(context[1].find("(est.)"), std::string::npos) << context[1];
  EXPECT_NE(context[1], context[0]);
  EXPECT_EQ(context[2], context[0]) << run.out;
}

TEST_F(ChatTest, ReasoningIsShownFoldedOverEveryProtocol) {
  mock::MockOptions options;
  options.script = mock::readScript(
      R"({"reply": {"reasoning_content": "The user greets me.\nAnswer briefly.", "content": "Hello!", "usage": {"prompt_tokens": 30, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 12}, "completion_tokens_details": {"reasoning_tokens": 5}}}})");
  mock::MockServer server(options);
  server.start();
  for (const char* protocol : {"openai-chat", "openai-responses", "anthropic"}) {
    for (const char* mode : {"--stream", "--no-stream"}) {
      SCOPED_TRACE(std::string(protocol) + " " + mode);
      CliRun run = chat({"--base-url", server.baseUrl(), "--protocol", protocol, mode},
                        "hi\n/usage\n/quit\n");
      ASSERT_EQ(run.exitCode, 0) << run.err;
      // One line, before the reply; not dimmed when stdout is not a terminal.
      const size_t folded =
          run.out.find("[reasoning] The user greets me. Answer briefly. (35 chars)\nHello!");
      EXPECT_NE(folded, std::string::npos) << run.out;
      EXPECT_EQ(run.out.find("\033["), std::string::npos) << run.out;
      // Usage in one meaning over every protocol: cached tokens inside the prompt's 30.
      const std::string reasoning =
          std::string(protocol) == "anthropic" ? "" : ", 5 reasoning";  // Anthropic reports none
      EXPECT_NE(
          run.out.find("last call: 30 prompt, 9 completion, 39 total (12 cached" + reasoning + ")"),
          std::string::npos)
          << run.out;
    }
  }
}

TEST_F(ChatTest, AnEmptyThreadIdIsRefused) {
  CliRun run = chat({"--thread", ""}, "hello\n");
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("--thread: needs a thread id"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(db_));
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
  // keepLast 1 keeps the reply; the chat keeps its system prompt before it.
  EXPECT_NE(run.out.find("truncate: 2 messages visible"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("undone: 3 messages visible"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("error: /bogus: unknown command (try /help)"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("no branch \"nowhere\""), std::string::npos) << run.out;
  ASSERT_TRUE(std::filesystem::exists(snapshot));
  // Storage is append-only: the system prompt put back after the truncation is a fourth message.
  EXPECT_EQ(json::parse(std::ifstream(snapshot))["messages"].size(), 4u);

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
      loadConversation(store, info.id, fork);
      EXPECT_EQ(fork.getAllMessages().back().content, "You said: two");
    }
  }
  EXPECT_EQ(forks, 1u);
  server.stop();
}

TEST_F(ChatTest, DashCResumesTheThreadUsedLast) {
  CliRun none = chat({"-c"}, "/quit\n");
  EXPECT_EQ(none.exitCode, 2);
  EXPECT_NE(none.err.find("no stored thread to resume"), std::string::npos) << none.err;
  ASSERT_EQ(chat({"--thread", "old"}, "first\n/quit\n").exitCode, 0);
  ASSERT_EQ(chat({"--thread", "recent"}, "second\n/quit\n").exitCode, 0);
  CliRun resumed = chat({"-c"}, "third\nquit\nnot sent\n");
  ASSERT_EQ(resumed.exitCode, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("thread recent (resumed)"), std::string::npos) << resumed.out;
  SqliteStore store(db_);
  EXPECT_EQ(store.threadInfo("recent")->messageCount, 4);  // `quit` ended it, nothing more sent
  EXPECT_EQ(store.threadInfo("old")->messageCount, 2);
}

TEST_F(ChatTest, RegenerateSettingsContinueAndBranchesThatOutliveTheSession) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "re: {{last_user}}"}})");
  mock::MockServer server(options);
  server.start();
  CliRun run = chat({"--base-url", server.baseUrl(), "--thread", "t1"},
                    "one\n/fork alt\ntwo\n/regenerate\n/set temperature 0.5\n"
                    "/set temperature 7\n/set colour blue\n/show settings\n/continue\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("regenerating on branch regen-1"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("temperature: 0.5"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("error: /set temperature: \"7\" is not a valid value"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("error: /set colour: unknown setting"), std::string::npos) << run.out;

  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 4u);  // one, two, two again, continue
  const json redo = seen[2]["body"]["messages"];
  ASSERT_EQ(redo.size(), 3u);  // one, its reply, two: the first reply to "two" is not sent
  EXPECT_EQ(redo[2]["content"], "two");
  EXPECT_FALSE(seen[2]["body"].contains("temperature"));
  EXPECT_EQ(seen[3]["body"]["temperature"], 0.5);
  EXPECT_EQ(seen[3]["body"]["messages"].back()["content"], "Continue.");

  // A new session on the thread finds the branches again, by name.
  CliRun again = chat({"--base-url", server.baseUrl(), "--thread", "t1"}, "/branches\n/quit\n");
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_NE(again.out.find("  alt  thread "), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("  regen-1  thread "), std::string::npos) << again.out;
  server.stop();
}

TEST_F(ChatTest, EditsKeepTheSystemPromptFirstAndAUserPromptNext) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "re: {{last_user}}"}})");
  mock::MockServer server(options);
  server.start();
  CliRun run = chat({"--base-url", server.baseUrl(), "--thread", "t1", "--system", "Be kind."},
                    "one\ntwo\nthree\n/truncate {\"keepLast\": 4}\n/history\n"
                    "/truncate {\"keepLast\": 3}\n/history\n/undo\n/undo\n/history\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  // keepLast 4 keeps two, re: two, three, re: three, and the system prompt stays first.
  EXPECT_NE(run.out.find("truncate: 5 messages visible\n[0] system: Be kind.\n[1] user: two\n"),
            std::string::npos)
      << run.out;
  // keepLast 3 would start with a reply: that reply goes too.
  EXPECT_NE(run.out.find("truncate: 3 messages visible\n[0] system: Be kind.\n[1] user: three\n"),
            std::string::npos)
      << run.out;
  // Each /undo takes back one whole edit, repairs included.
  EXPECT_NE(run.out.find("undone: 5 messages visible\nundone: 7 messages visible\n"),
            std::string::npos)
      << run.out;
  server.stop();
}

}  // namespace
}  // namespace parley

namespace parley {
namespace {

TEST_F(ChatTest, SystemModelClearAndLoad) {
  mock::MockOptions options;
  options.models = {"parley-mock", "other-model"};
  mock::MockServer server(options);
  server.start();
  const std::string snapshot = (dir_ / "s.json").string();
  CliRun run = chat({"--base-url", server.baseUrl(), "--no-stream", "--model", "parley-mock"},
                    "/help\none\n/save " + snapshot +
                        "\n/system\n/model\n/model fast\n/system Be short.\n/system\n"
                        "/model other-model\n/model\ntwo\n/truncate {\"keepLast\": "
                        "-1}\n/clear\n/history\n/load " +
                        snapshot + "\n/branches\nthree\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("/fork [NAME]"), std::string::npos) << run.out;
  // With no argument /system and /model show what is in use; a model not listed is refused.
  EXPECT_NE(run.out.find("no system prompt (set one: /system TEXT)\nmodel: parley-mock\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("error: /model: \"fast\" is not a model of this endpoint (it lists "
                         "parley-mock, other-model"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("system prompt: Be short.\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("model: other-model\nmodel: other-model\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("You said: one\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("error: truncate.keepLast"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("cleared: 1 messages visible"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[0] system: Be short."), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("* loaded-1"), std::string::npos) << run.out;
  std::vector<json> requests;  // the chat calls (/model also asked for the list of models)
  for (const json& request : server.requests()) {
    if (request["path"] == "/v1/chat/completions") requests.push_back(request);
  }
  ASSERT_EQ(requests.size(), 3u);
  // /system put the prompt first; /model changed the model of the next call.
  EXPECT_EQ(requests[1]["body"]["model"], "other-model");
  EXPECT_EQ(requests[1]["body"]["messages"][0],
            json({{"role", "system"}, {"content", "Be short."}}));
  // The loaded branch continues from the saved snapshot (one turn, no system prompt).
  const json last = requests[2]["body"]["messages"];
  ASSERT_EQ(last.size(), 3u) << last.dump();
  EXPECT_EQ(last[0]["content"], "one");
  EXPECT_EQ(last[2]["content"], "three");
  server.stop();
}

// The REPL on a pseudo-terminal: line editing is on, and Ctrl-C is the terminal's interrupt.
class ChatPty {
 public:
  ChatPty(const std::vector<std::string>& args, const std::string& home,
          const std::vector<std::pair<std::string, std::string>>& env = {}) {
    pid_ = ::forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      ::setenv("HOME", home.c_str(), 1);
      ::setenv("TERM", "dumb", 1);
      ::unsetenv("OPENAI_BASE_URL");
      ::unsetenv("OPENAI_API_KEY");
      ::unsetenv("NO_COLOR");
      for (const auto& [name, value] : env)
        ::setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> argv;
      static std::string program = PARLEY_CLI_PATH;
      argv.push_back(program.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~ChatPty() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  void send(const std::string& text) {
    ASSERT_EQ(::write(fd_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  // Reads until `needle` appears in the output after `from` (true) or 20 s pass (false).
  bool waitFor(const std::string& needle, size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (output_.find(needle, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buffer[4096];
        ssize_t n = ::read(fd_, buffer, sizeof buffer);
        if (n <= 0) {
          closed_ = true;
          return output_.find(needle, from) != std::string::npos;
        }
        output_.append(buffer, static_cast<size_t>(n));
      }
    }
    return true;
  }

  // Waits (20 s at most) for the terminal to close, then reaps the child; -1 if it did not end.
  int wait() {
    waitFor("\x01never\x01");  // returns at end of output (EIO) or at the deadline
    int status = 0;
    // The terminal closes as the process exits, so once it has, waiting cannot hang.
    if (!closed_ || ::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& output() const { return output_; }

  // The output as a terminal shows it in the end, lines joined by "\n": carriage returns, cursor
  // up (ESC[nA) and erase to the end of the screen (ESC[J) applied; other sequences (styles) are
  // kept in the text as they came.
  std::string screen() const {
    std::vector<std::string> lines(1);
    size_t row = 0, col = 0;
    for (size_t i = 0; i < output_.size(); ++i) {
      const char c = output_[i];
      if (c == '\r') {
        col = 0;
      } else if (c == '\n') {
        if (++row == lines.size()) lines.emplace_back();
        col = 0;
      } else if (c == '\033' && i + 1 < output_.size() && output_[i + 1] == '[') {
        size_t end = i + 2;
        while (end < output_.size() && !(output_[end] >= 0x40 && output_[end] <= 0x7e))
          ++end;
        const std::string params = output_.substr(i + 2, end - i - 2);
        const char final = end < output_.size() ? output_[end] : 'm';
        if (final == 'A') {
          row -= std::min<size_t>(row, params.empty() ? 1 : std::stoul(params));
        } else if (final == 'J') {
          lines[row].resize(std::min(col, lines[row].size()));
          lines.resize(row + 1);
        } else {
          const std::string sequence = output_.substr(i, end - i + 1);
          lines[row].replace(std::min(col, lines[row].size()), sequence.size(), sequence);
          col += sequence.size();
        }
        i = end;
      } else {
        if (col < lines[row].size()) {
          lines[row][col] = c;
        } else {
          lines[row].push_back(c);
        }
        ++col;
      }
    }
    std::string text;
    for (const std::string& line : lines)
      text += line + "\n";
    return text;
  }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string output_;
  bool closed_ = false;
};

TEST_F(ChatTest, CtrlCCancelsTheReplyAndKeepsTheSession) {
  mock::MockOptions options;
  options.script = mock::readScript(
      R"({"match": {"user_contains": "slow"}, "delay_ms": 30000, "reply": {"content": "late"}}
{"reply": {"content": "quick {{last_user}}"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  // --format markdown: the echo of what was typed is checked byte for byte.
  ChatPty pty({"chat", "--db", db_, "--thread", "t1", "--base-url", server.baseUrl(), "--format",
               "markdown"},
              dir_.string());
  ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
  pty.send("first\r");
  ASSERT_TRUE(pty.waitFor("quick first")) << pty.output();
  ASSERT_TRUE(pty.waitFor("tokens")) << pty.output();
  pty.send("slow one\r");
  ASSERT_TRUE(pty.waitFor("> slow one")) << pty.output();
  ASSERT_TRUE(pty.waitFor("...", pty.output().find("> slow one"))) << pty.output();
  pty.send("\x03");  // Ctrl-C
  ASSERT_TRUE(pty.waitFor("[cancelled")) << pty.output();
  pty.send("/history\r");
  ASSERT_TRUE(pty.waitFor("[1] assistant: quick first")) << pty.output();
  pty.send("again\r");
  ASSERT_TRUE(pty.waitFor("quick again")) << pty.output();
  pty.send("/quit\r");
  EXPECT_EQ(pty.wait(), 0) << pty.output();

  // The cancelled prompt left no trace: the store holds the two whole turns.
  SqliteStore store(db_);
  ConversationManager manager;
  loadConversation(store, "t1", manager);
  ASSERT_EQ(manager.getMessageCount(), 4u);
  EXPECT_EQ(manager.getAllMessages()[2].content, "again");
  server.stop();
}

TEST_F(ChatTest, OnATerminalRepliesAreRenderedAndNoColorTakesTheStylesAway) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "Some **bold** words\n- item"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  for (const bool noColor : {false, true}) {
    SCOPED_TRACE(noColor ? "NO_COLOR=1" : "colour");
    std::vector<std::pair<std::string, std::string>> env;
    if (noColor) env.emplace_back("NO_COLOR", "1");
    ChatPty pty({"chat", "--db", db_, "--base-url", server.baseUrl()}, dir_.string(), env);
    ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
    pty.send("hi\r");
    ASSERT_TRUE(pty.waitFor("tokens")) << pty.output();
    pty.send("/quit\r");
    EXPECT_EQ(pty.wait(), 0) << pty.output();
    // What the screen ends up showing: the line in progress is shown, taken back and shown
    // again as the reply streams.
    const std::string out = pty.screen();
    if (noColor) {
      EXPECT_NE(out.find("\nSome bold words\n- item\n"), std::string::npos) << out;
      EXPECT_EQ(pty.output().find("\033[1m"), std::string::npos) << pty.output();
    } else {
      EXPECT_NE(out.find("\nSome \033[1mbold\033[22m words\n\033[2m\u2022\033[22m item\n"),
                std::string::npos)
          << out;
    }
  }
  server.stop();
}

TEST_F(ChatTest, PromptsAreRememberedAcrossSessionsAndTabCompletesCommands) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "got {{last_user}}"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  const std::vector<std::pair<std::string, std::string>> env = {
      {"XDG_STATE_HOME", (dir_ / "state").string()}};
  {
    ChatPty pty({"chat", "--db", db_, "--base-url", server.baseUrl(), "--format", "markdown"},
                dir_.string(), env);
    ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
    pty.send("remember me\r");
    ASSERT_TRUE(pty.waitFor("got remember me")) << pty.output();
    ASSERT_TRUE(pty.waitFor("tokens")) << pty.output();
    pty.send("/bran\t\r");  // Tab completes the command
    ASSERT_TRUE(pty.waitFor("* main  thread")) << pty.output();
    pty.send("/quit\r");
    EXPECT_EQ(pty.wait(), 0) << pty.output();
  }
  const auto history = dir_ / "state" / "parley" / "chat_history";
  ASSERT_TRUE(std::filesystem::exists(history));
  EXPECT_EQ(std::filesystem::status(history).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  {
    ChatPty pty({"chat", "--db", db_, "--base-url", server.baseUrl(), "--format", "markdown"},
                dir_.string(), env);
    ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
    pty.send("\x10\x10\x10\r");  // Ctrl-P three times: past /quit and /branches to the prompt
    ASSERT_TRUE(pty.waitFor("got remember me")) << pty.output();
    pty.send("/quit\r");
    EXPECT_EQ(pty.wait(), 0) << pty.output();
  }
  EXPECT_EQ(server.requests().back()["body"]["messages"].back()["content"], "remember me");
  server.stop();
}

TEST_F(ChatTest, EditChangesAPromptOnANewBranchInlineOrInTheEditor) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "re: {{last_user}}"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  // An editor that appends to what it was given, so the test sees both the old text and the edit.
  const auto editor = dir_ / "editor.sh";
  std::ofstream(editor) << "#!/bin/sh\nprintf ' (edited)' >> \"$1\"\n";
  std::filesystem::permissions(editor, std::filesystem::perms::owner_all);

  CliRun run = chat({"--base-url", server.baseUrl()},
                    "first\nsecond\n/edit 2 changed\n/switch main\n/edit 0\n/edit 1 x\n/edit\n"
                    "/branches\n/quit\n",
                    "EDITOR=" + editor.string());
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const auto& requests = server.requests();
  ASSERT_EQ(requests.size(), 5u) << run.out;
  // /edit 2 changed: the first turn kept, the second prompt replaced.
  const json inline_ = requests[2]["body"]["messages"];
  ASSERT_EQ(inline_.size(), 3u);
  EXPECT_EQ(inline_[0]["content"], "first");
  EXPECT_EQ(inline_.back()["content"], "changed");
  // /edit 0 from main: the editor changed the first prompt; nothing before it.
  const json edited = requests[3]["body"]["messages"];
  ASSERT_EQ(edited.size(), 1u);
  EXPECT_EQ(edited[0]["content"], "first (edited)");
  EXPECT_NE(run.out.find("error: /edit: message 1 is not a prompt"), std::string::npos) << run.out;
  // /edit alone: the next prompt from the editor (which started empty).
  EXPECT_EQ(requests[4]["body"]["messages"].back()["content"], " (edited)");
  EXPECT_NE(run.out.find("  edit-1  thread"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("* edit-2  thread"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("  main  thread"), std::string::npos) << run.out;
  server.stop();
}

TEST_F(ChatTest, CopyWritesTheLastReplyToAFileOrTheClipboardTool) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "copy **this**"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_ / "bin");
  const auto clipboard = dir_ / "clipboard.txt";
  const auto tool = dir_ / "bin" / "xclip";
  std::ofstream(tool) << "#!/bin/sh\ncat > " << clipboard.string() << "\n";
  std::filesystem::permissions(tool, std::filesystem::perms::owner_all);
  const auto file = dir_ / "reply.md";

  CliRun run = chat({"--base-url", server.baseUrl()},
                    "/copy\nhi\n/copy " + file.string() + "\n/copy\n/quit\n",
                    "DISPLAY=:0 PATH=" + (dir_ / "bin").string() + ":/usr/bin:/bin");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("error: /copy: there is no reply to copy"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("copied 13 bytes to " + file.string()), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("copied 13 bytes to the clipboard (xclip)"), std::string::npos) << run.out;
  std::ifstream copied(clipboard);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(copied), {}), "copy **this**");
  std::ifstream written(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(written), {}), "copy **this**");

  CliRun none = chat({"--base-url", server.baseUrl(), "-c"}, "/copy\n/quit\n",
                     "PATH=" + (dir_ / "empty").string());
  EXPECT_NE(none.out.find("no clipboard tool found"), std::string::npos) << none.out;
  server.stop();
}

TEST_F(ChatTest, TypedUtf8CtrlCAtThePromptMultiLineFilesAndExit) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "got <{{last_user}}>"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "notes.txt") << "from a file\n";
  // --format markdown: the echo of what was typed is checked byte for byte.
  ChatPty pty({"chat", "--db", db_, "--thread", "t1", "--base-url", server.baseUrl(), "--format",
               "markdown"},
              dir_.string());
  ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
  pty.send("h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\r");
  ASSERT_TRUE(pty.waitFor("got <h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E>"))
      << pty.output();
  ASSERT_TRUE(pty.waitFor(" tok/s]")) << pty.output();
  // What is typed before the prompt shows is the terminal's to echo, and a Ctrl-C then is not
  // the line's: each round starts at a prompt.
  const std::string prompt = "\x1b[?2004h> ";
  ASSERT_TRUE(pty.waitFor(prompt, pty.output().find(" tok/s]"))) << pty.output();
  // Ctrl-C at the prompt: the line is dropped, the session goes on. The terminal flushes its
  // input at a Ctrl-C, so the editor can find nothing left of what it was told was there: it
  // used to block in read() then, and the Ctrl-C was lost (about 1 time in 20; the rounds make it
  // show).
  for (int round = 0; round < 8; ++round) {
    const size_t from = pty.output().size();
    pty.send("half typed");
    ASSERT_TRUE(pty.waitFor("half typed", from)) << pty.output();
    pty.send("\x03");
    ASSERT_TRUE(pty.waitFor("^C\r\n" + prompt, from)) << "round " << round << "\n" << pty.output();
  }
  pty.send("\"\"\"\rline one\rline two\r\"\"\"\r");
  ASSERT_TRUE(pty.waitFor("got <line one\r\nline two>")) << pty.output();  // the pty adds \r
  pty.send("/file " + (dir_ / "notes.txt").string() + " read this\r");
  ASSERT_TRUE(pty.waitFor("from a file\r\n```>")) << pty.output();
  pty.send("exit\r");
  EXPECT_EQ(pty.wait(), 0) << pty.output();

  // Three turns, none of them the half-typed line or `exit`.
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 3u);
  SqliteStore store(db_);
  ConversationManager manager;
  loadConversation(store, "t1", manager);
  ASSERT_EQ(manager.getMessageCount(), 6u);
  EXPECT_EQ(manager.getAllMessages()[2].content, "line one\nline two");
  EXPECT_EQ(manager.getAllMessages()[4].content.rfind("read this\n\n", 0), 0u);
  server.stop();
}

TEST_F(ChatTest, SlashAttachSendsTheFileWithTheNextPromptOnly) {
  mock::MockOptions options;
  options.script = mock::readScript(
      R"({"match": {"user_part": "image"}, "reply": {"content": "saw {{user_parts}}"}}
{"reply": {"content": "text only: {{last_user}}"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "dot.png", std::ios::binary) << test::makePng(5, 4);
  CliRun run = chat({"--base-url", server.baseUrl(), "--format", "markdown"},
                    "/attach " + (dir_ / "dot.png").string() + "\nwhat is it\nand now\n" +
                        "/attach " + (dir_ / "none.png").string() + "\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("attached " + (dir_ / "dot.png").string() + " (image/png"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("saw image/png 5x4"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("text only: and now"), std::string::npos) << run.out;
  EXPECT_NE((run.out + run.err).find("none.png"), std::string::npos) << run.out << run.err;
  server.stop();
  ASSERT_EQ(server.requests().size(), 2u);
  SqliteStore store(db_);
  const auto threads = store.listThreads();
  ASSERT_EQ(threads.size(), 1u);
  const std::vector<Message> messages = store.loadThread(threads[0].id).messages;
  ASSERT_GE(messages.size(), 2u);
  const std::vector<Part> parts = partsOf(messages[messages.size() - 4]);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].content, "what is it");
  EXPECT_EQ(parts[1].bytes, test::makePng(5, 4));
}

// A terminal in bracketed-paste mode wraps a paste in ESC[200~ ... ESC[201~: a paste of several
// lines is one prompt (it used to be one per line), a one-line paste is typed into the line, and
// the terminal is told to bracket pastes only while a prompt is read.
TEST_F(ChatTest, AMultiLinePasteIsOnePrompt) {
  mock::MockOptions options;
  options.script = mock::readScript(R"({"reply": {"content": "got <{{last_user}}>"}})");
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  ChatPty pty({"chat", "--db", db_, "--thread", "t1", "--base-url", server.baseUrl(), "--format",
               "markdown"},
              dir_.string());
  ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
  ASSERT_TRUE(pty.waitFor("\033[?2004h")) << pty.output();
  // Typed text, then a three-line paste (a terminal sends \r for its line breaks), UTF-8 in it.
  pty.send("look: \033[200~line one\rline tw\xC3\xB6\r\rline three\r\033[201~");
  ASSERT_TRUE(pty.waitFor("got <look: line one\r\nline tw\xC3\xB6\r\n\r\nline three>"))
      << pty.output();
  ASSERT_TRUE(pty.waitFor(" tok/s]")) << pty.output();
  // One line pasted is typed in: it can still be edited (Ctrl-U... here: more typed after it).
  pty.send("\033[200~pasted\033[201~ and typed\r");
  ASSERT_TRUE(pty.waitFor("got <pasted and typed>")) << pty.output();
  ASSERT_TRUE(pty.waitFor(" tok/s]", pty.output().find("got <pasted and typed>"))) << pty.output();
  // Escape sequences of keys still reach the editor: Up brings the last prompt back.
  pty.send("\033[A\r");
  ASSERT_TRUE(
      pty.waitFor("got <pasted and typed>", pty.output().find("got <pasted and typed>") + 1))
      << pty.output();
  pty.send("/quit\r");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
  EXPECT_NE(pty.output().rfind("\033[?2004l"), std::string::npos);

  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0]["body"]["messages"].back()["content"],
            "look: line one\nline tw\xC3\xB6\n\nline three");
  EXPECT_EQ(seen[1]["body"]["messages"].back()["content"], "pasted and typed");
  EXPECT_EQ(seen[2]["body"]["messages"].back()["content"], "pasted and typed");
  server.stop();
}

TEST_F(ChatTest, EachReplyShowsItsCostAndSlashCostTheSession) {
  mock::MockOptions options;
  options.script = mock::readScript(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}})");
  options.models = {"m1", "m2"};
  mock::MockServer server(options);
  server.start();
  std::filesystem::create_directories(dir_);
  const std::string prices = (dir_ / "prices.toml").string();
  std::ofstream(prices) << "[prices.m1]\ninput = 1\noutput = 10\n";
  CliRun run = chat({"--base-url", server.baseUrl(), "--model", "m1", "--prices", prices},
                    "one\ntwo\n/cost\n/model m2\nthree\n/cost\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  // 1000 * $1 + 100 * $10 per million = $0.002 a turn.
  const size_t usage = run.out.find("[1000 prompt + 100 completion = 1100 tokens");
  ASSERT_NE(usage, std::string::npos) << run.out;
  EXPECT_NE(run.out.find("]\n[cost $0.002000]\n", usage), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("this session: $0.004000\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[cost unpriced (no price for m2)]"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("this session: $0.004000 (not counted: 1 unpriced turn)\n"),
            std::string::npos)
      << run.out;
  server.stop();
}

// --dry-run: the preview, and the conversation as it was.
TEST_F(ChatTest, ADryRunTruncateChangesNothing) {
  auto server = testing::startMockServer(R"({"reply": {"content": "re: {{last_user}}"}})");
  CliRun run = chat({"--base-url", server->baseUrl(), "--thread", "t1", "--system", "Be kind."},
                    "one\ntwo\n/truncate {\"keepLast\": 2} --dry-run\n/history\n"
                    "/truncate {\"keepLast\": 2}\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  // The system prompt stays, in the dry run as in the real one.
  EXPECT_NE(run.out.find("truncate (dry run, nothing changed): 3 of 5 messages would stay"),
            std::string::npos)
      << run.out;
  // The previous request (system, one, re: one, two) loses its prefix.
  EXPECT_NE(run.out.find("cached prefix lost: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[0] system: Be kind.\n[1] user: one\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("truncate: 3 messages visible"), std::string::npos) << run.out;
  server->stop();
}

// The offline chat (the in-process demo agent runs server threads) after Ctrl-C at the prompt:
// a SIGINT handler once jumped out of the line editor on whichever thread took the signal, and
// the session crashed or lost the next prompt. Several sessions, each a few Ctrl-Cs.
TEST_F(ChatTest, TheOfflineChatSurvivesCtrlCAtThePrompt) {
  std::filesystem::create_directories(dir_);
  for (int session = 0; session < 4; ++session) {
    SCOPED_TRACE("session " + std::to_string(session));
    ChatPty pty({"chat", "--db", db_, "--format", "markdown"}, dir_.string());
    // Each Ctrl-C at the prompt, as the chat answers it (the terminal may echo ^C itself): the
    // line dropped, then the prompt again.
    const std::string prompt = "\x1b[?2004h> ";
    const std::string dropped = "\x1b[?2004l^C\r\n" + prompt;
    ASSERT_TRUE(pty.waitFor(prompt)) << pty.output();
    size_t from = pty.output().find(prompt) + prompt.size();
    for (int press = 0; press < 3; ++press) {
      pty.send("\x03");
      ASSERT_TRUE(pty.waitFor(dropped, from)) << pty.output();
      from = pty.output().find(dropped, from) + dropped.size();
    }
    pty.send("hello " + std::to_string(session) + "\r");
    ASSERT_TRUE(pty.waitFor("You said: hello " + std::to_string(session), from)) << pty.output();
    ASSERT_TRUE(pty.waitFor("tokens", from)) << pty.output();
    pty.send("/quit\r");
    EXPECT_EQ(pty.wait(), 0) << pty.output();
  }
}

// Ctrl-C while a tool runs cancels the turn: the tool is stopped, the model is not called
// again, and nothing of the turn is kept or saved.
TEST_F(ChatTest, CtrlCDuringAToolCallCancelsTheTurn) {
  auto server = testing::startMockServer(
      R"({"match": {"last_role": "tool"}, "reply": {"content": "after the tool"}}
{"match": {"user_contains": "nap"}, "reply": {"tool_calls": [{"name": "nap", "arguments": {}}]}}
{"reply": {"content": "re: {{last_user}}"}})");
  std::filesystem::create_directories(dir_);
  const std::string tools = (dir_ / "tools.toml").string();
  std::ofstream(tools) << "[[tool]]\nname = \"nap\"\ndescription = \"sleeps\"\n"
                          "command = [\"sleep\", \"30\"]\n";
  ChatPty pty({"chat", "--db", db_, "--thread", "t1", "--base-url", server->baseUrl(),
               "--tools-file", tools, "--format", "markdown"},
              dir_.string());
  ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
  pty.send("first\r");
  ASSERT_TRUE(pty.waitFor("re: first")) << pty.output();
  ASSERT_TRUE(pty.waitFor("tokens")) << pty.output();
  pty.send("take a nap\r");
  ASSERT_TRUE(pty.waitFor("[tool] nap")) << pty.output();
  pty.send("\x03");
  ASSERT_TRUE(pty.waitFor("[cancelled")) << pty.output();
  pty.send("/history\r");
  ASSERT_TRUE(pty.waitFor("[1] assistant: re: first")) << pty.output();
  pty.send("/quit\r");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
  EXPECT_EQ(pty.output().find("after the tool"), std::string::npos) << pty.output();
  EXPECT_EQ(server->requests().size(), 2u);  // "first", and the call that asked for the tool
  SqliteStore store(db_);
  ConversationManager manager;
  loadConversation(store, "t1", manager);
  EXPECT_EQ(manager.getMessageCount(), 2u);
  server->stop();
}

// --format text on a terminal: a one-paragraph reply shows its first words while the rest is
// still on its way (here the server holds the rest back until the turn is cancelled).
TEST_F(ChatTest, OnATerminalAParagraphStreamsBeforeItsEnd) {
  auto piece = [](const std::string& content) {
    const json event = {{"id", "c1"},
                        {"object", "chat.completion.chunk"},
                        {"created", 1},
                        {"model", "m"},
                        {"choices",
                         {{{"index", 0},
                           {"delta", {{"role", "assistant"}, {"content", content}}},
                           {"finish_reason", nullptr}}}}};
    return "data: " + event.dump() + "\n\n";
  };
  const json rule = {{"raw", {piece("Alpha beta"), piece(" gamma delta") + "data: [DONE]\n\n"}},
                     {"stream", {{"chunk_delay_ms", 60000}}}};
  auto server = testing::startMockServer(rule.dump());
  std::filesystem::create_directories(dir_);
  ChatPty pty({"chat", "--db", db_, "--base-url", server->baseUrl(), "--color", "never"},
              dir_.string());
  ASSERT_TRUE(pty.waitFor("/help for commands")) << pty.output();
  pty.send("go\r");
  ASSERT_TRUE(pty.waitFor("Alpha beta")) << pty.output();
  EXPECT_EQ(pty.output().find("gamma"), std::string::npos) << pty.output();
  pty.send("\x03");
  ASSERT_TRUE(pty.waitFor("[cancelled")) << pty.output();
  pty.send("/quit\r");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
  server->stop();
}

// Each branch's turns go to its own thread, whatever was typed on the others: the sequence of
// issue 33 (/edit, /save, /load, a turn on the loaded branch), then a resume.
TEST_F(ChatTest, ATurnIsWrittenOnlyIntoTheThreadOfItsBranch) {
  auto server = testing::startMockServer(R"({"reply": {"content": "re: {{last_user}}"}})");
  const std::string snapshot = (dir_ / "e3.json").string();
  CliRun first = chat(
      {"--base-url", server->baseUrl(), "--thread", "L3"},
      "q1\n/edit 0 q1b\n/save " + snapshot + "\n/load " + snapshot + "\nq2 on loaded\n/quit\n");
  ASSERT_EQ(first.exitCode, 0) << first.err;
  ASSERT_NE(first.out.find("as branch loaded-1"), std::string::npos) << first.out;

  CliRun again = chat({"--base-url", server->baseUrl(), "--thread", "L3"},
                      "/branches\n/switch edit-1\n/history\n/switch loaded-1\n/history\n/quit\n");
  ASSERT_EQ(again.exitCode, 0) << again.err;
  const size_t edit = again.out.find("now on edit-1");
  const size_t loaded = again.out.find("now on loaded-1");
  ASSERT_NE(edit, std::string::npos) << again.out;
  ASSERT_NE(loaded, std::string::npos) << again.out;  // the loaded branch outlives the session
  const std::string editHistory = again.out.substr(edit, loaded - edit);
  EXPECT_NE(editHistory.find("user: q1b"), std::string::npos) << again.out;
  EXPECT_EQ(editHistory.find("q2 on loaded"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("user: q2 on loaded", loaded), std::string::npos) << again.out;

  // -c goes back to the session, on the branch used last, not to that branch's thread alone.
  CliRun resumed = chat({"--base-url", server->baseUrl(), "-c"}, "/history\n/quit\n");
  ASSERT_EQ(resumed.exitCode, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("thread L3 (resumed; on branch loaded-1)"), std::string::npos)
      << resumed.out;

  // A session quit before any prompt leaves no thread behind.
  const size_t threads = SqliteStore(db_).listThreads().size();
  CliRun idle = chat({"--base-url", server->baseUrl()}, "/help\n/quit\n");
  ASSERT_EQ(idle.exitCode, 0) << idle.err;
  EXPECT_EQ(SqliteStore(db_).listThreads().size(), threads);
  server->stop();
}

}  // namespace
}  // namespace parley
