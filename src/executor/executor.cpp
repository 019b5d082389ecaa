// LlmExecutor (docs/executor.md): a scheduler of threads (one runner per thread at a time, at
// most maxConcurrentThreads at once) and a handler per node kind, chosen by the kind
// request_validation.cpp read when the request arrived. Near 700 lines: the five handlers share
// the thread's state, its span and its event publishing, which one Impl keeps in one place; the
// parts that stand alone live beside it (request_validation, tool_call_dispatch, interactions,
// response_cache).
#include "parley/executor.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <unordered_map>
#include <utility>

#include "executor/interactions.hpp"
#include "executor/request_context.hpp"
#include "executor/request_validation.hpp"
#include "executor/response_cache.hpp"
#include "executor/tool_call_dispatch.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/prompt_counter.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "parley/structured_output.hpp"
#include "parley/telemetry.hpp"
#include "parley/thread_pool.hpp"

namespace parley {
namespace {

// A request checked on arrival, with the kind of node that serves it.
struct QueuedRequest {
  LlmExecutionRequest request;
  detail::NodeKind kind = detail::NodeKind::Llm;
};

// One thread's conversation and its queue of requests.
struct ThreadState {
  explicit ThreadState(std::string threadId) : id(std::move(threadId)) {}
  const std::string id;
  // Guarded by Impl::mutex.
  std::deque<QueuedRequest> queue;
  bool scheduled = false;  // a runner owns the thread, or it waits in Impl::ready
  std::stop_source stop;   // requested by cleanupThread()
  // Touched only by the runner that owns the thread (one at a time).
  std::unique_ptr<ConversationManager> manager;
  std::string profileId;
  std::unique_ptr<StoredThread> stored;
  const LlmExecutionRequest* current = nullptr;  // the request running now (for the trigger)
  detail::NodeKind currentKind = detail::NodeKind::Llm;
  // The span of the model call under way (EventHeader::spanId); a new one starts at the first
  // event of the next call once `callDone` (its reply arrived).
  std::string span;
  bool callDone = true;
};

// The pool tasks that hold the executor (its runners), counted so that ~LlmExecutor waits until
// the last has let it go: the executor's state, and the store it holds, end on the caller's
// thread, not on a pool thread after the caller went on (and removed the database, say).
struct TaskCount {
  std::mutex mutex;
  std::condition_variable zero;
  size_t tasks = 0;

  void wait() {
    std::unique_lock lock(mutex);
    zero.wait(lock, [&] { return tasks == 0; });
  }
};

// One task's place in the count, given back when the task is destroyed.
struct TaskTicket {
  explicit TaskTicket(std::shared_ptr<TaskCount> c) : count(std::move(c)) {
    std::lock_guard lock(count->mutex);
    ++count->tasks;
  }
  ~TaskTicket() {
    {
      std::lock_guard lock(count->mutex);
      --count->tasks;
    }
    count->zero.notify_all();
  }
  TaskTicket(const TaskTicket&) = delete;
  TaskTicket& operator=(const TaskTicket&) = delete;
  std::shared_ptr<TaskCount> count;
};

}  // namespace

struct LlmExecutor::Impl : std::enable_shared_from_this<LlmExecutor::Impl> {
  Impl(EventBus& b, ExecutorOptions o) : bus(b), options(std::move(o)) {}

  EventBus& bus;
  ExecutorOptions options;
  std::shared_ptr<ThreadPool> pool;
  std::shared_ptr<detail::ResponseCache> cache;  // null: responseCacheSize 0

  mutable std::mutex mutex;
  std::condition_variable idle;
  std::unordered_map<std::string, std::shared_ptr<ThreadState>> threads;
  std::deque<std::shared_ptr<ThreadState>> ready;  // scheduled, waiting for a slot
  int running = 0;                                 // runners alive
  std::shared_ptr<TaskCount> tasks = std::make_shared<TaskCount>();  // runner tasks alive
  size_t outstanding = 0;                                            // requests queued or running
  bool stopped = false;

  detail::ToolStatsTable toolStats;
  detail::ToolCallDispatch toolCalls{bus, options, toolStats};
  detail::Interactions interactions{bus, options};

