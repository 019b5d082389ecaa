// The run queue: durable runs of conversations across processes and machines, kept in the same
// database as the threads (SQLite on one machine, PostgreSQL across many). The database
// is both the source of truth and the queue: no broker, and no transaction or row lock is held
// while a model or a tool runs. docs/scale-out.md describes the tables and the protocol.
//
// A run is one unit of work on one thread: input messages (usually one user prompt) plus options.
// Producers submit(); workers claim() a run, work on it, and write what it produces through the
// fenced calls below; clients read its state (run(), listRuns()) and its thread's event log
// (readEvents(), waitForEvents()), cancel() it or respond() to what it waits for.
//
//   queued --claim--> running --finish--> completed | failed | cancelled
//                        |  ^
//                   wait |  | respond + claim
//                        v  |
//                      waiting
//   (a submit refused by DoubleTextPolicy::Reject is stored as rejected)
//
// Order: the unfinished runs of a thread run one at a time, in submit order: only the oldest of
// them (the thread's head) can be claimed, and only while no live lease holds the thread. Runs of
// different threads run in parallel, the oldest first. A waiting run keeps its place: the runs
// submitted after it wait until it is answered and finishes (or is cancelled).
//
// Leases and fencing: claim() gives the worker the thread's lease (owner, expiry, fencing token).
// The token grows on every claim and every revocation (a cancel or a policy that ends a run
// without its worker). Every write a run makes (appendTurn, appendEvents, the journal, wait,
// finish, release) names its lease and is checked against the thread's lease in the same
// transaction; a stale one throws LeaseLost and writes nothing. A lease that expired but that no
// one took over is still valid: renew() extends it. Expiry is judged by the database's clock
// (PostgreSQL's, so that the workers of many machines agree; SQLite's machine's).
//
// Ownership: a RunStore shares the ConversationStore it is made from (and its connections).
// Thread-safety: one RunStore may be shared by any number of threads; each call is atomic. Any
// number of processes may use one database at once.
// Durability: as the store's (store.hpp): a call that returned has committed.
// Failure: a call that throws has changed nothing. Errors: ValidationError (bad arguments, named,
// also input past a RunStoreLimits cap), StoreError (unknown run or thread, a run in the wrong
// state, the database failed), LeaseLost (a fenced write with a stale lease).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/event_names.hpp"
#include "parley/message.hpp"
#include "parley/store.hpp"

