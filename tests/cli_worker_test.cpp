// `parley worker`, `parley submit` and `parley runs` as real processes, on SQLite and on the
// throwaway PostgreSQL cluster, against the mock: the command forms, bad input, a worker stopped
// with SIGSTOP past its lease and fenced out when it continues, an interaction wait that
// survives a worker's SIGKILL, cancel of a queued and of a running run, SIGTERM.
//
// The test follows what the workers do through the database's event log (RunStore in this
// process), never by sleeping. The tools are command tools (a tools file): `count` appends its
// arguments to a file; `gate` records that it started and returns once a file exists.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "child_process.hpp"
#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"
#include "run_databases.hpp"

namespace parley::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kScript = R"script(
{"name": "answer", "match": {"last_role": "tool"}, "reply": {"content": "done: {{tool_results}}"}}
{"name": "gate", "match": {"user_contains": "gate"}, "reply": {"tool_calls": [{"name": "gate", "arguments": {}}]}}
{"name": "ask", "match": {"user_contains": "ask"}, "reply": {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which city?"}}]}}
{"name": "stall", "match": {"user_contains": "stall"}, "delay_ms": 60000, "reply": {"content": "too late"}}
{"name": "echo", "reply": {"content": "echo: {{last_user}}"}}
)script";

template <class Db>
class CliWorkerTest : public ::testing::Test {
 protected:
  Db db;
  std::unique_ptr<mock::MockServer> server;
  std::unique_ptr<RunStore> runs;
  fs::path gateFile = db.dir / "gate-open";

  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    server = std::make_unique<mock::MockServer>(options);
    server->start();
    std::ofstream(db.dir / "tools.toml")
        << "[[tool]]\nname = \"gate\"\ndescription = \"waits for the gate file\"\n"
        << "command = [\"sh\", \"-c\", \"while [ ! -e '" << gateFile.string()
        << "' ]; do sleep 0.02; done; echo passed\"]\ntimeout_ms = 120000\n";
    // Creates the schema before the processes start, and watches them.
    runs = std::make_unique<RunStore>(db.open());
  }
  void TearDown() override {
    server->stop();
    std::error_code ignored;
    fs::remove_all(db.dir, ignored);
  }

  CliRun cli(std::vector<std::string> args) { return runCli(args, db.dir / "cli"); }

  std::unique_ptr<ChildProcess> worker(const std::string& id, int leaseMs = 30'000,
                                       std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PARLEY_CLI_PATH, "worker",
                                     "--db",          db.url(),
                                     "--base-url",    server->baseUrl(),
                                     "--model",       "parley-mock",
                                     "--api-key",     "test",
                                     "--tools-file",  (db.dir / "tools.toml").string(),
                                     "--worker-id",   id,
                                     "--lease-ms",    std::to_string(leaseMs)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto child = std::make_unique<ChildProcess>(argv);
    auto ready = child->readLine();  // its id, once it serves
    if (!ready || *ready != id) throw std::runtime_error("the worker did not start");
    return child;
  }

  std::string submit(const std::string& thread, const std::string& prompt) {
    CliRun r = cli({"submit", "--db", db.url(), "--thread", thread, prompt});
    if (r.exitCode != 0) throw std::runtime_error("submit failed: " + r.err);
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n')
      id.pop_back();
    return id;
  }

  // Waits, on the thread's event log, for an event of `type` (of `runId`) past `after`.
  StoredEvent awaitEvent(const std::string& thread, const std::string& type,
                         const std::string& runId = "", int64_t after = 0) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    int64_t seen = after;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const auto& e : runs->waitForEvents(thread, seen, 500ms)) {
        seen = e.seq;
        if (e.type == type && (runId.empty() || e.runId == runId)) return e;
      }
    }
    throw std::runtime_error("no " + type + " event on thread " + thread);
  }

  std::vector<std::string> contents(const std::string& thread) {
    std::vector<std::string> out;
    for (const auto& m : runs->threads().loadThread(thread).messages)
      out.push_back(m.content);
    return out;
  }
};

TYPED_TEST_SUITE_P(CliWorkerTest);