  std::mutex traceMutex;
  std::mt19937_64 traceRandom{std::random_device{}()};

  void log(const std::string& line) const { detail::logLine(options, line); }

  // A random id: "tr-" for a trace, "sp-" for a span.
  std::string newId(const char* prefix) {
    std::lock_guard lock(traceMutex);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id = prefix;
    uint64_t bits = traceRandom();
    for (int i = 0; i < 16; ++i, bits >>= 4)
      id += kHex[bits & 15];
    return id;
  }

  // The span of the model call the thread's next event belongs to.
  const std::string& callSpan(ThreadState& state) {
    if (state.callDone) {
      state.span = newId("sp-");
      state.callDone = false;
    }
    return state.span;
  }

  // --- requests ------------------------------------------------------------------------------

  void publishFailed(const LlmExecutionRequest& request, const std::exception_ptr& error) {
    auto event = detail::causedBy<LlmExecutionFailed>(request);
    event.nodeId = request.nodeId;
    event.errorDetails = errorToJson(error);
    event.error = event.errorDetails.at("message").get<std::string>();
    if (options.logErrors) {
      log("parley: request of node \"" + request.nodeId + "\" in thread \"" + request.threadId +
          "\" (trace " + request.traceId + ") failed: " + event.error);
    }
    bus.publish(event);
  }

  void onRequest(const LlmExecutionRequest& received) {
    LlmExecutionRequest request = received;
    if (request.traceId.empty()) request.traceId = newId("tr-");
    // Published from inside a span (the bus delivers on the publisher's thread): the run joins
    // that trace.
    if (request.traceparent.empty()) request.traceparent = currentTraceContext().traceparent();
    detail::NodeKind kind{};
    try {
      kind = detail::validateRequest(request, options);
    } catch (...) {
      publishFailed(request, std::current_exception());
      return;
    }
    std::unique_lock lock(mutex);
    if (stopped) {
      lock.unlock();
      publishFailed(request, std::make_exception_ptr(CancelledError("the executor is shut down")));
      return;
    }
    auto& slot = threads[request.threadId];
    if (!slot) slot = std::make_shared<ThreadState>(request.threadId);
    std::shared_ptr<ThreadState> state = slot;
    state->queue.push_back({std::move(request), kind});
    ++outstanding;
    if (state->scheduled) return;
    state->scheduled = true;
    if (running >= options.maxConcurrentThreads) {
      ready.push_back(std::move(state));
      return;
    }
    ++running;
    lock.unlock();
    startRunner(std::move(state));
  }

  // A runner on the pool. Its members end in reverse order: the hold on the executor before
  // the ticket, so that the count reaches zero only once no task holds the executor.
  struct RunnerTask {
    std::shared_ptr<TaskTicket> ticket;
    std::shared_ptr<Impl> self;
    std::shared_ptr<ThreadState> state;
    void operator()() { self->runner(std::move(state)); }
  };

  void startRunner(std::shared_ptr<ThreadState> state) {
    try {
      pool->submit(RunnerTask{std::make_shared<TaskTicket>(tasks), shared_from_this(), state});
    } catch (...) {
      // No thread could be started: the requests stay queued for the next runner to free up.
      std::lock_guard lock(mutex);
      --running;
      ready.push_front(std::move(state));
      log("parley: executor could not start a thread; the request waits for a free runner");
    }
  }

  // Runs the queued requests of `state`, then of the threads waiting for a slot.
  void runner(std::shared_ptr<ThreadState> state) {
    for (;;) {
      QueuedRequest queued;
      {
        std::unique_lock lock(mutex);
        if (state->queue.empty()) {
          state->scheduled = false;
          if (!ready.empty()) {
            state = std::move(ready.front());
            ready.pop_front();
            continue;
          }
          --running;
          idle.notify_all();
          return;
        }
        queued = std::move(state->queue.front());
        state->queue.pop_front();
      }
      process(*state, queued);
      {
        std::lock_guard lock(mutex);
        --outstanding;
      }
      idle.notify_all();
    }
  }

