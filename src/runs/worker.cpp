#include "parley/worker.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/logger.hpp"
#include "parley/stored_thread.hpp"
#include "parley/telemetry.hpp"
#include "runs/run_events.hpp"

namespace parley {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

// Ends run() when a call makes the run wait (RunStore::wait was written).
struct RunWaits {};
// Ends run() after a whole turn when the run was asked to stop there (an interrupt).
class StopAtSafePoint : public CancelledError {
 public:
  StopAtSafePoint() : CancelledError("interrupted after a whole turn") {}
};

std::string defaultWorkerId() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, 8, "host");
  std::random_device random;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", static_cast<unsigned>(random() & 0xffff));
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + suffix;
}

std::string answerText(const json& answer) {
  return answer.is_string() ? answer.get<std::string>() : answer.dump();
}

ToolResult errorResult(const ToolCall& call, ToolErrorKind kind, std::string error) {
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.errorKind = kind;
  r.error = std::move(error);
  return r;
}

ToolResult textResult(const ToolCall& call, const std::string& text) {
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.success = true;
  r.result = text;
  return r;
}

}  // namespace

// One run a slot works on: what the heartbeat shares with it.
struct ActiveRun {
  Lease lease;
  std::stop_source stop;
  std::atomic<CancelRequest> request{CancelRequest::None};
  std::atomic<bool> lost{false};
  std::atomic<bool> handBack{false};
  // Set before the run's closing write (finish, wait, release): a renewal that then finds the
  // lease gone is not a loss.
  std::atomic<bool> closing{false};
  // The next run, claimed in this run's finish (finishWithTurnAndClaim): the slot goes on with it.
  std::optional<Claim> next;
};

struct Worker::Impl : std::enable_shared_from_this<Worker::Impl> {
  std::shared_ptr<RunStore> runs;
  WorkerOptions options;
  milliseconds heartbeat{};

  mutable std::mutex mutex;
  std::condition_variable changed;  // active runs, stopping
  std::list<std::shared_ptr<ActiveRun>> active;
  std::deque<Claim> ready;  // claimed, not yet taken by a slot
  int busy = 0;             // claims in `ready` or being worked on
  bool dispatcherDone = false;
  bool started = false;
  bool stopping = false;
  bool stopped = false;
  std::vector<std::thread> slots;
  std::thread dispatcherThread;
  std::thread heartbeatThread;
  Stats counters;
  // What every run's replies cost (the per-worker budget's ledger).
  std::shared_ptr<SharedSpending> spending = std::make_shared<SharedSpending>();

  // The thread cache (WorkerOptions::threadCache): a thread's state after a run completed here,
  // by thread id, with the version that run committed; most recently used first.
  struct CachedThread {
    RunStore::Version version = 0;
    ContextSnapshot snapshot;
  };
  std::mutex cacheMutex;
  std::list<std::pair<std::string, CachedThread>> cache;
  std::unordered_map<std::string, decltype(cache)::iterator> cached;

  // Takes the cached state of `threadId` if it is at `version` (the entry goes either way: the
  // run makes a new one).
  std::optional<ContextSnapshot> takeCached(const std::string& threadId,
                                            RunStore::Version version) {
    std::lock_guard lock(cacheMutex);
    auto found = cached.find(threadId);
    if (found == cached.end()) return std::nullopt;
    std::optional<ContextSnapshot> state;
    if (found->second->second.version == version) state = std::move(found->second->second.snapshot);
    cache.erase(found->second);
    cached.erase(found);
    return state;
  }

  void remember(const std::string& threadId, RunStore::Version version, ContextSnapshot snapshot) {
    if (options.threadCache == 0) return;
    std::lock_guard lock(cacheMutex);
    if (auto old = cached.find(threadId); old != cached.end()) {
      cache.erase(old->second);
      cached.erase(old);
    }
    cache.emplace_front(threadId, CachedThread{version, std::move(snapshot)});
    cached[threadId] = cache.begin();
    while (cache.size() > options.threadCache) {
      cached.erase(cache.back().first);
      cache.pop_back();
    }
  }

  // Registries offering a subset of `tools` to the model, by the subset's names.
  std::mutex subsetMutex;
  std::map<std::vector<std::string>, std::shared_ptr<ToolRegistry>> subsets;

  void log(const std::string& line) const { writeLog(options.log, line); }

  bool stillClaiming() const {
    std::lock_guard lock(mutex);
    return !stopping;
  }

  void count(uint64_t Stats::*field) {
    std::lock_guard lock(mutex);
    ++(counters.*field);
  }

