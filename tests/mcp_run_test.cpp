// An MCP server's questions in durable runs: the reference server
// (@modelcontextprotocol/server-everything from npm, tests/node/mcp) asks for a form during a
// tool call of a run served by a Worker on SQLite, with the mock model choosing the call. The form
// becomes the run's own question (the run waits, its worker freed), the answer comes through the
// service's POST /v1/runs/ID/respond, and the call is run again with the answer, by another
// worker. Also the 2026-07-28 test server (tests/node/mcp/test_server.mjs modern), whose
// input_required result goes the same way.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "http_client.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/mcp.hpp"
#include "parley/run_store.hpp"
#include "parley/store.hpp"
#include "parley/worker.hpp"
#include "service/service.hpp"
#include "store/sqlite_store.hpp"

namespace parley::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const std::string kModules =
    std::string(PARLEY_MCP_NODE_DIR) + "/node_modules/@modelcontextprotocol";
const std::string kEverything = kModules + "/server-everything/dist/index.js";
const std::string kTestServer = std::string(PARLEY_MCP_NODE_DIR) + "/test_server.mjs";

// "form" calls the reference server's elicitation tool, "ask" the 2026 server's, "both" both.
constexpr const char* kScript = R"script(
{"name": "answer", "match": {"last_role": "tool"}, "reply": {"content": "done: {{tool_results}}"}}
{"name": "form", "match": {"user_contains": "form"}, "reply": {"tool_calls": [{"name": "trigger-elicitation-request", "arguments": {}}]}}
{"name": "ask", "match": {"user_contains": "name"}, "reply": {"tool_calls": [{"name": "ask", "arguments": {}}]}}
{"name": "echo", "reply": {"content": "echo: {{last_user}}"}}
)script";

class McpRunTest : public ::testing::Test {
 protected:
  fs::path dir = [] {
    std::string pattern = (fs::temp_directory_path() / "parley-mcp-run-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    return fs::path(pattern);
  }();
  std::unique_ptr<mock::MockServer> model;
  std::shared_ptr<RunStore> runs;
  std::shared_ptr<ProfileRegistry> profiles = std::make_shared<ProfileRegistry>();
  std::shared_ptr<ToolRegistry> tools = std::make_shared<ToolRegistry>();
  std::unique_ptr<Service> service;
  int declinedOutsideRuns = 0;

  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    model = std::make_unique<mock::MockServer>(options);
    model->start();
    ClientOptions client;
    client.baseUrl = model->baseUrl();
    client.model = "parley-mock";
    profiles->add("mock", client);
    RunStoreOptions ro;
    ro.pollMax = 20ms;
    runs =
        std::make_shared<RunStore>(std::make_shared<SqliteStore>((dir / "runs.db").string()), ro);
    ServiceOptions so;
    so.log = [](const std::string&) {};
    so.threads = 4;
    service = std::make_unique<Service>(runs, so);
    service->start();
  }
  void TearDown() override {
    service.reset();
    tools.reset();  // closes the MCP servers
    model->stop();
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  // The server offers elicitation (its onElicitation declines: nobody to ask outside a run);
  // a durable run asks in its own way.
  void addServer(const std::string& name, std::vector<std::string> command) {
    McpServerOptions options;
    options.command = std::move(command);
    options.shutdownGrace = 200ms;
    options.onElicitation = [this](const McpElicitation&, std::stop_token) {
      ++declinedOutsideRuns;
      return McpElicitationAnswer{};
    };
    tools->addMcpServer(name, options);
  }

  std::unique_ptr<Worker> startWorker(const std::string& id) {
    WorkerOptions o;
    o.workerId = id;
    o.profiles = profiles;
    o.defaultProfile = "mock";
    o.tools = tools;
    o.heartbeat = 20ms;
    o.claimPoll = 50ms;
    o.log = [](const std::string&) {};
    auto worker = std::make_unique<Worker>(runs, std::move(o));
    worker->start();
    return worker;
  }

  RunInfo awaitRun(const std::string& runId, std::initializer_list<RunStatus> states) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    int64_t seen = 0;
    for (;;) {
      RunInfo run = *runs->run(runId);
      for (RunStatus s : states)
        if (run.status == s) return run;
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("run " + runId + " stayed " + std::string(toString(run.status)));
      for (const auto& e : runs->waitForEvents(run.threadId, seen, 500ms))
        seen = e.seq;
    }
  }

  HttpReply respond(const std::string& runId, const json& response) {
    return http("POST", service->baseUrl() + "/v1/runs/" + runId + "/respond",
                json{{"response", response}}.dump(), {});
  }
};

TEST_F(McpRunTest, AServersFormBecomesTheRunsQuestionAnsweredOverTheService) {
  addServer("everything", {PARLEY_NODE, kEverything, "stdio"});
  auto first = startWorker("first");
  RunInfo run = runs->submit("t", "fill the form");
  RunInfo waiting = awaitRun(run.id, {RunStatus::Waiting, RunStatus::Failed, RunStatus::Completed});
  ASSERT_EQ(waiting.status, RunStatus::Waiting) << waiting.error << " " << waiting.result.dump();
  EXPECT_EQ(waiting.wait["kind"], "elicitation") << waiting.wait.dump();
  EXPECT_EQ(waiting.wait["tool"], "trigger-elicitation-request");
  EXPECT_EQ(waiting.wait["prompt"], "Please provide inputs for the following fields:");
  EXPECT_EQ(waiting.wait["question"]["server"], "everything");
  EXPECT_TRUE(waiting.wait["question"]["requestedSchema"]["properties"].contains("name"));
  EXPECT_EQ(declinedOutsideRuns, 0);  // the run asked, not the server's own handler
  first.reset();  // the worker goes away while the run waits: the question is run state

  auto second = startWorker("second");
  HttpReply reply = respond(run.id, {{"action", "accept"}, {"content", {{"name", "Ada"}}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  RunInfo done = awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.worker, "second");
  const std::string content = done.result["content"].get<std::string>();
  EXPECT_NE(content.find("- Name: Ada"), std::string::npos) << content;
  // The schema's defaults filled in what the answer left out.
  EXPECT_NE(content.find("- Favorite Integer: 42"), std::string::npos) << content;
  EXPECT_EQ(declinedOutsideRuns, 0);
}

TEST_F(McpRunTest, ADeclineAndA2026InputRequiredResultGoTheSameWay) {
  addServer("modern", {PARLEY_NODE, kTestServer, "modern"});
  auto worker = startWorker("w");
  RunInfo run = runs->submit("m", "your name?");
  RunInfo waiting = awaitRun(run.id, {RunStatus::Waiting, RunStatus::Failed, RunStatus::Completed});
  ASSERT_EQ(waiting.status, RunStatus::Waiting) << waiting.error << " " << waiting.result.dump();
  EXPECT_EQ(waiting.wait["prompt"], "Your name?");
  ASSERT_EQ(respond(run.id, {{"action", "accept"}, {"content", {{"name", "Grace"}}}}).status, 200);
  RunInfo done = awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.result["content"], "done: Hello, Grace");

  RunInfo declined = runs->submit("d", "your name?");
  ASSERT_EQ(awaitRun(declined.id, {RunStatus::Waiting, RunStatus::Failed}).status,
            RunStatus::Waiting);
  ASSERT_EQ(respond(declined.id, {{"action", "decline"}}).status, 200);
  done = awaitRun(declined.id, {RunStatus::Completed, RunStatus::Failed});
  EXPECT_EQ(done.result["content"], "done: no name (decline)");
  EXPECT_EQ(declinedOutsideRuns, 0);
}

}  // namespace
}  // namespace parley::testing