  std::unique_ptr<ConversationManager> makeManager(ThreadState& state,
                                                   const std::string& profileId) {
    std::shared_ptr<LlmClient> llm;
    ClientOptions profile;
    if (!profileId.empty()) {
      llm = options.profiles->client(profileId);
      profile = options.profiles->get(profileId);
      if (cache)
        llm = std::make_shared<detail::CachedLlmClient>(std::move(llm), cache, profileId, profile);
    }
    ConversationOptions o =
        configureConversation(profile, std::move(llm), options.tools, options.turn);
    o.log = options.log;
    ThreadState* owner = &state;
    o.onTokenLimitExceeded = [this, owner](ConversationManager&, const TokenCheck& check) {
      if (!owner->current) return;
      auto event = detail::causedBy<TokenLimitExceeded>(*owner->current, callSpan(*owner));
      event.nodeId = owner->current->nodeId;
      event.contextTokens = check.contextTokens;
      event.tokenLimit = check.tokenLimit;
      bus.publish(event);
    };
    return std::make_unique<ConversationManager>(std::move(o));
  }

  // The thread's conversation, made or loaded on first use, on the request's profile.
  void prepare(ThreadState& state, const LlmExecutionRequest& request) {
    const std::string& profileId = request.requestData.profileId;
    if (!state.manager) {
      state.manager = makeManager(state, profileId);
      state.profileId = profileId;
      if (options.store) {
        state.stored = std::make_unique<StoredThread>(options.store, state.id);
        state.stored->attach(*state.manager);
      }
    } else if (!profileId.empty() && profileId != state.profileId) {
      // A manager's model is fixed at construction: move the conversation to a new one.
      auto next = makeManager(state, profileId);
      next->restoreFromSnapshot(state.manager->snapshot());
      state.manager = std::move(next);
      state.profileId = profileId;
    }
  }

  // Replaces the thread's conversation with the request's contextSnapshot, when it has one.
  void applySnapshot(ThreadState& state, const LlmExecutionRequest& request) {
    if (!request.contextSnapshot.isNull()) {
      if (!state.stored) {
        state.manager->restoreFromSnapshot(request.contextSnapshot);
        return;
      }
      // A stored thread only grows: the snapshot's view becomes the thread's new batch (the
      // old messages stay in storage, hidden), never a splice of its tail onto the old prefix.
      const std::vector<Message> given = request.contextSnapshot.messages();  // validated first
      state.manager->modifyStore([&](MessageStore& store) {
        store.startNewBatch(store.storageSize());
        store.appendAll(given);
      });
    }
  }

  void publishAdded(const LlmExecutionRequest& request, const Message& message,
                    const std::string& spanId = {}) {
    auto event = detail::causedBy<MessageAdded>(request, spanId);
    event.nodeId = request.nodeId;
    event.message = message;
    bus.publish(event);
  }

  void process(ThreadState& state, const QueuedRequest& queued) {
    const LlmExecutionRequest& request = queued.request;
    ContextScope trace(TraceContext::parse(request.traceparent).value_or(TraceContext{}));
    state.current = &request;
    state.currentKind = queued.kind;
    std::optional<ConversationManager> before;
    try {
      if (state.stop.stop_requested()) throw CancelledError("the thread was cleaned up");
      prepare(state, request);
      // What the thread held before: a failed request leaves it so (a retry must not find
      // the prompt, a half turn or the snapshot there). A clone shares the history's storage.
      before = state.manager->clone();
      applySnapshot(state, request);
      LlmExecutionResult result;
      switch (queued.kind) {
        case detail::NodeKind::ContextProcessor:
          result = applyOperation(state, request);
          break;
        case detail::NodeKind::UserInteraction:
          result = interact(state, request);
          break;
        case detail::NodeKind::Tool:
          result = runTool(state, request);
          break;
        case detail::NodeKind::Structured:
          result = runStructured(state, request);
          break;
        case detail::NodeKind::Llm:
          result = runLoop(state, request, request.requestData.prompt);
          break;
      }
      if (state.stored) state.stored->save(*state.manager);
      before.reset();  // committed
      auto done = detail::causedBy<LlmExecutionCompleted>(request);
      done.nodeId = request.nodeId;
      done.result = std::move(result);
      done.updatedContext = state.manager->snapshot();
      state.current = nullptr;
      bus.publish(done);
    } catch (...) {
      state.current = nullptr;
      if (before) state.manager = std::make_unique<ConversationManager>(std::move(*before));
      publishFailed(request, std::current_exception());
    }
  }