namespace parley {

namespace detail {
class SqlConnection;
struct LockedThread;
}  // namespace detail

enum class RunStatus { Queued, Running, Waiting, Completed, Failed, Cancelled, Rejected };
// "queued", "running", ... (the stored and printed names).
std::string_view toString(RunStatus status);
std::optional<RunStatus> parseRunStatus(std::string_view text);
// Completed, failed, cancelled or rejected: nothing will change the run any more.
bool isFinished(RunStatus status);

// What a submit does when its thread already has unfinished runs ("double texting").
enum class DoubleTextPolicy {
  Enqueue,    // run after them (the default)
  Reject,     // refuse: the new run is stored as rejected, with the reason
  Interrupt,  // stop them: a running one at its next safe point, keeping its whole turns; the
              // others at once; then the new one runs
  Rollback,   // cancel them and roll the thread back to before the oldest of them started
};
std::string_view toString(DoubleTextPolicy policy);
std::optional<DoubleTextPolicy> parseDoubleTextPolicy(std::string_view text);

// What the worker of a running run is asked to do at its next safe point (renew() reports it).
// Rollback: undo the run's turns (a state-only appendTurn), then finish(Cancelled).
enum class CancelRequest { None, Cancel, Interrupt, Rollback };
std::string_view toString(CancelRequest request);

// How a run is to be done; the worker interprets these.
struct SubmitOptions {
  std::string id{};       // "" generates "r-" + 32 hex digits
  std::string profile{};  // a profile the worker knows; "" its default
  // The tools the run may call, by name; nullopt: every tool of the worker; empty: none.
  std::optional<std::vector<std::string>> tools{};
  std::optional<std::string> systemPrompt{};  // replaces the thread's system prompt for the run
  int maxIterations = 0;                      // model calls at most; 0: the worker's default
  bool stream = false;
  DoubleTextPolicy policy = DoubleTextPolicy::Enqueue;
  std::string traceId{};      // carried by the run's events; "" generates one
  nlohmann::json metadata{};  // an object or null, kept with the run
  // Tools the client runs itself (the OpenAI-compatible endpoints' `tools`): an array of
  // {"name", "description", "parameters"} offered to the model beside the worker's tools. A reply
  // that calls one makes the run wait (kind "client_tools", the calls in `wait.tool_calls`);
  // the answer {"tool_outputs": {call id: text}} goes on with them as the calls' results. Null:
  // none; at most 128, each name 1 to 64 of [A-Za-z0-9_-].
  nlohmann::json clientTools{};
  // The W3C trace context the run continues (docs/telemetry.md): the worker that claims it
  // starts its spans under this traceparent. "" none. Kept as given, at most 512 bytes each.
  std::string traceparent{};
  std::string tracestate{};
};

// A run as stored.
struct RunInfo {
  std::string id;
  std::string threadId;
  int64_t position = 0;  // submit order within the thread, from 1
  RunStatus status = RunStatus::Queued;
  std::vector<Message> input;
  SubmitOptions options;                              // as submitted, id and traceId filled in
  CancelRequest cancelRequest = CancelRequest::None;  // asked of its worker, not yet done
  nlohmann::json wait;      // what a waiting run waits for (as given to wait()); else null
  nlohmann::json response;  // the answer respond() stored; null until then
  std::string error;        // why it failed, was (or is being) cancelled, or was rejected
  nlohmann::json result;    // what finish() recorded; null until then
  int64_t attempts = 0;     // claims so far; more than 1: taken over or resumed
  std::string worker;       // the worker that claimed it last
  // The thread's version and message count when the run first started (rollback's target).
  std::optional<int64_t> baseVersion;
  std::optional<int64_t> baseMessageCount;
  std::chrono::system_clock::time_point createdAt;
  std::chrono::system_clock::time_point updatedAt;
  std::optional<std::chrono::system_clock::time_point> startedAt;
  std::optional<std::chrono::system_clock::time_point> finishedAt;
};

// For listRuns: oldest first (a thread's runs in submit order).
struct RunListOptions {
  std::string threadId{};             // "" every thread
  std::optional<RunStatus> status{};  // nullopt: any
  size_t limit = 100;                 // 1 .. RunStoreLimits::maxPage
  size_t offset = 0;
};

// A worker's hold on a thread while it works on one run. A value: copy it freely.
struct Lease {
  std::string threadId;
  std::string runId;
  std::string traceId;  // the run's, stamped on the events written under the lease
  std::string owner;    // the worker id given to claim()
  int64_t token = 0;    // the fencing token
  std::chrono::system_clock::time_point expiresAt;  // by the database's clock
};

// What claim() returns: the run (running now) and its lease. run.attempts > 1 means the run was
// started before (a takeover after a crash, or the answer to a wait): read journal() before
// going on, and run.cancelRequest before anything else.
struct Claim {
  RunInfo run;
  Lease lease;
  // The thread held no messages and no saved state when it was claimed (a thread its first run
  // created): there is nothing to load.
  bool threadEmpty = false;
  // The events ClaimEvents gave for this run follow its run_started, written by the claim (false
  // when none were given, or they were past RunStoreLimits: then nothing of them was written).
  bool startEventsWritten = false;
};

struct LeaseRenewal {
  std::chrono::system_clock::time_point expiresAt;
  CancelRequest cancelRequest = CancelRequest::None;
};

// The tool journal: each tool call of a run by id, so that a worker taking over reuses what
// completed and never runs twice what must not (docs/scale-out.md, "Crash recovery").
enum class ToolCallPhase { Intent, Started, Completed, Failed, Indeterminate };
std::string_view toString(ToolCallPhase phase);

struct ToolCallEntry {
  int64_t turn = 0;  // the storage index of the reply that made the call (recordReply's `at`)
  std::string callId;
  std::string toolName;
  ToolCallPhase phase = ToolCallPhase::Intent;
  std::string arguments;  // JSON text, as the model sent it
  std::string text;       // the result (completed) or the error (failed, indeterminate)
  // A started call's checkpoint: the handle of the work it started elsewhere (a remote task),
  // as recordToolCheckpoint() kept it; null when it noted none (and in every other phase). A
  // worker taking the run over runs a started call that has one again with it
  // (ToolContext::resumeFrom), tool idempotent or not; without one, a started call of a tool
  // that is not idempotent is indeterminate.
  nlohmann::json checkpoint;
  int64_t attempts = 0;  // times started
  int64_t token = 0;     // the lease that wrote the phase
  std::chrono::system_clock::time_point updatedAt;
};

struct RunJournal {
  // The model reply whose tool calls were running when the run last stopped, and the storage
  // index it takes; nullopt once a turn was committed after it.
  std::optional<Message> pendingReply;
  int64_t pendingAt = 0;
  std::vector<ToolCallEntry> calls;  // every journaled call of the run, by turn, then call id
};

// An event to append to a thread's log.
struct EventInput {
  std::string type;  // e.g. "message_added"; kStreamChunkEventType expires
  nlohmann::json payload;
};

// What a worker's claim writes for each run it takes, in the claim's transaction, right after
// the run's run_started: a worker announces there the input a run starts with, instead of in a
// transaction of its own. Called inside the transaction, once per claimed run (again if the
// transaction is run again): it must be quick, must not use the store, and its events are held
// to RunStoreLimits as appendEvents' are.
using ClaimEvents = std::function<std::vector<EventInput>(const Claim& claim)>;

// An event as read back. Sequence numbers grow by one per event of a thread and are never
// reused; expired stream chunks leave gaps.
struct StoredEvent {
  std::string threadId;
  int64_t seq = 0;
  std::string runId;    // "" for none
  std::string traceId;  // "" for none
  std::string type;
  nlohmann::json payload;
  std::chrono::system_clock::time_point createdAt;
};

// The type of stream-chunk events (the executor's LlmStreamChunk::kType): the only events that
// expire (RunStoreOptions::chunkRetention). The store itself writes "run_queued",
// "run_rejected", "run_started", "run_cancel_requested", "run_waiting", "run_responded",
// "run_released", "run_completed", "run_failed" and "run_cancelled" as runs change state.
inline constexpr const char* kStreamChunkEventType = "llm_stream_chunk";
// A run's last event, whatever ended it (its worker, a cancel, a policy), written right after
// run_completed, run_failed or run_cancelled (which carry no outcome: `{}`): the one terminal
// event, llm_execution_completed {"run_id", "result"} or llm_execution_failed {"run_id",
// "error", "cancelled", "result" (the error's details, when any)} (a cancelled run counts as
// failed).
inline constexpr const char* kRunCompletedEventType = "llm_execution_completed";
inline constexpr const char* kRunFailedEventType = "llm_execution_failed";
static_assert(eventName(EventType::LlmStreamChunk) == kStreamChunkEventType &&
              eventName(EventType::LlmExecutionCompleted) == kRunCompletedEventType &&
              eventName(EventType::LlmExecutionFailed) == kRunFailedEventType);

// The JSON forms `parley runs` prints and `parley serve` answers with (times as ISO 8601 UTC with
// milliseconds; empty texts as null). toJson(RunInfo) leaves the input out (it may be large):
// add "input" where it is wanted.
nlohmann::json toJson(const RunInfo& run);
// {"seq", "run", "trace", "type", "payload", "time"}
nlohmann::json toJson(const StoredEvent& event);

// Caps on what callers hand in (each past-the-cap input is a ValidationError naming the cap).
struct RunStoreLimits {
  size_t maxInputMessages = 1'000;
  size_t maxInputBytes = 4 << 20;     // a run's input messages and options, as JSON
  size_t maxEventBytes = 1 << 20;     // one event's payload, as JSON
  size_t maxEventsPerCall = 1'000;    // events appended by one call; events read at once
  size_t maxResponseBytes = 1 << 20;  // respond()'s answer; wait()'s description
  size_t maxResultBytes = 1 << 20;    // finish()'s result and error
  size_t maxJournalBytes = 8 << 20;   // one tool call's arguments, or its result
  size_t maxToolCallsPerReply = 1'000;
  size_t maxPage = 1'000;      // listRuns
  size_t maxClaimBatch = 256;  // runs one claim() may take
  int maxIterations = 10'000;  // SubmitOptions::maxIterations
};

struct RunStoreOptions {
  RunStoreLimits limits{};
  // Waiting for events or runs: SQLite (and PostgreSQL while its listening connection is down)
  // polls, from pollMin doubling up to pollMax. PostgreSQL wakes on NOTIFY and re-reads every
  // listenPoll anyway.
  std::chrono::milliseconds pollMin{2};
  std::chrono::milliseconds pollMax{100};
  std::chrono::milliseconds listenPoll{5'000};
  // PostgreSQL: LISTEN on a connection of its own for wake-ups. Turn it off where LISTEN cannot
  // work (behind a PgBouncer in transaction or statement pooling mode): waiters then poll.
  bool listen = true;
  // Stream-chunk events older than this are removed (by finish(), at most every quarter of it,
  // and by expireStreamChunks()). Other events never expire.
  std::chrono::milliseconds chunkRetention{std::chrono::hours(1)};
  // Milliseconds since the Unix epoch replacing the database's clock, for tests that move time.
  std::function<int64_t()> clock{};
};

class RunStore {
 public:
  using Version = ConversationStore::Version;