  // --- claiming -----------------------------------------------------------------------------

  // One claimer per worker (not one per slot: idle slots would each poll the database). It
  // claims while a slot is free and hands the claims to the slots.
  void dispatch() {
    const auto slice = std::min(options.claimPoll, milliseconds(250));
    for (;;) {
      size_t free = 0;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stopping || busy < options.concurrency; });
        if (stopping) break;
        free = static_cast<size_t>(options.concurrency - busy);
      }
      std::vector<Claim> claims;
      try {
        // Every free slot in one transaction: under load several free up during one claim.
        claims = runs->claim(options.workerId, options.leaseDuration,
                             std::min(free, runs->options().limits.maxClaimBatch));
      } catch (const std::exception& e) {
        log("parley worker: claim failed: " + std::string(e.what()));
      }
      if (!claims.empty()) {
        std::lock_guard lock(mutex);
        for (auto& claim : claims)
          ready.push_back(std::move(claim));
        busy += static_cast<int>(claims.size());
        counters.claimed += claims.size();
        changed.notify_all();
        continue;
      }
      // Waits in slices so that stop() is seen soon.
      try {
        runs->waitForRuns(slice);
      } catch (const std::exception&) {
        std::unique_lock lock(mutex);  // the store is down: wait as if there were nothing
        changed.wait_for(lock, slice, [&] { return stopping; });
      }
    }
    std::lock_guard lock(mutex);
    dispatcherDone = true;
    changed.notify_all();
  }

  void slot() {
    std::optional<Claim> next;  // claimed by the slot's last run as it finished
    for (;;) {
      std::optional<Claim> claim;
      auto run = std::make_shared<ActiveRun>();
      bool late = false;
      {
        std::unique_lock lock(mutex);
        if (next) {
          claim = std::move(next);
          next.reset();
          ++counters.claimed;
          ++counters.chained;
        } else {
          changed.wait(lock, [&] { return !ready.empty() || dispatcherDone; });
          if (ready.empty()) return;
          claim = std::move(ready.front());
          ready.pop_front();
        }
        run->lease = claim->lease;
        run->request = claim->run.cancelRequest;
        active.push_back(run);
        ++counters.running;
        late = stopping;
      }
      if (late) {
        // Claimed while stop() began: another worker goes on with it (not counted: not worked on).
        try {
          runs->release(run->lease);
        } catch (const std::exception& e) {
          log("parley worker: could not hand back run " + run->lease.runId + ": " + e.what());
        }
      } else {
        work(*claim, *run);
      }
      {
        std::lock_guard lock(mutex);
        active.remove(run);
        --counters.running;
        if (run->next) {
          next = std::move(run->next);  // the slot stays busy
        } else {
          --busy;
        }
      }
      changed.notify_all();
    }
  }

  void beat() {
    std::unique_lock lock(mutex);
    while (!stopped) {
      changed.wait_for(lock, heartbeat, [&] { return stopped; });
      if (stopped) return;
      std::vector<std::shared_ptr<ActiveRun>> now(active.begin(), active.end());
      lock.unlock();
      for (auto& run : now) {
        if (run->lost) continue;
        try {
          const LeaseRenewal renewal = runs->renew(run->lease, options.leaseDuration);
          if (renewal.cancelRequest != CancelRequest::None) {
            run->request = renewal.cancelRequest;
            if (renewal.cancelRequest != CancelRequest::Interrupt) run->stop.request_stop();
          }
        } catch (const LeaseLost& e) {
          if (run->closing) continue;  // it ended meanwhile
          run->lost = true;
          run->stop.request_stop();
          log("parley worker: lost run " + run->lease.runId + ": " + e.what());
        } catch (const std::exception& e) {
          log("parley worker: could not renew the lease of run " + run->lease.runId + ": " +
              e.what());
        }
      }
      lock.lock();
    }
  }

  // --- one run ------------------------------------------------------------------------------

  std::shared_ptr<ToolRegistry> toolsFor(const RunInfo& run) {
    if (!run.options.tools || !options.tools) return options.tools;
    std::vector<std::string> names = *run.options.tools;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::lock_guard lock(subsetMutex);
    auto& registry = subsets[names];
    if (registry) return registry;
    auto made = std::make_shared<ToolRegistry>();
    for (const std::string& name : names) {
      auto info = options.tools->find(name);
      if (!info) {
        subsets.erase(names);
        throw ValidationError(
            "tools", "the run asks for the tool '" + name + "', which this worker does not have");
      }
      // The model is offered the definition; the calls run on the worker's registry.
      made->add(
          info->name, info->description, info->schema,
          [](const json&, ToolContext&) -> json { return nullptr; }, info->options);
    }
    registry = made;
    return registry;
  }

  // The worker's span of a run and the queue's metrics for its claim.
  void describeRun(Span& span, const RunInfo& run) {
    if (!telemetryEnabled()) return;
    const std::vector<Attribute> worker = {{"parley.worker.id", options.workerId}};
    addCounter("parley.run.claims", 1, worker);
    if (run.attempts > 1) {
      addCounter("parley.run.lease.takeovers", 1, worker);
    } else {
      const std::chrono::duration<double> waited = std::chrono::system_clock::now() - run.createdAt;
      recordHistogram("parley.run.claim.latency", std::max(waited.count(), 0.0), worker);
    }
    if (!span.recording()) return;
    span.set("parley.run.id", run.id);
    span.set("parley.run.attempt", run.attempts);
    span.set("parley.worker.id", options.workerId);
    span.set("gen_ai.conversation.id", run.threadId);
  }

  void work(const Claim& claim, ActiveRun& active) {
    const RunInfo& run = claim.run;
    detail::RunEvents events(*runs, claim.lease, options.chunkInterval, options.chunkBytes);
    // The run continues the trace it was submitted in, whichever worker claims it, however often
    // (docs/telemetry.md).
    const auto submitted = TraceContext::parse(run.options.traceparent, run.options.tracestate);
    ContextScope remote(submitted.value_or(TraceContext{}));
    Span span("parley.run", "", SpanKind::Consumer);
    describeRun(span, run);
    try {
      if (run.cancelRequest != CancelRequest::None) {
        endCancelled(run, active, events);
        return;
      }
      execute(run, active, events);
    } catch (const RunWaits&) {
      count(&Stats::waiting);
    } catch (const LeaseLost& e) {
      span.setError(e);
      count(&Stats::lost);
      log("parley worker: run " + run.id + " lost its lease: " + e.what());
    } catch (const std::exception& e) {
      span.setError(e);
      if (active.lost) {
        count(&Stats::lost);
      } else if (active.handBack) {
        handBack(active);
      } else if (active.request != CancelRequest::None &&
                 (dynamic_cast<const CancelledError*>(&e) || active.stop.stop_requested())) {
        guarded(run, active, [&] { endCancelled(run, active, events); });
      } else {
        guarded(run, active, [&] {
          active.closing = true;
          runs->finish(active.lease, RunStatus::Failed, e.what(), {{"error", errorToJson(e)}},
                       events.takeLive());
          count(&Stats::failed);
        });
      }
    }
  }

  // Runs a closing write; a lost lease or a failing store is logged (the run stays for another
  // worker to take over once the lease expires).
  template <typename F>
  void guarded(const RunInfo& run, ActiveRun& active, F&& write) {
    try {
      write();
    } catch (const LeaseLost& e) {
      active.lost = true;
      count(&Stats::lost);
      log("parley worker: run " + run.id + " lost its lease: " + e.what());
    } catch (const std::exception& e) {
      log("parley worker: could not end run " + run.id + ": " + e.what());
    }
  }

  void handBack(ActiveRun& active) {
    active.closing = true;
    try {
      if (runs->release(active.lease)) count(&Stats::handedBack);
    } catch (const std::exception& e) {
      log("parley worker: could not hand back run " + active.lease.runId + ": " + e.what());
    }
  }

  // A cancel request carried out: a rollback first hides the run's turns (a new batch whose view
  // is the view before the run), then the run ends cancelled.
  void endCancelled(const RunInfo& run, ActiveRun& active, detail::RunEvents& events) {
    if (active.request == CancelRequest::Rollback && run.baseMessageCount) {
      ConversationManager manager;
      const auto version = loadConversation(runs->threads(), run.threadId, manager);
      const auto base = static_cast<size_t>(*run.baseMessageCount);
      if (manager.storageSize() > base) {
        manager.modifyStore([&](MessageStore& store) {
          std::vector<MessageStore::Index> view;
          store.view().forEach(0, store.viewSize(), [&](MessageStore::Index i) {
            if (i < base) view.push_back(i);
          });
          store.commitView(view);
        });
        UnsavedTurn turn =
            unsavedTurn(manager, static_cast<int64_t>(manager.storageSize()), run.threadId);
        runs->appendTurn(active.lease, {}, turn.state, version);
      }
    }
    active.closing = true;
    runs->finish(active.lease, RunStatus::Cancelled, "", nullptr, events.takeLive());
    count(&Stats::cancelled);
  }

  void execute(const RunInfo& run, ActiveRun& active, detail::RunEvents& events);
};