  LlmExecutionResult applyOperation(ThreadState& state, const LlmExecutionRequest& request) {
    if (isContextRead(request.requestData.parameters)) {
      const ContextRead read = parseContextRead(request.requestData.parameters);
      std::vector<Message> messages = readContext(*state.manager, read);
      if (read.into == ContextRead::Into::Prompt) {
        return runLoop(state, request,
                       promptWithContext(request.requestData.prompt, contextText(messages)));
      }
      LlmExecutionResult result;
      result.content = nlohmann::json{{"operation", "read"},
                                      {"messageCount", messages.size()},
                                      {"messages", toJson(messages)}}
                           .dump();
      result.finishReason = "context_read";
      return result;
    }
    const ContextOperation op = parseContextOperation(request.requestData.parameters);
    if (isDryRun(request.requestData.parameters)) {
      LlmExecutionResult result;
      result.content = toJson(previewContextOperation(*state.manager, op)).dump();
      result.finishReason = "context_preview";
      return result;
    }
    const ContextOperationResult applied = applyContextOperation(*state.manager, op);
    LlmExecutionResult result;
    result.content = nlohmann::json{{"operation", applied.operation},
                                    {"messageCount", applied.messageCount},
                                    {"removedForPairing", applied.removedForPairing}}
                         .dump();
    result.finishReason = "context_operation";
    return result;
  }

  // Runs the tool the request names, as a call the workflow made: the call (an assistant
  // message holding it) and its result join the thread, a pair the model's API accepts. A
  // tool's error is its result (finish reason "tool_error"), as in the tool loop.
  LlmExecutionResult runTool(ThreadState& state, const LlmExecutionRequest& request) {
    const nlohmann::json& params = request.requestData.parameters;
    ToolCall call;
    call.id = newId("call_");
    call.name = params.at("tool").get<std::string>();
    call.arguments = params.value("arguments", nlohmann::json::object()).dump();
    std::vector<ToolResult> results =
        toolCalls.run(request, {}, {call}, state.stop.get_token(), [&](const ToolCall& c) {
          return interactions.approval(request, {}, c, state.stop.get_token());
        });
    const ToolResult& r = results.front();
    const std::vector<Message> added = {Message::assistant("", {call}), r.toMessage()};
    state.manager->addMessages(added);
    for (const Message& m : added)
      publishAdded(request, m);
    LlmExecutionResult result;
    result.content = added.back().content;
    result.finishReason = r.success ? "tool" : "tool_error";
    result.toolCalls = {call};
    return result;
  }

  // Asks the user (UserInteractionRequested) and waits for the answer; the answer is the next
  // user message: the model is called with it when the request names a profile.
  LlmExecutionResult interact(ThreadState& state, const LlmExecutionRequest& request) {
    const auto timeout = std::chrono::milliseconds(
        request.requestData.parameters.value("timeoutMs", options.interactionTimeout.count()));
    const std::string id = "ui-" + request.traceId + "-" + request.nodeId;
    std::stop_token stop = state.stop.get_token();
    std::optional<std::string> response =
        interactions.ask(request, id, request.requestData.prompt, timeout, stop);
    if (!response) {
      if (stop.stop_requested()) throw CancelledError("the thread was cleaned up");
      throw TimeoutError("no UserInteractionResponded for \"" + id + "\" within " +
                         std::to_string(timeout.count()) + " ms");
    }
    if (!request.requestData.profileId.empty()) return runLoop(state, request, *response);
    Message message = Message::user(*response);
    state.manager->addMessage(message);
    publishAdded(request, message);
    LlmExecutionResult result;
    result.content = *response;
    result.finishReason = "user_response";
    return result;
  }

