// The chaos test of durable runs (docs/scale-out.md): three `parley worker` processes serve 300
// runs over 60 threads against the mock (a delay per reply, a tool in every third run) while one
// random worker is SIGKILLed and restarted about every second, for a bounded time. At the end:
// every run completed exactly once; each thread holds exactly its runs' turns, in submit order,
// none twice, none interleaved; each journaled call of the idempotent tool ran as often as the
// journal says it was started, and a call completed at its first start ran exactly once (the
// tool appends its arguments to a file on every execution).
//
// On SQLite and on the throwaway PostgreSQL cluster; CTest label `chaos`. The pause between
// kills paces the chaos; nothing waits on time for a result.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "child_process.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"
#include "run_databases.hpp"

namespace parley::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kThreads = 60;
constexpr int kRunsPerThread = 5;
constexpr int kWorkers = 3;
constexpr auto kChaosFor = 60s;    // kills stop after this, or when every run finished
constexpr auto kSettleFor = 120s;  // then the workers get this long to finish the rest

constexpr const char* kScript = R"script(
{"name": "answer", "match": {"last_role": "tool"}, "delay_ms": 300, "reply": {"content": "done: {{tool_results}}"}}
{"name": "tool", "match": {"user_contains": "tool"}, "delay_ms": 300, "reply": {"tool_calls": [{"name": "count", "arguments": {"key": "{{last_user}}"}}]}}
{"name": "echo", "delay_ms": 300, "reply": {"content": "echo: {{last_user}}"}}
)script";

std::string promptOf(int thread, int run) {
  return std::string(run % 3 == 0 ? "tool" : "say") + " t" + std::to_string(thread) + "-r" +
         std::to_string(run);
}

// The contents one completed run adds to its thread.
std::vector<std::string> turnOf(const std::string& prompt) {
  if (prompt.rfind("tool", 0) == 0) return {prompt, "", "counted", "done: counted"};
  return {prompt, "echo: " + prompt};
}

template <class Db>
class ChaosTest : public ::testing::Test {
 protected:
  Db db;
  fs::path countFile = db.dir / "executions";

  std::unique_ptr<ChildProcess> startWorker(const std::string& id, const std::string& baseUrl) {
    auto child = std::make_unique<ChildProcess>(std::vector<std::string>{
        PARLEY_CLI_PATH, "worker", "--db", db.url(), "--base-url", baseUrl, "--model",
        "parley-mock", "--api-key", "test", "--tools-file", (db.dir / "tools.toml").string(),
        "--worker-id", id, "--lease-ms", "1000", "--concurrency", "4"});
    auto ready = child->readLine();
    if (!ready || *ready != id) throw std::runtime_error("worker " + id + " did not start");
    return child;
  }