namespace {

// The fenced whole-turn append, with the turn's events; after it, an interrupt stops the run.
// The run's answer (a turn that ends the loop) is held: finishWithTurn commits it with the end.
class LeaseSink : public TurnSink {
  // Whether the loop goes on after this turn: it ended with tool results.
  static bool continues(const ConversationManager& conversation) {
    auto last = conversation.getRecentMessages(1);
    return !last.empty() && last.back().role == Role::Tool;
  }

 public:
  LeaseSink(RunStore& runs, ActiveRun& active, detail::RunEvents& events, std::string threadId,
            int64_t storedCount, RunStore::Version version)
      : runs_(runs),
        active_(active),
        events_(events),
        threadId_(std::move(threadId)),
        storedCount_(storedCount),
        version_(version) {}

  void saveTurn(const ConversationManager& conversation) override {
    UnsavedTurn turn = unsavedTurn(conversation, storedCount_, threadId_);
    std::vector<EventInput> held;
    if (answer_) {
      // The loop went on after all: the held turn is part of this one.
      held = std::move(answer_->events);
      answer_.reset();
    }
    if (!turn.messages.empty() && !continues(conversation)) {
      // The run's answer: held for finishWithTurn, which commits it with the run's end.
      auto turnEvents = events_.takeForTurn();
      held.insert(held.end(), std::make_move_iterator(turnEvents.begin()),
                  std::make_move_iterator(turnEvents.end()));
      answer_ = HeldAnswer{std::move(turn), std::move(held)};
      return;
    }
    if (!turn.messages.empty()) {
      const auto added = static_cast<int64_t>(turn.messages.size());
      auto turnEvents = events_.takeForTurn();
      held.insert(held.end(), std::make_move_iterator(turnEvents.begin()),
                  std::make_move_iterator(turnEvents.end()));
      Span span("parley.store.append_turn", "", SpanKind::Client);  // docs/telemetry.md
      span.set("parley.run.id", active_.lease.runId);
      span.set("parley.messages", added);
      try {
        version_ = runs_.appendTurn(active_.lease, turn.messages, turn.state, version_, held);
      } catch (const std::exception& e) {
        span.setError(e);
        throw;
      }
      storedCount_ += added;
    }
    // A safe point: a request the heartbeat has not brought yet is read here, so an interrupt
    // never lets the run start another model call.
    // (A turn that ends the loop, a reply without tool calls, needs no check.)
    if (active_.request == CancelRequest::None && continues(conversation)) {
      if (auto run = runs_.run(active_.lease.runId)) active_.request = run->cancelRequest;
    }
    if (active_.request == CancelRequest::Interrupt) throw StopAtSafePoint();
  }