  // The request the model gets when the node changes the thread's: the request's parameters
  // merged last into the body, so they win (the executor's own parameters, a
  // user_interaction's timeoutMs or a structured node's schema, are not the model's), and the
  // tools offered. nullopt: the thread's own.
  std::optional<ChatRequest> modelRequest(const ConversationManager& manager,
                                          const LlmExecutionRequest& request,
                                          detail::NodeKind kind) const {
    const LlmRequestData& data = request.requestData;
    if (data.parameters.empty() && data.tools.empty()) return std::nullopt;
    ChatRequest base = manager.options().request;
    for (const auto& [key, value] : data.parameters.items()) {
      if (kind == detail::NodeKind::UserInteraction && key == "timeoutMs") continue;
      if (kind == detail::NodeKind::Structured && key == detail::kStructuredKey) continue;
      if (kind == detail::NodeKind::ContextProcessor) break;  // its parameters say what to read
      base.extra[key] = value;
    }
    if (!data.tools.empty()) {
      nlohmann::json subset = nlohmann::json::array();
      for (const auto& tool : options.tools->definitions()->tools) {
        if (!detail::toolRefusal(data, tool["function"]["name"].get<std::string>(), options)) {
          subset.push_back(tool);
        }
      }
      base.extra["tools"] = std::move(subset);
    }
    return base;
  }

  // A structured answer (ConversationManager::runStructuredResult): the ladder and the repairs
  // run in the manager; each model call is published as a StructuredOutputAttempt (its own
  // span), a streamed call's deltas as LlmStreamChunk carrying the partial answer. The thread
  // keeps the prompt and the valid answer (MessageAdded for both once the answer is valid); the
  // failed attempts stay in storage, hidden, as runStructured leaves them.
  LlmExecutionResult runStructured(ThreadState& state, const LlmExecutionRequest& request) {
    const LlmRequestData& data = request.requestData;
    std::stop_token stop = state.stop.get_token();
    detail::StructuredSpec spec =
        detail::parseStructured(data.parameters.at(detail::kStructuredKey));
    StructuredOptions& structured = spec.options;
    structured.stream = data.stream;
    structured.stopToken = stop;
    const RunOptions limits = turnRunOptions(options.turn);
    structured.timeout = limits.timeout;
    structured.turnTimeout = limits.turnTimeout;
    structured.request = modelRequest(*state.manager, request, state.currentKind);

    int calls = 0;           // model calls ended, refusals included
    std::string promptSpan;  // the call that sent the prompt on the rung that answered
    std::string answerSpan;  // the call whose reply was valid
    nlohmann::json partial;  // the answer so far, not yet published
    state.callDone = true;   // the first call's first event starts its span
    if (data.stream) {
      structured.onPartial = [&](const nlohmann::json& now) { partial = now; };
      structured.onChunk = [&](const StreamDelta& delta) {
        if (!delta.content.empty() || !delta.reasoning.empty() || !partial.is_null()) {
          auto chunk = detail::causedBy<LlmStreamChunk>(request, callSpan(state));
          chunk.nodeId = request.nodeId;
          chunk.iteration = calls + 1;
          chunk.content = delta.content;
          chunk.reasoning = delta.reasoning;
          chunk.partial = std::exchange(partial, nullptr);
          bus.publish(chunk);
        }
        return !stop.stop_requested();
      };
    }
    structured.onAttempt = [&](const StructuredAttempt& a) {
      ++calls;
      auto event = detail::causedBy<StructuredOutputAttempt>(request, callSpan(state));
      state.callDone = true;
      partial = nullptr;
      event.nodeId = request.nodeId;
      event.attempt = calls;
      event.rungAttempt = a.attempt;
      event.rung = toString(a.rung);
      event.refused = a.refused;
      event.valid = a.valid;
      event.errorCount = a.errors.size();
      for (size_t i = 0; i < a.errors.size() && i < StructuredOutputAttempt::kMaxErrors; ++i)
        event.errors.push_back(
            detail::cutText(a.errors[i], StructuredOutputAttempt::kMaxErrorBytes));
      event.usage = a.usage;
      if (!a.refused && a.attempt == 1) promptSpan = event.spanId;
      if (a.valid) answerSpan = event.spanId;
      bus.publish(event);
    };

    StructuredResult answer =
        state.manager->runStructuredResult(data.prompt, spec.schema, structured);
    publishAdded(request, Message::user(data.prompt), promptSpan);
    publishAdded(request, answer.message, answerSpan);
    LlmExecutionResult out;
    out.content = answer.value.dump();
    out.usage = answer.usage;
    out.finishReason = "structured";
    out.iterations = answer.attempts;
    return out;
  }

