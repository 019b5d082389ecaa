// Whole-run replay (docs/scale-out.md, "Replaying a run"): a durable run recorded with cassettes
// (docs/cassettes.md) is worked again, into another database, by the same Worker and the same
// tool loop, with its model calls answered by the cassettes (replay-only) and its tool results
// taken from the recorded run's tool journal: no tool runs and no model is asked. Approvals and
// a person's answers come from the journal too: what a wait's answer made of a call (the tool's
// result once approved, the refusal, the person's answer) is the call's journaled result. The
// replayed thread is then the recorded one, byte for byte (messages, tool call ids, the replies'
// models, usage and received_at); replayRun() checks it and says where it departs.
//
// A replay that cannot be faithful fails loudly: a model request the cassettes do not hold is
// a CassetteMiss naming the first differing field (a tool result edited in the journal shows as
// the next request's changed message); a tool call the journal has no final result for, or
// one of another tool or arguments, is a ReplayMiss naming the run, the call and the message.
//
// Owned by the runs layer. Thread-safety: replayRun() may be called from any thread; it runs a
// Worker of its own on `into` for the time of the call.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "parley/errors.hpp"
#include "parley/run_store.hpp"
#include "parley/tool_tape.hpp"
#include "parley/worker.hpp"

namespace parley {

struct RunReplayOptions {
  // The replaying worker: profiles whose clients replay the recording's cassettes
  // (ClientOptions::cassettes, CassetteMode::ReplayOnly), the tools as the recording worker
  // offered them (names, descriptions, schemas: they are part of every request; their handlers
  // are never called) and its turn settings (system prompt, iterations, ...). replayRun() sets
  // replayJournal, concurrency (1) and the worker id ("replay").
  WorkerOptions worker{};
  // How long each run may take to replay before the replay gives up (TimeoutError).
  std::chrono::milliseconds timeout{60'000};
};

struct RunReplay {
  std::vector<RunInfo>
      runs;  // the runs worked again in `into`, in order; the last is the one asked
  std::string threadId;
  size_t messages = 0;  // the replayed thread's messages
};

// Replays run `runId` of `recorded` into `into`: its thread's runs before it first (they made the
// history it started from; a rejected one is skipped), then it, each submitted with its id,
// input and options and worked by a Worker whose tool results are `recorded`'s journal of that
// run (WorkerOptions::replayJournal). Then compares the replayed thread with the recorded one
// (the same messages, as stored, as far as the replay goes; all of them when the run is its
// thread's last).
// `into` is a database whose queue nothing else uses meanwhile (a new one): the replaying
// worker claims what it queues.
// ValidationError: no such run, a run of the thread up to it that did not complete (only
// completed runs replay), `into` already holding the thread or unfinished runs. ReplayMiss: see
// above (a run that failed in the replay carries its error, e.g. the CassetteMiss's text).
// TimeoutError past `options.timeout`.
RunReplay replayRun(RunStore& recorded, const std::string& runId,
                    const std::shared_ptr<RunStore>& into, RunReplayOptions options);

}  // namespace parley