  // The run's answer, not yet written: commit it with finish (finishWithTurn). Empty when the
  // run's last turn was written already (or it has none).
  struct HeldAnswer {
    UnsavedTurn turn;
    std::vector<EventInput> events;  // the turn's, in order
  };
  std::optional<HeldAnswer>& answer() { return answer_; }
  RunStore::Version version() const { return version_; }

 private:
  std::optional<HeldAnswer> answer_;
  RunStore& runs_;
  ActiveRun& active_;
  detail::RunEvents& events_;
  std::string threadId_;
  int64_t storedCount_;
  RunStore::Version version_;
};

// The tool calls of a durable run, consulting its journal.
class JournalRunner {
 public:
  JournalRunner(RunStore& runs, ActiveRun& active, detail::RunEvents& events, const RunInfo& run,
                RunJournal journal, std::shared_ptr<ToolRegistry> allowed,
                std::shared_ptr<ToolRegistry> all, int maxConcurrent, std::string humanTool)
      : runs_(runs),
        active_(active),
        events_(events),
        run_(run),
        journal_(std::move(journal)),
        allowed_(std::move(allowed)),
        all_(std::move(all)),
        humanTool_(std::move(humanTool)) {
    if (all_) {
      ToolExecutorOptions o;
      o.maxConcurrent = maxConcurrent;
      executor_ = std::make_unique<ToolExecutor>(all_, o);
    }
  }

  int64_t turn = 0;  // the storage index of the reply whose calls run next

