// Worker (worker.hpp): durable runs served from the run queue, on SQLite and on a throwaway
// PostgreSQL cluster, against the mock server. Time: the stores run on the test's clock
// (RunStoreOptions::clock), so leases expire when the test moves it, never by waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/postgres_store.hpp"
#include "parley/run_store.hpp"
#include "parley/stored_thread.hpp"
#include "parley/worker.hpp"
#include "pg_test_cluster.hpp"
#include "store/postgres_store.hpp"
#include "store/sqlite_store.hpp"

namespace parley::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

struct SqliteBackend {
  fs::path dir = [] {
    std::string pattern = (fs::temp_directory_path() / "parley-worker-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    return fs::path(pattern);
  }();
  ~SqliteBackend() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::shared_ptr<ConversationStore> open() {
    return std::make_shared<SqliteStore>((dir / "runs.db").string());
  }
};

struct PostgresBackend {
  std::string conninfo = PgTestCluster::shared().freshSchemaConninfo();
  std::shared_ptr<ConversationStore> open() { return std::make_shared<PostgresStore>(conninfo); }
};

// A tool that holds its call until released (or stopped), so a test acts while a run is in
// the middle of a tool call.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  int entered = 0;
  bool open = false;

  json pass(ToolContext& context) {
    std::unique_lock lock(mutex);
    ++entered;
    changed.notify_all();
    std::stop_callback wake(context.stopToken, [this] {
      std::lock_guard inner(mutex);
      changed.notify_all();
    });
    changed.wait(lock, [&] { return open || context.stopRequested(); });
    if (!open) throw std::runtime_error("stopped");
    return "passed";
  }
  void awaitEntered(int n) {
    std::unique_lock lock(mutex);
    if (!changed.wait_for(lock, 30s, [&] { return entered >= n; })) {
      throw std::runtime_error("the tool was not called");
    }
  }
  void release() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
};