TYPED_TEST_P(CliWorkerTest, SubmitWaitListShowAndSigterm) {
  auto w = this->worker("w1");
  const std::string a = this->submit("t", "first");
  const std::string b = this->submit("t", "second");
  EXPECT_EQ(a.rfind("r-", 0), 0u) << a;
  CliRun waited = this->cli({"runs", "wait", "--db", this->db.url(), "--timeout", "60000", a, b});
  EXPECT_EQ(waited.exitCode, 0) << waited.err;
  EXPECT_EQ(
      waited.out,
      json({{"run", a}, {"thread", "t"}, {"status", "completed"}, {"error", nullptr}}).dump() +
          "\n" +
          json({{"run", b}, {"thread", "t"}, {"status", "completed"}, {"error", nullptr}}).dump() +
          "\n");
  EXPECT_EQ(this->contents("t"),
            (std::vector<std::string>{"first", "echo: first", "second", "echo: second"}));

  CliRun listed = this->cli({"runs", "list", "--db", this->db.url(), "--thread", "t"});
  ASSERT_EQ(listed.exitCode, 0) << listed.err;
  std::istringstream lines(listed.out);
  std::string line;
  std::vector<json> rows;
  while (std::getline(lines, line))
    rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["run"], a);
  EXPECT_EQ(rows[0]["worker"], "w1");
  EXPECT_EQ(rows[1]["result"]["content"], "echo: second");

  CliRun shown = this->cli({"runs", "show", "--db", this->db.url(), a});
  ASSERT_EQ(shown.exitCode, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["input"][0]["content"], "first");

  CliRun events = this->cli({"runs", "events", "--db", this->db.url(), "t"});
  ASSERT_EQ(events.exitCode, 0) << events.err;
  EXPECT_NE(events.out.find("\"type\":\"run_completed\""), std::string::npos);
  EXPECT_NE(events.out.find("\"type\":\"message_added\""), std::string::npos);

  // --follow prints what is there, then waits for more until SIGTERM, which ends it with 0.
  ChildProcess follow({PARLEY_CLI_PATH, "runs", "events", "--follow", "--db", this->db.url(), "t"});
  std::optional<std::string> line1;
  bool sawEnd = false;
  while (!sawEnd && (line1 = follow.readLine())) {
    const json event = json::parse(*line1);
    sawEnd = event["run"] == b && event["type"] == "llm_execution_completed";
  }
  ASSERT_TRUE(sawEnd) << "runs events --follow did not print the second run's end";
  follow.kill(SIGTERM);
  EXPECT_EQ(follow.wait(), 0);

  w->kill(SIGTERM);
  EXPECT_EQ(w->wait(), 0);
}