  std::vector<ToolResult> operator()(const std::vector<ToolCall>& calls, std::stop_token stop) {
    std::vector<std::optional<ToolResult>> results(calls.size());
    std::vector<size_t> toRun;
    std::optional<json> waitFor;
    for (size_t i = 0; i < calls.size(); ++i) {
      const ToolCall& call = calls[i];
      const ToolCallEntry* entry = find(call.id);
      if (entry && entry->phase == ToolCallPhase::Completed) {
        results[i] = textResult(call, entry->text);
        continue;
      }
      if (entry &&
          (entry->phase == ToolCallPhase::Failed || entry->phase == ToolCallPhase::Indeterminate)) {
        results[i] = errorResult(call, ToolErrorKind::HandlerFailed, entry->text);
        continue;
      }
      if (!allowed_ || !allowed_->has(call.name) || !all_) {
        results[i] = errorResult(call, ToolErrorKind::UnknownTool,
                                 "unknown tool \"" + call.name + "\": this run may not call it");
        record(call, ToolCallPhase::Failed, results[i]->error);
        continue;
      }
      const auto info = all_->find(call.name);
      if (entry && entry->phase == ToolCallPhase::Started && info && !info->options.idempotent) {
        results[i] = errorResult(
            call, ToolErrorKind::HandlerFailed,
            "the call may have run: it was started before its worker stopped and its result was "
            "lost; the tool is not idempotent, so it was not run again. Check its effect before "
            "calling it again.");
        record(call, ToolCallPhase::Indeterminate, results[i]->error);
        continue;
      }
      const bool human = call.name == humanTool_;
      if (human || (info && info->options.requiresApproval)) {
        const json* answer = answerFor(call.id);
        if (!answer) {
          if (!waitFor) waitFor = waitDescription(call, human);
          continue;
        }
        if (human) {
          results[i] = textResult(call, answerText(*answer));
          record(call, ToolCallPhase::Completed, answerText(*answer));
          continue;
        }
        if (!isApproval(*answer)) {
          results[i] =
              errorResult(call, ToolErrorKind::HandlerFailed,
                          "the call was not approved (answer: " + answerText(*answer) + ")");
          record(call, ToolCallPhase::Failed, results[i]->error);
          continue;
        }
      }
      toRun.push_back(i);
    }
    if (!toRun.empty()) runCalls(calls, toRun, results, stop);
    if (waitFor) {
      UserInteractionRequested asked;
      asked.interactionId = (*waitFor)["tool_call_id"];
      asked.prompt = (*waitFor)["prompt"];
      asked.kind = (*waitFor)["kind"];
      auto live = events_.takeLive();
      live.push_back(detail::eventInput(asked));
      active_.closing = true;
      runs_.wait(active_.lease, *waitFor, live);
      throw RunWaits{};
    }
    std::vector<ToolResult> out;
    out.reserve(calls.size());
    for (auto& r : results)
      out.push_back(std::move(*r));
    return out;
  }

 private:
  const ToolCallEntry* find(const std::string& callId) const {
    for (const auto& e : journal_.calls)
      if (e.turn == turn && e.callId == callId) return &e;
    return nullptr;
  }

  // The answer respond() stored for this call, if the run waited for it.
  const json* answerFor(const std::string& callId) const {
    if (run_.response.is_null() || !run_.wait.is_object()) return nullptr;
    // "toolCallId": the spelling of runs that waited before the store's schema version 6.
    if (run_.wait.value("tool_call_id", run_.wait.value("toolCallId", "")) != callId) return nullptr;
    return &run_.response;
  }

  json waitDescription(const ToolCall& call, bool human) const {
    std::string prompt;
    if (human) {
      try {
        const json args = json::parse(call.arguments);
        prompt = args.is_object() && args.contains("question") && args["question"].is_string()
                     ? args["question"].get<std::string>()
                     : call.arguments;
      } catch (const std::exception&) {
        prompt = call.arguments;
      }
    } else {
      prompt = "Run the tool " + call.name + " with " + call.arguments + "?";
    }
    return {{"kind", human ? "interaction" : "approval"},
            {"tool_call_id", call.id},
            {"tool", call.name},
            {"arguments", call.arguments},
            {"prompt", prompt}};
  }

  void record(const ToolCall& call, ToolCallPhase phase, const std::string& text) {
    runs_.recordToolCall(active_.lease, turn, call.id, phase, text);
  }

