// `parley serve` as a real process, against the mock, through libcurl: a run submitted over
// HTTP and completed by `--workers 1` with its events streamed; a stream cut in the middle of a
// run and resumed with Last-Event-ID (nothing lost or doubled); no API key in any answer; the
// command line's refusals; SIGTERM. On the throwaway PostgreSQL: two serve processes and two
// `parley worker` processes, where a client of serve A sees the events of a run submitted
// through serve B.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "child_process.hpp"
#include "cli_runner.hpp"
#include "http_client.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"
#include "run_databases.hpp"

namespace parley::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Not a real key: what the test looks for in every answer.
constexpr const char* kApiKey = "sk-test-never-in-an-answer-4711";
constexpr const char* kToken = "serve-test-token-0123456789";

// A streamed reply in many chunks, slow enough that a client can leave in the middle.
constexpr const char* kScript = R"script(
{"name": "slow", "match": {"user_contains": "slow"}, "reply": {"content": "one two three four five six seven eight nine ten eleven twelve"}, "stream": {"chunk_delay_ms": 60}}
{"name": "echo", "reply": {"content": "echo: {{last_user}}"}}
)script";

std::string chunkText(const SseEvent& e) {
  return json::parse(e.data)["payload"]["content"].get<std::string>();
}

template <class Db>
class CliServeTest : public ::testing::Test {
 protected:
  Db db;
  std::unique_ptr<mock::MockServer> server;
  std::vector<std::string> answers;  // every body the services sent

  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    server = std::make_unique<mock::MockServer>(options);
    server->start();
    ::setenv("PARLEY_SERVE_TEST_TOKEN", kToken, 1);
    RunStore(db.open());  // the schema, before the processes start
  }
  void TearDown() override { server->stop(); }

  struct Serve {
    std::unique_ptr<ChildProcess> process;
    std::string base;
  };
  Serve serve(int workers, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PARLEY_CLI_PATH,
                                     "serve",
                                     "--db",
                                     db.url(),
                                     "--port",
                                     "0",
                                     "--auth-token-env",
                                     "PARLEY_SERVE_TEST_TOKEN",
                                     "--workers",
                                     std::to_string(workers),
                                     "--base-url",
                                     server->baseUrl(),
                                     "--model",
                                     "parley-mock",
                                     "--api-key",
                                     kApiKey};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Serve s;
    s.process = std::make_unique<ChildProcess>(argv);
    auto line = s.process->readLine();
    if (!line || line->rfind("http://127.0.0.1:", 0) != 0) {
      throw std::runtime_error("parley serve did not print its URL");
    }
    s.base = *line;
    return s;
  }
  std::unique_ptr<ChildProcess> worker(const std::string& id) {
    auto child = std::make_unique<ChildProcess>(std::vector<std::string>{
        PARLEY_CLI_PATH, "worker", "--db", db.url(), "--base-url", server->baseUrl(), "--model",
        "parley-mock", "--api-key", kApiKey, "--worker-id", id});
    auto ready = child->readLine();
    if (!ready || *ready != id) throw std::runtime_error("the worker did not start");
    return child;
  }

  std::vector<std::string> auth() const { return {std::string("Authorization: Bearer ") + kToken}; }
  HttpReply call(const std::string& method, const std::string& url, const json& body = nullptr) {
    HttpReply reply = http(method, url, body.is_null() ? "" : body.dump(), auth());
    answers.push_back(reply.body);
    return reply;
  }
  // The events of `thread` from `after` on, until `runId`'s last event.
  std::vector<SseEvent> streamRun(const std::string& base, const std::string& thread,
                                  const std::string& runId, int64_t after = 0,
                                  std::function<bool(const SseEvent&)> more = {}) {
    std::vector<SseEvent> got;
    auto headers = auth();
    if (after > 0) headers.push_back("Last-Event-ID: " + std::to_string(after));
    auto read = readSse(
        base + "/v1/threads/" + thread + "/events",
        [&](const SseEvent& e) {
          got.push_back(e);
          answers.push_back(e.data);
          if (more && !more(e)) return false;
          json data = json::parse(e.data);
          return !(data["run"] == runId &&
                   (e.event == "llm_execution_completed" || e.event == "llm_execution_failed"));
        },
        headers, 60'000);
    EXPECT_FALSE(read.timedOut);
    EXPECT_EQ(read.status, 200);
    return got;
  }
  void expectNoKeyAnywhere() {
    for (const auto& a : answers)
      EXPECT_EQ(a.find(kApiKey), std::string::npos) << a;
  }
};