  void run() {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    options.threads = 64;
    mock::MockServer server(options);
    server.start();
    std::ofstream(db.dir / "tools.toml")
        << "[[tool]]\nname = \"count\"\ndescription = \"counts\"\nidempotent = true\n"
        << "command = [\"sh\", \"-c\", \"cat >> '" << countFile.string()
        << "'; sleep 0.2; echo >> '" << countFile.string() << "'; echo counted\"]\n";

    RunStore runs(db.open());
    std::map<std::string, std::vector<std::string>> submitted;  // thread -> run ids in order
    std::map<std::string, std::string> promptOfRun;
    for (int r = 0; r < kRunsPerThread; ++r) {
      for (int t = 0; t < kThreads; ++t) {
        const std::string thread = "chaos-" + std::to_string(t);
        RunInfo run = runs.submit(thread, promptOf(t, r));
        submitted[thread].push_back(run.id);
        promptOfRun[run.id] = promptOf(t, r);
      }
    }

    std::vector<std::unique_ptr<ChildProcess>> workers;
    for (int i = 0; i < kWorkers; ++i)
      workers.push_back(startWorker("w" + std::to_string(i) + "-0", server.baseUrl()));
    auto unfinished = [&] {
      size_t n = 0;
      for (RunStatus s : {RunStatus::Queued, RunStatus::Running, RunStatus::Waiting}) {
        RunListOptions o;
        o.status = s;
        o.limit = 1000;
        n += runs.listRuns(o).size();
      }
      return n;
    };
    std::mt19937 random(12345);
    int kills = 0;
    const auto chaosEnd = std::chrono::steady_clock::now() + kChaosFor;
    while (std::chrono::steady_clock::now() < chaosEnd && unfinished() > 0) {
      std::this_thread::sleep_for(1s);  // the pace of the chaos
      const size_t victim = random() % workers.size();
      workers[victim]->kill(SIGKILL);
      workers[victim]->wait();
      ++kills;
      workers[victim] =
          startWorker("w" + std::to_string(victim) + "-" + std::to_string(kills), server.baseUrl());
    }
    const auto settleEnd = std::chrono::steady_clock::now() + kSettleFor;
    while (unfinished() > 0 && std::chrono::steady_clock::now() < settleEnd)
      runs.waitForRuns(500ms);
    for (auto& w : workers) {
      w->kill(SIGTERM);
      EXPECT_EQ(w->wait(), 0);
    }
    server.stop();
    RecordProperty("kills", kills);
    std::cout << "chaos: " << kills << " workers killed\n";
    EXPECT_GE(kills, 1);

    // Every run completed, exactly once.
    ASSERT_EQ(unfinished(), 0u);
    std::map<std::string, int> executions;
    {
      std::ifstream in(countFile);
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        ++executions[json::parse(line).at("key").get<std::string>()];
      }
    }
    int reRun = 0;
    for (const auto& [thread, ids] : submitted) {
      std::vector<std::string> expected;
      for (const auto& id : ids) {
        RunInfo run = *runs.run(id);
        EXPECT_EQ(run.status, RunStatus::Completed) << id << " " << run.error;
        for (auto& c : turnOf(promptOfRun[id]))
          expected.push_back(c);
      }
      int completedEvents = 0;
      std::map<std::string, int> perRun;
      for (int64_t after = 0;;) {
        auto events = runs.readEvents(thread, after);
        if (events.empty()) break;
        for (const auto& e : events) {
          after = e.seq;
          if (e.type == "run_completed") ++perRun[e.runId];
        }
      }
      for (const auto& id : ids) {
        EXPECT_EQ(perRun[id], 1) << "run " << id << " completed " << perRun[id] << " times";
        completedEvents += perRun[id];
      }
      EXPECT_EQ(completedEvents, kRunsPerThread);
      // The thread: exactly its runs' turns, in submit order, none twice, none interleaved.
      std::vector<std::string> stored;
      for (const auto& m : runs.threads().loadThread(thread).messages)
        stored.push_back(m.content);
      EXPECT_EQ(stored, expected) << thread;
      // The idempotent tool: as often as the journal started it; once if its first start
      // completed.
      for (const auto& id : ids) {
        for (const auto& call : runs.journal(id).calls) {
          const std::string key = json::parse(call.arguments).at("key");
          EXPECT_EQ(call.phase, ToolCallPhase::Completed) << key;
          EXPECT_GE(executions[key], 1) << key;
          EXPECT_LE(executions[key], call.attempts) << key;
          if (call.attempts == 1) {
            EXPECT_EQ(executions[key], 1) << key;
          } else {
            ++reRun;
          }
        }
      }
    }
    std::cout << "chaos: " << reRun << " tool calls re-run after a kill (idempotent)\n";
  }
};

TYPED_TEST_SUITE_P(ChaosTest);

TYPED_TEST_P(ChaosTest, EveryRunCompletesExactlyOnceInOrder) {
  this->run();
}

REGISTER_TYPED_TEST_SUITE_P(ChaosTest, EveryRunCompletesExactlyOnceInOrder);

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, ChaosTest, ::testing::Types<SqliteRunDb>);
INSTANTIATE_TYPED_TEST_SUITE_P(Postgres, ChaosTest, ::testing::Types<PostgresRunDb>);

}  // namespace parley::testing
