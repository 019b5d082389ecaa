// MCP servers on the command line: [mcp.NAME] tables of the config file, `--mcp NAME` on ask and
// chat, `parley mcp list|call`, against server-everything from npm (the mcp_npm_install
// fixture) and the mock for the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "child_process.hpp"
#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

const std::string kEverything = std::string(PARLEY_MCP_NODE_DIR) +
                                "/node_modules/@modelcontextprotocol/server-everything/dist/"
                                "index.js";

class CliMcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "The server said: {{last_tool}}"}}
{"reply": {"content": "", "tool_calls": [{"name": "ev__echo", "arguments": {"message": "from the model"}}]}}
)");
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }
  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // A config file with server-everything as [mcp.ev] plus `extra` lines in its table.
  std::string config(const std::string& extra = "", const std::string& more = "") {
    std::filesystem::create_directories(dir_);
    const auto path = dir_ / "config.toml";
    std::ofstream(path) << "[mcp.ev]\ncommand = [\"" << PARLEY_NODE << "\", \"" << kEverything
                        << "\", \"stdio\"]\nprefix = true\n"
                        << extra << "\n"
                        << more;
    return path.string();
  }

  CliRun run(std::vector<std::string> args, const std::string& input = "") {
    return testing::runCli(args, dir_, "", input);
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-cli-mcp-test-" + std::to_string(::getpid()));
};

TEST_F(CliMcpTest, AskRunsAnMcpToolInTheLoop) {
  CliRun out = run({"ask", "--base-url", server_->baseUrl(), "--config", config(), "--mcp", "ev",
                    "--no-save", "say it"});
  ASSERT_EQ(out.exitCode, 0) << out.err;
  EXPECT_EQ(out.out, "The server said: Echo: from the model\n");
  EXPECT_NE(out.err.find("[tool] ev__echo {\"message\":\"from the model\"}"), std::string::npos)
      << out.err;
  EXPECT_NE(out.err.find("[tool] ev__echo -> Echo: from the model"), std::string::npos) << out.err;
  const json first = server_->requests().at(0)["body"];
  bool offered = false;
  for (const json& tool : first["tools"])
    offered = offered || tool["function"]["name"] == "ev__get-sum";
  EXPECT_TRUE(offered);
}