  // `store` must be one of parley's SQL stores (openSqliteStore, openPostgresStore, openStore)
  // (else ValidationError).
  explicit RunStore(std::shared_ptr<ConversationStore> store, RunStoreOptions options = {});
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  ConversationStore& threads() const noexcept { return *store_; }
  const RunStoreOptions& options() const noexcept { return options_; }

  // --- producers and clients ------------------------------------------------------------------

  // Queues a run of `input` on `threadId` (created, empty, if it does not exist), applying the
  // options' DoubleTextPolicy to the thread's unfinished runs; returns the new run. A rejected
  // submit returns a run with status Rejected and the reason in `error` (nothing else changed).
  // ValidationError for an empty or bad thread id, no input, an invalid message, options out of
  // range, or input past the limits.
  RunInfo submit(const std::string& threadId, std::span<const Message> input,
                 const SubmitOptions& options = {});
  RunInfo submit(const std::string& threadId, const std::string& prompt,
                 const SubmitOptions& options = {});

  std::optional<RunInfo> run(const std::string& runId);
  std::vector<RunInfo> listRuns(const RunListOptions& options = {});
  // How many runs are in each state, every thread together (one query; for /metrics).
  std::map<RunStatus, int64_t> countRuns();

  // Cancels a run: a queued or waiting one at once, a running one whose lease expired at once
  // (its worker is fenced out), a running one with a live lease through a CancelRequest its worker
  // sees at its next safe point. A finished run is returned unchanged. StoreError for an unknown
  // run.
  RunInfo cancel(const std::string& runId);