using Engines = ::testing::Types<SqliteRunDb, PostgresRunDb>;
TYPED_TEST_SUITE(CliServeTest, Engines);

TYPED_TEST(CliServeTest, RunSubmittedOverHttpCompletesWithStreamedEvents) {
  auto s = this->serve(1);
  auto created = this->call("POST", s.base + "/v1/threads", {{"id", "t"}});
  ASSERT_EQ(created.status, 201) << created.body;
  auto submitted = this->call("POST", s.base + "/v1/threads/t/runs", {{"input", "slow please"}});
  ASSERT_EQ(submitted.status, 202) << submitted.body;
  const std::string runId = submitted.json()["run"];
  auto events = this->streamRun(s.base, "t", runId);
  std::string streamed;
  std::vector<std::string> types;
  int64_t previous = 0;
  for (const auto& e : events) {
    types.push_back(e.event);
    const int64_t seq = std::stoll(e.id);
    EXPECT_EQ(seq, previous + 1);  // in order, none missing, none twice
    previous = seq;
    if (e.event == "llm_stream_chunk") streamed += chunkText(e);
  }
  EXPECT_EQ(types.front(), "run_queued");
  EXPECT_EQ(types.back(), "llm_execution_completed");
  EXPECT_NE(std::find(types.begin(), types.end(), "message_added"), types.end());
  EXPECT_EQ(streamed, "one two three four five six seven eight nine ten eleven twelve");

  auto run = this->call("GET", s.base + "/v1/runs/" + runId);
  EXPECT_EQ(run.json()["status"], "completed");
  EXPECT_EQ(run.json()["result"]["content"],
            "one two three four five six seven eight nine ten eleven twelve");
  auto thread = this->call("GET", s.base + "/v1/threads/t");
  ASSERT_EQ(thread.json()["messages"].size(), 2u);
  EXPECT_EQ(thread.json()["messages"][1]["role"], "assistant");
  this->call("GET", s.base + "/v1/threads");
  this->call("GET", s.base + "/v1/threads/t/runs");
  this->call("GET", s.base + "/metrics");
  this->expectNoKeyAnywhere();

  s.process->kill(SIGTERM);
  EXPECT_EQ(s.process->wait(), 0);
}

