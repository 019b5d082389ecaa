// Whole-run replay (parley/run_replay.hpp, docs/scale-out.md "Replaying a run"): the recorded
// thread's runs are submitted again into another database and worked by a Worker whose tool
// results come from the recorded journal (WorkerOptions::replayJournal, read in durable_turn.cpp
// where a taken-over run reads its own journal).
#include "parley/run_replay.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "parley/cache_diagnostic.hpp"

namespace parley {

namespace {

using json = nlohmann::json;
using ReplayClock = std::chrono::steady_clock;

// Waits until the run finished or the deadline passed; the run as it then is.
RunInfo awaitReplayedRun(RunStore& runs, const std::string& runId,
                         ReplayClock::time_point deadline) {
  int64_t seen = 0;
  for (;;) {
    auto run = runs.run(runId);
    if (!run) throw StoreError("store: the replayed run '" + runId + "' is gone");
    if (isFinished(run->status) || run->status == RunStatus::Waiting) return *run;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - ReplayClock::now());
    if (left.count() <= 0) {
      throw TimeoutError("replay: run " + runId + " did not finish within the replay's timeout");
    }
    for (const auto& e :
         runs.waitForEvents(run->threadId, seen, std::min(left, std::chrono::milliseconds(200))))
      seen = e.seq;
  }
}

// Where the replayed thread departs from the recorded one, by the cache diagnostic's comparison
// of message lists (index and field); nullopt when the replayed messages are the recorded ones
// (all of them if `whole`, else as many as were replayed).
std::optional<std::string> threadDifference(const std::vector<Message>& recorded,
                                            const std::vector<Message>& replayed, bool whole) {
  const size_t common = std::min(recorded.size(), replayed.size());
  json before = json::array();
  json after = json::array();
  for (size_t i = 0; i < common; ++i) {
    before.push_back(toJson(recorded[i]));
    after.push_back(toJson(replayed[i]));
  }
  if (before != after) {
    auto difference = firstRequestDifference({{"messages", before}}, {{"messages", after}});
    if (difference && difference->message) {
      return "message " + std::to_string(*difference->message) + " field \"" + difference->field +
             "\"";
    }
    return "its messages";
  }
  if (replayed.size() > recorded.size() || (whole && replayed.size() != recorded.size())) {
    return "its length: " + std::to_string(replayed.size()) + " messages replayed, " +
           std::to_string(recorded.size()) + " recorded";
  }
  return std::nullopt;
}

}  // namespace

RunReplay replayRun(RunStore& recorded, const std::string& runId,
                    const std::shared_ptr<RunStore>& into, RunReplayOptions options) {
  if (!into) throw ValidationError("into", "must not be null");
  if (options.timeout.count() <= 0) throw ValidationError("timeout", "must be positive");
  const auto asked = recorded.run(runId);
  if (!asked) throw ValidationError("run", "no run '" + runId + "' in the recorded database");
  const std::string thread = asked->threadId;

  // The thread's runs, in submit order: the ones up to the one asked for made its history.
  std::vector<RunInfo> all;
  const size_t page = recorded.options().limits.maxPage;
  for (size_t offset = 0;; offset += page) {
    RunListOptions list;
    list.threadId = thread;
    list.limit = page;
    list.offset = offset;
    auto runs = recorded.listRuns(list);
    const size_t got = runs.size();
    all.insert(all.end(), std::make_move_iterator(runs.begin()),
               std::make_move_iterator(runs.end()));
    if (got < page) break;
  }
  std::vector<RunInfo> chain;
  bool last = true;  // no run after it added to the recorded thread
  bool reached = false;
  for (RunInfo& run : all) {
    if (run.status == RunStatus::Rejected) continue;  // it changed nothing
    if (reached) {
      last = false;
      break;
    }
    if (run.status != RunStatus::Completed) {
      throw ValidationError("run", "run " + run.id + " of thread " + thread + " is " +
                                       std::string(toString(run.status)) +
                                       ": only completed runs replay");
    }
    reached = run.id == runId;
    chain.push_back(std::move(run));
  }
  if (!reached) throw ValidationError("run", "run " + runId + " is not a completed run");
  // The replaying worker claims whatever `into` queues: it must queue nothing else.
  const auto counts = into->countRuns();
  for (RunStatus busy : {RunStatus::Queued, RunStatus::Running, RunStatus::Waiting}) {
    if (auto found = counts.find(busy); found != counts.end() && found->second > 0) {
      throw ValidationError("into",
                            "the database replayed into has unfinished runs: replay into "
                            "one whose queue is idle (a new one)");
    }
  }
  if (into->threads().threadInfo(thread)) {
    throw ValidationError("into", "the database replayed into already holds thread " + thread);
  }

  WorkerOptions worker = std::move(options.worker);
  worker.concurrency = 1;
  worker.workerId = "replay";
  worker.replayJournal = [&recorded](const RunInfo& run) -> std::optional<RunJournal> {
    return recorded.journal(run.id);
  };
  Worker replaying(into, std::move(worker));
  replaying.start();

  RunReplay replay;
  replay.threadId = thread;
  for (const RunInfo& run : chain) {
    SubmitOptions again = run.options;  // its id, trace id and options as submitted
    again.policy = DoubleTextPolicy::Enqueue;
    into->submit(thread, run.input, again);
    RunInfo replayed = awaitReplayedRun(*into, run.id, ReplayClock::now() + options.timeout);
    if (replayed.status != RunStatus::Completed) {
      replaying.stop();
      if (replayed.status == RunStatus::Waiting) {
        throw ReplayMiss("run " + run.id + " waits in the replay (" + replayed.wait.dump() +
                         ") for an answer its recording's journal does not hold");
      }
      throw ReplayMiss("run " + run.id + " did not replay: it " +
                       std::string(toString(replayed.status)) + ": " + replayed.error);
    }
    replay.runs.push_back(std::move(replayed));
  }
  replaying.stop();

  const std::vector<Message> replayedMessages = into->threads().loadThread(thread).messages;
  const std::vector<Message> recordedMessages = recorded.threads().loadThread(thread).messages;
  if (auto where = threadDifference(recordedMessages, replayedMessages, last)) {
    throw ReplayMiss("the replayed thread " + thread + " departs from the recorded one at " +
                     *where);
  }
  replay.messages = replayedMessages.size();
  return replay;
}

}  // namespace parley