// Rules: after a tool result, say so; "count K" calls count {key: K}; "gate" calls gate;
// "twice" calls count then gate; "ask" calls the human tool; "approve" calls the guarded tool;
// "delegate" calls remote and gate at once; anything else is echoed.
constexpr const char* kScript = R"script(
{"name": "after-gate", "match": {"last_role": "tool", "user_contains": "twice"}, "times": 1, "reply": {"tool_calls": [{"name": "gate", "arguments": {}}]}}
{"name": "answer", "match": {"last_role": "tool"}, "reply": {"content": "done: {{tool_results}}"}}
{"name": "count", "match": {"user_regex": "count (\\w+)"}, "reply": {"tool_calls": [{"name": "count", "arguments": {"key": "{{1}}"}}]}}
{"name": "remote", "match": {"user_contains": "delegate"}, "reply": {"tool_calls": [{"name": "remote", "arguments": {}}, {"name": "gate", "arguments": {}}]}}
{"name": "gate", "match": {"user_contains": "gate"}, "reply": {"tool_calls": [{"name": "gate", "arguments": {}}]}}
{"name": "twice", "match": {"user_contains": "twice"}, "reply": {"tool_calls": [{"name": "count", "arguments": {"key": "first"}}]}}
{"name": "ask", "match": {"user_contains": "ask"}, "reply": {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which city?"}}]}}
{"name": "approve", "match": {"user_contains": "approve"}, "reply": {"tool_calls": [{"name": "guarded", "arguments": {"what": "deploy"}}, {"name": "count", "arguments": {"key": "beside"}}]}}
{"name": "stall", "match": {"user_contains": "stall"}, "delay_ms": 60000, "reply": {"content": "too late"}}
{"name": "three", "match": {"user_contains": "three at once"}, "reply": {"tool_calls": [{"name": "count", "arguments": {"key": "a"}}, {"name": "count", "arguments": {"key": "b"}}, {"name": "count", "arguments": {"key": "c"}}]}}
{"name": "long", "match": {"user_contains": "long"}, "reply": {"content": "{{last_user}}", "repeat": 40, "chunk_size": 3}}
{"name": "echo", "reply": {"content": "echo: {{last_user}}"}}
)script";

std::string text(const json& value) {
  return value.get<std::string>();
}

template <class Backend>
class WorkerTest : public ::testing::Test {
 protected:
  Backend backend;
  std::shared_ptr<std::atomic<int64_t>> clock =
      std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);
  std::unique_ptr<mock::MockServer> server;
  std::shared_ptr<RunStore> runs;
  std::shared_ptr<ProfileRegistry> profiles = std::make_shared<ProfileRegistry>();
  std::shared_ptr<ToolRegistry> tools = std::make_shared<ToolRegistry>();
  Gate gate;
  Gate remoteGate;                // holds the remote tool's first (fresh) call
  std::vector<json> resumedWith;  // the remote tool's resumeFrom on each resumed call
  std::mutex countMutex;
  std::map<std::string, int> counted;  // count's executions by key

  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    server = std::make_unique<mock::MockServer>(options);
    server->start();
    ClientOptions client;
    client.baseUrl = server->baseUrl();
    client.model = "parley-mock";
    profiles->add("mock", client);
    RunStoreOptions ro;
    ro.clock = [c = clock] { return c->load(); };
    ro.pollMax = 20ms;
    runs = std::make_shared<RunStore>(backend.open(), ro);
    ToolOptions idempotent;
    idempotent.idempotent = true;
    tools->add(
        "count", "counts", {{"type", "object"}, {"properties", {{"key", {{"type", "string"}}}}}},
        [this](const json& args, ToolContext&) -> json {
          std::lock_guard lock(countMutex);
          return "counted " + args.at("key").get<std::string>() + " " +
                 std::to_string(++counted[args.at("key").get<std::string>()]);
        },
        idempotent);
    tools->add("gate", "waits", json(nullptr),
               [this](const json&, ToolContext& context) { return gate.pass(context); });
    // Work on a "remote server": a fresh call starts it (counted) and notes its handle, then
    // holds; a resumed call picks it up by the handle.
    tools->add("remote", "delegates", json(nullptr),
               [this](const json&, ToolContext& context) -> json {
                 if (!context.resumeFrom.is_null()) {
                   context.progress(context, "picked up", {{"task", "rt-1"}});
                   std::lock_guard lock(countMutex);
                   resumedWith.push_back(context.resumeFrom);
                   return "resumed " + context.resumeFrom.value("task", std::string());
                 }
                 {
                   std::lock_guard lock(countMutex);
                   ++counted["remote-started"];
                 }
                 context.checkpoint(context, {{"task", "rt-1"}});
                 return remoteGate.pass(context);
               });
    ToolOptions approval;
    approval.requiresApproval = true;
    tools->add(
        "guarded", "needs a yes", json(nullptr),
        [this](const json&, ToolContext&) -> json {
          std::lock_guard lock(countMutex);
          return "guarded ran " + std::to_string(++counted["guarded"]);
        },
        approval);
  }
  void TearDown() override {
    gate.release();
    remoteGate.release();
    server->stop();
  }

  WorkerOptions workerOptions(const std::string& id = "w1") {
    WorkerOptions o;
    o.workerId = id;
    o.profiles = profiles;
    o.defaultProfile = "mock";
    o.tools = tools;
    o.leaseDuration = 10s;
    o.heartbeat = 20ms;
    o.claimPoll = 50ms;
    o.humanTool = "ask_human";
    o.log = [](const std::string&) {};
    return o;
  }
  std::unique_ptr<Worker> startWorker(WorkerOptions o) {
    auto w = std::make_unique<Worker>(runs, std::move(o));
    w->start();
    return w;
  }

  // Waits (on the thread's event log) until the run is in one of `states`.
  RunInfo awaitRun(const std::string& runId, std::initializer_list<RunStatus> states) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    int64_t seen = 0;
    for (;;) {
      RunInfo run = *runs->run(runId);
      for (RunStatus s : states)
        if (run.status == s) return run;
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("run " + runId + " stayed " + std::string(toString(run.status)));
      }
      for (const auto& e : runs->waitForEvents(run.threadId, seen, 500ms))
        seen = e.seq;
    }
  }
  std::vector<std::string> contents(const std::string& thread) {
    std::vector<std::string> out;
    for (const auto& m : runs->threads().loadThread(thread).messages)
      out.push_back(m.content);
    return out;
  }
  // The visible view of the thread (after a rollback, without the run's turns).
  std::vector<std::string> visible(const std::string& thread) {
    ConversationManager manager;
    loadConversation(runs->threads(), thread, manager);
    std::vector<std::string> out;
    for (const auto& m : manager.getMessages())
      out.push_back(m.content);
    return out;
  }
  std::vector<std::string> eventTypes(const std::string& thread) {
    std::vector<std::string> out;
    for (const auto& e : runs->readEvents(thread, 0))
      out.push_back(e.type);
    return out;
  }
  int countOf(const std::string& key) {
    std::lock_guard lock(countMutex);
    return counted[key];
  }
};

TYPED_TEST_SUITE_P(WorkerTest);

TYPED_TEST_P(WorkerTest, CompletesARunWithAToolAndWritesItsEvents) {
  auto worker = this->startWorker(this->workerOptions());
  RunInfo run = this->runs->submit("t1", "count apples");
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.result["content"], "done: counted apples 1");
  EXPECT_EQ(done.result["iterations"], 2);
  EXPECT_EQ(this->contents("t1"), (std::vector<std::string>{"count apples", "", "counted apples 1",
                                                            "done: counted apples 1"}));
  auto types = this->eventTypes("t1");
  EXPECT_EQ(std::count(types.begin(), types.end(), "message_added"), 4);
  EXPECT_EQ(std::count(types.begin(), types.end(), "tool_execution_request"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "tool_execution_completed"), 1);
  EXPECT_EQ(types.back(), "llm_execution_completed");  // a run's last event
  EXPECT_EQ(types[types.size() - 2], "run_completed");
  // An order a UI renders as it reads: the user's message before the model's reply, the reply
  // with its tool call before the call runs; the outcome once, in the terminal event.
  std::vector<std::string> order;
  for (const auto& e : this->runs->readEvents("t1", 0)) {
    if (e.type == "message_added") {
      order.push_back(e.payload["message"].value("role", ""));
    } else if (e.type.starts_with("tool_execution") || e.type == "run_completed") {
      order.push_back(e.type);
      if (e.type == "run_completed") {
        EXPECT_FALSE(e.payload.contains("result"));
      }
    } else if (e.type == "llm_execution_completed") {
      EXPECT_EQ(e.payload["result"]["content"], "done: counted apples 1");
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"user", "assistant", "tool_execution_request",
                                             "tool_execution_completed", "tool", "assistant",
                                             "run_completed"}));
  // The journal holds the call, completed with its result.
  RunJournal journal = this->runs->journal(run.id);
  ASSERT_EQ(journal.calls.size(), 1u);
  EXPECT_EQ(journal.calls[0].phase, ToolCallPhase::Completed);
  EXPECT_EQ(journal.calls[0].text, "counted apples 1");
  EXPECT_FALSE(journal.pendingReply);
  worker->stop();
  EXPECT_EQ(worker->stats().completed, 1u);
}

