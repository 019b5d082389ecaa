// Whole-run replay (run_replay.hpp, docs/scale-out.md "Replaying a run"): a 200-turn tool-heavy
// durable run, recorded on SQLite against the mock with cassettes (approvals given and refused,
// a person's answer, a failing tool on the way), replays with the mock stopped and tools that
// fail the test if run to a thread whose stored messages hash the same; a tool result edited in
// the journal, a request edited in a cassette and a call missing from the journal each give a
// loud miss that names what differs. The whole run is recorded and replayed on PostgreSQL too.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "model/sha256.hpp"
#include "parley/cassette.hpp"
#include "parley/errors.hpp"
#include "parley/run_replay.hpp"
#include "parley/run_store.hpp"
#include "parley/store.hpp"
#include "parley/worker.hpp"
#include "run_databases.hpp"

namespace parley {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kTurns = 200;  // model calls of the recorded run

// Two lookups per reply; at 40 a guarded call (approved) beside a lookup, at 80 a guarded call
// (refused), at 120 a question to a person, at 160 a tool that fails; the 200th reply answers.
const char* kScript = R"(
{"match": {"request": 200}, "reply": {"content": "Done after {{request}} calls: {{tool_results}}"}}
{"match": {"request": [40, 80]}, "reply": {"tool_calls": [{"name": "guarded", "arguments": {"what": "deploy {{request}}"}}, {"name": "lookup", "arguments": {"n": "{{request}}"}}]}}
{"match": {"request": 120}, "reply": {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which city?"}}]}}
{"match": {"request": 160}, "reply": {"tool_calls": [{"name": "flaky", "arguments": {}}]}}
{"reply": {"tool_calls": [{"name": "lookup", "arguments": {"n": "{{request}}"}}, {"name": "lookup", "arguments": {"n": "{{request}}b"}}]}}
)";

fs::path freshDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("parley-replay-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::shared_ptr<RunStore> openRuns(const fs::path& file) {
  SqliteStoreOptions o;
  o.synchronous = SqliteStoreOptions::Synchronous::Normal;  // the disk is not what is tested
  RunStoreOptions ro;
  ro.pollMax = 20ms;
  return std::make_shared<RunStore>(
      std::shared_ptr<ConversationStore>(openSqliteStore(file.string(), o)), ro);
}

// The thread as stored: every message's JSON (roles, content, tool calls and their ids, tool call
// ids, the replies' model, usage and received_at), hashed.
std::string threadHash(RunStore& runs, const std::string& thread) {
  return detail::sha256Hex(toJson(runs.threads().loadThread(thread).messages).dump());
}

RunInfo awaitStatus(RunStore& runs, const std::string& id, RunStatus status) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  int64_t seen = 0;
  for (;;) {
    RunInfo run = *runs.run(id);
    // A waiting run that was answered waits for a worker, not for an answer.
    if (run.status == status && (status != RunStatus::Waiting || run.response.is_null())) {
      return run;
    }
    if (isFinished(run.status) || std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("run " + id + " is " + std::string(toString(run.status)) +
                               " (waited for " + std::string(toString(status)) + "): " + run.error);
    }
    for (const auto& e : runs.waitForEvents(run.threadId, seen, 200ms))
      seen = e.seq;
  }
}

void execSql(const fs::path& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.string().c_str(), &handle), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(handle);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

// One recording for the whole suite: the run is long, the mutations replay copies of it.
class CassetteRunReplay : public ::testing::Test {
 protected:
  static inline fs::path dir_;
  static inline std::string baseUrl_;
  static inline std::string runId_;
  static inline std::string recordedHash_;
  static inline std::atomic<int> toolRuns_{0};
  static inline std::string recordError_;

  static fs::path cassettes() { return dir_ / "cassettes"; }
  static fs::path recordedDb() { return dir_ / "recorded.db"; }

  // The tools as the recording offered them; `run` false: a handler that fails the test.
  static std::shared_ptr<ToolRegistry> tools(bool run) {
    auto registry = std::make_shared<ToolRegistry>();
    auto handler = [run](std::function<json(const json&)> body) {
      return [run, body](const json& args, ToolContext&) -> json {
        if (!run) {
          ADD_FAILURE() << "a tool ran during the replay: " << args.dump();
          throw std::runtime_error("a replay runs no tool");
        }
        ++toolRuns_;
        return body(args);
      };
    };
    const json object = {{"type", "object"}};
    registry->add("lookup", "Looks a number up", object,
                  handler([](const json& a) { return "value of " + a.value("n", ""); }));
    ToolOptions guarded;
    guarded.requiresApproval = true;
    registry->add("guarded", "Does what needs approval", object,
                  handler([](const json& a) { return "did " + a.value("what", ""); }), guarded);
    registry->add("flaky", "Always fails", object, handler([](const json&) -> json {
                    throw std::runtime_error("the flaky service is down");
                  }));
    return registry;
  }