  // The manager's tool loop (ConversationManager::run), configured for the executor: tool calls
  // go out as events (runTools), every message added is published, chunks carry the iteration.
  LlmExecutionResult runLoop(ThreadState& state, const LlmExecutionRequest& request,
                             const std::string& prompt) {
    ConversationManager& manager = *state.manager;
    const LlmRequestData& data = request.requestData;
    std::stop_token stop = state.stop.get_token();

    RunOptions run = turnRunOptions(options.turn);
    run.stream = data.stream;
    run.stopToken = stop;
    run.request = modelRequest(manager, request, state.currentKind);
    run.toolTape = options.toolTape;
    run.toolTapeThread = request.threadId;
    int iteration = 1;      // of the model call under way: one more than the replies seen
    state.callDone = true;  // the first call's first event starts its span
    run.onChunk = [&](const StreamDelta& delta) {
      if (!delta.content.empty() || !delta.reasoning.empty()) {
        auto chunk = detail::causedBy<LlmStreamChunk>(request, callSpan(state));
        chunk.nodeId = request.nodeId;
        chunk.iteration = iteration;
        chunk.content = delta.content;
        chunk.reasoning = delta.reasoning;
        bus.publish(chunk);
      }
      return !stop.stop_requested();
    };
    run.onMessage = [&](const Message& message) {
      if (message.role == Role::Tool) {
        publishAdded(request, message, state.span);  // the results of the call's tool calls
        return;
      }
      publishAdded(request, message, callSpan(state));
      if (message.role == Role::Assistant) {
        ++iteration;
        state.callDone = true;
      }
    };
    run.runToolCalls = [&](const std::vector<ToolCall>& calls, std::stop_token cancel) {
      return toolCalls.run(request, state.span, calls, cancel,
                           [&](const ToolCall& call) -> std::optional<ToolResult> {
                             if (auto why = detail::toolRefusal(data, call.name, options)) {
                               ToolResult r;
                               r.toolCallId = call.id;
                               r.name = call.name;
                               r.errorKind = ToolErrorKind::UnknownTool;
                               r.error = std::move(*why);
                               return r;
                             }
                             return interactions.approval(request, state.span, call, cancel);
                           });
    };

    RunResult done = manager.run(prompt, run);
    LlmExecutionResult out;
    out.content = std::move(done.content);
    out.usage = done.usage;
    out.finishReason = std::move(done.finishReason);
    out.toolCalls = std::move(done.toolCalls);
    out.iterations = done.iterations;
    return out;
  }

  // --- control -------------------------------------------------------------------------------

  bool cleanupThread(const std::string& threadId) {
    std::shared_ptr<ThreadState> state;
    std::deque<QueuedRequest> dropped;
    {
      std::lock_guard lock(mutex);
      auto it = threads.find(threadId);
      if (it == threads.end()) return false;
      state = it->second;
      threads.erase(it);
      dropped.swap(state->queue);
      outstanding -= dropped.size();
    }
    toolStats.forget(threadId);
    state->stop.request_stop();
    for (const auto& [request, kind] : dropped) {
      publishFailed(request, std::make_exception_ptr(CancelledError(
                                 "the thread was cleaned up before the request ran")));
    }
    idle.notify_all();
    return true;
  }

  void waitIdle() {
    std::unique_lock lock(mutex);
    idle.wait(lock, [&] { return outstanding == 0 && running == 0; });
  }

  void shutdown() {
    std::vector<std::string> ids;
    {
      std::lock_guard lock(mutex);
      stopped = true;
      for (const auto& [id, state] : threads)
        ids.push_back(id);
    }
    for (const auto& id : ids)
      cleanupThread(id);
    waitIdle();
  }