  // Stores the answer to what a waiting run waits for (a human interaction, a tool approval); the
  // run is claimed again (by any worker) and goes on. StoreError for an unknown run, one that is
  // not waiting or already answered.
  RunInfo respond(const std::string& runId, const nlohmann::json& response);

  // --- workers ---------------------------------------------------------------------------------

  // Claims a claimable run (a thread's head run that is queued, answered, asked to roll back, or
  // running under an expired or released lease: a run whose lease expired first, then the oldest
  // head) and takes its thread's lease for `leaseDuration`; nullopt when there is none. One short
  // transaction that reads one index entry per run, however deep the queue.
  std::optional<Claim> claim(const std::string& workerId, std::chrono::milliseconds leaseDuration);
  // Claims up to `maxRuns` runs (of as many threads) in one transaction, in the order claim()
  // would take them one by one: a worker with several free slots pays for one transaction.
  // ValidationError if maxRuns is 0 or past RunStoreLimits::maxClaimBatch.
  // `startEvents`: what each claim also writes (ClaimEvents).
  std::vector<Claim> claim(const std::string& workerId, std::chrono::milliseconds leaseDuration,
                           size_t maxRuns, const ClaimEvents& startEvents = {});

  // Extends the lease to now + leaseDuration (the heartbeat) and reports what the run is asked to
  // do. LeaseLost if another worker took the thread over or the run was ended without its worker.
  LeaseRenewal renew(const Lease& lease, std::chrono::milliseconds leaseDuration);