  static WorkerOptions workerOptions(CassetteMode mode, bool runTools) {
    ClientOptions client;
    client.baseUrl = baseUrl_;
    client.model = "parley-mock";
    client.maxRetries = 0;
    client.cassettes = CassetteOptions{};
    client.cassettes->directory = cassettes().string();
    client.cassettes->mode = mode;
    WorkerOptions o;
    o.profiles = std::make_shared<ProfileRegistry>();
    o.profiles->add("mock", client);
    o.defaultProfile = "mock";
    o.tools = tools(runTools);
    o.humanTool = "ask_human";
    o.concurrency = 1;
    o.turn.systemPrompt = "Look things up.";
    return o;
  }

  static void SetUpTestSuite() {
    dir_ = freshDir("suite");
    try {
      record();
    } catch (const std::exception& e) {
      recordError_ = e.what();
    }
  }

  static void record() {
    auto runs = openRuns(recordedDb());
    runId_ = recordInto(runs);
    recordedHash_ = threadHash(*runs, "long");
  }

  // Records the run into `runs` against a mock of its own, which stops on return: nothing
  // answers at baseUrl_ any more. The run's id.
  static std::string recordInto(const std::shared_ptr<RunStore>& runs) {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    mock::MockServer server(options);
    server.start();
    baseUrl_ = server.baseUrl();
    Worker worker(runs, workerOptions(CassetteMode::Record, true));
    worker.start();
    SubmitOptions submit;
    submit.maxIterations = kTurns + 10;
    submit.stream = true;
    const std::string id = runs->submit("long", "Look up everything.", submit).id;
    for (const char* answer : {"yes", "no", "Oslo"}) {
      awaitStatus(*runs, id, RunStatus::Waiting);
      runs->respond(id, answer);
    }
    awaitStatus(*runs, id, RunStatus::Completed);
    worker.stop();
    if (server.requests().size() != static_cast<size_t>(kTurns)) {
      throw std::runtime_error("the mock saw " + std::to_string(server.requests().size()) +
                               " requests");
    }
    return id;
  }

  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override { ASSERT_EQ(recordError_, "") << "the recording failed"; }

  // Replays the recorded run from `recorded` into a new database; tools fail the test if run.
  RunReplay replay(const fs::path& recorded, const std::string& name) {
    auto from = openRuns(recorded);
    auto into = openRuns(dir_ / (name + ".db"));
    RunReplayOptions o;
    o.worker = workerOptions(CassetteMode::ReplayOnly, false);
    return replayRun(*from, runId_, into, o);
  }