TYPED_TEST(CliServeTest, StreamCutMidRunResumesWithLastEventId) {
  auto s = this->serve(1);
  auto submitted = this->call("POST", s.base + "/v1/threads/t/runs", {{"input", "slow again"}});
  ASSERT_EQ(submitted.status, 202) << submitted.body;
  const std::string runId = submitted.json()["run"];
  // Leave after the first streamed chunk, while the reply is still coming.
  auto first = this->streamRun(s.base, "t", runId, 0,
                               [](const SseEvent& e) { return e.event != "llm_stream_chunk"; });
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.back().event, "llm_stream_chunk");
  const int64_t cut = std::stoll(first.back().id);
  auto rest = this->streamRun(s.base, "t", runId, cut);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().event, "llm_execution_completed");
  std::vector<int64_t> seqs;
  std::string streamed;
  for (const auto* part : {&first, &rest}) {
    for (const auto& e : *part) {
      seqs.push_back(std::stoll(e.id));
      if (e.event == "llm_stream_chunk") streamed += chunkText(e);
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    EXPECT_EQ(seqs[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(streamed, "one two three four five six seven eight nine ten eleven twelve");
  this->expectNoKeyAnywhere();
}

TYPED_TEST(CliServeTest, CommandLineRefusals) {
  const auto scratch = this->db.dir / "cli";
  CliRun open =
      runCli({"serve", "--db", this->db.url(), "--host", "0.0.0.0", "--port", "0"}, scratch);
  EXPECT_EQ(open.exitCode, 2);
  EXPECT_NE(open.err.find("loopback"), std::string::npos) << open.err;
  CliRun unset = runCli(
      {"serve", "--db", this->db.url(), "--auth-token-env", "PARLEY_SERVE_TEST_UNSET_VARIABLE"},
      scratch);
  EXPECT_EQ(unset.exitCode, 2);
  EXPECT_NE(unset.err.find("PARLEY_SERVE_TEST_UNSET_VARIABLE"), std::string::npos) << unset.err;
  CliRun badWorkers = runCli({"serve", "--db", this->db.url(), "--workers", "-1"}, scratch);
  EXPECT_EQ(badWorkers.exitCode, 2);
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--max-streams", "0"}, {"--max-connections", "0"}, {"--stream-threads", "65"}}) {
    CliRun bad = runCli({"serve", "--db", this->db.url(), flag, value}, scratch);
    EXPECT_EQ(bad.exitCode, 2) << flag << " " << value;
    EXPECT_NE(bad.err.find(flag), std::string::npos) << bad.err;
  }
}

// --max-streams is the service's stream cap: the second stream is refused (503).
TYPED_TEST(CliServeTest, MaxStreamsCapsTheStreams) {
  auto s = this->serve(0, {"--max-streams", "1", "--stream-threads", "1"});
  ASSERT_EQ(this->call("POST", s.base + "/v1/threads", {{"id", "t"}}).status, 201);
  auto first = std::async(std::launch::async, [&] {
    return readSse(
        s.base + "/v1/threads/t/events", [](const SseEvent&) { return true; }, this->auth(),
        60'000);
  });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (this->call("GET", s.base + "/metrics").body.find("\nparley_stream_clients 1\n") ==
             std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const HttpReply second = this->call("GET", s.base + "/v1/threads/t/events");
  EXPECT_EQ(second.status, 503) << second.body;
  EXPECT_NE(second.body.find("too_many_streams"), std::string::npos) << second.body;
  s.process->kill(SIGTERM);  // ends the first stream
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(s.process->wait(), 0);
}

// Two services and two workers on one PostgreSQL database: the stream of serve A carries the
// run submitted through serve B, finished by whichever worker claimed it.
TEST(CliServePostgres, AClientOfOneServiceSeesRunsSubmittedThroughAnother) {
  PostgresRunDb db;
  mock::MockOptions mockOptions;
  mockOptions.script = mock::readScript(kScript);
  mock::MockServer server(mockOptions);
  server.start();
  RunStore(db.open());
  ::setenv("PARLEY_SERVE_TEST_TOKEN", kToken, 1);
  auto start = [&](const std::vector<std::string>& argv) {
    auto child = std::make_unique<ChildProcess>(argv);
    if (!child->readLine()) throw std::runtime_error(argv[1] + " did not start");
    return child;
  };
  auto serveArgs = [&] {
    return std::vector<std::string>{
        PARLEY_CLI_PATH,          "serve", "--db", db.url(), "--port", "0", "--auth-token-env",
        "PARLEY_SERVE_TEST_TOKEN"};
  };
  ChildProcess a(serveArgs());
  ChildProcess b(serveArgs());
  const std::string baseA = a.readLine().value_or("");
  const std::string baseB = b.readLine().value_or("");
  ASSERT_FALSE(baseA.empty());
  ASSERT_FALSE(baseB.empty());
  ASSERT_NE(baseA, baseB);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* id : {"pg-w1", "pg-w2"}) {
    workers.push_back(
        start({PARLEY_CLI_PATH, "worker", "--db", db.url(), "--base-url", server.baseUrl(),
               "--model", "parley-mock", "--api-key", kApiKey, "--worker-id", id}));
  }
  const std::vector<std::string> auth = {std::string("Authorization: Bearer ") + kToken};
  ASSERT_EQ(http("POST", baseA + "/v1/threads", json{{"id", "shared"}}.dump(), auth).status, 201);

  // The client on A is connected before the run exists.
  auto reader = std::async(std::launch::async, [&] {
    std::vector<SseEvent> got;
    auto read = readSse(
        baseA + "/v1/threads/shared/events",
        [&](const SseEvent& e) {
          got.push_back(e);
          return e.event != "llm_execution_completed";
        },
        auth, 60'000);
    EXPECT_FALSE(read.timedOut);
    return got;
  });
  // A's stream exists once A counts it.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (http("GET", baseA + "/metrics", "", auth).body.find("parley_stream_clients 1\n") ==
         std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::yield();
  }
  auto submitted =
      http("POST", baseB + "/v1/threads/shared/runs", json{{"input", "slow via B"}}.dump(), auth);
  ASSERT_EQ(submitted.status, 202) << submitted.body;
  const std::string runId = submitted.json()["run"];
  auto events = reader.get();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().event, "run_queued");
  EXPECT_EQ(json::parse(events.front().data)["run"], runId);
  EXPECT_EQ(events.back().event, "llm_execution_completed");
  std::string streamed;
  for (const auto& e : events)
    if (e.event == "llm_stream_chunk") streamed += chunkText(e);
  EXPECT_EQ(streamed, "one two three four five six seven eight nine ten eleven twelve");
  for (auto* p : {&a, &b}) {
    p->kill(SIGTERM);
    EXPECT_EQ(p->wait(), 0);
  }
  for (auto& w : workers) {
    w->kill(SIGTERM);
    EXPECT_EQ(w->wait(), 0);
  }
  server.stop();
}

}  // namespace
}  // namespace parley::testing
