// The RunStore conformance suite: the run queue behaves the same on every store. A store's test
// program instantiates it with the Backend of store_conformance.hpp (a fresh database, raw SQL,
// the arguments of a helper process):
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, RunStoreConformance, ::testing::Types<SqliteBackend>);
//
// Time: most tests inject the store's clock (RunStoreOptions::clock) and move it, so that leases
// expire without waiting. The multi-process tests run tests/run_store_worker.cpp.
#pragma once

#include <gtest/gtest.h>
#include <functional>

#include <atomic>
#include <latch>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "child_process.hpp"
#include "parley/errors.hpp"
#include "parley/run_store.hpp"
#include "parley/store.hpp"

namespace parley::testing {

using nlohmann::json;
using namespace std::chrono_literals;

// The schema parley wrote before the run queue (version 1), as a script, to test the migration
// with a database of that version.
inline std::vector<std::string> schemaVersion1(bool sqlite) {
  const std::string rowid = sqlite ? " WITHOUT ROWID" : "";
  return {
      "CREATE TABLE parley_schema (version INTEGER NOT NULL)",
      "CREATE TABLE parley_threads (id TEXT PRIMARY KEY, parent_id TEXT, fork_position BIGINT NOT "
      "NULL, message_count BIGINT NOT NULL, version BIGINT NOT NULL, created_at BIGINT NOT NULL, "
      "updated_at BIGINT NOT NULL, title TEXT NOT NULL, metadata TEXT, state TEXT, deleted "
      "INTEGER NOT NULL DEFAULT 0)",
      "CREATE INDEX parley_threads_parent ON parley_threads (parent_id)",
      "CREATE INDEX parley_threads_created ON parley_threads (created_at, id)",
      "CREATE TABLE parley_messages (thread_id TEXT NOT NULL, seq BIGINT NOT NULL, body TEXT NOT "
      "NULL, PRIMARY KEY (thread_id, seq))" +
          rowid,
      "INSERT INTO parley_schema (version) VALUES (1)",
      "INSERT INTO parley_threads (id, parent_id, fork_position, message_count, version, "
      "created_at, updated_at, title, metadata, state) VALUES ('old', NULL, 0, 2, 2, 1000, 2000, "
      "'from version 1', '{\"k\":1}', NULL)",
      R"(INSERT INTO parley_messages VALUES ('old', 0, '{"role":"user","content":"hello"}'))",
      R"(INSERT INTO parley_messages VALUES ('old', 1, '{"role":"assistant","content":"hi"}'))",
      "INSERT INTO parley_threads (id, parent_id, fork_position, message_count, version, "
      "created_at, updated_at, title, metadata, state) VALUES ('old-fork', 'old', 1, 1, 1, 3000, "
      "3000, '', NULL, NULL)",
  };
}

template <class Backend>
class RunStoreConformance : public ::testing::Test {
 protected:
  Backend backend;
  std::shared_ptr<std::atomic<int64_t>> clock =
      std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);

  RunStoreOptions clocked() {
    RunStoreOptions options;
    options.clock = [c = clock] { return c->load(); };
    return options;
  }
  std::unique_ptr<RunStore> open(RunStoreOptions options) {
    return std::make_unique<RunStore>(std::shared_ptr<ConversationStore>(backend.open()),
                                      std::move(options));
  }
  // The store most tests use: on the test's clock.
  RunStore& runs() {
    if (!runs_) runs_ = open(clocked());
    return *runs_;
  }
  void advance(std::chrono::milliseconds by) { *clock += by.count(); }
  // Closes the store, runs `between` (on the database alone), and opens it again.
  void reopen(const std::function<void()>& between) {
    runs_.reset();
    between();
    runs_ = open(clocked());
  }
  // Submits and moves the clock on, so that runs of different threads have distinct ages.
  RunInfo submit(const std::string& thread, const std::string& prompt, SubmitOptions options = {}) {
    RunInfo run = runs().submit(thread, prompt, options);
    advance(1ms);
    return run;
  }
  Claim claimOrFail(const std::string& worker, std::chrono::milliseconds lease = 10s) {
    auto claim = runs().claim(worker, lease);
    if (!claim) throw std::runtime_error("nothing to claim");
    return *claim;
  }
  int64_t versionOf(const std::string& thread) {
    return runs().threads().threadInfo(thread)->version;
  }
  std::vector<std::string> contents(const std::string& thread) {
    std::vector<std::string> out;
    for (const auto& m : runs().threads().loadThread(thread).messages)
      out.push_back(m.content);
    return out;
  }
  std::vector<std::string> eventTypes(const std::string& thread, int64_t after = 0) {
    std::vector<std::string> out;
    for (const auto& e : runs().readEvents(thread, after))
      out.push_back(e.type);
    return out;
  }
  int64_t rows(const std::string& table) { return backend.count("SELECT COUNT(*) FROM " + table); }
  std::unique_ptr<ChildProcess> worker(const std::string& mode, const std::string& id,
                                       const std::string& extra = "") {
    std::vector<std::string> argv = {PARLEY_RUN_STORE_WORKER};
    for (auto& a : backend.writerArgs())
      argv.push_back(a);
    argv.push_back(mode);
    argv.push_back(id);
    if (!extra.empty()) argv.push_back(extra);
    return std::make_unique<ChildProcess>(argv);
  }

 private:
  std::unique_ptr<RunStore> runs_;
};

TYPED_TEST_SUITE_P(RunStoreConformance);

TYPED_TEST_P(RunStoreConformance, MigratesAVersion1Database) {
  for (const auto& sql : schemaVersion1(this->backend.writerArgs()[0] == "sqlite"))
    this->backend.exec(sql);
  auto store = std::shared_ptr<ConversationStore>(this->backend.open());
  EXPECT_EQ(this->backend.count("SELECT MAX(version) FROM parley_schema"), kStoreSchemaVersion);
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_schema"), 1);
  ThreadData old = store->loadThread("old");
  EXPECT_EQ(old.messages.size(), 2u);
  EXPECT_EQ(old.info.version, 2);
  EXPECT_EQ(old.info.title, "from version 1");
  EXPECT_EQ(old.info.metadata, json({{"k", 1}}));
  EXPECT_EQ(store->loadThread("old-fork").messages.at(0).content, "hello");
  // The messages of the old version are in the search index.
  const auto hits = store->searchMessages("hello");
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].threadId, "old");
  EXPECT_EQ(hits[0].position, 0);

  RunStore runs(store);
  RunInfo run = runs.submit("old", "again");
  EXPECT_EQ(run.position, 1);
  auto claim = runs.claim("w", 10s);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->lease.token, 1);
  EXPECT_EQ(claim->run.baseMessageCount, 2);
  EXPECT_EQ(runs.appendTurn(claim->lease, run.input, nullptr, 2), 3);
  runs.finish(claim->lease, RunStatus::Completed);
  EXPECT_EQ(store->loadThread("old").messages.size(), 3u);
  // A second open finds the current version and changes nothing.
  this->backend.open();
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_schema"), 1);
}