TEST_F(CliMcpTest, ChatShowsMcpToolCallsLikeTheOthers) {
  CliRun out = run({"chat", "--base-url", server_->baseUrl(), "--config", config(), "--mcp", "ev",
                    "--db", (dir_ / "chat.db").string()},
                   "say it\n/quit\n");
  ASSERT_EQ(out.exitCode, 0) << out.err;
  EXPECT_NE(out.out.find("tools: ev__echo"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("[tool] ev__echo {\"message\":\"from the model\"}"), std::string::npos)
      << out.out;
  EXPECT_NE(out.out.find("The server said: Echo: from the model"), std::string::npos) << out.out;
}

TEST_F(CliMcpTest, ToolsThatNeedApprovalAreNotOfferedWhereNobodyCanApprove) {
  CliRun out = run({"ask", "--base-url", server_->baseUrl(), "--config",
                    config("approve = [\"echo\"]\nallow = [\"echo\", \"get-sum\"]"), "--mcp", "ev",
                    "--no-save", "say it"});
  ASSERT_EQ(out.exitCode, 0) << out.err;
  EXPECT_NE(out.err.find("mcp.ev: echo need approval, which this command cannot ask for"),
            std::string::npos)
      << out.err;
  const json first = server_->requests().at(0)["body"];
  ASSERT_EQ(first["tools"].size(), 1u) << first["tools"];
  EXPECT_EQ(first["tools"][0]["function"]["name"], "ev__get-sum");
  // The model asked for the tool anyway: an error result, not a call.
  EXPECT_NE(out.err.find("unknown tool \\\"ev__echo\\\""), std::string::npos) << out.err;

  CliRun always = run({"ask", "--base-url", server_->baseUrl(), "--config",
                       config("approve = \"always\""), "--mcp", "ev", "--no-save", "say it"});
  EXPECT_EQ(always.exitCode, 2);
  EXPECT_NE(always.err.find("config.toml: mcp.ev.approve: \"always\" needs someone to approve"),
            std::string::npos)
      << always.err;
}

TEST_F(CliMcpTest, BadConfigNamesTheKey) {
  struct Case {
    std::string table;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"timeout = 5", "mcp.ev.timeout: unknown key (command, env, cwd, url,"},
      {"timeout_ms = -1", "mcp.ev.timeout_ms: must be a positive integer"},
      {"approve = \"sometimes\"",
       "mcp.ev.approve: must be \"always\", \"never\", \"destructive\" or a list"},
      {"protocol = \"2030-01-01\"",
       "mcp.ev.protocol: \"2030-01-01\" is not one of auto, 2026-07-28"},
      {"allow = \"echo\"", "mcp.ev.allow: must be an array of strings"},
      {"env = { A = 1 }", "mcp.ev.env.A: must be a string"},
      {"url = \"http://127.0.0.1:1/mcp\"", "mcp.ev: give exactly one of command"},
      {"cwd = 3", "mcp.ev.cwd: must be a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.table);
    CliRun out = run({"mcp", "list", "--config", config(c.table), "ev"});
    EXPECT_EQ(out.exitCode, 2);
    EXPECT_NE(out.err.find(c.error), std::string::npos) << out.err;
  }
  CliRun token = run({"mcp", "list", "--config",
                      config("",
                             "[mcp.web]\nurl = \"http://127.0.0.1:1/mcp\"\nbearer_token_env = "
                             "\"PARLEY_TEST_NO_SUCH_TOKEN\"\n"),
                      "web"});
  EXPECT_EQ(token.exitCode, 2);
  EXPECT_NE(token.err.find("mcp.web.bearer_token_env: the environment variable "
                           "PARLEY_TEST_NO_SUCH_TOKEN is not set"),
            std::string::npos)
      << token.err;
  CliRun missing = run({"ask", "--config", config(), "--mcp", "nope", "hi"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("mcp.nope: no [mcp.nope] table in"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("(it has: ev)"), std::string::npos) << missing.err;
}

TEST_F(CliMcpTest, ListAndCall) {
  CliRun list = run({"mcp", "list", "--config", config("deny = [\"get-env\"]"), "ev"});
  ASSERT_EQ(list.exitCode, 0) << list.err;
  EXPECT_NE(list.out.find("ev: mcp-servers/everything"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("  echo "), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("(denied)"), std::string::npos) << list.out;
  CliRun listJson = run({"mcp", "list", "--json", "--config", config(), "ev"});
  ASSERT_EQ(listJson.exitCode, 0) << listJson.err;
  json tools = json::parse(listJson.out);
  ASSERT_TRUE(tools.is_array());
  EXPECT_EQ(tools[0]["inputSchema"]["type"], "object");

  CliRun call = run({"mcp", "call", "--config", config(), "ev", "get-sum", R"({"a": 1, "b": 2})"});
  ASSERT_EQ(call.exitCode, 0) << call.err;
  EXPECT_EQ(call.out, "The sum of 1 and 2 is 3.\n");
  CliRun failing = run({"mcp", "call", "--config", config(), "ev", "echo", R"({"message": 1})"});
  EXPECT_EQ(failing.exitCode, 1);
  EXPECT_NE(failing.out.find("message"), std::string::npos) << failing.out;
}

TEST_F(CliMcpTest, AServerThatCannotStartIsAnError) {
  CliRun out =
      run({"ask", "--base-url", server_->baseUrl(), "--config",
           config("", "[mcp.broken]\ncommand = [\"sh\", \"-c\", \"echo no luck >&2; exit 4\"]\n"),
           "--mcp", "broken", "--no-save", "hi"});
  EXPECT_EQ(out.exitCode, 1);
  EXPECT_NE(out.err.find("MCP server \"broken\" exited with status 4"), std::string::npos)
      << out.err;
  EXPECT_NE(out.err.find("no luck"), std::string::npos) << out.err;
}

// A server that asks the user for a form (tests/node/mcp/test_server.mjs relay): chat asks the
// person at the terminal; ask cannot, so it declines and says what was asked.
class CliMcpFormTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "Answer: {{last_tool}}"}}
{"reply": {"content": "", "tool_calls": [{"name": "relay", "arguments": {"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string", "default": "John"}, "age": {"type": "integer"}}}}}}]}}
)");
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.toml")
        << "[mcp.rel]\ncommand = [\"" << PARLEY_NODE << "\", \"" << PARLEY_MCP_NODE_DIR
        << "/test_server.mjs\", \"relay\"]\n";
  }
  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::vector<std::string> command(const std::string& name) {
    return {name,    "--base-url", server_->baseUrl(), "--config", (dir_ / "config.toml").string(),
            "--mcp", "rel"};
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-cli-mcp-form-test-" + std::to_string(::getpid()));
};

