// DurableTurn: one claimed run worked to its end. It configures the run's conversation (the
// host kit's configureConversation), restores the thread (from the worker's ThreadCache or the
// store), works out where a resumed run stands (its input committed or not, a journaled reply),
// and runs the one tool loop with itself as the loop's three seams: the turn sink (each whole
// turn appended under the lease, the answer held for the finish), the tool runner (through the
// run's journal: a call that completed is not run again, a call that needs an approval or an
// answer makes the run wait) and the message observer (replies journaled, message events).
// docs/scale-out.md, "The worker", describes the protocol. Internal to src/runs/.
//
// Ownership: made and run by a worker's slot for one claim; it borrows the host's parts.
// Thread-safety: one thread runs it; its tool runner and chunk handler are called from the
// loop's threads, and write only through RunEvents and the store (both thread-safe).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parley/cost.hpp"
#include "parley/worker.hpp"
#include "runs/active_run.hpp"
#include "runs/run_events.hpp"
#include "runs/thread_cache.hpp"

namespace parley::detail {

// What a worker lends each of its runs.
struct DurableTurnHost {
  RunStore& runs;
  const WorkerOptions& options;
  ThreadCache& cache;
  std::shared_ptr<SharedSpending> spending;  // the per-worker budget's ledger
  std::function<bool()> stillClaiming;       // false once the worker stops
  // Called as a run's thread is restored from the ThreadCache (before the run goes on, so that a
  // reader of the worker's stats who saw the run end sees it counted).
  std::function<void()> cacheHit;
  // What the worker's claims write for a run they take (announceInput).
  const ClaimEvents& startEvents;
};

// The messages a run adds before its first model call, on a thread of `stored` messages: its
// input, after a system message when the run brings its own system prompt, or when the thread
// is empty and the worker has one (`defaultSystemPrompt`).
std::vector<Message> startingInput(const RunInfo& run, int64_t stored,
                                   const std::string& defaultSystemPrompt);

// A worker's ClaimEvents: a run claimed for the first time announces its starting input
// (message_added, at the storage indices it will take) in the claim's transaction, so that a UI
// shows the user's message as the run starts, before the model is called, without a transaction
// of its own.
ClaimEvents announceInput(std::string defaultSystemPrompt);

class DurableTurn {
 public:
  // `allowed`: the tools the run may call (a subset of the worker's, or all of them).
  DurableTurn(const DurableTurnHost& host, const Claim& claim, ActiveRun& active, RunEvents& events,
              std::shared_ptr<ToolRegistry> allowed);

  // Works the run until its finish is written (completed), or throws: RunWaits when it waits for
  // an answer, StopAtSafePoint after an interrupt, LeaseLost, CancelledError, or the failure
  // that ends it (the worker writes it).
  void run();

 private:
  const DurableTurnHost& host_;
  const Claim& claim_;
  const RunInfo& run_;
  ActiveRun& active_;
  RunEvents& events_;
  std::shared_ptr<ToolRegistry> allowed_;
};

}  // namespace parley::detail
