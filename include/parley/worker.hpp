// Worker: serves the run queue (run_store.hpp). It claims queued runs in short transactions,
// works on up to `concurrency` of them at once (at most one per thread: the store's leases see
// to that), and does each one with the one tool loop (ConversationManager::run) configured for a
// durable run:
//
// - the turn sink is the fenced whole-turn append (RunStore::appendTurn under the run's lease),
//   with the turn's `message_added` events in the same transaction;
// - the tool-call runner consults the tool journal: before a model reply's calls run, the reply
//   is journaled (recordReply); each call is journaled started, then completed or failed. A
//   worker that takes a run over (its first worker died or stalled past its lease) resumes the
//   journaled reply instead of asking the model again: completed calls reuse their result,
//   a call that started but never completed runs again only if its tool is idempotent
//   (ToolOptions::idempotent), otherwise the model gets an error result saying it may have run;
// - events go to the thread's event log: stream chunks coalesced (one write per chunkInterval
//   or chunkBytes), tool calls requested and completed, interactions requested;
// - waits are run state: a call of a tool that requiresApproval, or of the human tool
//   (WorkerOptions::humanTool), makes the run wait (RunStore::wait) and frees the worker; the
//   answer (RunStore::respond) makes the run claimable again, by any worker, which goes on
//   from the journal; so does a tool that asks a person through ToolContext::ask (an MCP
//   server's form: wait kind "elicitation", the call run again with the answer; docs/mcp.md);
// - a heartbeat renews every lease the worker holds and carries out cancel requests: cancel and
//   rollback stop the run at once (rollback also hides the run's turns from the thread's view,
//   as a new batch), interrupt stops it after its next whole turn.
//
// A run that fails (the model errs, a limit) is finished failed with the error; the thread keeps
// its whole turns. A worker that loses a lease stops that run and writes nothing more for it.
// docs/scale-out.md describes the protocol, the failure cases and sizing.
//
// Ownership: the caller owns the worker; it shares the RunStore, the profiles and the tools.
// Thread-safety: start(), stop(), stats() and the accessors may be called from any thread.
// Lifetime: the destructor stops the worker (stop()).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "parley/cost.hpp"
#include "parley/logger.hpp"
#include "parley/profiles.hpp"
#include "parley/run_store.hpp"
#include "parley/tools.hpp"
#include "parley/turn_defaults.hpp"

namespace parley {

struct WorkerOptions {
  // Written on the leases it takes; "" makes "<host>-<pid>-<4 hex digits>". 1 to 200 bytes.
  std::string workerId{};
  int concurrency = 4;  // runs at once, 1 to 1024
  // A lease lasts this long without a renewal; another worker may then take the run over.
  std::chrono::milliseconds leaseDuration{30'000};
  // How often the leases are renewed (and cancel requests seen); 0: a third of leaseDuration,
  // at most one second.
  std::chrono::milliseconds heartbeat{0};
  // A worker with a free slot claims at least this often even without a wake-up (a lease that
  // expires wakes no one).
  std::chrono::milliseconds claimPoll{1'000};
  // stop(): how long runs under way may take to finish before they are handed back.
  std::chrono::milliseconds shutdownGrace{10'000};
  // Where runs find their model: a run's profile, or defaultProfile when it names none.
  // Required.
  std::shared_ptr<ProfileRegistry> profiles{};
  std::string defaultProfile{};
  // The tools runs may call (a run's SubmitOptions::tools narrows them); null: none.
  std::shared_ptr<ToolRegistry> tools{};
  // The turn's settings (turn_defaults.hpp), a run being one turn: callTimeout bounds each
  // model call and turnTimeout the whole run (a run past it fails with kind "timeout", its whole
  // turns kept), maxIterations its model calls (a run's SubmitOptions::maxIterations may lower
  // or raise it), maxToolCallsPerReply and maxToolConcurrency the calls of one reply,
  // tokenLimit triggers compression, systemPrompt opens a thread that has none (unless the run
  // gives its own), budget limits each run (maxCostPerRun) and thread (maxCostPerThread) and
  // needs budget.prices: a call that could go over fails its run with kind budget_exceeded (the
  // run's result is {"error": errorToJson(...)}) and nothing is sent; an unpriced model fails
  // the run the same way. A worker bounds a run at 10 minutes unless told otherwise: a model
  // that never answers must not hold a run (and its thread) for the client's own timeouts.
  TurnDefaults turn{.turnTimeout = std::chrono::minutes(10)};
  // Non-empty: the worker adds a tool of this name ({"question": string}) to `tools` (made if
  // null); a call of it makes the run wait for a person, whose answer is the call's result.
  std::string humanTool{};
  // Stream chunks are written at most once per chunkInterval unless chunkBytes of text wait.
  std::chrono::milliseconds chunkInterval{50};
  std::size_t chunkBytes = 256;
  Logger log{};  // diagnostics; null: stderr
  // Threads whose state the worker keeps after a run it completed, so that the thread's next run,
  // if this worker claims it and nothing changed the thread meanwhile (same version), starts
  // without loading and parsing the thread's history again. Least recently used ones go first;
  // 0 keeps none.
  size_t threadCache = 256;
  // A cost limit in USD over every reply of every run this worker made since it was
  // constructed (calls under way at once reserve their worst case); needs turn.budget.prices.
  std::optional<double> maxCostPerWorker{};
  // Replay (run_replay.hpp, docs/scale-out.md "Replaying a run"): the tool journal of the
  // recorded run a claimed run replays, or nullopt (null function: always) for a run that is
  // worked for real. With a journal no tool of the run runs: each call's result is the recorded
  // entry of the same message (turn) and call id, reused as a taken-over run reuses its own
  // journal (completed: its result; failed or indeterminate: its error), and journaled again;
  // a call without a final recorded entry, or with another tool or arguments, fails the run with
  // ReplayMiss.
  std::function<std::optional<RunJournal>(const RunInfo& run)> replayJournal{};
};

class Worker {
 public:
  // ValidationError for a null store or profiles, or options out of range (named).
  Worker(std::shared_ptr<RunStore> runs, WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts claiming (a thread per slot and one heartbeat). Once only (ValidationError after).
  void start();
  // Stops claiming, lets the runs under way finish within shutdownGrace, then hands the rest
  // back (RunStore::release: any worker continues them from their last whole turn) and returns
  // once every thread has ended. Idempotent.
  void stop();

  const std::string& id() const noexcept;

  struct Stats {
    uint64_t claimed = 0;
    uint64_t completed = 0;
    uint64_t failed = 0;
    uint64_t cancelled = 0;
    uint64_t waiting = 0;     // runs that went to wait for an answer
    uint64_t handedBack = 0;  // released by stop()
    uint64_t lost = 0;        // leases lost to another worker (or a cancel without us)
    uint64_t fromCache = 0;   // runs that started from the thread cache instead of a load
    // Of `claimed`: taken in the finish of the slot's run before (finishWithTurnAndClaim), with
    // no claim transaction or wake-up of their own.
    uint64_t chained = 0;
    uint64_t running = 0;  // now
  };
  Stats stats() const;
  // USD the worker's replies cost so far, over its lifetime, as the per-worker budget counts it
  // (0 without maxCostPerWorker).
  double spentCost() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace parley