TYPED_TEST_P(RunStoreConformance, SubmitQueuesRunsInSubmitOrder) {
  SubmitOptions options;
  options.profile = "fast";
  options.tools = std::vector<std::string>{"calc", "search"};
  options.systemPrompt = "be brief";
  options.maxIterations = 3;
  options.stream = true;
  options.metadata = {{"ticket", 42}};
  options.traceId = "trace-1";
  RunInfo first = this->submit("t", "one", options);
  RunInfo second = this->submit("t", "two");
  RunInfo other = this->submit("u", "three");
  EXPECT_EQ(first.position, 1);
  EXPECT_EQ(second.position, 2);
  EXPECT_EQ(other.position, 1);
  EXPECT_EQ(first.status, RunStatus::Queued);
  EXPECT_EQ(first.id.rfind("r-", 0), 0u);
  EXPECT_NE(first.id, second.id);
  EXPECT_TRUE(this->runs().threads().threadInfo("t"));  // submit created the thread

  auto stored = this->runs().run(first.id);
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->input.size(), 1u);
  EXPECT_EQ(stored->input[0], Message::user("one"));
  EXPECT_EQ(stored->options.profile, "fast");
  EXPECT_EQ(stored->options.tools, options.tools);
  EXPECT_EQ(stored->options.systemPrompt, "be brief");
  EXPECT_EQ(stored->options.maxIterations, 3);
  EXPECT_TRUE(stored->options.stream);
  EXPECT_EQ(stored->options.metadata, options.metadata);
  EXPECT_EQ(stored->options.traceId, "trace-1");
  EXPECT_EQ(stored->options.policy, DoubleTextPolicy::Enqueue);
  EXPECT_FALSE(stored->startedAt);
  EXPECT_FALSE(this->runs().run("r-none"));
  EXPECT_FALSE(this->runs().run(second.id)->options.tools);  // not given: every tool

  auto ofT = this->runs().listRuns({.threadId = "t"});
  ASSERT_EQ(ofT.size(), 2u);
  EXPECT_EQ(ofT[0].id, first.id);
  EXPECT_EQ(ofT[1].id, second.id);
  auto all = this->runs().listRuns({.limit = 2, .offset = 1});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, second.id);
  EXPECT_EQ(all[1].id, other.id);
  EXPECT_EQ(this->runs().listRuns({.status = RunStatus::Running}).size(), 0u);
  EXPECT_THROW(this->runs().listRuns({.limit = 0}), ValidationError);
  EXPECT_THROW(this->runs().listRuns({.limit = 100'000}), ValidationError);
  EXPECT_EQ(this->eventTypes("t"), (std::vector<std::string>{"run_queued", "run_queued"}));
}

TYPED_TEST_P(RunStoreConformance, BadSubmitsAreClearErrorsAndChangeNothing) {
  RunStoreOptions options = this->clocked();
  options.limits.maxInputBytes = 2'000;
  options.limits.maxInputMessages = 3;
  auto runs = this->open(options);
  auto field = [&](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const ValidationError& e) {
      return e.field();
    }
    return "<no ValidationError>";
  };
  EXPECT_EQ(field([&] { runs->submit("", "hi"); }), "threadId");
  EXPECT_EQ(field([&] { runs->submit("bad\nid", "hi"); }), "threadId");
  EXPECT_EQ(field([&] { runs->submit("t", std::vector<Message>{}); }), "input");
  Message orphan;
  orphan.role = Role::Tool;
  orphan.content = "x";
  EXPECT_EQ(field([&] { runs->submit("t", std::vector<Message>{orphan}); }),
            "messages[0].tool_call_id");
  EXPECT_EQ(field([&] { runs->submit("t", std::string(3'000, 'x')); }), "input");
  EXPECT_EQ(field([&] { runs->submit("t", std::vector<Message>(4, Message::user("x"))); }),
            "input");
  EXPECT_EQ(field([&] { runs->submit("t", "hi", {.maxIterations = -1}); }),
            "options.maxIterations");
  EXPECT_EQ(field([&] { runs->submit("t", "hi", {.maxIterations = 1'000'000}); }),
            "options.maxIterations");
  EXPECT_EQ(field([&] { runs->submit("t", "hi", {.metadata = json::array()}); }),
            "options.metadata");
  EXPECT_EQ(field([&] { runs->submit("t", "hi", {.tools = std::vector<std::string>{""}}); }),
            "options.tools[0]");
  EXPECT_EQ(this->rows("parley_runs"), 0);
  EXPECT_FALSE(runs->threads().threadInfo("t"));

  RunInfo run = runs->submit("t", "hi", {.id = "r-fixed"});
  EXPECT_EQ(run.id, "r-fixed");
  EXPECT_THROW(runs->submit("t", "again", {.id = "r-fixed"}), StoreError);
  EXPECT_EQ(this->rows("parley_runs"), 1);
  EXPECT_EQ(this->rows("parley_events"), 1);
}

TYPED_TEST_P(RunStoreConformance, ClaimsTheOldestHeadRunOfAFreeThread) {
  RunInfo a1 = this->submit("a", "a1");
  RunInfo b1 = this->submit("b", "b1");
  RunInfo a2 = this->submit("a", "a2");
  Claim first = this->claimOrFail("w1");
  EXPECT_EQ(first.run.id, a1.id);
  EXPECT_EQ(first.run.status, RunStatus::Running);
  EXPECT_EQ(first.run.attempts, 1);
  EXPECT_EQ(first.run.worker, "w1");
  EXPECT_EQ(first.run.baseVersion, 1);
  EXPECT_EQ(first.run.baseMessageCount, 0);
  EXPECT_TRUE(first.run.startedAt);
  EXPECT_EQ(first.lease.threadId, "a");
  EXPECT_EQ(first.lease.owner, "w1");
  EXPECT_EQ(first.lease.token, 1);
  EXPECT_EQ(first.lease.traceId, a1.options.traceId);
  Claim second = this->claimOrFail("w2");
  EXPECT_EQ(second.run.id, b1.id);  // a2 waits for a1: one run per thread, in order
  EXPECT_FALSE(this->runs().claim("w3", 10s));
  this->runs().finish(first.lease, RunStatus::Completed, "", {{"finish", "stop"}});
  RunInfo done = *this->runs().run(a1.id);
  EXPECT_EQ(done.status, RunStatus::Completed);
  EXPECT_EQ(done.result, json({{"finish", "stop"}}));
  EXPECT_TRUE(done.finishedAt);
  Claim third = this->claimOrFail("w3");
  EXPECT_EQ(third.run.id, a2.id);
  EXPECT_EQ(third.lease.token, 2);  // the token grows with every claim of the thread
  EXPECT_THROW(this->runs().claim("", 10s), ValidationError);
  EXPECT_THROW(this->runs().claim("w", 0ms), ValidationError);
  EXPECT_EQ(this->eventTypes("a"),
            (std::vector<std::string>{"run_queued", "run_queued", "run_started", "run_completed",
                                      "llm_execution_completed", "run_started"}));
}

// The heart of fencing: a worker whose lease expired and was taken over writes nothing.
TYPED_TEST_P(RunStoreConformance, ABatchClaimTakesOneHeadRunPerThreadOldestFirst) {
  RunInfo a1 = this->submit("a", "a1");
  RunInfo b1 = this->submit("b", "b1");
  RunInfo a2 = this->submit("a", "a2");
  RunInfo c1 = this->submit("c", "c1");
  std::vector<Claim> claims = this->runs().claim("w", 10s, 2);
  ASSERT_EQ(claims.size(), 2u);
  EXPECT_EQ(claims[0].run.id, a1.id);
  EXPECT_EQ(claims[1].run.id, b1.id);
  for (const Claim& claim : claims) {  // the claimed run is the run as stored
    const RunInfo stored = *this->runs().run(claim.run.id);
    EXPECT_EQ(stored.status, claim.run.status);
    EXPECT_EQ(stored.attempts, claim.run.attempts);
    EXPECT_EQ(stored.worker, claim.run.worker);
    EXPECT_EQ(stored.startedAt, claim.run.startedAt);
    EXPECT_EQ(stored.updatedAt, claim.run.updatedAt);
    EXPECT_EQ(stored.baseVersion, claim.run.baseVersion);
    EXPECT_EQ(stored.baseMessageCount, claim.run.baseMessageCount);
    EXPECT_EQ(stored.input.size(), claim.run.input.size());
  }
  claims = this->runs().claim("w", 10s, 10);  // a2 waits for a1
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(claims[0].run.id, c1.id);
  EXPECT_EQ(claims[0].lease.owner, "w");
  EXPECT_TRUE(this->runs().claim("w", 10s, 10).empty());
  EXPECT_THROW(this->runs().claim("w", 10s, 0), ValidationError);
  EXPECT_THROW(this->runs().claim("w", 10s, RunStoreLimits{}.maxClaimBatch + 1), ValidationError);
  EXPECT_EQ(this->runs().run(a2.id)->status, RunStatus::Queued);
}

TYPED_TEST_P(RunStoreConformance, FinishWithTurnCommitsTheAnswerAndTheEndTogether) {
  RunInfo run = this->submit("t", "hello");
  Claim claim = this->claimOrFail("w", 10s);
  std::vector<Message> turn = run.input;
  turn.push_back(Message::assistant("world"));
  const auto events = this->rows("parley_events");
  const auto messages = this->rows("parley_messages");
  // A stale version changes nothing: no message, no event, the run still running.
  EXPECT_THROW(this->runs().finishWithTurn(claim.lease, turn, nullptr, 7, {{"content", "world"}}),
               StoreConflict);
  EXPECT_EQ(this->rows("parley_events"), events);
  EXPECT_EQ(this->rows("parley_messages"), messages);
  EXPECT_EQ(this->runs().run(run.id)->status, RunStatus::Running);

  // Events of one call go in as one statement where the database allows: quotes, backslashes
  // and braces come back as they were.
  const json tricky = {{"index", 1}, {"text", "a \"quoted\" \\ {brace}, comma"}};
  EXPECT_EQ(this->runs().finishWithTurn(claim.lease, turn, nullptr, 1, {{"content", "world"}},
                                        std::vector<EventInput>{{"message_added", tricky}}),
            2);
  const auto logged = this->runs().readEvents("t", 0);
  ASSERT_EQ(logged.size(), 5u);
  EXPECT_EQ(logged[2].payload, tricky);
  EXPECT_EQ(logged[2].runId, run.id);
  EXPECT_EQ(logged[3].seq, logged[2].seq + 1);
  EXPECT_EQ(this->contents("t"), (std::vector<std::string>{"hello", "world"}));
  RunInfo done = *this->runs().run(run.id);
  EXPECT_EQ(done.status, RunStatus::Completed);
  EXPECT_EQ(done.result, json({{"content", "world"}}));
  EXPECT_EQ(this->eventTypes("t"),
            (std::vector<std::string>{"run_queued", "run_started", "message_added", "run_completed",
                                      "llm_execution_completed"}));
  const auto last = this->runs().readEvents("t", 0).back();
  EXPECT_EQ(last.payload, json({{"run_id", run.id}, {"result", {{"content", "world"}}}}));
  EXPECT_THROW(this->runs().renew(claim.lease, 10s), LeaseLost);  // it went with the finish
}

// A worker's slot that frees takes its next run in the same transaction as the finish: the run
// claim() would take, this thread's next one when nothing older waits, another thread's older
// head first, nothing when nothing is claimable.
TYPED_TEST_P(RunStoreConformance, FinishWithTurnAndClaimTakesTheNextRunInTheSameTransaction) {
  RunInfo a1 = this->submit("a", "a1");
  RunInfo a2 = this->submit("a", "a2");
  Claim first = this->claimOrFail("w", 10s);
  RunInfo b1 = this->submit("b", "b1");  // younger than a2
  Claim b = this->claimOrFail("v", 10s);
  ASSERT_EQ(b.run.id, b1.id);
  std::vector<Message> turn = a1.input;
  turn.push_back(Message::assistant("one"));
  EXPECT_THROW(this->runs().finishWithTurnAndClaim(first.lease, turn, nullptr, 1,
                                                   {{"content", "one"}}, {}, 0ms),
               ValidationError);
  const auto events = this->rows("parley_events");
  // A stale version claims nothing and changes nothing.
  EXPECT_THROW(this->runs().finishWithTurnAndClaim(first.lease, turn, nullptr, 7,
                                                   {{"content", "one"}}, {}, 10s),
               StoreConflict);
  EXPECT_EQ(this->rows("parley_events"), events);
  EXPECT_EQ(this->runs().run(a2.id)->status, RunStatus::Queued);

  auto done = this->runs().finishWithTurnAndClaim(first.lease, turn, nullptr, 1,
                                                  {{"content", "one"}}, {}, 10s);
  EXPECT_EQ(done.version, 2);
  EXPECT_EQ(this->runs().run(a1.id)->status, RunStatus::Completed);
  ASSERT_TRUE(done.next);
  EXPECT_EQ(done.next->run.id, a2.id);
  EXPECT_EQ(done.next->run.status, RunStatus::Running);
  EXPECT_EQ(done.next->run.baseVersion, 2);  // after the answer it committed
  EXPECT_EQ(done.next->run.baseMessageCount, 2);
  EXPECT_EQ(done.next->lease.owner, "w");
  EXPECT_EQ(done.next->lease.token, first.lease.token + 1);
  const RunInfo stored = *this->runs().run(a2.id);
  EXPECT_EQ(stored.status, RunStatus::Running);
  EXPECT_EQ(stored.worker, "w");
  EXPECT_EQ(stored.attempts, 1);
  EXPECT_THROW(this->runs().renew(first.lease, 10s), LeaseLost);  // the old lease went
  EXPECT_NO_THROW(this->runs().renew(done.next->lease, 10s));
  EXPECT_EQ(this->eventTypes("a"),
            (std::vector<std::string>{"run_queued", "run_queued", "run_started", "run_completed",
                                      "llm_execution_completed", "run_started"}));

  // An older head of another thread goes first: c1 waits longer than a3.
  RunInfo c1 = this->submit("c", "c1");
  RunInfo a3 = this->submit("a", "a3");
  turn = a2.input;
  turn.push_back(Message::assistant("two"));
  done = this->runs().finishWithTurnAndClaim(done.next->lease, turn, nullptr, 2,
                                             {{"content", "two"}}, {}, 10s);
  ASSERT_TRUE(done.next);
  EXPECT_EQ(done.next->run.id, c1.id);
  EXPECT_EQ(this->runs().run(a3.id)->status, RunStatus::Queued);
  Claim a = this->claimOrFail("v", 10s);
  EXPECT_EQ(a.run.id, a3.id);

  // Nothing claimable: the finish alone.
  turn = c1.input;
  turn.push_back(Message::assistant("three"));
  done = this->runs().finishWithTurnAndClaim(done.next->lease, turn, nullptr, 1,
                                             {{"content", "three"}}, {}, 10s);
  EXPECT_FALSE(done.next);
  EXPECT_EQ(this->runs().run(c1.id)->status, RunStatus::Completed);
  EXPECT_EQ(this->contents("c"), (std::vector<std::string>{"c1", "three"}));
}

TYPED_TEST_P(RunStoreConformance, ConcurrentFinishesFailAloneAndCommitTogether) {
  // The finishWithTurnAndClaim calls of a worker's slots that meet are committed together (one
  // transaction); each is still checked alone: a lost lease or a stale version fails its own
  // call, which writes nothing, and the others commit and claim their next runs. Several rounds,
  // so that calls meet in batches of different makeups.
  constexpr int kCalls = 8;
  for (int round = 0; round < 5; ++round) {
    const std::string prefix = "r" + std::to_string(round) + "-";
    for (int i = 0; i < kCalls; ++i)
      this->submit(prefix + std::to_string(i), "q" + std::to_string(i));
    std::vector<Claim> claims = this->runs().claim("w", 10s, kCalls);
    ASSERT_EQ(claims.size(), static_cast<size_t>(kCalls));
    std::set<std::string> queued;  // one next run for each of the four good calls
    for (int i = 0; i < 4; ++i)
      queued.insert(this->submit(prefix + "next" + std::to_string(i), "n").id);
    // Calls 0 to 3 are good; 4 and 5 name a lease that is lost (a token too old); 6 and 7 a
    // stale version.
    std::vector<std::optional<RunStore::FinishedTurn>> finished(kCalls);
    std::vector<std::string> errors(kCalls);
    std::latch start(kCalls);
    std::vector<std::thread> callers;
    for (int i = 0; i < kCalls; ++i) {
      callers.emplace_back([&, i] {
        Lease lease = claims[i].lease;
        if (i == 4 || i == 5) lease.token -= 1;
        std::vector<Message> turn = claims[i].run.input;
        turn.push_back(Message::assistant("a" + std::to_string(i)));
        start.arrive_and_wait();
        try {
          finished[i] = this->runs().finishWithTurnAndClaim(lease, turn, nullptr, i < 6 ? 1 : 5,
                                                            {{"content", "a"}}, {}, 10s);
        } catch (const LeaseLost&) {
          errors[i] = "lease";
        } catch (const StoreConflict&) {
          errors[i] = "version";
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& caller : callers)
      caller.join();
    std::set<std::string> next;
    for (int i = 0; i < kCalls; ++i) {
      const std::string thread = claims[i].lease.threadId;
      if (i < 4) {
        ASSERT_TRUE(finished[i]) << errors[i];
        EXPECT_EQ(finished[i]->version, 2);
        EXPECT_EQ(this->runs().run(claims[i].run.id)->status, RunStatus::Completed);
        EXPECT_EQ(this->contents(thread),
                  (std::vector<std::string>{"q" + std::to_string(i), "a" + std::to_string(i)}));
        ASSERT_TRUE(finished[i]->next);
        EXPECT_EQ(finished[i]->next->lease.owner, "w");
        next.insert(finished[i]->next->run.id);
      } else {
        EXPECT_EQ(errors[i], i < 6 ? "lease" : "version") << i;
        EXPECT_FALSE(finished[i]);
        EXPECT_EQ(this->runs().run(claims[i].run.id)->status, RunStatus::Running);
        EXPECT_TRUE(this->contents(thread).empty());
        EXPECT_EQ(this->eventTypes(thread),
                  (std::vector<std::string>{"run_queued", "run_started"}));
      }
    }
    // Each queued run was claimed once, by one of the good calls.
    EXPECT_EQ(next, queued);
    for (const auto& id : next) {
      EXPECT_EQ(this->runs().run(id)->status, RunStatus::Running);
      EXPECT_EQ(this->runs().run(id)->attempts, 1);
    }
  }
}

TYPED_TEST_P(RunStoreConformance, AClaimWritesItsStartEventsAfterRunStarted) {
  RunInfo a1 = this->submit("a", "a1");
  RunInfo a2 = this->submit("a", "a2");
  RunInfo b1 = this->submit("b", "b1");
  const ClaimEvents announce = [](const Claim& claim) {
    return std::vector<EventInput>{
        {"announced", {{"run", claim.run.id}, {"attempt", claim.run.attempts}}}};
  };
  std::vector<Claim> claims = this->runs().claim("w", 10s, 2, announce);
  ASSERT_EQ(claims.size(), 2u);
  EXPECT_EQ(claims[0].run.id, a1.id);
  EXPECT_EQ(claims[1].run.id, b1.id);
  EXPECT_TRUE(claims[0].startEventsWritten);
  EXPECT_TRUE(claims[1].startEventsWritten);
  EXPECT_EQ(this->eventTypes("a"),
            (std::vector<std::string>{"run_queued", "run_queued", "run_started", "announced"}));
  const auto events = this->runs().readEvents("a", 0);
  EXPECT_EQ(events[3].payload["run"], a1.id);
  EXPECT_EQ(events[3].payload["attempt"], 1);
  EXPECT_EQ(events[3].runId, a1.id);  // a run's event, with its trace
  EXPECT_EQ(events[3].traceId, a1.options.traceId);
  // A claim without them writes none.
  RunInfo c1 = this->submit("c", "c1");
  EXPECT_FALSE(this->claimOrFail("w").startEventsWritten);
  EXPECT_EQ(this->eventTypes("c"), (std::vector<std::string>{"run_queued", "run_started"}));

  // The claim of a finish writes them too.
  std::vector<Message> turn = a1.input;
  turn.push_back(Message::assistant("one"));
  auto done = this->runs().finishWithTurnAndClaim(claims[0].lease, turn, nullptr, 1,
                                                  {{"content", "one"}}, {}, 10s, announce);
  ASSERT_TRUE(done.next);
  EXPECT_EQ(done.next->run.id, a2.id);
  EXPECT_TRUE(done.next->startEventsWritten);
  EXPECT_EQ(this->eventTypes("a", 4),
            (std::vector<std::string>{"run_completed", "llm_execution_completed", "run_started",
                                      "announced"}));

  // Past the limits, nothing of them is written and the claim says so; the run is claimed.
  RunStoreOptions small = this->clocked();
  small.limits.maxEventBytes = 100;
  auto limited = this->open(small);
  this->submit("d", "d1");
  const ClaimEvents big = [](const Claim&) {
    return std::vector<EventInput>{{"small", json::object()},
                                   {"big", {{"text", std::string(200, 'x')}}}};
  };
  std::vector<Claim> claimed = limited->claim("w", 10s, 1, big);
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_FALSE(claimed[0].startEventsWritten);
  EXPECT_EQ(this->eventTypes("d"), (std::vector<std::string>{"run_queued", "run_started"}));
}

TYPED_TEST_P(RunStoreConformance, AClaimSaysWhetherItsThreadIsEmpty) {
  this->submit("new", "made by its first run");
  this->runs().threads().createThread({.id = "told"}, std::vector<Message>{Message::user("hi")});
  this->submit("told", "has a message");
  this->runs().threads().createThread({.id = "stated"}, {}, json{{"k", 1}});
  this->submit("stated", "has a state");
  std::map<std::string, bool> empty;
  for (const Claim& claim : this->runs().claim("w", 10s, 3))
    empty[claim.lease.threadId] = claim.threadEmpty;
  EXPECT_EQ(empty,
            (std::map<std::string, bool>{{"new", true}, {"told", false}, {"stated", false}}));
}

TYPED_TEST_P(RunStoreConformance, MigratesAVersion3QueueToQueueHeads) {
  RunInfo a1 = this->submit("a", "a1");
  RunInfo b1 = this->submit("b", "b1");
  RunInfo a2 = this->submit("a", "a2");
  // Back to version 3: no queue heads, the run index that version's claim read.
  const bool sqlite = this->backend.writerArgs()[0] == "sqlite";
  std::vector<std::string> down;
  if (sqlite) {
    down = {"DROP TRIGGER parley_runs_head_insert", "DROP TRIGGER parley_runs_head_update",
            "DROP TRIGGER parley_runs_head_delete"};
  } else {
    down = {"DROP TRIGGER parley_runs_head ON parley_runs",
            "DROP TRIGGER parley_runs_head_update ON parley_runs",  // version 7's
            "DROP FUNCTION parley_runs_head()"};
  }
  for (const char* sql :
       {"DROP TABLE parley_assistant_versions", "DROP TABLE parley_assistants",  // version 6's
        "DROP TABLE parley_blobs",                                               // version 5's
        "DROP INDEX parley_threads_queue", "DROP INDEX parley_threads_leases",
        "ALTER TABLE parley_threads DROP COLUMN queue_head_at",
        "CREATE INDEX parley_runs_queue ON parley_runs (created_at, position, id) "
        "WHERE status IN ('queued', 'running', 'waiting')",
        "UPDATE parley_schema SET version = 3"})
    down.push_back(sql);
  this->reopen([&] {
    for (const auto& sql : down)
      this->backend.exec(sql);
  });
  EXPECT_EQ(this->backend.count("SELECT MAX(version) FROM parley_schema"), kStoreSchemaVersion);
  EXPECT_EQ(this->backend.count("SELECT COUNT(*) FROM parley_threads WHERE queue_head_at IS NOT "
                                "NULL"),
            2);
  std::vector<Claim> claims = this->runs().claim("w", 10s, 10);
  ASSERT_EQ(claims.size(), 2u);
  EXPECT_EQ(claims[0].run.id, a1.id);
  EXPECT_EQ(claims[1].run.id, b1.id);
  this->runs().finish(claims[0].lease, RunStatus::Completed);
  Claim next = this->claimOrFail("w", 10s);
  EXPECT_EQ(next.run.id, a2.id);
}

TYPED_TEST_P(RunStoreConformance, AStaleLeaseWritesNothing) {
  RunInfo run = this->submit("t", "hello");
  Claim stale = this->claimOrFail("slow", 1s);
  this->runs().appendTurn(stale.lease, run.input, nullptr, 1);  // its first turn commits
  this->advance(2s);                                            // it stalls past its lease
  Claim fresh = this->claimOrFail("fast", 10s);                 // and another takes over
  EXPECT_EQ(fresh.run.id, run.id);
  EXPECT_EQ(fresh.run.attempts, 2);
  EXPECT_EQ(fresh.lease.token, stale.lease.token + 1);

  const auto version = this->versionOf("t");
  const auto events = this->rows("parley_events");
  const auto messages = this->rows("parley_messages");
  Message reply = Message::assistant("", {ToolCall{"c1", "calc", "{}"}});
  auto lost = [&](auto&& fn) {
    try {
      fn();
    } catch (const LeaseLost& e) {
      return std::string(e.what());
    }
    return std::string("<no LeaseLost>");
  };
  std::string error = lost([&] {
    this->runs().appendTurn(stale.lease, std::vector<Message>{Message::assistant("late")}, nullptr,
                            version);
  });
  EXPECT_NE(error.find("'fast'"), std::string::npos) << error;
  EXPECT_NE(error.find("token 2"), std::string::npos) << error;
  lost([&] { this->runs().appendEvents(stale.lease, std::vector<EventInput>{{"x", 1}}); });
  EXPECT_NE(lost([&] { this->runs().recordReply(stale.lease, reply, 1); }), "<no LeaseLost>");
  EXPECT_NE(lost([&] { this->runs().wait(stale.lease, {{"q", 1}}); }), "<no LeaseLost>");
  EXPECT_NE(lost([&] { this->runs().finish(stale.lease, RunStatus::Completed); }),
            "<no LeaseLost>");
  EXPECT_NE(lost([&] {
              this->runs().finishWithTurn(stale.lease,
                                          std::vector<Message>{Message::assistant("late")}, nullptr,
                                          version, {{"content", "late"}});
            }),
            "<no LeaseLost>");
  EXPECT_NE(lost([&] { this->runs().renew(stale.lease, 10s); }), "<no LeaseLost>");
  EXPECT_FALSE(this->runs().release(stale.lease));
  EXPECT_EQ(this->versionOf("t"), version);
  EXPECT_EQ(this->rows("parley_events"), events);
  EXPECT_EQ(this->rows("parley_messages"), messages);
  EXPECT_EQ(this->rows("parley_tool_calls"), 0);
  EXPECT_EQ(this->runs().run(run.id)->status, RunStatus::Running);

  // The new holder goes on from the committed turn.
  this->runs().appendTurn(fresh.lease, std::vector<Message>{Message::assistant("world")}, nullptr,
                          version);
  this->runs().finish(fresh.lease, RunStatus::Completed);
  EXPECT_EQ(this->contents("t"), (std::vector<std::string>{"hello", "world"}));
}

TYPED_TEST_P(RunStoreConformance, AnExpiredLeaseNoOneTookStaysValid) {
  this->submit("t", "hello");
  Claim claim = this->claimOrFail("w", 1s);
  this->advance(5s);
  LeaseRenewal renewal = this->runs().renew(claim.lease, 1s);
  EXPECT_GT(renewal.expiresAt, claim.lease.expiresAt);
  EXPECT_EQ(renewal.cancelRequest, CancelRequest::None);
  EXPECT_FALSE(this->runs().claim("other", 1s));  // renewed: live again
  EXPECT_EQ(
      this->runs().appendTurn(claim.lease, std::vector<Message>{Message::user("x")}, nullptr, 1),
      2);
  EXPECT_THROW(this->runs().renew(claim.lease, 0ms), ValidationError);
  Lease forged = claim.lease;
  forged.owner = "someone-else";
  EXPECT_THROW(this->runs().renew(forged, 1s), LeaseLost);
}

TYPED_TEST_P(RunStoreConformance, AReleasedRunIsTakenOverAtOnce) {
  RunInfo run = this->submit("t", "hello");
  Claim first = this->claimOrFail("w1");
  EXPECT_TRUE(this->runs().release(first.lease));
  Claim second = this->claimOrFail("w2");
  EXPECT_EQ(second.run.id, run.id);
  EXPECT_EQ(second.run.attempts, 2);
  EXPECT_EQ(second.lease.token, first.lease.token + 1);
  EXPECT_THROW(this->runs().appendEvents(first.lease, std::vector<EventInput>{{"x", 1}}),
               LeaseLost);
}

TYPED_TEST_P(RunStoreConformance, CancelsQueuedAtOnceAndRunningAtItsNextSafePoint) {
  RunInfo running = this->submit("t", "one");
  RunInfo queued = this->submit("t", "two");
  Claim claim = this->claimOrFail("w");
  RunInfo cancelledQueued = this->runs().cancel(queued.id);
  EXPECT_EQ(cancelledQueued.status, RunStatus::Cancelled);
  EXPECT_TRUE(cancelledQueued.finishedAt);

  RunInfo asked = this->runs().cancel(running.id);
  EXPECT_EQ(asked.status, RunStatus::Running);
  EXPECT_EQ(asked.cancelRequest, CancelRequest::Cancel);
  EXPECT_EQ(this->runs().renew(claim.lease, 10s).cancelRequest, CancelRequest::Cancel);
  this->runs().finish(claim.lease, RunStatus::Cancelled);
  RunInfo done = *this->runs().run(running.id);
  EXPECT_EQ(done.status, RunStatus::Cancelled);
  EXPECT_EQ(done.error, "cancelled");
  EXPECT_EQ(done.cancelRequest, CancelRequest::None);
  // Cancelling a finished run changes nothing.
  EXPECT_EQ(this->runs().cancel(running.id).status, RunStatus::Cancelled);
  EXPECT_THROW(this->runs().cancel("r-unknown"), StoreError);
  EXPECT_FALSE(this->runs().claim("w", 10s));
}

TYPED_TEST_P(RunStoreConformance, CancellingAnOrphanedRunFencesItsWorker) {
  RunInfo run = this->submit("t", "one");
  Claim claim = this->claimOrFail("w", 1s);
  this->advance(2s);
  EXPECT_EQ(this->runs().cancel(run.id).status, RunStatus::Cancelled);
  EXPECT_THROW(
      this->runs().appendTurn(claim.lease, std::vector<Message>{Message::user("late")}, nullptr, 1),
      LeaseLost);
  EXPECT_TRUE(this->runs().threads().loadThread("t").messages.empty());
}

TYPED_TEST_P(RunStoreConformance, AWaitingRunResumesOnAnyWorkerWithTheAnswer) {
  RunInfo run = this->submit("t", "delete it?");
  RunInfo after = this->submit("t", "next");
  Claim first = this->claimOrFail("w1");
  this->runs().appendTurn(first.lease, run.input, nullptr, 1);
  this->runs().wait(first.lease, {{"type", "approval"}, {"call", "c1"}});
  RunInfo waiting = *this->runs().run(run.id);
  EXPECT_EQ(waiting.status, RunStatus::Waiting);
  EXPECT_EQ(waiting.wait, json({{"type", "approval"}, {"call", "c1"}}));
  EXPECT_FALSE(this->runs().claim("w2", 10s));  // unanswered; `after` waits behind it
  EXPECT_THROW(this->runs().appendEvents(first.lease, std::vector<EventInput>{{"x", 1}}),
               LeaseLost);  // waiting released the lease

  EXPECT_THROW(this->runs().respond(after.id, true), StoreError);  // not waiting
  EXPECT_THROW(this->runs().respond("r-unknown", true), StoreError);
  RunInfo answered = this->runs().respond(run.id, {{"approved", true}});
  EXPECT_EQ(answered.response, json({{"approved", true}}));
  EXPECT_THROW(this->runs().respond(run.id, false), StoreError);  // answered already

  Claim resumed = this->claimOrFail("w2");  // any worker: the first may be gone
  EXPECT_EQ(resumed.run.id, run.id);
  EXPECT_EQ(resumed.run.attempts, 2);
  EXPECT_EQ(resumed.run.wait, waiting.wait);
  EXPECT_EQ(resumed.run.response, json({{"approved", true}}));
  this->runs().appendTurn(resumed.lease, std::vector<Message>{Message::assistant("deleted")},
                          nullptr, 2);
  RunInfo consumed = *this->runs().run(run.id);
  EXPECT_TRUE(consumed.wait.is_null());
  EXPECT_TRUE(consumed.response.is_null());
  this->runs().finish(resumed.lease, RunStatus::Completed);
  EXPECT_EQ(this->claimOrFail("w3").run.id, after.id);
  EXPECT_EQ(this->contents("t"), (std::vector<std::string>{"delete it?", "deleted"}));
}

TYPED_TEST_P(RunStoreConformance, RejectPolicyStoresARejectedRun) {
  RunInfo first = this->submit("t", "one", {.policy = DoubleTextPolicy::Reject});
  EXPECT_EQ(first.status, RunStatus::Queued);  // nothing unfinished: queued as any other
  RunInfo second = this->submit("t", "two", {.policy = DoubleTextPolicy::Reject});
  EXPECT_EQ(second.status, RunStatus::Rejected);
  EXPECT_NE(second.error.find(first.id), std::string::npos) << second.error;
  EXPECT_TRUE(second.finishedAt);
  EXPECT_EQ(this->runs().run(first.id)->status, RunStatus::Queued);
  EXPECT_EQ(this->claimOrFail("w").run.id, first.id);
  EXPECT_FALSE(this->runs().claim("w2", 10s));
  EXPECT_EQ(this->eventTypes("t"),
            (std::vector<std::string>{"run_queued", "run_rejected", "run_started"}));
}

TYPED_TEST_P(RunStoreConformance, InterruptPolicyStopsTheRunningRunAndCancelsTheQueued) {
  RunInfo running = this->submit("t", "one");
  RunInfo queued = this->submit("t", "two");
  Claim claim = this->claimOrFail("w");
  this->runs().appendTurn(claim.lease, running.input, nullptr, 1);
  RunInfo urgent = this->submit("t", "three", {.policy = DoubleTextPolicy::Interrupt});
  EXPECT_EQ(urgent.status, RunStatus::Queued);
  EXPECT_EQ(this->runs().run(queued.id)->status, RunStatus::Cancelled);
  RunInfo interrupted = *this->runs().run(running.id);
  EXPECT_EQ(interrupted.status, RunStatus::Running);
  EXPECT_EQ(interrupted.cancelRequest, CancelRequest::Interrupt);
  EXPECT_NE(interrupted.error.find(urgent.id), std::string::npos);
  EXPECT_FALSE(this->runs().claim("w2", 10s));  // the interrupted one still holds the thread
  EXPECT_EQ(this->runs().renew(claim.lease, 10s).cancelRequest, CancelRequest::Interrupt);
  this->runs().finish(claim.lease, RunStatus::Cancelled);
  EXPECT_NE(this->runs().run(running.id)->error.find("interrupted by run"), std::string::npos);
  EXPECT_EQ(this->claimOrFail("w2").run.id, urgent.id);
  EXPECT_EQ(this->contents("t"), std::vector<std::string>{"one"});  // its whole turns stay
}

TYPED_TEST_P(RunStoreConformance, InterruptingAnOrphanedRunEndsItAtOnce) {
  RunInfo running = this->submit("t", "one");
  Claim claim = this->claimOrFail("w", 1s);
  this->advance(2s);
  RunInfo urgent = this->submit("t", "two", {.policy = DoubleTextPolicy::Interrupt});
  EXPECT_EQ(this->runs().run(running.id)->status, RunStatus::Cancelled);
  EXPECT_THROW(this->runs().renew(claim.lease, 10s), LeaseLost);
  EXPECT_EQ(this->claimOrFail("w2").run.id, urgent.id);
}

TYPED_TEST_P(RunStoreConformance, RollbackPolicyAsksTheWorkerToUndoTheRun) {
  RunInfo running = this->submit("t", "one");
  Claim claim = this->claimOrFail("w");
  this->runs().appendTurn(claim.lease, running.input, nullptr, 1);
  RunInfo next = this->submit("t", "instead", {.policy = DoubleTextPolicy::Rollback});
  RunInfo asked = *this->runs().run(running.id);
  EXPECT_EQ(asked.cancelRequest, CancelRequest::Rollback);
  EXPECT_EQ(asked.baseVersion, 1);
  EXPECT_EQ(asked.baseMessageCount, 0);
  // The worker dies instead of rolling back: whoever takes the run over is asked to.
  this->advance(20s);
  Claim takeover = this->claimOrFail("w2");
  EXPECT_EQ(takeover.run.id, running.id);
  EXPECT_EQ(takeover.run.cancelRequest, CancelRequest::Rollback);
  this->runs().finish(takeover.lease, RunStatus::Cancelled);
  EXPECT_NE(this->runs().run(running.id)->error.find("rolled back by run"), std::string::npos);
  EXPECT_EQ(this->claimOrFail("w3").run.id, next.id);
}

TYPED_TEST_P(RunStoreConformance, RollbackOfARunThatCommittedNothingIsImmediate) {
  RunInfo waiting = this->submit("t", "one");
  Claim claim = this->claimOrFail("w");
  this->runs().wait(claim.lease, {{"type", "question"}});
  RunInfo next = this->submit("t", "instead", {.policy = DoubleTextPolicy::Rollback});
  EXPECT_EQ(this->runs().run(waiting.id)->status, RunStatus::Cancelled);
  EXPECT_EQ(this->claimOrFail("w2").run.id, next.id);
  // A waiting run that did commit a turn is claimed to be rolled back, answered or not.
  RunInfo third = this->submit("u", "one");
  Claim c3 = this->claimOrFail("w3");
  this->runs().appendTurn(c3.lease, third.input, nullptr, 1);
  this->runs().wait(c3.lease, {{"type", "question"}});
  this->submit("u", "instead", {.policy = DoubleTextPolicy::Rollback});
  Claim again = this->claimOrFail("w4");
  EXPECT_EQ(again.run.id, third.id);
  EXPECT_EQ(again.run.cancelRequest, CancelRequest::Rollback);
}

TYPED_TEST_P(RunStoreConformance, TheJournalSurvivesATakeover) {
  RunInfo run = this->submit("t", "compute");
  Claim first = this->claimOrFail("w1", 1s);
  this->runs().appendTurn(first.lease, run.input, nullptr, 1);
  Message reply = Message::assistant(
      "", {ToolCall{"c1", "calc", R"({"x":1})"}, ToolCall{"c2", "mail", R"({"to":"ann"})"},
           ToolCall{"c3", "calc", R"({"x":3})"}});
  this->runs().recordReply(first.lease, reply, 1);
  this->runs().recordToolCall(first.lease, 1, "c1", ToolCallPhase::Started);
  this->runs().recordToolCall(first.lease, 1, "c1", ToolCallPhase::Completed, "2");
  this->runs().recordToolCall(first.lease, 1, "c2", ToolCallPhase::Started);
  // Bad journal writes change nothing.
  EXPECT_THROW(this->runs().recordToolCall(first.lease, 1, "c1", ToolCallPhase::Failed, "x"),
               StoreError);  // completed is final
  EXPECT_THROW(this->runs().recordToolCall(first.lease, 1, "nope", ToolCallPhase::Started),
               StoreError);
  EXPECT_THROW(this->runs().recordToolCall(first.lease, 1, "c3", ToolCallPhase::Intent),
               ValidationError);
  EXPECT_THROW(this->runs().recordReply(first.lease, Message::assistant("no calls"), 1),
               ValidationError);
  EXPECT_THROW(this->runs().recordReply(first.lease, reply, 0), ValidationError);
  Message twice =
      Message::assistant("", {ToolCall{"d", "calc", "{}"}, ToolCall{"d", "calc", "{}"}});
  EXPECT_THROW(this->runs().recordReply(first.lease, twice, 1), ValidationError);

  this->advance(2s);  // the first worker dies in the middle of c2
  Claim second = this->claimOrFail("w2");
  EXPECT_EQ(second.run.attempts, 2);
  RunJournal journal = this->runs().journal(run.id);
  ASSERT_TRUE(journal.pendingReply);
  EXPECT_EQ(*journal.pendingReply, reply);
  EXPECT_EQ(journal.pendingAt, 1);
  ASSERT_EQ(journal.calls.size(), 3u);
  EXPECT_EQ(journal.calls[0].callId, "c1");
  EXPECT_EQ(journal.calls[0].phase, ToolCallPhase::Completed);
  EXPECT_EQ(journal.calls[0].text, "2");
  EXPECT_EQ(journal.calls[0].attempts, 1);
  EXPECT_EQ(journal.calls[1].callId, "c2");
  EXPECT_EQ(journal.calls[1].toolName, "mail");
  EXPECT_EQ(journal.calls[1].phase, ToolCallPhase::Started);
  EXPECT_EQ(journal.calls[1].arguments, R"({"to":"ann"})");
  EXPECT_EQ(journal.calls[2].phase, ToolCallPhase::Intent);
  EXPECT_EQ(journal.calls[2].token, first.lease.token);

  // The new worker: c1 reused, c2 (not idempotent) indeterminate, c3 run.
  this->runs().recordToolCall(second.lease, 1, "c2", ToolCallPhase::Indeterminate, "may have run");
  this->runs().recordToolCall(second.lease, 1, "c3", ToolCallPhase::Started);
  this->runs().recordToolCall(second.lease, 1, "c3", ToolCallPhase::Started);  // a re-run
  this->runs().recordToolCall(second.lease, 1, "c3", ToolCallPhase::Completed, "4");
  std::vector<Message> turn = {reply, Message::tool("c1", "2"), Message::tool("c2", "may have run"),
                               Message::tool("c3", "4")};
  this->runs().appendTurn(second.lease, turn, nullptr, 2);
  journal = this->runs().journal(run.id);
  EXPECT_FALSE(journal.pendingReply);  // the committed turn consumed it
  ASSERT_EQ(journal.calls.size(), 3u);
  EXPECT_EQ(journal.calls[1].phase, ToolCallPhase::Indeterminate);
  EXPECT_EQ(journal.calls[2].attempts, 2);
  EXPECT_EQ(journal.calls[2].token, second.lease.token);
  EXPECT_THROW(this->runs().journal("r-unknown"), StoreError);
}

// A started call's checkpoint (the handle of its remote work) is kept in its journal entry
// without counting an attempt, survives a takeover and a re-run, and goes with the call's end.
TYPED_TEST_P(RunStoreConformance, AStartedCallKeepsItsCheckpointAcrossATakeover) {
  RunInfo run = this->submit("t", "delegate");
  Claim first = this->claimOrFail("w1", 1s);
  this->runs().appendTurn(first.lease, run.input, nullptr, 1);
  Message reply = Message::assistant(
      "", {ToolCall{"c1", "agent", R"({"message":"go"})"}, ToolCall{"c2", "agent", "{}"}});
  this->runs().recordReply(first.lease, reply, 1);
  this->runs().recordToolCall(first.lease, 1, "c1", ToolCallPhase::Started);
  this->runs().recordToolCheckpoint(first.lease, 1, "c1", {{"task", "t-1"}});
  this->runs().recordToolCheckpoint(first.lease, 1, "c1", {{"task", "t-2"}});  // replaces
  // Bad checkpoints change nothing.
  EXPECT_THROW(this->runs().recordToolCheckpoint(first.lease, 1, "c2", {{"task", "x"}}),
               StoreError);  // an intent: not started
  EXPECT_THROW(this->runs().recordToolCheckpoint(first.lease, 1, "nope", {{"task", "x"}}),
               StoreError);
  EXPECT_THROW(this->runs().recordToolCheckpoint(first.lease, 1, "c1", nullptr), ValidationError);
  RunStoreOptions small = this->clocked();
  small.limits.maxJournalBytes = 64;
  auto capped = this->open(small);
  try {
    capped->recordToolCheckpoint(first.lease, 1, "c1", {{"task", std::string(100, 'x')}});
    ADD_FAILURE() << "a checkpoint past the journal cap was kept";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("maxJournalBytes"), std::string::npos) << e.what();
  }

  this->advance(2s);  // the first worker dies while the remote work goes on
  Claim second = this->claimOrFail("w2");
  EXPECT_THROW(this->runs().recordToolCheckpoint(first.lease, 1, "c1", {{"task", "stale"}}),
               LeaseLost);
  RunJournal journal = this->runs().journal(run.id);
  ASSERT_EQ(journal.calls.size(), 2u);
  EXPECT_EQ(journal.calls[0].phase, ToolCallPhase::Started);
  EXPECT_EQ(journal.calls[0].checkpoint, json({{"task", "t-2"}}));
  EXPECT_EQ(journal.calls[0].text, "");
  EXPECT_EQ(journal.calls[0].attempts, 1);  // a checkpoint is no attempt
  EXPECT_TRUE(journal.calls[1].checkpoint.is_null());

  this->runs().recordToolCall(second.lease, 1, "c1", ToolCallPhase::Started);  // the resume
  journal = this->runs().journal(run.id);
  EXPECT_EQ(journal.calls[0].checkpoint, json({{"task", "t-2"}}));
  EXPECT_EQ(journal.calls[0].attempts, 2);
  this->runs().recordToolCall(second.lease, 1, "c1", ToolCallPhase::Completed, "done");
  journal = this->runs().journal(run.id);
  EXPECT_EQ(journal.calls[0].text, "done");
  EXPECT_TRUE(journal.calls[0].checkpoint.is_null());
  EXPECT_THROW(this->runs().recordToolCheckpoint(second.lease, 1, "c1", {{"task", "t-3"}}),
               StoreError);  // completed is final
}

TYPED_TEST_P(RunStoreConformance, EventsAreNumberedPerThreadAndReadAfterASequence) {
  RunInfo run = this->submit("t", "hi");
  Claim claim = this->claimOrFail("w");
  std::vector<EventInput> batch = {{"message_added", {{"role", "user"}}},
                                   {kStreamChunkEventType, {{"delta", "Hel"}}},
                                   {kStreamChunkEventType, {{"delta", "lo"}}}};
  EXPECT_EQ(this->runs().appendEvents(claim.lease, batch), 5);  // queued, started, then these
  auto events = this->runs().readEvents("t", 2);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].seq, 3);
  EXPECT_EQ(events[0].type, "message_added");
  EXPECT_EQ(events[0].payload, json({{"role", "user"}}));
  EXPECT_EQ(events[0].runId, run.id);
  EXPECT_EQ(events[0].traceId, run.options.traceId);
  EXPECT_EQ(events[0].threadId, "t");
  EXPECT_EQ(this->runs().readEvents("t", 0, 2).size(), 2u);
  EXPECT_TRUE(this->runs().readEvents("t", 5).empty());
  EXPECT_THROW(this->runs().readEvents("nope", 0), StoreError);
  EXPECT_THROW(this->runs().readEvents("t", 0, 0), ValidationError);

  // Bad events: nothing is appended.
  EXPECT_THROW(this->runs().appendEvents(claim.lease, std::vector<EventInput>{{"", 1}}),
               ValidationError);
  EXPECT_THROW(
      this->runs().appendEvents(claim.lease, std::vector<EventInput>{{"ok", 1}, {"bad\ntype", 1}}),
      ValidationError);
  RunStoreOptions small = this->clocked();
  small.limits.maxEventBytes = 100;
  small.limits.maxEventsPerCall = 2;
  auto capped = this->open(small);
  EXPECT_THROW(
      capped->appendEvents(claim.lease, std::vector<EventInput>{{"big", std::string(200, 'x')}}),
      ValidationError);
  EXPECT_THROW(capped->appendEvents(claim.lease, std::vector<EventInput>(3, {"e", 1})),
               ValidationError);
  EXPECT_EQ(this->runs().readEvents("t", 0).size(), 5u);

  // Old stream chunks expire; nothing else does, and numbers are never reused.
  this->advance(2h);
  this->runs().appendEvents(claim.lease, std::vector<EventInput>{{kStreamChunkEventType, 1}});
  EXPECT_EQ(this->runs().expireStreamChunks(1h), 2u);
  std::vector<int64_t> seqs;
  for (const auto& e : this->runs().readEvents("t", 0))
    seqs.push_back(e.seq);
  EXPECT_EQ(seqs, (std::vector<int64_t>{1, 2, 3, 6}));
  this->advance(1s);
  EXPECT_EQ(this->runs().expireStreamChunks(0ms), 1u);
  EXPECT_EQ(this->runs().appendEvents(claim.lease, std::vector<EventInput>{{"after", 1}}), 7);
}

TYPED_TEST_P(RunStoreConformance, FinishExpiresOldStreamChunks) {
  RunStoreOptions options = this->clocked();
  options.chunkRetention = 10min;
  auto runs = this->open(options);
  runs->submit("t", "hi");
  Claim claim = *runs->claim("w", 1h);
  runs->appendEvents(claim.lease, std::vector<EventInput>{{kStreamChunkEventType, 1}, {"keep", 1}});
  this->advance(11min);
  runs->finish(claim.lease, RunStatus::Completed);
  std::vector<std::string> types;
  for (const auto& e : runs->readEvents("t", 0))
    types.push_back(e.type);
  EXPECT_EQ(types, (std::vector<std::string>{"run_queued", "run_started", "keep", "run_completed",
                                             "llm_execution_completed"}));
}

TYPED_TEST_P(RunStoreConformance, AWaiterWakesForEventsOfAnotherStoreObject) {
  RunStoreOptions options;
  options.pollMin = 1ms;
  options.pollMax = 5ms;
  auto reader = this->open(options);
  auto writer = this->open(options);
  writer->submit("t", "hi");
  auto claim = writer->claim("w", 10s);
  ASSERT_TRUE(claim);
  const int64_t last = writer->readEvents("t", 0).back().seq;
  std::vector<StoredEvent> got;
  std::thread waiter([&] { got = reader->waitForEvents("t", last, 60s); });
  writer->appendEvents(claim->lease, std::vector<EventInput>{{"message_added", {{"n", 1}}}});
  waiter.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, "message_added");
  EXPECT_EQ(got[0].seq, last + 1);
  // Nothing new: the wait ends empty at its timeout.
  EXPECT_TRUE(reader->waitForEvents("t", last + 1, 20ms).empty());
}

// A run submitted after a claim found nothing, but before the claimer waits, must not be slept
// through (every poll here is an hour: only a wake-up returns early).
TYPED_TEST_P(RunStoreConformance, WaitForRunsSeesARunSubmittedSinceTheLastClaim) {
  RunStoreOptions options;
  options.pollMin = options.pollMax = options.listenPoll = 1h;
  auto runs = this->open(options);
  EXPECT_FALSE(runs->claim("w", 10s));
  runs->submit("t", "hi");
  EXPECT_TRUE(runs->waitForRuns(30s));
  EXPECT_TRUE(runs->claim("w", 10s));
}

TYPED_TEST_P(RunStoreConformance, DeletingAThreadTakesItsRunsAndFencesItsWorker) {
  this->submit("t", "hi");
  this->submit("t", "again");
  Claim claim = this->claimOrFail("w");
  EXPECT_TRUE(this->runs().threads().deleteThread("t"));
  EXPECT_EQ(this->rows("parley_runs"), 0);
  EXPECT_EQ(this->rows("parley_events"), 0);
  std::string error;
  try {
    this->runs().appendEvents(claim.lease, std::vector<EventInput>{{"x", 1}});
  } catch (const LeaseLost& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("deleted"), std::string::npos) << error;
  // A new thread of the same id starts a new queue; the old lease still writes nothing.
  RunInfo fresh = this->submit("t", "new");
  Claim next = this->claimOrFail("w2");
  EXPECT_EQ(next.run.id, fresh.id);
  EXPECT_THROW(this->runs().finish(claim.lease, RunStatus::Completed), LeaseLost);
}

// Workers in separate processes drain one queue: each run exactly once, each thread's runs in
// submit order, never two runs of one thread at once (their turns would interleave).
TYPED_TEST_P(RunStoreConformance, ProcessesDrainingOneQueueRunEachRunOnceInOrder) {
  constexpr int kThreads = 12, kRunsPerThread = 10, kWorkers = 4;
  std::map<std::string, std::vector<std::string>> submitted;  // thread -> run ids, in order
  for (int i = 0; i < kRunsPerThread; ++i) {
    for (int t = 0; t < kThreads; ++t) {
      const std::string thread = "th" + std::to_string(t);
      submitted[thread].push_back(this->runs().submit(thread, "p" + std::to_string(i)).id);
    }
  }
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.push_back(this->worker("drain", "w" + std::to_string(w)));
  std::map<std::string, int> done;
  for (auto& worker : workers) {
    while (auto line = worker->readLine()) {
      std::istringstream words(*line);
      std::string word, run;
      words >> word >> run;
      EXPECT_EQ(word, "done") << *line;
      ++done[run];
    }
    EXPECT_EQ(worker->wait(), 0);
  }
  EXPECT_EQ(done.size(), size_t(kThreads * kRunsPerThread));
  for (const auto& [run, times] : done)
    EXPECT_EQ(times, 1) << run;
  for (const auto& [thread, ids] : submitted) {
    std::vector<std::string> expected;
    for (size_t i = 0; i < ids.size(); ++i) {
      expected.push_back("p" + std::to_string(i));
      expected.push_back("done " + ids[i]);
    }
    EXPECT_EQ(this->contents(thread), expected) << thread;
    for (const auto& id : ids)
      EXPECT_EQ(this->runs().run(id)->status, RunStatus::Completed);
  }
}

// A worker process stopped (SIGSTOP) past its lease: another takes the run over; the stopped one,
// continued, writes nothing.
TYPED_TEST_P(RunStoreConformance, AStoppedWorkerProcessIsFencedOut) {
  RunStore runs(std::shared_ptr<ConversationStore>(this->backend.open()));
  RunInfo run = runs.submit("t", "hello");
  auto slow = this->worker("hold", "slow", "200");
  auto line = slow->readLine();
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "claimed " + run.id + " 1");
  slow->kill(SIGSTOP);
  slow->writeLine("go");  // read when it continues
  auto fast = this->worker("drain", "fast");
  line = fast->readLine();  // claims once the stopped worker's lease has expired
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "done " + run.id + " t 2");
  EXPECT_EQ(fast->wait(), 0);
  slow->kill(SIGCONT);
  line = slow->readLine();
  ASSERT_TRUE(line);
  EXPECT_EQ(line->rfind("lost: ", 0), 0u) << *line;
  EXPECT_NE(line->find("token 1"), std::string::npos) << *line;
  EXPECT_EQ(slow->wait(), 0);
  std::vector<std::string> contents;
  for (const auto& m : runs.threads().loadThread("t").messages)
    contents.push_back(m.content);
  EXPECT_EQ(contents, (std::vector<std::string>{"hello", "done " + run.id}));
}

// What a parley older than the one event vocabulary stored (camelCase keys) is read in today's
// snake_case spelling; nothing of it is written any more.
TYPED_TEST_P(RunStoreConformance, EventsAndWaitsInTheOldSpellingAreReadInTheNewOne) {
  RunInfo run = this->submit("t", "hi");
  Claim claim = this->claimOrFail("w");
  this->runs().appendEvents(
      claim.lease,
      std::vector<EventInput>{
          {"tool_execution_request",
           {{"toolCallId", "c1"}, {"toolName", "count"}, {"arguments", "{}"}}},
          {"tool_execution_completed",
           {{"toolCallId", "c1"}, {"toolName", "count"}, {"content", "3"}, {"success", true}}},
          {"tool_execution_failed",
           {{"toolCallId", "c2"}, {"toolName", "x"}, {"content", "boom"}, {"success", false}}},
          {"user_interaction_requested", {{"interactionId", "c3"}, {"prompt", "ok?"}}}});
  this->runs().wait(claim.lease, {{"kind", "approval"}, {"toolCallId", "c3"}, {"prompt", "ok?"}});
  auto events = this->runs().readEvents("t", 2);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events[0].payload,
            json({{"tool_call_id", "c1"}, {"tool_name", "count"}, {"arguments", "{}"}}));
  EXPECT_EQ(
      events[1].payload,
      json({{"tool_call_id", "c1"}, {"tool_name", "count"}, {"result", "3"}, {"success", true}}));
  EXPECT_EQ(
      events[2].payload,
      json({{"tool_call_id", "c2"}, {"tool_name", "x"}, {"error", "boom"}, {"success", false}}));
  EXPECT_EQ(events[3].payload, json({{"interaction_id", "c3"}, {"prompt", "ok?"}}));
  EXPECT_EQ(events[4].type, "run_waiting");
  EXPECT_EQ(events[4].payload["wait"]["tool_call_id"], "c3");
  EXPECT_EQ(this->runs().run(run.id)->wait["tool_call_id"], "c3");
  EXPECT_FALSE(this->runs().run(run.id)->wait.contains("toolCallId"));
  // A tool's own result keeps its keys whatever their spelling.
  RunInfo second = this->submit("u", "again");
  Claim next = this->claimOrFail("w");
  this->runs().appendEvents(
      next.lease,
      std::vector<EventInput>{
          {"tool_execution_completed",
           {{"tool_call_id", "c9"}, {"success", true}, {"result", {{"finishReason", 1}}}}}});
  EXPECT_EQ(this->runs().readEvents("u", 2).at(0).payload["result"], json({{"finishReason", 1}}));
  EXPECT_EQ(second.threadId, "u");
}

REGISTER_TYPED_TEST_SUITE_P(
    RunStoreConformance, MigratesAVersion1Database, SubmitQueuesRunsInSubmitOrder,
    BadSubmitsAreClearErrorsAndChangeNothing, ClaimsTheOldestHeadRunOfAFreeThread,
    ABatchClaimTakesOneHeadRunPerThreadOldestFirst, FinishWithTurnCommitsTheAnswerAndTheEndTogether,
    FinishWithTurnAndClaimTakesTheNextRunInTheSameTransaction, MigratesAVersion3QueueToQueueHeads,
    AStaleLeaseWritesNothing, AnExpiredLeaseNoOneTookStaysValid, AReleasedRunIsTakenOverAtOnce,
    CancelsQueuedAtOnceAndRunningAtItsNextSafePoint, CancellingAnOrphanedRunFencesItsWorker,
    AWaitingRunResumesOnAnyWorkerWithTheAnswer, RejectPolicyStoresARejectedRun,
    InterruptPolicyStopsTheRunningRunAndCancelsTheQueued, InterruptingAnOrphanedRunEndsItAtOnce,
    RollbackPolicyAsksTheWorkerToUndoTheRun, RollbackOfARunThatCommittedNothingIsImmediate,
    TheJournalSurvivesATakeover, AStartedCallKeepsItsCheckpointAcrossATakeover,
    EventsAreNumberedPerThreadAndReadAfterASequence, FinishExpiresOldStreamChunks,
    AWaiterWakesForEventsOfAnotherStoreObject, WaitForRunsSeesARunSubmittedSinceTheLastClaim,
    DeletingAThreadTakesItsRunsAndFencesItsWorker, ProcessesDrainingOneQueueRunEachRunOnceInOrder,
    AStoppedWorkerProcessIsFencedOut, EventsAndWaitsInTheOldSpellingAreReadInTheNewOne,
    ConcurrentFinishesFailAloneAndCommitTogether, AClaimWritesItsStartEventsAfterRunStarted,
    AClaimSaysWhetherItsThreadIsEmpty);

}  // namespace parley::testing