  // A copy of the recorded database to mutate.
  fs::path copyOfRecording(const std::string& name) {
    const fs::path copy = dir_ / (name + "-source.db");
    fs::copy_file(recordedDb(), copy, fs::copy_options::overwrite_existing);
    for (const char* suffix : {"-wal", "-shm"}) {
      const fs::path side = recordedDb().string() + suffix;
      if (fs::exists(side)) fs::copy_file(side, copy.string() + suffix);
    }
    return copy;
  }
};

TEST_F(CassetteRunReplay, ALongToolHeavyRunReplaysToTheSameStoredThreadWithoutRunningTools) {
  // What was recorded: 200 model calls, the lookups, one approved and one refused guarded call,
  // the person's answer and the failure.
  auto recorded = openRuns(recordedDb());
  const auto messages = recorded->threads().loadThread("long").messages;
  // The system prompt, the input, 200 replies, two results per reply but for the question, the
  // failing tool and the answer.
  ASSERT_EQ(messages.size(), static_cast<size_t>(2 + kTurns + 2 * (kTurns - 3) + 2));
  EXPECT_EQ(messages.back().content.rfind("Done after 200 calls", 0), 0u)
      << messages.back().content;
  std::string all = toJson(messages).dump();
  for (const char* seen : {"did deploy 40", "the call was not approved", "Oslo",
                           "the flaky service is down", "value of 199b"}) {
    EXPECT_NE(all.find(seen), std::string::npos) << seen;
  }
  const int ranWhenRecorded = toolRuns_;

  const RunReplay replayed = replay(recordedDb(), "replayed");
  EXPECT_EQ(toolRuns_, ranWhenRecorded) << "a tool ran during the replay";
  ASSERT_EQ(replayed.runs.size(), 1u);
  EXPECT_EQ(replayed.runs[0].id, runId_);
  EXPECT_EQ(replayed.messages, messages.size());
  auto into = openRuns(dir_ / "replayed.db");
  EXPECT_EQ(threadHash(*into, "long"), recordedHash_);
  EXPECT_EQ(toJson(into->threads().loadThread("long").messages), toJson(messages));
  // The replay journaled every call with its recorded outcome.
  const RunJournal before = recorded->journal(runId_);
  const RunJournal after = into->journal(runId_);
  ASSERT_EQ(after.calls.size(), before.calls.size());
  for (size_t i = 0; i < before.calls.size(); ++i) {
    EXPECT_EQ(after.calls[i].callId, before.calls[i].callId);
    EXPECT_EQ(after.calls[i].phase, before.calls[i].phase) << before.calls[i].callId;
    EXPECT_EQ(after.calls[i].text, before.calls[i].text) << before.calls[i].callId;
  }
}

TEST_F(CassetteRunReplay, AToolResultEditedInTheJournalIsAMissNamingTheMessage) {
  const fs::path source = copyOfRecording("edited-result");
  // The result of the first lookup of reply 100 (storage index: the messages before it).
  auto recorded = openRuns(recordedDb());
  const auto messages = recorded->threads().loadThread("long").messages;
  size_t index = 0;
  std::string callId;
  for (size_t i = 0, replies = 0; i < messages.size() && callId.empty(); ++i) {
    if (messages[i].role == Role::Assistant && ++replies == 100) {
      callId = messages[i].toolCalls.at(0).id;
      index = i + 1;  // its first result follows it
    }
  }
  ASSERT_EQ(messages.at(index).toolCallId, callId);
  execSql(source,
          "UPDATE parley_tool_calls SET result = 'value of something else' WHERE "
          "call_id = '" +
              callId + "'");
  try {
    replay(source, "edited-result");
    ADD_FAILURE() << "the edited result replayed";
  } catch (const ReplayMiss& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cassette"), std::string::npos) << what;
    // The request after it differs at that message's content (the system prompt is message 0,
    // as in the thread).
    EXPECT_NE(what.find("message " + std::to_string(index) + " field \"content\""),
              std::string::npos)
        << what;
  }
}

TEST_F(CassetteRunReplay, ARequestEditedInACassetteIsAMissNamingTheField) {
  // Copy the cassettes, edit the request of the 50th call (its 7th message's content).
  const fs::path copy = dir_ / "edited-cassettes";
  fs::remove_all(copy);
  fs::copy(cassettes(), copy);
  bool edited = false;
  for (const auto& entry : fs::directory_iterator(copy)) {
    std::ifstream in(entry.path());
    json exchange = json::parse(in);
    json& body = exchange["request"]["body"];
    if (body["messages"].size() != 2 + 3 * 49) continue;  // system, user, 49 replies with results
    body["messages"][6]["content"] = "edited";
    std::ofstream(entry.path()) << exchange.dump(2);
    edited = true;
  }
  ASSERT_TRUE(edited);
  auto from = openRuns(recordedDb());
  auto into = openRuns(dir_ / "edited-request.db");
  RunReplayOptions o;
  o.worker = workerOptions(CassetteMode::ReplayOnly, false);
  auto& profile = o.worker.profiles;
  ClientOptions client = profile->get("mock");
  client.cassettes->directory = copy.string();
  profile->add("mock", client);
  try {
    replayRun(*from, runId_, into, o);
    ADD_FAILURE() << "the edited cassette replayed";
  } catch (const ReplayMiss& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("was edited"), std::string::npos) << what;
    EXPECT_NE(what.find("message 6 field \"content\""), std::string::npos) << what;
  }
}