TYPED_TEST_P(WorkerTest, RunsOfOneThreadInSubmitOrderAndThreadsInParallel) {
  auto worker = this->startWorker(this->workerOptions());
  std::vector<RunInfo> submitted;
  for (int i = 0; i < 4; ++i) {
    submitted.push_back(this->runs->submit("a", "a" + std::to_string(i)));
    submitted.push_back(this->runs->submit("b", "b" + std::to_string(i)));
  }
  for (auto& r : submitted)
    EXPECT_EQ(this->awaitRun(r.id, {RunStatus::Completed, RunStatus::Failed}).status,
              RunStatus::Completed);
  EXPECT_EQ(this->contents("a"), (std::vector<std::string>{"a0", "echo: a0", "a1", "echo: a1", "a2",
                                                           "echo: a2", "a3", "echo: a3"}));
  EXPECT_EQ(this->contents("b").size(), 8u);
}

TYPED_TEST_P(WorkerTest, StreamChunksAreCoalesced) {
  auto options = this->workerOptions();
  options.chunkInterval = std::chrono::hours(1);  // only the size decides
  auto worker = this->startWorker(options);
  SubmitOptions s;
  s.stream = true;
  RunInfo run = this->runs->submit("s", "long text ", s);
  ASSERT_EQ(this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  std::string streamed;
  std::vector<size_t> sizes;
  for (const auto& e : this->runs->readEvents("s", 0)) {
    if (e.type != kStreamChunkEventType) continue;
    sizes.push_back(text(e.payload["content"]).size());
    streamed += text(e.payload["content"]);
  }
  std::string expected;
  for (int i = 0; i < 40; ++i)
    expected += "long text ";
  EXPECT_EQ(streamed, expected);
  ASSERT_GE(sizes.size(), 2u);
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    EXPECT_GE(sizes[i], 256u);  // one write per 256 bytes, the rest with the turn
  EXPECT_LE(sizes.size(), expected.size() / 256 + 1);
}

TYPED_TEST_P(WorkerTest, TakesOverAJournaledReplyWithoutAskingTheModelAgain) {
  // A worker that died in the middle of a reply's calls: one completed, one started (of an
  // idempotent tool), one started (of a tool that is not), one never started.
  RunInfo run = this->runs->submit("t", "resume me");
  Claim dead = *this->runs->claim("dead", 5s);
  Message reply = Message::assistant("");
  reply.toolCalls = {{"c1", "count", R"({"key":"done-before"})"},
                     {"c2", "count", R"({"key":"rerun"})"},
                     {"c3", "gate", "{}"},
                     {"c4", "count", R"({"key":"fresh"})"}};
  this->runs->recordReply(dead.lease, reply, 1);
  this->runs->recordToolCall(dead.lease, 1, "c1", ToolCallPhase::Started);
  this->runs->recordToolCall(dead.lease, 1, "c1", ToolCallPhase::Completed, "kept result");
  this->runs->recordToolCall(dead.lease, 1, "c2", ToolCallPhase::Started);
  this->runs->recordToolCall(dead.lease, 1, "c3", ToolCallPhase::Started);
  *this->clock += 6'000;  // the lease expires

  auto worker = this->startWorker(this->workerOptions());
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.attempts, 2);
  // The model was asked once: for the answer after the resumed reply.
  EXPECT_EQ(this->server->requests().size(), 1u);
  auto messages = this->runs->threads().loadThread("t").messages;
  ASSERT_EQ(messages.size(), 7u);
  EXPECT_EQ(messages[0].content, "resume me");
  EXPECT_EQ(messages[1].toolCalls.size(), 4u);
  EXPECT_EQ(messages[2].content, "kept result");
  EXPECT_EQ(messages[3].content, "counted rerun 1");
  EXPECT_NE(messages[4].content.find("may have run"), std::string::npos) << messages[4].content;
  EXPECT_EQ(messages[5].content, "counted fresh 1");
  EXPECT_EQ(this->countOf("done-before"), 0);
  EXPECT_EQ(this->gate.entered, 0);
  auto journal = this->runs->journal(run.id);
  ASSERT_EQ(journal.calls.size(), 4u);
  EXPECT_EQ(journal.calls[1].attempts, 2);  // c2 ran again
  EXPECT_EQ(journal.calls[2].phase, ToolCallPhase::Indeterminate);
}