  void runCalls(const std::vector<ToolCall>& calls, const std::vector<size_t>& toRun,
                std::vector<std::optional<ToolResult>>& results, std::stop_token stop) {
    std::vector<ToolCall> batch;
    for (size_t i : toRun) {
      batch.push_back(calls[i]);
      record(calls[i], ToolCallPhase::Started, "");
      ToolExecutionRequest requested;
      requested.toolCall = calls[i];
      if (auto info = all_ ? all_->find(calls[i].name) : std::nullopt) {
        requested.executionOptions.timeout = info->options.timeout;
        requested.executionOptions.retries = info->options.retries;
        requested.executionOptions.retryDelay = info->options.retryDelay;
      }
      events_.add(detail::eventInput(requested));
    }
    events_.flush();
    std::vector<ToolResult> done = executor_->executeAll(batch, stop);
    for (size_t k = 0; k < toRun.size(); ++k) {
      ToolResult& r = done[k];
      // A call cut short by a stop stays "started": whoever goes on decides from the tool.
      if (r.errorKind == ToolErrorKind::Cancelled) continue;
      if (r.success) {
        record(batch[k], ToolCallPhase::Completed, r.content());
      } else {
        record(batch[k], ToolCallPhase::Failed, r.error);
      }
      // Ran, successfully or not (the executor's meaning): tool_execution_completed.
      ToolExecutionCompleted ended;
      ended.toolCallId = r.toolCallId;
      ended.toolName = r.name;
      ended.result.success = r.success;
      // What the model reads (capped at the tool's maxResultBytes), not the raw value.
      if (r.success) ended.result.result = r.content();
      ended.result.error = r.error;
      ended.result.executionTime = r.executionTime;
      ended.result.retryCount = r.retryCount;
      ended.result.timedOut = r.errorKind == ToolErrorKind::Timeout;
      events_.add(detail::eventInput(ended));
    }
    if (stop.stop_requested()) throw CancelledError("the run was stopped while its tools ran");
    for (size_t k = 0; k < toRun.size(); ++k)
      results[toRun[k]] = std::move(done[k]);
  }

  RunStore& runs_;
  ActiveRun& active_;
  detail::RunEvents& events_;
  const RunInfo& run_;
  RunJournal journal_;
  std::shared_ptr<ToolRegistry> allowed_;
  std::shared_ptr<ToolRegistry> all_;
  std::unique_ptr<ToolExecutor> executor_;
  std::string humanTool_;
};

}  // namespace