  // Hands the run back (a worker shutting down): it stays running, and any worker may claim and
  // continue it at once. Returns false if the lease was already lost.
  bool release(const Lease& lease);

  // The fenced whole-turn append: ConversationStore::appendTurn in the same transaction as the
  // lease check, plus `events`. A committed turn consumes the pending reply (recordReply) and the
  // answer to a wait. StoreConflict if `expectedVersion` is stale.
  Version appendTurn(const Lease& lease, std::span<const Message> messages,
                     const nlohmann::json& state, Version expectedVersion,
                     std::span<const EventInput> events = {});

  // Appends events of the lease's run to its thread's log; returns the last sequence number.
  int64_t appendEvents(const Lease& lease, std::span<const EventInput> events);

  // Journals a model reply whose tool calls are about to run: the reply itself (a worker taking
  // over resumes this turn instead of asking the model again) and an Intent entry per call.
  // `at` is the storage index the reply will take (at least the thread's message count).
  void recordReply(const Lease& lease, const Message& reply, int64_t at);
  // Moves a journaled call on: Intent -> Started | Completed | Failed | Indeterminate; Started ->
  // Started (a re-run) | Completed | Failed | Indeterminate. `text` is the result or the error.
  // StoreError for an unknown call or a finished one.
  void recordToolCall(const Lease& lease, int64_t turn, const std::string& callId,
                      ToolCallPhase phase, const std::string& text = "");
  // Keeps the handle of a started call's remote work (ToolContext::checkpoint) in its journal
  // entry: the phase stays Started and no attempt is counted; a later checkpoint replaces it, a
  // re-run (Started again) keeps it, the call's end (Completed, Failed, Indeterminate) drops it.
  // ValidationError for a null handle or one past RunStoreLimits::maxJournalBytes (as JSON);
  // StoreError for an unknown call or one that is not started.
  void recordToolCheckpoint(const Lease& lease, int64_t turn, const std::string& callId,
                            const nlohmann::json& handle);
  RunJournal journal(const std::string& runId);

  // The run now waits for `what` (an object describing the interaction or approval): status
  // waiting, lease released. respond() resumes it.
  void wait(const Lease& lease, const nlohmann::json& what,
            std::span<const EventInput> events = {});

  // Ends the run (Completed, Failed or Cancelled) and releases the lease, in one transaction with
  // `events` and the store's own run_completed/run_failed/run_cancelled event. A Cancelled run
  // without `error` keeps the reason its cancel request gave.
  void finish(const Lease& lease, RunStatus status, const std::string& error = "",
              const nlohmann::json& result = nullptr, std::span<const EventInput> events = {});
  // appendTurn, then finish(Completed), in one transaction: a run's last whole turn (its answer)
  // and its end commit together, one disk flush instead of two. `events` follow the turn's
  // messages in the log (the turn's events first). StoreConflict if `expectedVersion` is stale.
  Version finishWithTurn(const Lease& lease, std::span<const Message> messages,
                         const nlohmann::json& state, Version expectedVersion,
                         const nlohmann::json& result, std::span<const EventInput> events = {});
  // finishWithTurn, then claim(lease.owner, leaseDuration) for one run, in the same transaction:
  // a worker whose slot frees takes the run claim() would take (the oldest claimable head: under
  // load often this thread's next run, whose state the worker still holds) without a claim
  // transaction of its own or waiting for a wake-up.
  struct FinishedTurn {
    Version version = 0;
    std::optional<Claim> next;  // nullopt when no run was claimable
  };
  FinishedTurn finishWithTurnAndClaim(const Lease& lease, std::span<const Message> messages,
                                      const nlohmann::json& state, Version expectedVersion,
                                      const nlohmann::json& result,
                                      std::span<const EventInput> events,
                                      std::chrono::milliseconds leaseDuration,
                                      const ClaimEvents& startEvents = {});

  // --- events ----------------------------------------------------------------------------------

