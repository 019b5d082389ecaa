// Worker (docs/scale-out.md, "The worker"): a dispatcher that claims runs for the free slots,
// the slots that work them (each claim one DurableTurn, durable_turn.hpp), a heartbeat that
// renews the leases and brings cancel requests, and the ThreadCache the turns share.
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
#include "runs/active_run.hpp"
#include "runs/durable_turn.hpp"
#include "runs/run_events.hpp"
#include "runs/thread_cache.hpp"

namespace parley {

using detail::ActiveRun;
using detail::RunWaits;

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

std::string defaultWorkerId() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, 8, "host");
  std::random_device random;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", static_cast<unsigned>(random() & 0xffff));
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + suffix;
}

}  // namespace

struct Worker::Impl : std::enable_shared_from_this<Worker::Impl> {
  std::shared_ptr<RunStore> runs;
  WorkerOptions options;
  milliseconds heartbeat{};

  mutable std::mutex mutex;
  std::condition_variable changed;         // a slot freed, claims ready, stopping
  std::condition_variable stoppedChanged;  // for the heartbeat, which waits for nothing else
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

  // Threads whose runs completed here (WorkerOptions::threadCache).
  std::unique_ptr<detail::ThreadCache> cache;
  // What the claims write for each run they take: its starting input (detail::announceInput).
  ClaimEvents startEvents;

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
                             std::min(free, runs->options().limits.maxClaimBatch), startEvents);
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
          claim = std::exchange(next, std::nullopt);
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
      bool freed = false;
      {
        std::lock_guard lock(mutex);
        active.remove(run);
        --counters.running;
        if (run->next) {
          next = std::move(run->next);  // the slot stays busy: nobody waits for that
        } else {
          --busy;
          freed = true;
        }
      }
      if (freed) changed.notify_all();
    }
  }

  void beat() {
    std::unique_lock lock(mutex);
    while (!stopped) {
      stoppedChanged.wait_for(lock, heartbeat, [&] { return stopped; });
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

  // What the model is offered: the worker's tools (narrowed by the run's list), plus the
  // client's tools (SubmitOptions::clientTools), which the worker never runs.
  std::shared_ptr<ToolRegistry> toolsFor(const RunInfo& run) {
    auto server = serverToolsFor(run);
    const json& client = run.options.clientTools;
    if (!client.is_array() || client.empty()) return server;
    auto made = std::make_shared<ToolRegistry>();
    if (server) {
      for (const std::string& name : server->names()) {
        auto info = server->find(name);
        made->add(
            info->name, info->description, info->schema,
            [](const json&, ToolContext&) -> json { return nullptr; }, info->options);
      }
    }
    for (const json& tool : client) {
      const std::string name = tool.value("name", "");
      if (made->has(name)) {
        throw ValidationError(
            "clientTools", "the client tool '" + name + "' has the name of a tool of the worker");
      }
      made->add(name, tool.value("description", ""),
                tool.value("parameters", json{{"type", "object"}}),
                [](const json&, ToolContext&) -> json { return nullptr; });
    }
    return made;
  }

  std::shared_ptr<ToolRegistry> serverToolsFor(const RunInfo& run) {
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
      execute(claim, active, events);
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

  void execute(const Claim& claim, ActiveRun& active, detail::RunEvents& events) {
    const RunInfo& run = claim.run;
    detail::DurableTurnHost host{*runs,
                                 options,
                                 *cache,
                                 spending,
                                 [this] { return stillClaiming(); },
                                 [this] { count(&Stats::fromCache); },
                                 startEvents};
    detail::DurableTurn(host, claim, active, events, toolsFor(run)).run();
    count(&Stats::completed);
  }
};

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
      throw ValidationError("options.maxCostPerWorker",
                            "needs options.turn.budget.prices (a price table)");
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
  impl_->cache = std::make_unique<detail::ThreadCache>(options.threadCache);
  impl_->startEvents = detail::announceInput(options.turn.systemPrompt);
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
  impl.stoppedChanged.notify_all();
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