  std::vector<Subscription> subscriptions;
  std::unique_ptr<ToolWorker> worker;
};

LlmExecutor::LlmExecutor(EventBus& bus, ExecutorOptions options) {
  if (!options.profiles) throw ValidationError("options.profiles", "must not be null");
  if (options.maxConcurrentThreads < 1) {
    throw ValidationError("options.maxConcurrentThreads", "must be at least 1");
  }
  validateTurnDefaults(options.turn, "options.turn");
  if (options.toolCallTimeout.count() <= 0) {
    throw ValidationError("options.toolCallTimeout", "must be positive");
  }
  impl_ = std::make_shared<Impl>(bus, std::move(options));
  Impl& impl = *impl_;
  impl.pool = impl.options.pool ? impl.options.pool : std::make_shared<ThreadPool>();
  if (impl.options.responseCacheSize > 0) {
    impl.cache = std::make_shared<detail::ResponseCache>(impl.options.responseCacheSize);
  }
  if (impl.options.toolWorker && impl.options.tools) {
    impl.worker = std::make_unique<ToolWorker>(bus, impl.options.tools);
  }
  // Raw pointers: the subscriptions are reset (waiting for running handlers) before impl_ dies.
  Impl* self = impl_.get();
  impl.subscriptions.push_back(bus.subscribe<LlmExecutionRequest>(
      [self](const LlmExecutionRequest& e) { self->onRequest(e); }));
  impl.subscriptions.push_back(bus.subscribe<ToolExecutionCompleted>(
      [self](const ToolExecutionCompleted& e) { self->toolCalls.onCompleted(e); }));
  impl.subscriptions.push_back(bus.subscribe<ToolExecutionFailed>(
      [self](const ToolExecutionFailed& e) { self->toolCalls.onFailed(e); }));
  impl.subscriptions.push_back(bus.subscribe<UserInteractionResponded>(
      [self](const UserInteractionResponded& e) { self->interactions.onResponded(e); }));
}

LlmExecutor::~LlmExecutor() {
  // New requests first: nothing may be queued after shutdown() has drained the queues.
  impl_->subscriptions.front().reset();
  impl_->shutdown();
  impl_->subscriptions.clear();
  impl_->worker.reset();
  impl_->tasks->wait();
}

LlmExecutionResult LlmExecutor::execute(LlmExecutionRequest request) {
  if (request.traceId.empty()) request.traceId = impl_->newId("tr-");
  // A failure crosses as data and becomes an exception on this thread: an exception object
  // made on the runner's thread could be freed there, after this thread read it, and the
  // exception's reference count lives in an uninstrumented runtime that TSan cannot follow.
  struct Outcome {
    std::optional<LlmExecutionResult> result;
    nlohmann::json error;
  };
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto settled = std::make_shared<std::atomic<bool>>(false);
  const std::string trace = request.traceId;
  EventBus& bus = impl_->bus;
  Subscription done = bus.subscribe<LlmExecutionCompleted>(
      [promise, settled, trace](const LlmExecutionCompleted& e) {
        if (e.traceId != trace || settled->exchange(true)) return;
        promise->set_value(Outcome{e.result, nullptr});
      });
  Subscription failed =
      bus.subscribe<LlmExecutionFailed>([promise, settled, trace](const LlmExecutionFailed& e) {
        if (e.traceId != trace || settled->exchange(true)) return;
        nlohmann::json details = e.errorDetails;
        // A failure published by someone else may say what went wrong in `error` alone.
        if (details.is_object() && !details.contains("message")) details["message"] = e.error;
        if (!details.is_object()) details = {{"message", e.error}};
        promise->set_value(Outcome{std::nullopt, std::move(details)});
      });
  bus.publish(request);
  Outcome outcome = promise->get_future().get();
  if (!outcome.result) rethrowFromJson(outcome.error);
  return std::move(*outcome.result);
}

void LlmExecutor::waitIdle() {
  impl_->waitIdle();
}

bool LlmExecutor::cleanupThread(const std::string& threadId) {
  return impl_->cleanupThread(threadId);
}

void LlmExecutor::shutdown() {
  impl_->shutdown();
}

LlmExecutor::CacheStats LlmExecutor::responseCacheStats() const {
  CacheStats out;
  if (!impl_->cache) return out;
  const detail::ResponseCache::Stats s = impl_->cache->stats();
  out.hits = s.hits;
  out.misses = s.misses;
  out.evictions = s.evictions;
  out.size = s.size;
  return out;
}

std::map<std::string, ToolStats> LlmExecutor::toolStats(const std::string& threadId) const {
  return impl_->toolStats.stats(threadId);
}

size_t LlmExecutor::threadCount() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->threads.size();
}

}  // namespace parley
