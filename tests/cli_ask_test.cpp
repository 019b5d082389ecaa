// `parley ask` end to end: the real binary against the mock server over loopback.
#include <gtest/gtest.h>

#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/llm.hpp"
#include "parley/part.hpp"
#include "parley/store.hpp"
#include "parley/tokens.hpp"
#include "png_fixture.hpp"
#include "store/sqlite_store.hpp"

namespace parley {
namespace {

using nlohmann::json;

using testing::CliRun;

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class AskTest : public ::testing::Test {
 protected:
  void serve(const std::string& script) {
    mock::MockOptions options;
    options.script = mock::readScript(script);
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Runs `env <env> parley ask <args>` with a clean OPENAI_* environment.
  CliRun ask(std::vector<std::string> args, const std::string& env = "") {
    args.insert(args.begin(), "ask");
    return testing::runCli(args, dir_, env);
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("parley-ask-test-" + std::to_string(::getpid()));
};

TEST_F(AskTest, JsonPrintsMessageFinishReasonAndUsage) {
  serve(
      R"({"reply": {"content": "Hi {{last_user}}", "usage": {"prompt_tokens": 4, "completion_tokens": 2}}})");
  for (const char* mode : {"--stream", "--no-stream"}) {
    SCOPED_TRACE(mode);
    CliRun run = ask({"--base-url", server_->baseUrl(), "--model", "m1", "--api-key", "sk-1", mode,
                      "--json", "Bob"});
    ASSERT_EQ(run.exitCode, 0) << run.err;
    json out = json::parse(run.out);
    EXPECT_EQ(out["message"], json({{"role", "assistant"}, {"content", "Hi Bob"}}));
    EXPECT_EQ(out["finish_reason"], "stop");
    EXPECT_EQ(out["usage"]["total_tokens"], 6);
  }
  auto seen = server_->requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["body"]["stream"], true);
  EXPECT_FALSE(seen[1]["body"].contains("stream"));
  EXPECT_EQ(seen[0]["body"]["model"], "m1");
  EXPECT_EQ(seen[0]["headers"]["authorization"], "Bearer sk-1");
}

TEST_F(AskTest, EveryProtocolPrintsTheSameJsonObject) {
  serve(
      R"({"reply": {"reasoning_content": "Greet.", "content": "Hi {{last_user}}", "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}})");
  for (const char* protocol : {"openai-chat", "openai-responses", "anthropic", "gemini"}) {
    for (const char* mode : {"--stream", "--no-stream"}) {
      SCOPED_TRACE(std::string(protocol) + " " + mode);
      server_->clearRequests();
      CliRun run = ask({"--base-url", server_->baseUrl(), "--model", "m1", "--api-key", "sk-1",
                        "--protocol", protocol, mode, "--json", "Bob"});
      ASSERT_EQ(run.exitCode, 0) << run.err;
      json out = json::parse(run.out);
      EXPECT_EQ(out["message"]["role"], "assistant");
      EXPECT_EQ(out["message"]["content"], "Hi Bob");
      EXPECT_EQ(out["message"]["reasoning_content"], "Greet.");
      EXPECT_EQ(out["finish_reason"], "stop");
      EXPECT_EQ(out["usage"]["prompt_tokens"], 9);
      EXPECT_EQ(out["usage"]["total_tokens"], 11);
      EXPECT_EQ(out["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
      const std::string path = server_->requests().at(0)["path"];
      const bool streamed = std::string(mode) == "--stream";
      EXPECT_EQ(path, std::string(protocol) == "anthropic"          ? "/v1/messages"
                      : std::string(protocol) == "openai-responses" ? "/v1/responses"
                      : std::string(protocol) == "gemini"
                          ? (streamed ? "/v1/models/m1:streamGenerateContent"
                                      : "/v1/models/m1:generateContent")
                          : "/v1/chat/completions");
    }
  }
  CliRun bad = ask({"--base-url", server_->baseUrl(), "--protocol", "carrier-pigeon", "x"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--protocol"), std::string::npos) << bad.err;
}

TEST_F(AskTest, ToolCallsAreReturnedUnexecuted) {
  serve(R"({"reply": {"tool_calls": [{"id": "call_1", "name": "get_time", "arguments": {}}]}})");
  CliRun run = ask({"--base-url", server_->baseUrl(), "--json", "what time is it"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  json out = json::parse(run.out);
  EXPECT_EQ(out["finish_reason"], "tool_calls");
  EXPECT_TRUE(out["message"]["content"].is_null());
  EXPECT_EQ(out["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(server_->requests().size(), 1u);  // exactly one model call
  CliRun plain = ask({"--base-url", server_->baseUrl(), "what time is it"});
  EXPECT_NE(plain.out.find("tool call (not executed): get_time {}"), std::string::npos);
}

// The calls of a turn without tools are not run; the saved thread answers each with an error
// result, so the next turn is one the API takes (a call without a result is refused).
TEST_F(AskTest, AnUnrunToolCallDoesNotPoisonTheThread) {
  serve(
      R"({"match": {"request": 1}, "reply": {"tool_calls": [{"id": "call_1", "name": "get_time", "arguments": {}}]}}
{"reply": {"content": "fine"}})");
  std::filesystem::create_directories(dir_);
  const std::string db = (dir_ / "unrun.db").string();
  CliRun first = ask({"--base-url", server_->baseUrl(), "--db", db, "--json", "time?"});
  ASSERT_EQ(first.exitCode, 0) << first.err;
  EXPECT_EQ(json::parse(first.out)["message"]["tool_calls"][0]["id"], "call_1");
  CliRun next = ask({"--base-url", server_->baseUrl(), "--db", db, "-c", "--json", "again"});
  ASSERT_EQ(next.exitCode, 0) << next.err;
  EXPECT_EQ(json::parse(next.out)["message"]["content"], "fine");
  const json sent = server_->requests().back()["body"]["messages"];
  ASSERT_GE(sent.size(), 4u) << sent.dump();
  EXPECT_EQ(sent[sent.size() - 2]["role"], "tool") << sent.dump();
  EXPECT_EQ(sent[sent.size() - 2]["tool_call_id"], "call_1");
}

TEST_F(AskTest, PlainStreamPrintsTheText) {
  serve(R"({"reply": {"content": "one two three"}})");
  CliRun run = ask({"--base-url", server_->baseUrl(), "x"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(run.out, "one two three\n");
}

TEST_F(AskTest, EnvironmentGivesTheEndpointAndKey) {
  serve(R"({"reply": {"content": "ok"}})");
  CliRun run = ask({"x"}, "OPENAI_BASE_URL=" + server_->baseUrl() + " OPENAI_API_KEY=sk-env");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(server_->requests().at(0)["headers"]["authorization"], "Bearer sk-env");
  // --api-key-env names another variable; OPENAI_API_KEY is then not used.
  CliRun other =
      ask({"--api-key-env", "TEAM_KEY", "x"},
          "OPENAI_BASE_URL=" + server_->baseUrl() + " OPENAI_API_KEY=sk-env TEAM_KEY=sk-team");
  ASSERT_EQ(other.exitCode, 0) << other.err;
  EXPECT_EQ(server_->requests().at(1)["headers"]["authorization"], "Bearer sk-team");
}

TEST_F(AskTest, ProfileFromTheConfigFile) {
  serve(R"({"reply": {"content": "ok"}})");
  std::filesystem::create_directories(dir_ / "parley");
  const auto file = dir_ / "parley" / "config.toml";
  std::ofstream(file) << "[profiles.local]\nbase_url = \"" << server_->baseUrl()
                      << "\"\nmodel = \"profile-model\"\napi_key_env = \"LOCAL_KEY\"\n"
                      << "[profiles.local.parameters]\ntemperature = 0.25\n";
  CliRun run = ask({"--profile", "local", "--json", "x"},
                   "XDG_CONFIG_HOME=" + dir_.string() + " LOCAL_KEY=sk-local");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  auto seen = server_->requests().at(0);
  EXPECT_EQ(seen["body"]["model"], "profile-model");
  EXPECT_EQ(seen["body"]["temperature"], 0.25);
  EXPECT_EQ(seen["headers"]["authorization"], "Bearer sk-local");
  CliRun unknown = ask({"--profile", "nope", "x"}, "PARLEY_CONFIG=" + file.string());
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("unknown profile \"nope\""), std::string::npos) << unknown.err;
  CliRun missing = ask({"--profile", "local", "--config", (dir_ / "none.toml").string(), "x"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("--config: no such file"), std::string::npos) << missing.err;
}

TEST_F(AskTest, FailuresAreOneLineNamingTheCause) {
  serve(
      R"({"match": {"user_contains": "auth"}, "error": {"status": 401, "message": "Incorrect API key provided"}}
{"match": {"user_contains": "slow"}, "delay_ms": 5000, "reply": {"content": "late"}}
{"match": {"user_contains": "broken"}, "reply": {"content": "a b"}, "stream": {"malformed_at": 1}})");
  struct Case {
    std::string prompt;
    std::vector<std::string> extra;
    std::string cause;
  };
  const std::vector<Case> cases = {
      {"auth", {}, "HTTP 401: Incorrect API key provided"},
      {"slow", {"--timeout", "200"}, "timeout of 200 ms"},
      {"broken", {}, "malformed stream chunk"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.prompt);
    std::vector<std::string> args = {"--base-url", server_->baseUrl()};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    args.push_back(c.prompt);
    CliRun run = ask(args);
    EXPECT_EQ(run.exitCode, 1);
    EXPECT_NE(run.err.find(c.cause), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }
}

// 0 and -1 used to mean "no bound" silently; a huge bound is "practically forever", not an
// overflow into a deadline already past.
TEST_F(AskTest, TimeoutIsAtLeastOneAndAHugeOneDoesNotOverflow) {
  serve(R"({"reply": {"content": "fine"}})");
  for (const char* bad : {"0", "-1"}) {
    CliRun run = ask({"--base-url", server_->baseUrl(), "--timeout", bad, "x"});
    EXPECT_EQ(run.exitCode, 2) << bad;  // a usage error
    EXPECT_NE(run.err.find("--timeout: must be at least 1"), std::string::npos) << run.err;
  }
  EXPECT_EQ(server_->requests().size(), 0u);
  CliRun huge =
      ask({"--base-url", server_->baseUrl(), "--timeout", "9223372036854775807", "--json", "x"});
  ASSERT_EQ(huge.exitCode, 0) << huge.err;
  EXPECT_EQ(json::parse(huge.out)["message"]["content"], "fine");
}

// A turn killed while the model answers (SIGTERM has no handler: the process just ends, as it
// does on a kill or a closed terminal) leaves no thread: the thread is made with the saved turn.
TEST_F(AskTest, AKilledTurnLeavesNoEmptyThread) {
  serve(R"({"delay_ms": 30000, "reply": {"content": "late"}})");
  std::filesystem::create_directories(dir_);
  const std::string db = (dir_ / "killed.db").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("XDG_DATA_HOME", (dir_ / "data").c_str(), 1);
    testing::execCli({"ask", "--base-url", server_->baseUrl(), "--db", db, "x"});
  }
  ASSERT_GT(pid, 0);
  // The request has reached the model when the mock has it: the turn is under way.
  for (int i = 0; i < 10'000 && server_->requests().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(server_->requests().empty());
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  if (std::filesystem::exists(db)) {
    EXPECT_TRUE(SqliteStore(db).listThreads().empty());
  }
}

// Ctrl-C while the reply streams: the turn is cancelled (exit code 130), the text so far ends its
// line, and nothing is saved. The SIGINT comes once the first chunk is on stdout; the next one is
// 10 s away, so a process that ignored it would end with 0, after the whole reply.
TEST_F(AskTest, CtrlCCancelsTheTurn) {
  const auto chunk = [](const std::string& text) {
    return "data: " + json{{"choices", {{{"index", 0}, {"delta", {{"content", text}}}}}}}.dump() +
           "\n\n";
  };
  serve(json{{"raw", {chunk("first"), chunk(" second"), "data: [DONE]\n\n"}},
             {"stream", {{"chunk_delay_ms", 10000}}}}
            .dump());
  std::filesystem::create_directories(dir_);
  const std::string db = (dir_ / "interrupted.db").string();
  int out[2];
  int err[2];
  ASSERT_EQ(::pipe(out), 0);
  ASSERT_EQ(::pipe(err), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[0]);
    ::close(err[0]);
    testing::execCli({"ask", "--base-url", server_->baseUrl(), "--db", db, "x"});
  }
  ASSERT_GT(pid, 0);
  ::close(out[1]);
  ::close(err[1]);
  std::string printed;
  char buffer[256];
  while (printed.find("first") == std::string::npos) {
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n <= 0) break;
    printed.append(buffer, static_cast<size_t>(n));
  }
  ASSERT_NE(printed.find("first"), std::string::npos) << printed;
  ::kill(pid, SIGINT);
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;)
    printed.append(buffer, static_cast<size_t>(n));
  std::string errors;
  for (ssize_t n; (n = ::read(err[0], buffer, sizeof buffer)) > 0;)
    errors.append(buffer, static_cast<size_t>(n));
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_EQ(printed, "first\n");
  EXPECT_NE(errors.find("parley: interrupted"), std::string::npos) << errors;
  if (std::filesystem::exists(db)) {
    EXPECT_TRUE(SqliteStore(db).listThreads().empty());
  }
}

// One turn maps none of the libraries of parley-extras.so (apps/parley/extras.hpp): no
// cpp-httplib (whose initialiser sets up OpenSSL's TLS), no libedit, no libpq, nor the module.
// Read from the process's own maps while its request waits at the mock.
TEST_F(AskTest, AskLoadsNoneOfTheExtras) {
  serve(R"({"delay_ms": 30000, "reply": {"content": "late"}})");
  const pid_t pid = ::fork();
  if (pid == 0) testing::execCli({"ask", "--base-url", server_->baseUrl(), "--no-save", "x"});
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(server_->waitForRequests(1, std::chrono::seconds(30)));
  const std::string maps = readFile("/proc/" + std::to_string(pid) + "/maps");
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_NE(maps.find("libcurl"), std::string::npos) << maps;  // the maps were read
  for (const char* library : {"parley-extras", "libcpp-httplib", "libedit", "libpq"})
    EXPECT_EQ(maps.find(library), std::string::npos) << library;
}

// The commands of parley-extras.so say what is missing when the module is not where the
// executable looks (beside it, or in <libdir>/parley of an installed tree).
TEST_F(AskTest, AMissingModuleIsNamed) {
  std::filesystem::create_directories(dir_ / "bin");
  const auto alone = dir_ / "bin" / "parley";
  std::error_code error;
  std::filesystem::create_hard_link(PARLEY_CLI_PATH, alone, error);
  if (error) std::filesystem::copy_file(PARLEY_CLI_PATH, alone);
  const std::string command = alone.string() + " mock --port 0 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    out.append(buffer, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("need parley-extras.so, which could not be loaded"), std::string::npos) << out;
  EXPECT_NE(out.find((dir_ / "bin" / "parley-extras.so").string() + ": not found"),
            std::string::npos)
      << out;
}

TEST_F(AskTest, MaxIterationsWithoutToolsIsOneCall) {
  // Without tools a turn is one model call, within any bound of at least 1; scripts pass the
  // option whether or not they offer tools.
  serve(R"({"reply": {"content": "ok"}})");
  for (const char* n : {"1", "3"}) {
    SCOPED_TRACE(n);
    CliRun run = ask({"--base-url", server_->baseUrl(), "--max-iterations", n, "x"});
    EXPECT_EQ(run.exitCode, 0) << run.err;
    EXPECT_EQ(run.out, "ok\n");
  }
  EXPECT_EQ(server_->requests().size(), 2u);
  CliRun zero = ask({"--base-url", server_->baseUrl(), "--max-iterations", "0", "x"});
  EXPECT_EQ(zero.exitCode, 2);
  EXPECT_NE(zero.err.find("--max-iterations"), std::string::npos) << zero.err;
}

TEST_F(AskTest, AnEmptyThreadIdIsRefused) {
  // It used to start a thread with a random id, which the user then could not name.
  serve(R"({"reply": {"content": "ok"}})");
  CliRun run = ask(
      {"--base-url", server_->baseUrl(), "--db", (dir_ / "t.db").string(), "--thread", "", "x"});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("--thread: needs a thread id"), std::string::npos) << run.err;
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(AskTest, InBodyErrorsAreNotCalledHttp0Or200) {
  serve(
      R"({"match": {"stream": false}, "raw": "{\"error\": {\"message\": \"quota exceeded\"}}", "content_type": "application/json"}
{"match": {"stream": true}, "raw": "data: {\"error\": {\"message\": \"overloaded\"}}\n\n"})");
  CliRun body = ask({"--base-url", server_->baseUrl(), "--no-stream", "x"});
  EXPECT_EQ(body.exitCode, 1);
  EXPECT_EQ(body.err,
            "parley: error: the server sent an error instead of a reply: quota exceeded\n");
  CliRun stream = ask({"--base-url", server_->baseUrl(), "x"});
  EXPECT_EQ(stream.exitCode, 1);
  EXPECT_EQ(stream.err.rfind("parley: error: the server sent an error inside its 200 reply: "
                             "overloaded",
                             0),
            0u)
      << stream.err;
}

TEST_F(AskTest, AKeyInTheBaseUrlIsNotPrinted) {
  CliRun run = ask({"--base-url", "http://me:sk-SECRET-7@127.0.0.1:1/v1", "--timeout", "200", "x"});
  EXPECT_EQ(run.exitCode, 1);
  EXPECT_EQ(run.err.find("SECRET"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("http://***@127.0.0.1:1/v1"), std::string::npos) << run.err;
}

// The upstream repeating the key in its error (a body, a stream's error event): `ask` says what
// went wrong without the key, also with --json.
TEST_F(AskTest, AKeyTheUpstreamRepeatsIsNotPrinted) {
  const std::string key = "sk-live-SECRET-0123456789";
  serve(json{{"match", {{"request", 1}}},
             {"error", {{"status", 401}, {"message", "Incorrect API key provided: " + key}}}}
            .dump() +
        "\n" +
        json{{"reply", {{"content", "a b c"}}},
             {"stream",
              {{"error_after", 1}, {"error", {{"message", "bad key " + key + " in stream"}}}}}}
            .dump());
  for (const char* mode : {"--no-stream", "--stream"}) {
    CliRun run =
        ask({"--base-url", server_->baseUrl(), "--model", "m", "--api-key", key, mode, "x"});
    EXPECT_EQ(run.exitCode, 1) << mode;
    EXPECT_EQ((run.out + run.err).find("SECRET"), std::string::npos) << mode << run.err;
    EXPECT_NE(run.err.find("[redacted]"), std::string::npos) << mode << run.err;
  }
}

// Runs `parley ask <args>` on a pseudo-terminal (stdout and stderr) and returns what the
// terminal received.
std::string askOnTerminal(const std::vector<std::string>& args) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    std::vector<std::string> all = {"ask"};
    all.insert(all.end(), args.begin(), args.end());
    testing::execCli(all);
  }
  std::string seen;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(master, buffer, sizeof buffer);
    if (n > 0) {
      seen.append(buffer, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EIO once the child closed the terminal
    }
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return seen;
}

TEST_F(AskTest, EscapeSequencesFromTheServerNeverReachATerminal) {
  // A title change, a colour, clearing the screen, a carriage return that overwrites the line,
  // and a C1 CSI (U+009B): a terminal would obey each.
  const std::string hostile =
      R"(safe \u001b]0;pwned\u0007one \u001b[31mred\u001b[0m \u001b[2Jtwo\rthree \u009b31mfour)";
  serve(
      R"({"match": {"user_contains": "fail"}, "error": {"status": 400, "message": "bad \u001b[2Jnews"}}
{"reply": {"content": ")" +
      hostile + R"("}})");
  for (const char* mode : {"--stream", "--no-stream"}) {
    SCOPED_TRACE(mode);
    std::string seen = askOnTerminal({"--base-url", server_->baseUrl(), mode, "hello"});
    // parley's own: the line in progress taken back (cursor up, erase) to be shown again.
    for (const std::string own : {"\x1b[J", "\x1b[1A"}) {
      for (size_t at; (at = seen.find(own)) != std::string::npos;)
        seen.erase(at, own.size());
    }
    EXPECT_EQ(seen.find('\x1b'), std::string::npos) << seen;
    EXPECT_EQ(seen.find("\xC2\x9B"), std::string::npos) << seen;
    EXPECT_NE(seen.find("safe one red twothree 31mfour"), std::string::npos) << seen;
  }
  const std::string error = askOnTerminal({"--base-url", server_->baseUrl(), "fail"});
  EXPECT_EQ(error.find('\x1b'), std::string::npos) << error;
  EXPECT_NE(error.find("HTTP 400: bad news"), std::string::npos) << error;

  // The bytes themselves are kept where a program reads them: a pipe, and --json.
  CliRun piped = ask({"--base-url", server_->baseUrl(), "hello"});
  EXPECT_NE(piped.out.find("\x1b[31mred"), std::string::npos) << piped.out;
  CliRun asJson = ask({"--base-url", server_->baseUrl(), "--json", "hello"});
  EXPECT_NE(json::parse(asJson.out)["message"]["content"].get<std::string>().find("\x1b]0;pwned"),
            std::string::npos);
}

// --json's "cache": null on a new thread; on the next turn of a stored thread, the previous
// request's prompt (system prompt and first question) is the reusable prefix, beside what the
// provider reported.
TEST_F(AskTest, JsonReportsTheReusablePromptPrefix) {
  serve(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 50, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 32}}}})");
  std::filesystem::create_directories(dir_);
  const std::string db = (dir_ / "cache.db").string();
  CliRun first = ask({"--base-url", server_->baseUrl(), "--db", db, "--thread", "c1", "--system",
                      "Be brief.", "--json", "first question"});
  ASSERT_EQ(first.exitCode, 0) << first.err;
  EXPECT_TRUE(json::parse(first.out).at("cache").is_null()) << first.out;

  CliRun second = ask({"--base-url", server_->baseUrl(), "--db", db, "--thread", "c1", "--json",
                       "second question"});
  ASSERT_EQ(second.exitCode, 0) << second.err;
  const json cache = json::parse(second.out).at("cache");
  ASSERT_TRUE(cache.is_object()) << second.out;
  EXPECT_EQ(cache.at("reusable_messages"), 2);
  const int64_t expected =
      countMessageTokens(Message::system("Be brief."), TokenCounter()).tokens +
      countMessageTokens(Message::user("first question"), TokenCounter()).tokens;
  EXPECT_EQ(cache.at("reusable_prefix_tokens"), expected);
  EXPECT_EQ(cache.at("reusable_prefix_bytes"),
            encodeMessage(Message::system("Be brief.")).size() +
                encodeMessage(Message::user("first question")).size());
  EXPECT_TRUE(cache.at("first_difference").is_null());
  EXPECT_EQ(cache.at("reported_cached_tokens"), 32);
}

// The turn's cost: usage billed by the price table, cached reads at their price; a model the
// table does not know is null, never 0.
TEST_F(AskTest, JsonReportsTheCostOfTheTurn) {
  serve(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 600}}}})");
  std::filesystem::create_directories(dir_);
  const std::string prices = (dir_ / "prices.toml").string();
  std::ofstream(prices) << "[prices.\"m1\"]\ninput = 2\ncached_input = 0.5\noutput = 8\n";
  CliRun run = ask({"--base-url", server_->baseUrl(), "--model", "m1-2025", "--api-key", "sk",
                    "--prices", prices, "--no-save", "--json", "hi"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  json out = json::parse(run.out);
  ASSERT_TRUE(out["cost_usd"].is_number()) << run.out;
  EXPECT_NEAR(out["cost_usd"].get<double>(), (400 * 2 + 600 * 0.5 + 200 * 8) / 1e6, 1e-12);

  run = ask({"--base-url", server_->baseUrl(), "--model", "other", "--api-key", "sk", "--prices",
             prices, "--no-save", "--json", "hi"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  out = json::parse(run.out);
  ASSERT_TRUE(out.contains("cost_usd"));
  EXPECT_TRUE(out["cost_usd"].is_null()) << run.out;
}

// --max-cost refuses a turn that could go over before anything is sent: exit 1, a message
// naming the budget and the estimate, no request at the mock, no thread saved.
TEST_F(AskTest, MaxCostRefusesBeforeSending) {
  serve(R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}})");
  std::filesystem::create_directories(dir_);
  const std::string prices = (dir_ / "prices.toml").string();
  std::ofstream(prices) << "[prices.\"m1\"]\ninput = 1\noutput = 1\n";  // $1 per million
  const std::string db = (dir_ / "budget.db").string();
  // max_tokens 4096 by default: the worst case is over $0.001 for any prompt.
  CliRun run = ask({"--base-url", server_->baseUrl(), "--model", "m1", "--api-key", "sk",
                    "--prices", prices, "--db", db, "--max-cost", "0.001", "hi"});
  EXPECT_EQ(run.exitCode, 1) << run.err;
  EXPECT_NE(run.err.find("maxCostPerRun of $0.001000 would be exceeded"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("nothing was sent"), std::string::npos) << run.err;
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_TRUE(SqliteStore(db).listThreads().empty()) << "a refused turn leaves no thread";

  // A budget the worst case fits in: the call goes out, with the bound as its max_tokens.
  run = ask({"--base-url", server_->baseUrl(), "--model", "m1", "--api-key", "sk", "--prices",
             prices, "--no-save", "--max-cost", "0.01", "hi"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  ASSERT_EQ(server_->requests().size(), 1u);
  const json sent = server_->requests()[0]["body"];
  EXPECT_EQ(sent.value("max_completion_tokens", sent.value("max_tokens", json())), 4096) << sent;

  // A model the table does not price cannot keep a budget.
  run = ask({"--base-url", server_->baseUrl(), "--model", "other", "--api-key", "sk", "--prices",
             prices, "--no-save", "--max-cost", "1", "hi"});
  EXPECT_EQ(run.exitCode, 1);
  EXPECT_NE(run.err.find("has no price"), std::string::npos) << run.err;
  EXPECT_EQ(server_->requests().size(), 1u);

  run = ask({"--base-url", server_->baseUrl(), "--max-cost", "-1", "hi"});
  EXPECT_EQ(run.exitCode, 2) << run.err;
}

// A profile's token_counting reaches ask: with "remote" the budget counts the prompt at the
// endpoint (a count request goes first), with the default "local" nothing but the call is sent.
TEST_F(AskTest, AProfilesRemoteTokenCountingCountsAtTheEndpoint) {
  serve(R"({"reply": {"content": "ok"}})");
  std::filesystem::create_directories(dir_);
  const auto config = dir_ / "config.toml";
  for (const char* name : {"counted", "plain"}) {
    std::ofstream(config, std::ios::app)
        << "[profiles." << name << "]\nbase_url = \"" << server_->baseUrl()
        << "\"\nprotocol = \"anthropic\"\nmodel = \"m1\"\napi_key_env = \"KEY\"\n"
        << (std::string(name) == "counted" ? "token_counting = \"remote\"\n" : "");
  }
  const std::string prices = (dir_ / "prices.toml").string();
  std::ofstream(prices) << "[prices.\"m1\"]\ninput = 1\noutput = 1\n";
  auto paths = [&] {
    std::vector<std::string> out;
    for (const auto& request : server_->requests())
      out.push_back(request["path"].get<std::string>());
    return out;
  };
  CliRun run = ask({"--config", config.string(), "--profile", "counted", "--prices", prices,
                    "--max-cost", "1", "--no-save", "hi"},
                   "KEY=sk");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(paths(), (std::vector<std::string>{"/v1/messages/count_tokens", "/v1/messages"}));
  server_->clearRequests();
  run = ask({"--config", config.string(), "--profile", "plain", "--prices", prices, "--max-cost",
             "1", "--no-save", "hi"},
            "KEY=sk");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(paths(), (std::vector<std::string>{"/v1/messages"}));
}

// A Gemini profile with remote counting counts at countTokens first; a blocked reply is a
// refusal (exit 4) with the reason Gemini gave.
TEST_F(AskTest, AGeminiProfileCountsAtCountTokensAndReportsABlock) {
  serve(
      R"({"match": {"user_contains": "forbidden"}, "reply": {"content": "", "finish_reason": "content_filter"}}
{"reply": {"content": "ok"}})");
  std::filesystem::create_directories(dir_);
  const auto config = dir_ / "config.toml";
  std::ofstream(config) << "[profiles.g]\nbase_url = \"" << server_->baseUrl()
                        << "\"\nprotocol = \"gemini\"\nmodel = \"m1\"\napi_key_env = \"KEY\"\n"
                        << "token_counting = \"remote\"\n";
  const std::string prices = (dir_ / "prices.toml").string();
  std::ofstream(prices) << "[prices.\"m1\"]\ninput = 1\noutput = 1\n";
  CliRun run = ask({"--config", config.string(), "--profile", "g", "--prices", prices, "--max-cost",
                    "1", "--no-save", "--no-stream", "hi"},
                   "KEY=sk-g");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(run.out, "ok\n");
  const std::vector<json> requests = server_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0]["path"], "/v1/models/m1:countTokens");
  EXPECT_EQ(requests[0]["headers"]["x-goog-api-key"], "sk-g");
  EXPECT_EQ(requests[0]["body"]["generateContentRequest"]["contents"][0]["parts"][0]["text"], "hi");
  EXPECT_EQ(requests[1]["path"], "/v1/models/m1:generateContent");
  run = ask({"--config", config.string(), "--profile", "g", "--no-save", "--json", "forbidden"},
            "KEY=sk-g");
  EXPECT_EQ(run.exitCode, 4) << run.err;
  EXPECT_NE(json::parse(run.out)["refusal"].get<std::string>().find("finishReason SAFETY"),
            std::string::npos)
      << run.out;
}

// Issue 40's "done when" through `parley ask` and a Gemini profile with thinking on: tools over
// several rounds (the mock refuses a round whose signature was lost, as Gemini 3 does), streamed
// and not; a structured answer (responseJsonSchema); an image (inlineData).
TEST_F(AskTest, AGeminiProfileDoesToolRoundsStructuredOutputAndImages) {
  const std::string script = R"(
{"match": {"response_format": "json_schema"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
{"match": {"user_contains": "image"}, "reply": {"content": "a grey square"}}
{"match": {"request": 1}, "reply": {"reasoning_content": "Time first.", "content": "Checking.", "tool_calls": [{"name": "get_time", "arguments": {}}]}}
{"match": {"request": 2}, "reply": {"reasoning_content": "Then compute.", "tool_calls": [{"name": "calculate", "arguments": {"expression": "6*7"}}]}}
{"reply": {"reasoning_content": "Now the answer.", "content": "Done: {{tool_results}}"}}
)";
  serve(script);
  std::filesystem::create_directories(dir_);
  const auto config = dir_ / "gemini.toml";
  std::ofstream(config) << "[profiles.g]\nbase_url = \"" << server_->baseUrl()
                        << "\"\nprotocol = \"gemini\"\nmodel = \"gemini-mock\"\n"
                        << "api_key_env = \"KEY\"\n[profiles.g.parameters.generationConfig]\n"
                        << "thinkingConfig = { includeThoughts = true }\n";
  for (const char* mode : {"--stream", "--no-stream"}) {
    SCOPED_TRACE(mode);
    server_->setScript(mock::readScript(script));  // request numbers from 1 again
    server_->clearRequests();
    CliRun run = ask({"--config", config.string(), "--profile", "g", "--tools", "demo", mode,
                      "--no-save", "--json", "time and 6*7?"},
                     "KEY=k-g");
    ASSERT_EQ(run.exitCode, 0) << run.err;
    const std::string answer = json::parse(run.out)["message"]["content"];
    EXPECT_NE(answer.find("\"result\":42"), std::string::npos) << run.out;
    const std::vector<json> sent = server_->requests();
    ASSERT_EQ(sent.size(), 3u);
    // The third request carries both model turns with their signatures and thoughts.
    const json& contents = sent[2]["body"]["contents"];
    int signedCalls = 0;
    for (const json& c : contents) {
      for (const json& part : c["parts"]) {
        if (part.contains("functionCall") && part.contains("thoughtSignature")) ++signedCalls;
      }
    }
    EXPECT_EQ(signedCalls, 2) << contents.dump();
    EXPECT_EQ(sent[2]["body"]["generationConfig"]["thinkingConfig"]["includeThoughts"], true);
  }

  server_->clearRequests();
  CliRun structured = ask({"--config", config.string(), "--profile", "g", "--schema",
                           "name, age int", "--no-save", "who?"},
                          "KEY=k-g");
  ASSERT_EQ(structured.exitCode, 0) << structured.err;
  EXPECT_EQ(json::parse(structured.out), json::parse(R"({"name": "Ada", "age": 36})"));
  const json generation = server_->requests().at(0)["body"]["generationConfig"];
  EXPECT_EQ(generation["responseMimeType"], "application/json");
  EXPECT_EQ(generation["responseJsonSchema"]["required"], json::parse(R"(["name", "age"])"));

  server_->clearRequests();
  const auto image = dir_ / "grey.png";
  std::ofstream(image, std::ios::binary) << test::makePng(4, 4);
  CliRun seen = ask({"--config", config.string(), "--profile", "g", "--attach", image.string(),
                     "--no-save", "what is in the image?"},
                    "KEY=k-g");
  ASSERT_EQ(seen.exitCode, 0) << seen.err;
  EXPECT_EQ(seen.out, "a grey square\n");
  const json parts = server_->requests().at(0)["body"]["contents"][0]["parts"];
  bool inline_ = false;
  for (const json& p : parts) {
    if (p.contains("inlineData")) inline_ = p["inlineData"]["mimeType"] == "image/png";
  }
  EXPECT_TRUE(inline_) << parts.dump();
}

// An image a Gemini image model generates is written by --save-images (and only said without
// it); the grounding's searches are priced at the model's web_search.
TEST_F(AskTest, GeneratedImagesAreSavedAndGroundedSearchesPriced) {
  const std::string png = test::makePng(3, 3);
  const json body = {
      {"candidates",
       {{{"index", 0},
         {"finishReason", "STOP"},
         {"content",
          {{"role", "model"},
           {"parts",
            {{{"text", "Here is your square."}},
             {{"inlineData", {{"mimeType", "image/png"}, {"data", base64Encode(png)}}}}}}}},
         {"groundingMetadata", {{"webSearchQueries", {"grey", "square"}}}}}}},
      {"usageMetadata", {{"promptTokenCount", 1000000}, {"candidatesTokenCount", 0}}}};
  serve(json{{"raw", body.dump()}, {"content_type", "application/json"}}.dump());
  std::filesystem::create_directories(dir_);
  const auto prices = dir_ / "prices.toml";
  std::ofstream(prices) << "[prices.\"gemini-img\"]\ninput = 1\noutput = 1\nweb_search = 14\n";
  const auto images = dir_ / "images";
  const std::vector<std::string> common = {
      "--base-url", server_->baseUrl(), "--protocol",  "gemini",
      "--model",    "gemini-img",       "--api-key",   "k",
      "--prices",   prices.string(),    "--no-stream", "--no-save"};
  std::vector<std::string> saving = common;
  for (const char* a : {"--json", "--save-images"})
    saving.push_back(a);
  saving.push_back(images.string());
  saving.push_back("draw a grey square");
  CliRun run = ask(saving);
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NEAR(json::parse(run.out)["cost_usd"].get<double>(), 1 + 2 * 14 / 1000.0, 1e-9);
  EXPECT_EQ(readFile(images / "image-1.png"), png);
  EXPECT_NE(run.err.find("image saved to"), std::string::npos) << run.err;
  // A second turn does not overwrite the first image.
  ASSERT_EQ(ask(saving).exitCode, 0);
  EXPECT_EQ(readFile(images / "image-2.png"), png);

  std::vector<std::string> told = common;
  told.push_back("draw it again");
  CliRun said = ask(told);
  ASSERT_EQ(said.exitCode, 0) << said.err;
  EXPECT_EQ(said.out, "Here is your square.\n");
  EXPECT_NE(said.err.find("1 generated image (image/png"), std::string::npos) << said.err;

  std::vector<std::string> bad = common;
  for (const char* a : {"--save-images", "", "hi"})
    bad.push_back(a);
  bad[bad.size() - 2] = prices.string();  // a file, not a directory
  server_->clearRequests();
  CliRun refused = ask(bad);
  EXPECT_NE(refused.exitCode, 0);
  EXPECT_NE(refused.err.find("--save-images"), std::string::npos) << refused.err;
  EXPECT_TRUE(server_->requests().empty());
}

// Without --prices: the shipped table, with the config file's [prices] over it.
TEST_F(AskTest, ConfigPricesOverrideTheShippedTable) {
  serve(
      R"({"reply": {"content": "ok", "usage": {"prompt_tokens": 1000000, "completion_tokens": 0}}})");
  std::filesystem::create_directories(dir_);
  const std::string config = (dir_ / "config.toml").string();
  const auto costWith = [&](const std::string& model) {
    CliRun run = ask({"--base-url", server_->baseUrl(), "--model", model, "--api-key", "sk",
                      "--config", config, "--no-save", "--json", "hi"});
    EXPECT_EQ(run.exitCode, 0) << run.err;
    return json::parse(run.out)["cost_usd"];
  };
  std::ofstream(config) << "[prices.\"my-local-model\"]\ninput = 0.5\noutput = 1\n";
  EXPECT_EQ(costWith("my-local-model"), 0.5);
  EXPECT_EQ(costWith("gpt-4o-mini"), 0.15);  // the shipped price
  std::ofstream(config) << "[prices.\"gpt-4o-mini\"]\ninput = 9\noutput = 9\n";
  EXPECT_EQ(costWith("gpt-4o-mini"), 9);
}

// The prices are read only when the turn is priced (--json, --max-cost, --prices, telemetry):
// a plain ask does not parse them, so a mistake in the config file's [prices] does not stop it.
TEST_F(AskTest, APlainAskDoesNotReadThePrices) {
  serve(R"({"reply": {"content": "ok"}})");
  std::filesystem::create_directories(dir_);
  const std::string config = (dir_ / "config.toml").string();
  std::ofstream(config) << "[prices.\"m1\"]\ninput = 2\n";  // no output: not a valid table
  const std::vector<std::string> plain = {
      "--base-url", server_->baseUrl(), "--model", "m1",        "--api-key",
      "sk",         "--config",         config,    "--no-save", "hi"};
  CliRun run = ask(plain);
  EXPECT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(run.out, "ok\n");
  std::vector<std::string> priced = plain;
  priced.insert(priced.end() - 1, "--json");
  run = ask(priced);
  EXPECT_NE(run.exitCode, 0);
  EXPECT_NE(run.err.find("prices.m1.output: is required"), std::string::npos) << run.err;
  EXPECT_EQ(server_->requests().size(), 1u);  // the priced turn sent nothing
}

TEST_F(AskTest, ABadPriceFileFailsBeforeAnyRequest) {
  serve(R"({"reply": {"content": "ok"}})");
  std::filesystem::create_directories(dir_);
  const std::string prices = (dir_ / "prices.toml").string();
  std::ofstream(prices) << "[prices.\"m1\"]\ninput = 2\n";
  CliRun run = ask({"--base-url", server_->baseUrl(), "--model", "m1", "--api-key", "sk",
                    "--prices", prices, "--no-save", "--json", "hi"});
  EXPECT_NE(run.exitCode, 0);
  EXPECT_NE(run.err.find("prices.m1.output: is required"), std::string::npos) << run.err;
  EXPECT_TRUE(server_->requests().empty());
}

}  // namespace
}  // namespace parley