TYPED_TEST_P(WorkerTest, ContinuesFromTheLastWholeTurnAfterATakeover) {
  // The dead worker committed the first whole turn (prompt, tool call, result).
  RunInfo run = this->runs->submit("t", "count pears");
  Claim dead = *this->runs->claim("dead", 5s);
  Message reply = Message::assistant("");
  reply.toolCalls = {{"c1", "count", R"({"key":"pears"})"}};
  this->runs->appendTurn(dead.lease,
                         std::vector<Message>{Message::user("count pears"), reply,
                                              Message::tool("c1", "counted pears 1")},
                         nullptr, *dead.run.baseVersion);
  *this->clock += 6'000;
  auto worker = this->startWorker(this->workerOptions());
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(this->contents("t"), (std::vector<std::string>{"count pears", "", "counted pears 1",
                                                           "done: counted pears 1"}));
  EXPECT_EQ(this->countOf("pears"), 0);
  EXPECT_EQ(done.result["iterations"], 2);
}

TYPED_TEST_P(WorkerTest, AnApprovalWaitSurvivesTheWorkersEnd) {
  auto first = this->startWorker(this->workerOptions("first"));
  RunInfo run = this->runs->submit("t", "approve the deploy");
  RunInfo waiting = this->awaitRun(run.id, {RunStatus::Waiting, RunStatus::Failed});
  ASSERT_EQ(waiting.status, RunStatus::Waiting) << waiting.error;
  EXPECT_EQ(waiting.wait["kind"], "approval");
  EXPECT_EQ(waiting.wait["tool"], "guarded");
  EXPECT_EQ(this->countOf("beside"), 1);  // the call beside it ran
  EXPECT_EQ(this->countOf("guarded"), 0);
  first.reset();  // the worker goes away while the run waits

  auto second = this->startWorker(this->workerOptions("second"));
  this->runs->respond(run.id, "yes");
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.worker, "second");
  EXPECT_EQ(this->countOf("guarded"), 1);
  EXPECT_EQ(this->countOf("beside"), 1);  // reused from the journal, not run again
  EXPECT_EQ(done.result["content"], "done: guarded ran 1; counted beside 1");
  EXPECT_EQ(this->server->requests().size(), 2u);
}

TYPED_TEST_P(WorkerTest, AHumanAnswerResumesTheRunAndADenialIsAnErrorResult) {
  auto worker = this->startWorker(this->workerOptions());
  RunInfo run = this->runs->submit("h", "ask me");
  RunInfo waiting = this->awaitRun(run.id, {RunStatus::Waiting, RunStatus::Failed});
  ASSERT_EQ(waiting.status, RunStatus::Waiting) << waiting.error;
  EXPECT_EQ(waiting.wait["kind"], "interaction");
  EXPECT_EQ(waiting.wait["prompt"], "Which city?");
  auto types = this->eventTypes("h");
  EXPECT_NE(std::find(types.begin(), types.end(), "user_interaction_requested"), types.end());
  this->runs->respond(run.id, "Paris");
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  EXPECT_EQ(done.result["content"], "done: Paris");

  RunInfo denied = this->runs->submit("d", "approve it");
  ASSERT_EQ(this->awaitRun(denied.id, {RunStatus::Waiting, RunStatus::Failed}).status,
            RunStatus::Waiting);
  this->runs->respond(denied.id, "no");
  done = this->awaitRun(denied.id, {RunStatus::Completed, RunStatus::Failed});
  EXPECT_NE(text(done.result["content"]).find("not approved"), std::string::npos);
  EXPECT_EQ(this->countOf("guarded"), 0);
}

TYPED_TEST_P(WorkerTest, CancelsAQueuedAndARunningRun) {
  auto worker = this->startWorker(this->workerOptions());
  RunInfo running = this->runs->submit("c", "gate");
  RunInfo queued = this->runs->submit("c", "after");
  this->gate.awaitEntered(1);
  EXPECT_EQ(this->runs->cancel(queued.id).status, RunStatus::Cancelled);
  this->runs->cancel(running.id);
  RunInfo done =
      this->awaitRun(running.id, {RunStatus::Cancelled, RunStatus::Completed, RunStatus::Failed});
  EXPECT_EQ(done.status, RunStatus::Cancelled);
  EXPECT_TRUE(this->contents("c").empty());        // the half turn was never committed
  EXPECT_EQ(this->server->requests().size(), 1u);  // the queued run never reached the model
}