TEST_F(CassetteRunReplay, ACallMissingFromTheJournalIsAMissNamingTheCall) {
  const fs::path source = copyOfRecording("missing-call");
  auto recorded = openRuns(recordedDb());
  const RunJournal journal = recorded->journal(runId_);
  const ToolCallEntry& dropped = journal.calls.at(journal.calls.size() / 2);
  execSql(source, "DELETE FROM parley_tool_calls WHERE call_id = '" + dropped.callId + "'");
  try {
    replay(source, "missing-call");
    ADD_FAILURE() << "a call without a journaled result replayed";
  } catch (const ReplayMiss& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("call " + dropped.callId + " (" + dropped.toolName + ")"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("at message " + std::to_string(dropped.turn)), std::string::npos) << what;
    EXPECT_NE(what.find("not in the recorded journal"), std::string::npos) << what;
  }
}

// The replay checks what it made: a recorded thread edited after the run (its answer, which no
// request carries) differs from the replayed one at that message.
TEST_F(CassetteRunReplay, AThreadThatDiffersFromItsReplayIsAMissNamingTheMessage) {
  const fs::path source = copyOfRecording("edited-thread");
  execSql(source,
          "UPDATE parley_messages SET body = replace(body, 'Done after', 'Finished after') "
          "WHERE thread_id = 'long' AND seq = (SELECT MAX(seq) FROM parley_messages WHERE "
          "thread_id = 'long')");
  auto edited = openRuns(source);
  const size_t last = edited->threads().loadThread("long").messages.size() - 1;
  ASSERT_EQ(edited->threads().loadThread("long").messages.back().content.rfind("Finished", 0), 0u);
  try {
    replay(source, "edited-thread");
    ADD_FAILURE() << "a thread unlike its replay passed";
  } catch (const ReplayMiss& e) {
    EXPECT_NE(std::string(e.what()).find("departs from the recorded one at message " +
                                         std::to_string(last) + " field \"content\""),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CassetteRunReplay, OnlyACompletedRunIntoANewThreadReplays) {
  auto from = openRuns(recordedDb());
  auto into = openRuns(dir_ / "twice.db");
  RunReplayOptions o;
  o.worker = workerOptions(CassetteMode::ReplayOnly, false);
  EXPECT_THROW(replayRun(*from, "r-no-such-run", into, o), ValidationError);
  // A queue in use: the replaying worker would take its runs too.
  auto busy = openRuns(dir_ / "busy.db");
  busy->submit("other", "not for the replay");
  try {
    replayRun(*from, runId_, busy, o);
    ADD_FAILURE() << "replayed into a busy queue";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("unfinished runs"), std::string::npos) << e.what();
  }
  EXPECT_EQ(busy->listRuns().at(0).status, RunStatus::Queued);
  replayRun(*from, runId_, into, o);
  try {
    replayRun(*from, runId_, into, o);
    ADD_FAILURE() << "replayed twice into one thread";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds thread long"), std::string::npos)
        << e.what();
  }
}

// The same run recorded and replayed on PostgreSQL: the journal, the thread and the run
// read from its tables (the suite's SQLite recording is not used).
class CassetteRunReplayPostgres : public CassetteRunReplay {
 protected:
  static void SetUpTestSuite() {}
  static void TearDownTestSuite() {}
};

TEST_F(CassetteRunReplayPostgres, ALongToolHeavyRunReplaysToTheSameStoredThread) {
  dir_ = freshDir("postgres");
  testing::PostgresRunDb recordedPg;
  testing::PostgresRunDb replayedPg;
  auto open = [](const testing::PostgresRunDb& db) {
    RunStoreOptions ro;
    ro.pollMax = 20ms;
    return std::make_shared<RunStore>(db.open(), ro);
  };
  auto recorded = open(recordedPg);
  const std::string id = recordInto(recorded);
  const int ranWhenRecorded = toolRuns_;
  const auto messages = recorded->threads().loadThread("long").messages;
  ASSERT_EQ(messages.size(), static_cast<size_t>(2 + kTurns + 2 * (kTurns - 3) + 2));

  RunReplayOptions o;
  o.worker = workerOptions(CassetteMode::ReplayOnly, false);
  auto into = open(replayedPg);
  const RunReplay replayed = replayRun(*recorded, id, into, o);
  EXPECT_EQ(toolRuns_, ranWhenRecorded) << "a tool ran during the replay";
  EXPECT_EQ(replayed.messages, messages.size());
  EXPECT_EQ(threadHash(*into, "long"), threadHash(*recorded, "long"));
  EXPECT_EQ(into->journal(id).calls.size(), recorded->journal(id).calls.size());
  fs::remove_all(dir_);
}

}  // namespace
}  // namespace parley