  // The events of a thread after sequence number `afterSeq`, oldest first, at most `limit`
  // (capped by RunStoreLimits::maxEventsPerCall). StoreError for an unknown thread.
  std::vector<StoredEvent> readEvents(const std::string& threadId, int64_t afterSeq,
                                      size_t limit = 1'000);
  // As readEvents, but when there are none yet waits for them up to `timeout` (PostgreSQL: woken
  // by NOTIFY; SQLite: polling with backoff); empty if none came.
  std::vector<StoredEvent> waitForEvents(const std::string& threadId, int64_t afterSeq,
                                         std::chrono::milliseconds timeout, size_t limit = 1'000);
  // Returns when a run may have become claimable (a submit, an answer, a release, a finish)
  // since the calling thread's last claim() began, or after `timeout`; true if woken. PostgreSQL
  // wakes on NOTIFY from any process; SQLite wakes on this process's writes and otherwise returns
  // after pollMax (the caller polls by claiming). Expired leases wake no one: a worker also claims
  // every so often.
  bool waitForRuns(std::chrono::milliseconds timeout);
  // Removes stream-chunk events older than `olderThan`; returns how many.
  size_t expireStreamChunks(std::chrono::milliseconds olderThan);

  // --- following many threads at once (the service's event streams) ---------------------------
  // One wake-up source for every followed thread instead of a waiter per thread: the caller reads
  // eventsGeneration(), asks lastEventSeqs() of all its threads in one query, reads the events of
  // those that moved, then waitForEventsChange(generation, ...). Idle threads then cost one query
  // per wake-up for all of them, not a poll each.

  // The last sequence number of each thread's log (0: none yet), in the order given; nullopt for
  // a thread that does not exist (or was deleted). One query per 256 threads.
  std::vector<std::optional<int64_t>> lastEventSeqs(std::span<const std::string> threadIds);
  // A counter that moves whenever events may have been appended to any thread: this process's
  // writes, and NOTIFY from any process on PostgreSQL.
  uint64_t eventsGeneration();
  // Waits until eventsGeneration() is no longer `seen`, or `timeout`; true if it moved.
  bool waitForEventsChange(uint64_t seen, std::chrono::milliseconds timeout);
  // True while other processes' events wake waiters (PostgreSQL listening); else the caller
  // polls lastEventSeqs() (every pollMax: SQLite, or PostgreSQL without LISTEN).
  bool eventsPushed();

  // Checks that the database reads whole: SQLite runs PRAGMA quick_check (every page: seconds on
  // a large file), PostgreSQL a query of each table. StoreError saying what is wrong.
  void checkIntegrity();

 private:
  class Wakeups;
  struct TurnFinish;
  class FinishBatches;
  int64_t now(detail::SqlConnection& c) const;
  // Runs write(connection, now, the thread row as locked) in a write transaction, after
  // checking (and locking) the lease; LeaseLost if it is stale. Not `durable`: the commit need
  // not wait for the disk.
  void fenced(
      const Lease& lease,
      const std::function<void(detail::SqlConnection&, int64_t, detail::LockedThread&)>& write,
      bool durable = true);
  void afterWrite(const std::string& threadId, bool runsChanged);
  void maybeExpireChunks();
  FinishedTurn finishTurn(const Lease& lease, std::span<const Message> messages,
                          const nlohmann::json& state, Version expectedVersion,
                          const nlohmann::json& result, std::span<const EventInput> events,
                          std::optional<std::chrono::milliseconds> claimFor,
                          const ClaimEvents& startEvents);
  // Writes the finishes in one transaction, each checked alone; records each one's outcome in
  // it (never throws).
  void finishBatch(std::span<TurnFinish* const> items);
  // claim()'s work inside the caller's write transaction: appends up to `maxRuns` claims. `now`:
  // the time to judge leases by, when the caller knows it (else the database's clock).
  void claimIn(detail::SqlConnection& c, const std::string& workerId,
               std::chrono::milliseconds leaseDuration, size_t maxRuns, std::optional<int64_t> now,
               std::vector<Claim>& claimed, const ClaimEvents& startEvents);

  std::shared_ptr<ConversationStore> store_;
  RunStoreOptions options_;
  detail::SqlStoreEngine* engine_ = nullptr;
  std::unique_ptr<Wakeups> wakeups_;
  std::atomic<int64_t> lastChunkSweep_{0};
  std::unique_ptr<FinishBatches> batches_;
};

}  // namespace parley