TYPED_TEST_P(CliWorkerTest, BadInputGetsAClearErrorAndChangesNothing) {
  const std::string url = this->db.url();
  CliRun r = this->cli({"submit", "--db", url, "--thread", "t", "--policy", "sometimes", "hi"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("'sometimes' is not a policy"), std::string::npos) << r.err;
  r = this->cli({"submit", "--db", url, "--thread", "t"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
  r = this->cli({"submit", "--db", url, "--thread", "t", ""});
  EXPECT_EQ(r.exitCode, 2);
  r = this->cli({"runs", "respond", "--db", url, "--thread", "nowhere", "yes"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("no thread 'nowhere'"), std::string::npos) << r.err;
  r = this->cli({"runs", "respond", "--db", url, "r-missing", "yes"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("r-missing"), std::string::npos) << r.err;
  r = this->cli({"runs", "wait", "--db", url, "r-missing"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("no run 'r-missing'"), std::string::npos) << r.err;
  EXPECT_TRUE(this->runs->listRuns().empty());
  EXPECT_FALSE(this->runs->threads().threadInfo("t"));
  EXPECT_FALSE(this->runs->threads().threadInfo("nowhere"));

  // A rejected submit exits 1 with the reason, and is stored as rejected.
  const std::string first = this->submit("q", "queued");
  r = this->cli({"submit", "--db", url, "--thread", "q", "--policy", "reject", "again"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("rejected"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(first), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  // wait exits 1 when a run did not complete.
  r = this->cli({"runs", "wait", "--db", url, "--timeout", "10", first});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.out.find("\"status\":\"queued\""), std::string::npos) << r.out;
}

TYPED_TEST_P(CliWorkerTest, AWorkerStoppedPastItsLeaseIsFencedOut) {
  auto stalled = this->worker("stalled", 1'000);
  const std::string run = this->submit("f", "gate");
  this->awaitEvent("f", "tool_execution_request", run);
  stalled->kill(SIGSTOP);
  // Its lease runs out; another worker takes the run over and completes it (the gate call
  // started and is not idempotent: the model is told it may have run).
  auto taker = this->worker("taker", 1'000);
  StoredEvent completed = this->awaitEvent("f", "run_completed", run);
  EXPECT_EQ(completed.runId, run);
  RunInfo done = *this->runs->run(run);
  EXPECT_EQ(done.worker, "taker");
  EXPECT_EQ(done.attempts, 2);
  const auto before = this->contents("f");
  ASSERT_EQ(before.size(), 4u);
  EXPECT_NE(before[2].find("may have run"), std::string::npos) << before[2];

  // The stalled worker continues: its gate call ends, and every write it tries is refused.
  std::ofstream(this->gateFile) << "open";
  stalled->kill(SIGCONT);
  stalled->kill(SIGTERM);
  auto report = stalled->readLine();
  ASSERT_TRUE(report);
  EXPECT_EQ(json::parse(*report)["lost"], 1) << *report;
  EXPECT_EQ(json::parse(*report)["completed"], 0) << *report;
  EXPECT_EQ(stalled->wait(), 0);
  EXPECT_EQ(this->contents("f"), before);
  EXPECT_EQ(this->runs->run(run)->status, RunStatus::Completed);
  auto journal = this->runs->journal(run);
  ASSERT_EQ(journal.calls.size(), 1u);
  EXPECT_EQ(journal.calls[0].phase, ToolCallPhase::Indeterminate);
  taker->kill(SIGTERM);
  EXPECT_EQ(taker->wait(), 0);
}

TYPED_TEST_P(CliWorkerTest, AnInteractionWaitSurvivesAWorkersDeath) {
  auto first = this->worker("first", 30'000, {"--human-tool", "ask_human"});
  const std::string run = this->submit("h", "ask me");
  this->awaitEvent("h", "run_waiting", run);
  first->kill(SIGKILL);
  first->wait();
  CliRun answered = this->cli({"runs", "respond", "--db", this->db.url(), run, "Paris"});
  ASSERT_EQ(answered.exitCode, 0) << answered.err;
  EXPECT_EQ(json::parse(answered.out)["response"], "Paris");
  auto second = this->worker("second", 30'000, {"--human-tool", "ask_human"});
  CliRun waited = this->cli({"runs", "wait", "--db", this->db.url(), "--timeout", "60000", run});
  EXPECT_EQ(waited.exitCode, 0) << waited.out << waited.err;
  RunInfo done = *this->runs->run(run);
  EXPECT_EQ(done.worker, "second");
  EXPECT_EQ(done.result["content"], "done: Paris");
  second->kill(SIGTERM);
  EXPECT_EQ(second->wait(), 0);
}

TYPED_TEST_P(CliWorkerTest, CancelsAQueuedAndARunningRun) {
  auto w = this->worker("w");
  const std::string running = this->submit("c", "gate");
  const std::string queued = this->submit("c", "later");
  this->awaitEvent("c", "tool_execution_request", running);
  CliRun cancelled = this->cli({"runs", "cancel", "--db", this->db.url(), queued, running});
  ASSERT_EQ(cancelled.exitCode, 0) << cancelled.err;
  CliRun waited =
      this->cli({"runs", "wait", "--db", this->db.url(), "--timeout", "60000", queued, running});
  EXPECT_EQ(waited.exitCode, 1);
  EXPECT_EQ(
      waited.out,
      json({{"run", queued}, {"thread", "c"}, {"status", "cancelled"}, {"error", "cancelled"}})
              .dump() +
          "\n" +
          json({{"run", running}, {"thread", "c"}, {"status", "cancelled"}, {"error", "cancelled"}})
              .dump() +
          "\n");
  EXPECT_TRUE(this->contents("c").empty());
  w->kill(SIGTERM);
  EXPECT_EQ(w->wait(), 0);
}

// The turn's settings reach the worker from its command line: a run against a model that never
// answers fails at --turn-timeout instead of holding its thread.
TYPED_TEST_P(CliWorkerTest, ARunPastTheTurnTimeoutFails) {
  auto w = this->worker("w1", 30'000, {"--turn-timeout", "300", "--max-tool-calls", "2"});
  const std::string a = this->submit("t", "stall");
  CliRun waited = this->cli({"runs", "wait", "--db", this->db.url(), "--timeout", "60000", a});
  const json row = json::parse(waited.out);
  EXPECT_EQ(row["status"], "failed") << waited.out;
  EXPECT_NE(row["error"].get<std::string>().find("within its timeout"), std::string::npos) << waited.out;
}

REGISTER_TYPED_TEST_SUITE_P(CliWorkerTest, SubmitWaitListShowAndSigterm, ARunPastTheTurnTimeoutFails,
                            BadInputGetsAClearErrorAndChangesNothing,
                            AWorkerStoppedPastItsLeaseIsFencedOut,
                            AnInteractionWaitSurvivesAWorkersDeath, CancelsAQueuedAndARunningRun);

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, CliWorkerTest, ::testing::Types<SqliteRunDb>);
INSTANTIATE_TYPED_TEST_SUITE_P(Postgres, CliWorkerTest, ::testing::Types<PostgresRunDb>);

}  // namespace parley::testing