void Worker::Impl::execute(const RunInfo& run, ActiveRun& active, detail::RunEvents& events) {
  const std::string profile =
      run.options.profile.empty() ? options.defaultProfile : run.options.profile;
  if (profile.empty()) {
    throw ValidationError("profile", "the run names no profile and the worker has no default");
  }
  auto allowed = toolsFor(run);
  ConversationOptions config = configureConversation(
      options.profiles->get(profile), options.profiles->client(profile), allowed, options.turn);
  // The system prompt is the run's business (below): a thread with history keeps its own.
  config.systemPrompt.clear();
  config.log = options.log;
  config.onTokenLimitExceeded = [&events](ConversationManager&, const TokenCheck& check) {
    TokenLimitExceeded over;
    over.contextTokens = check.contextTokens;
    over.tokenLimit = check.tokenLimit;
    events.add(detail::eventInput(over));
  };
  if (options.maxCostPerWorker) {
    config.budget.maxCostShared = options.maxCostPerWorker;
    config.budget.shared = spending;
    config.budget.sharedName = "maxCostPerWorker";
  }
  ConversationManager manager(config);
  RunStore::Version version = 0;
  std::optional<ContextSnapshot> kept;
  if (run.attempts == 1 && run.baseVersion) kept = takeCached(run.threadId, *run.baseVersion);
  if (kept) {
    // The state this worker committed last, and nothing changed the thread since.
    manager.restoreFromSnapshot(*kept);
    version = *run.baseVersion;
    count(&Stats::fromCache);
  } else {
    version = loadConversation(runs->threads(), run.threadId, manager);
  }
  const auto stored = static_cast<int64_t>(manager.storageSize());
  const int64_t base = run.baseMessageCount.value_or(stored);

  // Where the run stands: its input committed with its first whole turn or not yet; a reply
  // journaled but not committed (resumed, not asked again).
  RunJournal journal;
  if (run.attempts > 1 || run.status == RunStatus::Waiting || !run.wait.is_null()) {
    journal = runs->journal(run.id);
  }
  std::vector<Message> input;
  int done = 0;
  if (stored <= base) {
    const std::string system =
        run.options.systemPrompt ? *run.options.systemPrompt : options.turn.systemPrompt;
    if (!system.empty() && (stored == 0 || run.options.systemPrompt)) {
      // A new thread starts with it; a run's own prompt on a thread with history takes effect
      // from here on (docs/scale-out.md, "The worker").
      input.push_back(Message::system(system));
    }
    input.insert(input.end(), run.input.begin(), run.input.end());
  } else {
    auto all = manager.getAllMessages();
    for (size_t i = static_cast<size_t>(base); i < all.size(); ++i)
      if (all[i].role == Role::Assistant) ++done;
    const Message& last = all.back();
    if (!journal.pendingReply && last.role == Role::Assistant && last.toolCalls.empty()) {
      // Its last whole turn was its answer: only the finish was missing.
      active.closing = true;
      runs->finish(active.lease, RunStatus::Completed, "",
                   {{"content", last.content}, {"finish_reason", "stop"}, {"iterations", done}},
                   events.takeLive());
      count(&Stats::completed);
      return;
    }
  }
  const int maxIterations =
      run.options.maxIterations > 0 ? run.options.maxIterations : options.turn.maxIterations;
  if (done >= maxIterations) {
    active.closing = true;
    runs->finish(active.lease, RunStatus::Completed, "",
                 {{"content", ""}, {"finish_reason", "max_iterations"}, {"iterations", done}},
                 events.takeLive());
    count(&Stats::completed);
    return;
  }

  auto sink = std::make_shared<LeaseSink>(*runs, active, events, run.threadId, stored, version);
  // The sink belongs to this run only: set it after the restore (which keeps options).
  ConversationManager worked = manager.clone(sink);
  JournalRunner runner(*runs, active, events, run, journal, allowed, options.tools,
                       options.turn.maxToolConcurrency, options.humanTool);

  RunOptions ro = turnRunOptions(options.turn);
  ro.conversationId = run.threadId;  // gen_ai.conversation.id
  ro.maxIterations = maxIterations - done;
  ro.stopToken = active.stop.get_token();
  ro.stream = run.options.stream;
  int64_t next = stored;  // the storage index of the next message the run adds
  bool resumed = false;
  if (journal.pendingReply) {
    const int64_t expected = stored + static_cast<int64_t>(input.size());
    if (journal.pendingAt == expected) {
      ro.firstReply = *journal.pendingReply;
      resumed = true;
    }
  }
  ro.onMessage = [&](const Message& m) {
    const int64_t at = next++;
    if (m.role == Role::Assistant && !m.toolCalls.empty()) {
      runner.turn = at;
      if (resumed && at == journal.pendingAt) {
        resumed = false;  // journaled already
      } else {
        runs->recordReply(active.lease, m, at);
      }
    }
    MessageAdded added;
    added.message = m;
    added.index = at;
    events.addToTurn(detail::eventInput(added));
  };
  ro.onChunk = [&](const StreamDelta& delta) {
    try {
      events.chunk(delta.content);
    } catch (const LeaseLost&) {
      active.lost = true;
      return false;
    }
    return !active.stop.stop_requested();
  };
  ro.runToolCalls = [&](const std::vector<ToolCall>& calls, std::stop_token stop) {
    return runner(calls, std::move(stop));
  };

  RunResult result;
  try {
    result = worked.run(std::move(input), ro);
  } catch (const StopAtSafePoint&) {
    // Interrupted after a whole turn; if that turn was the answer, the run is complete.
    auto all = worked.getAllMessages();
    if (all.empty() || all.back().role != Role::Assistant || !all.back().toolCalls.empty()) {
      throw;
    }
    result.content = all.back().content;
    result.finishReason = "stop";
  }
  if (active.lost) throw LeaseLost("store: the lease of run " + run.id + " was lost");
  active.closing = true;
  const json outcome = {{"content", result.content},
                        {"finish_reason", result.finishReason},
                        {"iterations", done + result.iterations}};
  if (auto& answer = sink->answer()) {
    auto live = events.takeLive();
    answer->events.insert(answer->events.end(), std::make_move_iterator(live.begin()),
                          std::make_move_iterator(live.end()));
    RunStore::Version committed = 0;
    if (stillClaiming()) {
      auto finished = runs->finishWithTurnAndClaim(active.lease, answer->turn.messages,
                                                   answer->turn.state, sink->version(), outcome,
                                                   answer->events, options.leaseDuration);
      committed = finished.version;
      active.next = std::move(finished.next);
    } else {
      committed = runs->finishWithTurn(active.lease, answer->turn.messages, answer->turn.state,
                                       sink->version(), outcome, answer->events);
    }
    remember(run.threadId, committed, worked.snapshot());
  } else {
    runs->finish(active.lease, RunStatus::Completed, "", outcome, events.takeLive());
  }
  count(&Stats::completed);
}