TEST_F(CliMcpFormTest, AskDeclinesAFormAndSaysWhatWasAsked) {
  std::vector<std::string> args = command("ask");
  args.insert(args.end(), {"--no-save", "go"});
  CliRun out = testing::runCli(args, dir_, "", "");
  ASSERT_EQ(out.exitCode, 0) << out.err;
  EXPECT_EQ(out.out, "Answer: {\"action\":\"decline\"}\n");
  EXPECT_NE(out.err.find("mcp.rel asked \"Your name?\"; this command cannot ask, so it declined"),
            std::string::npos)
      << out.err;
}

TEST_F(CliMcpFormTest, ChatAsksThePersonFieldByField) {
  std::vector<std::string> args = command("chat");
  args.insert(args.end(), {"--db", (dir_ / "chat.db").string()});
  // The fields in the schema's order (age, name): 41, then the default.
  CliRun out = testing::runCli(args, dir_, "", "go\n41\n\n/quit\n");
  ASSERT_EQ(out.exitCode, 0) << out.err;
  EXPECT_NE(out.out.find("[mcp.rel asks] Your name?"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find(R"(Answer: {"action":"accept","content":{"age":41,"name":"John"}})"),
            std::string::npos)
      << out.out;
}

// `parley worker --mcp NAME`: a server's form in a durable run becomes the run's question (the
// worker is freed), the worker is SIGKILLed while the run waits, the answer is stored with
// `parley runs respond`, and a second worker process runs the call again with it.
TEST_F(CliMcpFormTest, AWorkersFormIsTheRunsQuestionAndOutlivesItsSigkill) {
  const std::string db = (dir_ / "runs.db").string();
  RunStore runs(openStore(db));  // the schema, before the workers start; and a watcher
  auto worker = [&](const std::string& id) {
    std::vector<std::string> argv = command("worker");
    argv.insert(argv.begin(), PARLEY_CLI_PATH);
    argv.insert(argv.end(), {"--db", db, "--api-key", "test", "--worker-id", id});
    auto child = std::make_unique<testing::ChildProcess>(argv);
    auto ready = child->readLine();  // its id, once it serves
    if (!ready || *ready != id) throw std::runtime_error("the worker did not start");
    return child;
  };
  auto first = worker("first");
  const RunInfo run = runs.submit("f", "go");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int64_t seen = 0;
  bool waiting = false;
  while (!waiting && std::chrono::steady_clock::now() < deadline) {
    for (const StoredEvent& e : runs.waitForEvents("f", seen, std::chrono::milliseconds(500))) {
      seen = e.seq;
      waiting = waiting || e.type == "run_waiting";
    }
  }
  ASSERT_TRUE(waiting) << toJson(*runs.run(run.id)).dump();
  const RunInfo asked = *runs.run(run.id);
  EXPECT_EQ(asked.wait["kind"], "elicitation") << asked.wait.dump();
  EXPECT_EQ(asked.wait["prompt"], "Your name?") << asked.wait.dump();
  first->kill(SIGKILL);
  first->wait();

  CliRun answered =
      testing::runCli({"runs", "respond", "--db", db, run.id,
                       R"({"action": "accept", "content": {"name": "Ada", "age": 36}})"},
                      dir_, "", "");
  ASSERT_EQ(answered.exitCode, 0) << answered.err;
  auto second = worker("second");
  CliRun waited =
      testing::runCli({"runs", "wait", "--db", db, "--timeout", "60000", run.id}, dir_, "", "");
  ASSERT_EQ(waited.exitCode, 0) << waited.out << waited.err;
  const RunInfo done = *runs.run(run.id);
  EXPECT_EQ(done.worker, "second");
  EXPECT_EQ(done.result["content"],
            R"(Answer: {"action":"accept","content":{"age":36,"name":"Ada"}})")
      << done.result.dump();
  second->kill(SIGTERM);
  EXPECT_EQ(second->wait(), 0);
}

}  // namespace
}  // namespace parley