TYPED_TEST_P(WorkerTest, InterruptStopsAfterTheToolCallKeepingTheWholeTurn) {
  auto worker = this->startWorker(this->workerOptions());
  RunInfo first = this->runs->submit("p", "gate");
  this->gate.awaitEntered(1);
  SubmitOptions interrupt;
  interrupt.policy = DoubleTextPolicy::Interrupt;
  RunInfo second = this->runs->submit("p", "second", interrupt);
  EXPECT_EQ(this->runs->run(first.id)->cancelRequest, CancelRequest::Interrupt);
  this->gate.release();  // the tool call ends; its whole turn is the safe point
  RunInfo stopped =
      this->awaitRun(first.id, {RunStatus::Cancelled, RunStatus::Completed, RunStatus::Failed});
  EXPECT_EQ(stopped.status, RunStatus::Cancelled);
  EXPECT_NE(stopped.error.find("interrupted"), std::string::npos) << stopped.error;
  ASSERT_EQ(this->awaitRun(second.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  EXPECT_EQ(this->contents("p"),
            (std::vector<std::string>{"gate", "", "passed", "second", "echo: second"}));
}

TYPED_TEST_P(WorkerTest, RollbackCancelsTheRunAndHidesItsTurns) {
  auto worker = this->startWorker(this->workerOptions());
  RunInfo before = this->runs->submit("r", "hello");
  this->awaitRun(before.id, {RunStatus::Completed});
  RunInfo first = this->runs->submit("r", "twice");  // count (a whole turn), then the gate
  this->gate.awaitEntered(1);
  SubmitOptions rollback;
  rollback.policy = DoubleTextPolicy::Rollback;
  RunInfo second = this->runs->submit("r", "instead", rollback);
  RunInfo stopped =
      this->awaitRun(first.id, {RunStatus::Cancelled, RunStatus::Completed, RunStatus::Failed});
  EXPECT_EQ(stopped.status, RunStatus::Cancelled);
  EXPECT_NE(stopped.error.find("rolled back"), std::string::npos) << stopped.error;
  ASSERT_EQ(this->awaitRun(second.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  // The thread keeps every row (append-only) but its view is as before the run, then the new one.
  EXPECT_EQ(this->visible("r"),
            (std::vector<std::string>{"hello", "echo: hello", "instead", "echo: instead"}));
  EXPECT_EQ(this->contents("r").size(), 7u);
}

TYPED_TEST_P(WorkerTest, RejectAndEnqueueLeaveTheRunningRunAlone) {
  auto worker = this->startWorker(this->workerOptions());
  RunInfo first = this->runs->submit("q", "gate");
  this->gate.awaitEntered(1);
  SubmitOptions reject;
  reject.policy = DoubleTextPolicy::Reject;
  RunInfo refused = this->runs->submit("q", "refused", reject);
  EXPECT_EQ(refused.status, RunStatus::Rejected);
  EXPECT_NE(refused.error.find(first.id), std::string::npos) << refused.error;
  RunInfo queued = this->runs->submit("q", "queued");
  this->gate.release();
  ASSERT_EQ(this->awaitRun(first.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  ASSERT_EQ(this->awaitRun(queued.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  EXPECT_EQ(this->contents("q"), (std::vector<std::string>{"gate", "", "passed", "done: passed",
                                                           "queued", "echo: queued"}));
}

TYPED_TEST_P(WorkerTest, StopHandsBackARunStillGoing) {
  auto options = this->workerOptions("leaving");
  options.shutdownGrace = 0ms;
  auto first = this->startWorker(options);
  RunInfo run = this->runs->submit("g", "gate");
  this->gate.awaitEntered(1);
  first->stop();
  EXPECT_EQ(first->stats().handedBack, 1u);
  RunInfo handed = *this->runs->run(run.id);
  EXPECT_EQ(handed.status, RunStatus::Running);
  // The next worker goes on at once; the gate call was cut short and is not idempotent.
  auto second = this->startWorker(this->workerOptions("staying"));
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.worker, "staying");
  EXPECT_NE(text(done.result["content"]).find("may have run"), std::string::npos);
  EXPECT_EQ(this->server->requests().size(), 2u);  // the reply was resumed, not asked again
}

// A call that noted the handle of its remote work (ToolContext::checkpoint) and was cut short by
// its worker's stop runs again on the next worker with that handle (ToolContext::resumeFrom),
// though its tool is not idempotent: the remote work is picked up, not started again. Its
// sibling, started without a checkpoint, is still "may have run".
TYPED_TEST_P(WorkerTest, ACheckpointedCallResumesItsRemoteWorkAfterATakeover) {
  auto options = this->workerOptions("leaving");
  options.shutdownGrace = 0ms;
  auto first = this->startWorker(options);
  RunInfo run = this->runs->submit("d", "delegate");
  this->remoteGate.awaitEntered(1);  // its checkpoint is written before it holds
  first->stop();
  EXPECT_EQ(first->stats().handedBack, 1u);
  auto journal = this->runs->journal(run.id);
  ASSERT_EQ(journal.calls.size(), 2u);
  const auto remote = std::find_if(journal.calls.begin(), journal.calls.end(),
                                   [](const ToolCallEntry& e) { return e.toolName == "remote"; });
  ASSERT_NE(remote, journal.calls.end());
  EXPECT_EQ(remote->phase, ToolCallPhase::Started);
  EXPECT_EQ(remote->checkpoint, json({{"task", "rt-1"}}));

  auto second = this->startWorker(this->workerOptions("staying"));
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  EXPECT_EQ(done.worker, "staying");
  EXPECT_EQ(this->countOf("remote-started"), 1);  // started once, on the first worker
  {
    std::lock_guard lock(this->countMutex);
    ASSERT_EQ(this->resumedWith.size(), 1u);
    EXPECT_EQ(this->resumedWith[0], json({{"task", "rt-1"}}));
  }
  const std::string content = text(done.result["content"]);
  EXPECT_NE(content.find("resumed rt-1"), std::string::npos) << content;
  EXPECT_NE(content.find("may have run"), std::string::npos) << content;  // the gate
  // The resumed call's progress is in the run's log, between its request and its result.
  std::vector<std::string> types;
  for (const auto& e : this->runs->readEvents("d", 0)) {
    if (e.type == "tool_execution_progress") {
      EXPECT_EQ(e.payload["message"], "picked up");
      EXPECT_EQ(e.payload["tool_name"], "remote");
      EXPECT_EQ(e.payload["data"], json({{"task", "rt-1"}}));
    }
    if (e.type.starts_with("tool_execution")) types.push_back(e.type);
  }
  const auto progress = std::find(types.begin(), types.end(), "tool_execution_progress");
  ASSERT_NE(progress, types.end());
  EXPECT_EQ(*std::prev(progress), "tool_execution_request");
  journal = this->runs->journal(run.id);
  for (const auto& entry : journal.calls) {
    if (entry.toolName == "remote") {
      EXPECT_EQ(entry.phase, ToolCallPhase::Completed);
      EXPECT_EQ(entry.attempts, 2);
    } else {
      EXPECT_EQ(entry.phase, ToolCallPhase::Indeterminate);
    }
  }
}

TYPED_TEST_P(WorkerTest, TheClaimAnnouncesTheRunsInputAndInputPastTheEventLimitFailsTheRun) {
  // The input a run starts with (its system prompt, then its messages) follows its run_started
  // at once, at the storage indices it takes, before anything of the model.
  auto worker = this->startWorker(this->workerOptions());
  SubmitOptions system;
  system.systemPrompt = "be brief";
  RunInfo run = this->runs->submit("announced", "hello", system);
  ASSERT_EQ(this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  const auto events = this->runs->readEvents("announced", 0);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[1].type, "run_started");
  EXPECT_EQ(events[2].type, "message_added");
  EXPECT_EQ(events[2].payload["index"], 0);
  EXPECT_EQ(events[2].payload["message"]["role"], "system");
  EXPECT_EQ(events[3].type, "message_added");
  EXPECT_EQ(events[3].payload["index"], 1);
  EXPECT_EQ(events[3].payload["message"]["content"], "hello");
  EXPECT_EQ(events[3].runId, run.id);
  worker->stop();

  // An input message too large for an event (RunStoreLimits::maxEventBytes) cannot be
  // announced: the run fails naming the limit, as when the worker announced it itself.
  RunStoreOptions small;
  small.limits.maxEventBytes = 200;
  auto limited = std::make_shared<RunStore>(this->backend.open(), small);
  auto other = std::make_unique<Worker>(limited, this->workerOptions("w2"));
  other->start();
  RunInfo big = limited->submit("big", std::string(300, 'x'));
  RunInfo failed = this->awaitRun(big.id, {RunStatus::Failed, RunStatus::Completed});
  EXPECT_EQ(failed.status, RunStatus::Failed);
  EXPECT_NE(failed.error.find("maxEventBytes"), std::string::npos) << failed.error;
  EXPECT_TRUE(this->contents("big").empty());
}

TYPED_TEST_P(WorkerTest, BadInputIsRefusedWithAClearError) {
  auto options = this->workerOptions();
  options.concurrency = 0;
  EXPECT_THROW(Worker(this->runs, options), ValidationError);
  options = this->workerOptions();
  options.profiles = nullptr;
  EXPECT_THROW(Worker(this->runs, options), ValidationError);
  options = this->workerOptions();
  options.heartbeat = options.leaseDuration;
  EXPECT_THROW(Worker(this->runs, options), ValidationError);

  auto worker = this->startWorker(this->workerOptions());
  SubmitOptions unknownProfile;
  unknownProfile.profile = "nope";
  RunInfo bad = this->runs->submit("x", "hello", unknownProfile);
  RunInfo failed = this->awaitRun(bad.id, {RunStatus::Failed, RunStatus::Completed});
  EXPECT_EQ(failed.status, RunStatus::Failed);
  EXPECT_NE(failed.error.find("nope"), std::string::npos) << failed.error;
  SubmitOptions unknownTool;
  unknownTool.tools = std::vector<std::string>{"count", "missing"};
  bad = this->runs->submit("y", "hello", unknownTool);
  failed = this->awaitRun(bad.id, {RunStatus::Failed, RunStatus::Completed});
  EXPECT_EQ(failed.status, RunStatus::Failed);
  EXPECT_NE(failed.error.find("missing"), std::string::npos) << failed.error;
  EXPECT_TRUE(this->contents("x").empty());
  // A run limited to no tools gets an error result for a call, not the tool.
  SubmitOptions none;
  none.tools = std::vector<std::string>{};
  RunInfo limited = this->runs->submit("z", "count limes", none);
  RunInfo done = this->awaitRun(limited.id, {RunStatus::Completed, RunStatus::Failed});
  EXPECT_NE(text(done.result["content"]).find("may not call"), std::string::npos);
  EXPECT_EQ(this->countOf("limes"), 0);
}

TYPED_TEST_P(WorkerTest, TheNextRunOfAThreadStartsFromTheCacheUnlessTheThreadChanged) {
  auto o = this->workerOptions();
  o.concurrency = 1;
  auto worker = this->startWorker(o);
  auto complete = [&](const std::string& prompt) {
    RunInfo run = this->runs->submit("t", prompt);
    RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
    ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  };
  // The model's view of the thread: the messages of the last request.
  auto lastRequest = [&] {
    const auto requests = this->server->requests();
    std::vector<std::string> out;
    for (const auto& m : requests.back()["body"]["messages"])
      out.push_back(m.value("content", ""));
    return out;
  };
  complete("one");
  complete("two");
  EXPECT_EQ(worker->stats().fromCache, 1u);
  EXPECT_EQ(lastRequest(), (std::vector<std::string>{"one", "echo: one", "two"}));

  // A change made elsewhere (a new version): the worker loads the thread again.
  ConversationManager elsewhere;
  const auto version = loadConversation(this->runs->threads(), "t", elsewhere);
  elsewhere.addMessage(Message::user("beside"));
  elsewhere.addMessage(Message::assistant("noted"));
  saveConversation(this->runs->threads(), "t", elsewhere, version);
  complete("three");
  EXPECT_EQ(worker->stats().fromCache, 1u);
  EXPECT_EQ(lastRequest(), (std::vector<std::string>{"one", "echo: one", "two", "echo: two",
                                                     "beside", "noted", "three"}));
  complete("four");
  EXPECT_EQ(worker->stats().fromCache, 2u);
  EXPECT_EQ(this->contents("t").size(), 10u);

  // threadCache 0 keeps nothing.
  worker->stop();
  o.workerId = "w2";
  o.threadCache = 0;
  auto uncached = this->startWorker(o);
  complete("five");
  complete("six");
  EXPECT_EQ(uncached->stats().fromCache, 0u);
  EXPECT_EQ(lastRequest().size(), 13u);
}

// A slot that frees takes the thread's next run with its finish: no claim transaction, no
// wake-up, and the run starts from the state the slot kept.
TYPED_TEST_P(WorkerTest, AFinishingRunHandsItsSlotTheThreadsNextRun) {
  std::vector<std::string> ids;
  for (const char* prompt : {"one", "two", "three"})
    ids.push_back(this->runs->submit("t", prompt).id);
  auto o = this->workerOptions();
  o.concurrency = 1;
  auto worker = this->startWorker(o);
  for (const auto& id : ids) {
    RunInfo done = this->awaitRun(id, {RunStatus::Completed, RunStatus::Failed});
    ASSERT_EQ(done.status, RunStatus::Completed) << done.error;
  }
  const auto stats = worker->stats();
  EXPECT_EQ(stats.claimed, 3u);
  EXPECT_EQ(stats.chained, 2u);
  EXPECT_EQ(stats.fromCache, 2u);
  EXPECT_EQ(this->contents("t"), (std::vector<std::string>{"one", "echo: one", "two", "echo: two",
                                                           "three", "echo: three"}));
  // Stopping: the last run finished with nothing to take; nothing is left claimed.
  worker->stop();
  EXPECT_EQ(worker->stats().running, 0u);
  for (const auto& run : this->runs->listRuns())
    EXPECT_EQ(run.status, RunStatus::Completed);
}

// Budgets: a run whose model call could go over fails with kind budget_exceeded before anything
// is sent (the mock saw no request); the per-worker limit counts every run's replies.
TYPED_TEST_P(WorkerTest, BudgetsFailARunBeforeAnyModelRequest) {
  auto prices = std::make_shared<PriceTable>();
  // Output only, so every call's worst case is its max_tokens bound: 4096 x $1000 / M = $4.096.
  ModelPrice price;
  price.output = 1000;
  prices->set("parley-mock", price);
  auto failedWithBudget = [&](const RunInfo& run, const char* budget) {
    RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
    ASSERT_EQ(done.status, RunStatus::Failed);
    EXPECT_EQ(done.result["error"]["kind"], "budget_exceeded");
    EXPECT_EQ(done.result["error"]["budget"], budget);
    EXPECT_NE(done.error.find(budget), std::string::npos) << done.error;
    bool seen = false;
    for (const auto& e : this->runs->readEvents(run.threadId, 0)) {
      if (e.type == "llm_execution_failed" && e.runId == run.id) {
        seen = e.payload["result"]["error"]["kind"] == "budget_exceeded";
      }
    }
    EXPECT_TRUE(seen) << "no llm_execution_failed event with kind budget_exceeded";
  };
  {
    auto o = this->workerOptions();
    o.turn.budget.prices = prices;
    o.turn.budget.maxCostPerRun = 1.0;
    auto worker = this->startWorker(o);
    failedWithBudget(this->runs->submit("t1", "hello"), "maxCostPerRun");
    EXPECT_TRUE(this->server->requests().empty());
    EXPECT_TRUE(this->contents("t1").empty());
  }
  {
    auto o = this->workerOptions("w2");
    o.turn.budget.prices = prices;
    o.maxCostPerWorker = 4.097;  // one call's worst case fits; with the first reply's cost, no more
    auto worker = this->startWorker(o);
    RunInfo first = this->runs->submit("t2", "hello");
    EXPECT_EQ(this->awaitRun(first.id, {RunStatus::Completed, RunStatus::Failed}).status,
              RunStatus::Completed);
    EXPECT_EQ(this->server->requests().size(), 1u);
    // "echo: hello": 3 of the mock's completion tokens at $1000 / M.
    EXPECT_NEAR(worker->spentCost(), 0.003, 1e-9);
    failedWithBudget(this->runs->submit("t3", "again"), "maxCostPerWorker");
    EXPECT_EQ(this->server->requests().size(), 1u);
  }
  // A limit without a price table is refused.
  auto o = this->workerOptions("w3");
  o.turn.budget.maxCostPerRun = 1.0;
  EXPECT_THROW(Worker(this->runs, o), ValidationError);
}

// The turn's settings (WorkerOptions::turn, turn_defaults.hpp) hold in a durable run as they do
// in every other host.
TYPED_TEST_P(WorkerTest, ARunAgainstAModelThatNeverAnswersFailsAtItsTurnTimeout) {
  auto o = this->workerOptions();
  o.turn.turnTimeout = 300ms;
  auto worker = this->startWorker(o);
  RunInfo run = this->runs->submit("t1", "stall");
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Failed) << done.result.dump();
  EXPECT_EQ(done.result["error"]["kind"], "timeout") << done.result.dump();
  EXPECT_TRUE(this->contents("t1").empty());  // no whole turn: nothing kept
}

TYPED_TEST_P(WorkerTest, ACallTimeoutBoundsEachModelCallOfARun) {
  auto o = this->workerOptions();
  o.turn.turnTimeout = 0ms;
  o.turn.callTimeout = 300ms;
  auto worker = this->startWorker(o);
  RunInfo run = this->runs->submit("t1", "stall");
  RunInfo done = this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed});
  ASSERT_EQ(done.status, RunStatus::Failed) << done.result.dump();
  EXPECT_EQ(done.result["error"]["kind"], "timeout") << done.result.dump();
}

TYPED_TEST_P(WorkerTest, ThePerReplyToolCapHoldsInARun) {
  auto o = this->workerOptions();
  o.turn.maxToolCallsPerReply = 2;
  auto worker = this->startWorker(o);
  RunInfo run = this->runs->submit("t1", "three at once");
  ASSERT_EQ(this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  std::lock_guard lock(this->countMutex);
  EXPECT_EQ(this->counted["a"], 1);
  EXPECT_EQ(this->counted["b"], 1);
  EXPECT_EQ(this->counted.count("c"), 0u) << "the third call of the reply ran";
  const auto messages = this->runs->threads().loadThread("t1").messages;
  ASSERT_GE(messages.size(), 5u);  // the prompt, the reply, three results, the answer
  EXPECT_NE(messages[4].content.find("error"), std::string::npos) << messages[4].content;
}

TYPED_TEST_P(WorkerTest, ATokenLimitIsReportedInTheRunsEvents) {
  auto o = this->workerOptions();
  o.turn.tokenLimit = 1;
  auto worker = this->startWorker(o);
  RunInfo run = this->runs->submit("t1", "hello there");
  ASSERT_EQ(this->awaitRun(run.id, {RunStatus::Completed, RunStatus::Failed}).status,
            RunStatus::Completed);
  bool seen = false;
  for (const auto& e : this->runs->readEvents("t1", 0)) {
    if (e.type == "token_limit_exceeded") {
      const json& tokens = e.payload["context_tokens"];
      seen = e.payload["token_limit"] == 1 && tokens.is_number() && tokens > 1;
    }
  }
  EXPECT_TRUE(seen) << "no token_limit_exceeded event";
}

TYPED_TEST_P(WorkerTest, TurnSettingsOutOfRangeAreRefusedByName) {
  auto o = this->workerOptions();
  o.turn.maxToolCallsPerReply = 0;
  try {
    Worker w(this->runs, o);
    FAIL() << "accepted maxToolCallsPerReply = 0";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "options.turn.maxToolCallsPerReply");
  }
  o = this->workerOptions();
  o.turn.turnTimeout = -1ms;
  EXPECT_THROW(Worker(this->runs, o), ValidationError);
}

REGISTER_TYPED_TEST_SUITE_P(
    WorkerTest, BudgetsFailARunBeforeAnyModelRequest, CompletesARunWithAToolAndWritesItsEvents,
    RunsOfOneThreadInSubmitOrderAndThreadsInParallel, StreamChunksAreCoalesced,
    TakesOverAJournaledReplyWithoutAskingTheModelAgain, ContinuesFromTheLastWholeTurnAfterATakeover,
    AnApprovalWaitSurvivesTheWorkersEnd, AHumanAnswerResumesTheRunAndADenialIsAnErrorResult,
    CancelsAQueuedAndARunningRun, InterruptStopsAfterTheToolCallKeepingTheWholeTurn,
    RollbackCancelsTheRunAndHidesItsTurns, RejectAndEnqueueLeaveTheRunningRunAlone,
    StopHandsBackARunStillGoing, ACheckpointedCallResumesItsRemoteWorkAfterATakeover,
    BadInputIsRefusedWithAClearError, TheNextRunOfAThreadStartsFromTheCacheUnlessTheThreadChanged,
    AFinishingRunHandsItsSlotTheThreadsNextRun,
    ARunAgainstAModelThatNeverAnswersFailsAtItsTurnTimeout, ACallTimeoutBoundsEachModelCallOfARun,
    ThePerReplyToolCapHoldsInARun, ATokenLimitIsReportedInTheRunsEvents,
    TurnSettingsOutOfRangeAreRefusedByName,
    TheClaimAnnouncesTheRunsInputAndInputPastTheEventLimitFailsTheRun);

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, WorkerTest, ::testing::Types<SqliteBackend>);
INSTANTIATE_TYPED_TEST_SUITE_P(Postgres, WorkerTest, ::testing::Types<PostgresBackend>);

}  // namespace parley::testing