Worker::Worker(std::shared_ptr<RunStore> runs, WorkerOptions options)
    : impl_(std::make_shared<Impl>()) {
  if (!runs) throw ValidationError("runs", "must not be null");
  if (!options.profiles) throw ValidationError("options.profiles", "must not be null");
  if (options.concurrency < 1 || options.concurrency > 1024) {
    throw ValidationError("options.concurrency", "must be 1 to 1024");
  }
  if (options.leaseDuration.count() <= 0) {
    throw ValidationError("options.leaseDuration", "must be positive");
  }
  if (options.heartbeat.count() < 0 || options.heartbeat >= options.leaseDuration) {
    throw ValidationError("options.heartbeat", "must be 0 (automatic) or shorter than the lease");
  }
  if (options.claimPoll.count() <= 0)
    throw ValidationError("options.claimPoll", "must be positive");
  if (options.shutdownGrace.count() < 0) {
    throw ValidationError("options.shutdownGrace", "must not be negative");
  }
  validateTurnDefaults(options.turn, "options.turn");
  if (options.chunkBytes < 1) throw ValidationError("options.chunkBytes", "must be >= 1");
  if (options.maxCostPerWorker) {
    if (!(*options.maxCostPerWorker >= 0)) {
      throw ValidationError("options.maxCostPerWorker", "must be a non-negative number of USD");
    }
    if (!options.turn.budget.prices) {
      throw ValidationError("options.maxCostPerWorker", "needs options.turn.budget.prices (a price table)");
    }
  }
  if (options.workerId.empty()) options.workerId = defaultWorkerId();
  if (options.workerId.size() > 200) {
    throw ValidationError("options.workerId", "must be 1 to 200 bytes");
  }
  if (!options.humanTool.empty()) {
    if (!options.tools) options.tools = std::make_shared<ToolRegistry>();
    if (!options.tools->has(options.humanTool)) {
      options.tools->add(options.humanTool, "Asks a person a question and returns their answer.",
                         {{"type", "object"},
                          {"properties", {{"question", {{"type", "string"}}}}},
                          {"required", {"question"}}},
                         // The worker answers these calls itself (the run waits for the person).
                         [](const json&, ToolContext&) -> json {
                           throw std::runtime_error("answered by the worker, never run");
                         });
    }
  }
  impl_->heartbeat = options.heartbeat.count() > 0
                         ? options.heartbeat
                         : std::min(options.leaseDuration / 3, milliseconds(1'000));
  if (impl_->heartbeat.count() <= 0) impl_->heartbeat = milliseconds(1);
  impl_->runs = std::move(runs);
  impl_->options = std::move(options);
}

Worker::~Worker() {
  try {
    stop();
  } catch (...) {
    // stop() only logs; nothing to report from a destructor.
  }
}

void Worker::start() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->started) throw ValidationError("worker", "was started already");
  impl_->started = true;
  for (int i = 0; i < impl_->options.concurrency; ++i)
    impl_->slots.emplace_back([impl = impl_] { impl->slot(); });
  impl_->dispatcherThread = std::thread([impl = impl_] { impl->dispatch(); });
  impl_->heartbeatThread = std::thread([impl = impl_] { impl->beat(); });
}

void Worker::stop() {
  Impl& impl = *impl_;
  {
    std::lock_guard lock(impl.mutex);
    if (!impl.started || impl.stopped) return;
    impl.stopping = true;
  }
  impl.changed.notify_all();
  if (impl.dispatcherThread.joinable()) impl.dispatcherThread.join();
  {
    std::unique_lock lock(impl.mutex);
    impl.changed.wait_for(lock, impl.options.shutdownGrace, [&] { return impl.busy == 0; });
    for (auto& run : impl.active) {
      run->handBack = true;
      run->stop.request_stop();
    }
  }
  for (auto& t : impl.slots)
    t.join();
  impl.slots.clear();
  {
    std::lock_guard lock(impl.mutex);
    impl.stopped = true;
  }
  impl.changed.notify_all();
  if (impl.heartbeatThread.joinable()) impl.heartbeatThread.join();
}

const std::string& Worker::id() const noexcept {
  return impl_->options.workerId;
}

Worker::Stats Worker::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

double Worker::spentCost() const {
  return impl_->spending->spent();
}

}  // namespace parley
