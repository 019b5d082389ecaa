#include "parley/executor.hpp"

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <unordered_map>
#include <unordered_set>

#include "executor/response_cache.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/store.hpp"
#include "parley/thread_pool.hpp"

namespace parley {
namespace {

// The header of an event caused by `request`: same workflow, thread and trace.
template <typename Event>
Event causedBy(const LlmExecutionRequest& request) {
  Event event;
  event.workflowId = request.workflowId;
  event.threadId = request.threadId;
  event.traceId = request.traceId;
  return event;
}

bool isContextProcessor(const LlmExecutionRequest& request) {
  return request.nodeType == "context_processor";
}

bool isUserInteraction(const LlmExecutionRequest& request) {
  return request.nodeType == "user_interaction";
}

// One thread's conversation and its queue of requests.
struct ThreadState {
  explicit ThreadState(std::string threadId) : id(std::move(threadId)) {}
  const std::string id;
  // Guarded by Impl::mutex.
  std::deque<LlmExecutionRequest> queue;
  bool scheduled = false;  // a runner owns the thread, or it waits in Impl::ready
  std::stop_source stop;   // requested by cleanupThread()
  // Touched only by the runner that owns the thread (one at a time).
  std::unique_ptr<ConversationManager> manager;
  std::string profileId;
  std::unique_ptr<StoredThread> stored;
  const LlmExecutionRequest* current = nullptr;  // the request running now (for the trigger)
};

// The tool calls of one reply, waiting for their results.
struct PendingBatch {
  std::mutex mutex;
  std::condition_variable_any resolved;
  std::vector<std::optional<ToolResult>> results;
  size_t answers = 0;  // answers received: the runner wakes when it changes
};

// A user_interaction node waiting for its UserInteractionResponded.
struct PendingInteraction {
  std::mutex mutex;
  std::condition_variable_any answered;
  std::optional<std::string> response;
  std::string threadId;
};

struct PendingCall {
  std::shared_ptr<PendingBatch> batch;
  size_t index = 0;
  std::string threadId;
  std::string name;
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
  size_t outstanding = 0;                          // requests queued or running
  bool stopped = false;

  std::mutex pendingMutex;
  std::unordered_map<std::string, PendingCall> pending;  // by toolCallId

  std::mutex interactionMutex;
  std::unordered_map<std::string, std::shared_ptr<PendingInteraction>> interactions;

  std::mutex traceMutex;
  std::mt19937_64 traceRandom{std::random_device{}()};

  void log(const std::string& line) const {
    if (options.log) {
      options.log(line);
    } else {
      std::cerr << line << '\n';
    }
  }

  std::string newTraceId() {
    std::lock_guard lock(traceMutex);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id = "tr-";
    uint64_t bits = traceRandom();
    for (int i = 0; i < 16; ++i, bits >>= 4)
      id += kHex[bits & 15];
    return id;
  }

  // --- requests ------------------------------------------------------------------------------

  void validate(const LlmExecutionRequest& r) const {
    if (r.workflowId.empty()) throw ValidationError("workflowId", "must not be empty");
    if (r.threadId.empty()) throw ValidationError("threadId", "must not be empty");
    if (r.nodeId.empty()) throw ValidationError("nodeId", "must not be empty");
    if (!r.nodeType.empty() && r.nodeType != "llm" && r.nodeType != "context_processor" &&
        r.nodeType != "user_interaction") {
      throw ValidationError("nodeType", "unknown node type \"" + r.nodeType +
                                            "\" (expected \"llm\", \"context_processor\" or "
                                            "\"user_interaction\")");
    }
    if (!r.contextSnapshot.is_null() && !r.contextSnapshot.is_object()) {
      throw ValidationError("contextSnapshot", "must be a snapshot object or null");
    }
    if (!r.requestData.parameters.is_object()) {
      throw ValidationError("requestData.parameters", "must be a JSON object");
    }
    if (isContextProcessor(r)) {
      try {
        parseContextOperation(r.requestData.parameters);
      } catch (const ValidationError& e) {
        throw ValidationError("requestData.parameters." + e.field(), e.reason());
      }
      return;
    }
    if (r.requestData.prompt.empty()) {
      throw ValidationError("requestData.prompt", "must not be empty");
    }
    if (isUserInteraction(r)) {
      const auto& timeout = r.requestData.parameters.value("timeoutMs", nlohmann::json());
      if (!timeout.is_null() && !(timeout.is_number_integer() && timeout.get<int64_t>() > 0)) {
        throw ValidationError("requestData.parameters.timeoutMs", "must be a positive integer");
      }
      if (r.requestData.profileId.empty()) return;  // no model call after the answer
    }
    if (r.requestData.profileId.empty()) {
      throw ValidationError("requestData.profileId", "must name a profile");
    }
    if (!options.profiles->contains(r.requestData.profileId)) {
      throw ValidationError("requestData.profileId",
                            "unknown profile \"" + r.requestData.profileId + "\"");
    }
    for (size_t i = 0; i < r.requestData.tools.size(); ++i) {
      if (!options.tools || !options.tools->has(r.requestData.tools[i])) {
        throw ValidationError("requestData.tools[" + std::to_string(i) + "]",
                              "no tool \"" + r.requestData.tools[i] + "\" is registered");
      }
    }
  }

  void publishFailed(const LlmExecutionRequest& request, const std::exception_ptr& error) {
    auto event = causedBy<LlmExecutionFailed>(request);
    event.nodeId = request.nodeId;
    try {
      std::rethrow_exception(error);
    } catch (const ValidationError& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "validation"}, {"field", e.field()}, {"reason", e.reason()}};
    } catch (const CancelledError& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "cancelled"}};
    } catch (const TimeoutError& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "timeout"}};
    } catch (const HttpError& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "http"}, {"status", e.status()}};
    } catch (const ConnectionError& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "connection"}};
    } catch (const ProtocolError& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "protocol"}};
    } catch (const std::exception& e) {
      event.error = e.what();
      event.errorDetails = {{"kind", "error"}};
    } catch (...) {
      event.error = "unknown error";
      event.errorDetails = {{"kind", "error"}};
    }
    bus.publish(event);
  }

  void onRequest(const LlmExecutionRequest& received) {
    LlmExecutionRequest request = received;
    if (request.traceId.empty()) request.traceId = newTraceId();
    try {
      validate(request);
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
    state->queue.push_back(std::move(request));
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

  void startRunner(std::shared_ptr<ThreadState> state) {
    try {
      pool->submit(
          [self = shared_from_this(), state]() mutable { self->runner(std::move(state)); });
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
      LlmExecutionRequest request;
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
        request = std::move(state->queue.front());
        state->queue.pop_front();
      }
      process(*state, request);
      {
        std::lock_guard lock(mutex);
        --outstanding;
      }
      idle.notify_all();
    }
  }

  std::unique_ptr<ConversationManager> makeManager(ThreadState& state,
                                                   const std::string& profileId) {
    ConversationOptions o;
    if (!profileId.empty()) {
      o.llm = options.profiles->client(profileId);
      if (cache) {
        o.llm = std::make_shared<detail::CachedLlmClient>(std::move(o.llm), cache, profileId,
                                                          options.profiles->get(profileId));
      }
    }
    o.tools = options.tools;
    o.systemPrompt = options.systemPrompt;
    o.maxIterations = options.maxIterations;
    o.tokenLimit = options.tokenLimit;
    o.log = options.log;
    ThreadState* owner = &state;
    o.onTokenLimitExceeded = [this, owner](ConversationManager&, const TokenCheck& check) {
      if (!owner->current) return;
      auto event = causedBy<TokenLimitExceeded>(*owner->current);
      event.nodeId = owner->current->nodeId;
      event.contextTokens = check.contextTokens;
      event.tokenLimit = check.tokenLimit;
      bus.publish(event);
    };
    return std::make_unique<ConversationManager>(std::move(o));
  }

  // The thread's conversation, ready for `request`.
  void prepare(ThreadState& state, const LlmExecutionRequest& request) {
    const std::string& profileId = request.requestData.profileId;
    if (!state.manager) {
      state.manager = makeManager(state, profileId);
      state.profileId = profileId;
      if (options.store && request.contextSnapshot.is_null()) {
        state.stored = std::make_unique<StoredThread>(options.store, state.id);
        state.stored->attach(*state.manager);
      }
    } else if (!profileId.empty() && profileId != state.profileId) {
      // A manager's model is fixed at construction: move the conversation to a new one.
      auto next = makeManager(state, profileId);
      next->restoreFromSnapshot(state.manager->createSnapshot());
      state.manager = std::move(next);
      state.profileId = profileId;
    }
    if (!request.contextSnapshot.is_null()) {
      state.manager->restoreFromSnapshot(request.contextSnapshot);
    }
  }

  void publishAdded(const LlmExecutionRequest& request, const Message& message) {
    auto event = causedBy<MessageAdded>(request);
    event.nodeId = request.nodeId;
    event.message = message;
    bus.publish(event);
  }

  void process(ThreadState& state, const LlmExecutionRequest& request) {
    state.current = &request;
    try {
      if (state.stop.stop_requested()) throw CancelledError("the thread was cleaned up");
      prepare(state, request);
      LlmExecutionResult result;
      if (isContextProcessor(request)) {
        result = applyOperation(state, request);
      } else if (isUserInteraction(request)) {
        result = interact(state, request);
      } else {
        result = runLoop(state, request, request.requestData.prompt);
      }
      if (state.stored) state.stored->save(*state.manager);
      auto done = causedBy<LlmExecutionCompleted>(request);
      done.nodeId = request.nodeId;
      done.result = std::move(result);
      done.updatedContext = state.manager->createSnapshot();
      state.current = nullptr;
      bus.publish(done);
    } catch (...) {
      state.current = nullptr;
      publishFailed(request, std::current_exception());
    }
  }

  LlmExecutionResult applyOperation(ThreadState& state, const LlmExecutionRequest& request) {
    const ContextOperation op = parseContextOperation(request.requestData.parameters);
    const ContextOperationResult applied = applyContextOperation(*state.manager, op);
    LlmExecutionResult result;
    result.content = nlohmann::json{{"operation", applied.operation},
                                    {"messageCount", applied.messageCount},
                                    {"removedForPairing", applied.removedForPairing}}
                         .dump();
    result.finishReason = "context_operation";
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
        askUser(request, id, request.requestData.prompt, timeout, stop);
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

  // Publishes UserInteractionRequested and waits for its answer; nullopt on timeout or stop.
  std::optional<std::string> askUser(const LlmExecutionRequest& request, const std::string& id,
                                     const std::string& prompt, std::chrono::milliseconds timeout,
                                     std::stop_token stop) {
    auto wait = std::make_shared<PendingInteraction>();
    wait->threadId = request.threadId;
    {
      std::lock_guard lock(interactionMutex);
      interactions[id] = wait;
    }
    auto ask = causedBy<UserInteractionRequested>(request);
    ask.nodeId = request.nodeId;
    ask.interactionId = id;
    ask.prompt = prompt;
    ask.timeout = timeout;
    bus.publish(ask);
    std::optional<std::string> response;
    {
      std::unique_lock lock(wait->mutex);
      wait->answered.wait_for(lock, stop, timeout, [&] { return wait->response.has_value(); });
      response = wait->response;
    }
    {
      std::lock_guard lock(interactionMutex);
      interactions.erase(id);
    }
    return response;
  }

  static bool approves(std::string answer) {
    for (char& c : answer)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return answer == "y" || answer == "yes" || answer == "approve" || answer == "approved" ||
           answer == "ok" || answer == "true";
  }

  // For a tool that requiresApproval: asks the user; an error result unless approved.
  std::optional<ToolResult> approval(const LlmExecutionRequest& request, const ToolCall& call,
                                     std::stop_token stop) {
    if (!options.tools) return std::nullopt;
    auto info = options.tools->find(call.name);
    if (!info || !info->options.requiresApproval) return std::nullopt;
    const std::string id = "approve-" + call.id;
    auto answer = askUser(request, id,
                          "Approve the call of tool \"" + call.name + "\" with arguments " +
                              (call.arguments.empty() ? "{}" : call.arguments) + "? (yes/no)",
                          options.toolCallTimeout, stop);
    if (!answer && stop.stop_requested()) {
      throw CancelledError("the thread was cleaned up while a tool call awaited approval");
    }
    if (answer && approves(*answer)) return std::nullopt;
    ToolResult r;
    r.toolCallId = call.id;
    r.name = call.name;
    r.errorKind = ToolErrorKind::Cancelled;
    r.error = answer ? "the user rejected this call of \"" + call.name + "\""
                     : "no approval for this call of \"" + call.name + "\" arrived in time";
    return r;
  }

  void onInteractionResponded(const UserInteractionResponded& e) {
    std::shared_ptr<PendingInteraction> wait;
    {
      std::lock_guard lock(interactionMutex);
      auto it = interactions.find(e.interactionId);
      if (it == interactions.end()) {
        log("parley: user_interaction_responded for unknown or finished interaction \"" +
            e.interactionId + "\" ignored");
        return;
      }
      wait = it->second;
      interactions.erase(it);
    }
    {
      std::lock_guard lock(wait->mutex);
      wait->response = e.response;
    }
    wait->answered.notify_all();
  }

  LlmExecutionResult runLoop(ThreadState& state, const LlmExecutionRequest& request,
                             const std::string& prompt) {
    ConversationManager& manager = *state.manager;
    const LlmRequestData& data = request.requestData;
    std::stop_token stop = state.stop.get_token();

    LlmCallOptions call;
    call.stream = data.stream;
    call.stopToken = stop;
    if (options.llmTimeout.count() > 0) call.timeout = options.llmTimeout;
    if (!data.parameters.empty() || !data.tools.empty()) {
      ChatRequest base = manager.options().request;
      // Merged last into the body, so the request's parameters win.
      for (const auto& [key, value] : data.parameters.items())
        base.extra[key] = value;
      if (!data.tools.empty()) {
        const std::unordered_set<std::string> offered(data.tools.begin(), data.tools.end());
        nlohmann::json subset = nlohmann::json::array();
        for (const auto& tool : options.tools->definitions()->tools) {
          if (offered.count(tool["function"]["name"].get<std::string>())) subset.push_back(tool);
        }
        base.extra["tools"] = std::move(subset);
      }
      call.request = std::move(base);
    }
    int iteration = 0;
    call.onChunk = [&](const StreamDelta& delta) {
      if (!delta.content.empty() || !delta.reasoning.empty()) {
        auto chunk = causedBy<LlmStreamChunk>(request);
        chunk.nodeId = request.nodeId;
        chunk.iteration = iteration;
        chunk.content = delta.content;
        chunk.reasoning = delta.reasoning;
        bus.publish(chunk);
      }
      return !stop.stop_requested();
    };

    LlmExecutionResult out;
    std::vector<Message> pending{Message::user(prompt)};
    for (;;) {
      if (out.iterations >= options.maxIterations) {
        out.finishReason = "max_iterations";
        break;
      }
      iteration = out.iterations + 1;
      ChatResult reply = manager.executeLlmCall(pending, call);
      for (const Message& m : pending)
        publishAdded(request, m);
      publishAdded(request, reply.message);
      pending.clear();
      ++out.iterations;
      if (reply.usage) addUsage(out.usage, *reply.usage);
      out.content = reply.message.content;
      out.finishReason = reply.finishReason;
      if (reply.message.toolCalls.empty()) break;
      out.toolCalls.insert(out.toolCalls.end(), reply.message.toolCalls.begin(),
                           reply.message.toolCalls.end());
      std::vector<ToolResult> results = runTools(request, reply.message.toolCalls, stop);
      std::vector<Message> messages;
      messages.reserve(results.size());
      for (const ToolResult& r : results) {
        Message m = r.toMessage();
        if (m.content.empty()) m.content = "(empty result)";  // chat APIs want text
        messages.push_back(std::move(m));
      }
      manager.addMessages(messages);
      for (const Message& m : messages)
        publishAdded(request, m);
    }
    return out;
  }

  ToolResult errorResult(const ToolCall& call, std::string error, ToolErrorKind kind) {
    ToolResult r;
    r.toolCallId = call.id;
    r.name = call.name;
    r.error = std::move(error);
    r.errorKind = kind;
    return r;
  }

  void publishToolRequest(const LlmExecutionRequest& request, const ToolCall& call) {
    auto event = causedBy<ToolExecutionRequest>(request);
    event.nodeId = request.nodeId;
    event.toolCall = call;
    event.executionOptions.timeout = options.toolCallTimeout;
    if (options.tools) {
      if (auto info = options.tools->find(call.name)) {
        event.executionOptions.retries = info->options.retries;
        event.executionOptions.retryDelay = info->options.retryDelay;
      }
    }
    bus.publish(event);
  }

  // Sends the calls out as events, at most maxToolCallsPerThread unanswered at once (the next
  // goes out as an answer or a timeout frees a slot), and returns their results in call order.
  // Each call's timeout runs from the moment it was sent.
  std::vector<ToolResult> runTools(const LlmExecutionRequest& request,
                                   const std::vector<ToolCall>& calls, std::stop_token stop) {
    using Clock = std::chrono::steady_clock;
    auto batch = std::make_shared<PendingBatch>();
    batch->results.resize(calls.size());
    std::vector<std::optional<ToolResult>> settled(calls.size());  // known without sending
    std::unordered_set<std::string> ids;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!ids.insert(calls[i].id).second) {
        log("parley: tool call id \"" + calls[i].id +
            "\" repeats within one reply; the repeated call gets an error result");
        settled[i] = errorResult(calls[i], "duplicate tool call id \"" + calls[i].id + "\"",
                                 ToolErrorKind::HandlerFailed);
      }
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!settled[i]) settled[i] = approval(request, calls[i], stop);
    }

    struct InFlight {
      size_t index;
      Clock::time_point deadline;
    };
    std::vector<InFlight> inFlight;  // in send order, so deadlines never decrease
    const size_t cap = static_cast<size_t>(options.maxToolCallsPerThread);
    size_t next = 0;
    size_t seenAnswers = 0;
    // Forgets calls still waiting: a late answer is then an unknown id.
    auto forget = [&](const std::vector<InFlight>& gone) {
      std::lock_guard lock(pendingMutex);
      for (const InFlight& f : gone) {
        auto it = pending.find(calls[f.index].id);
        if (it != pending.end() && it->second.batch == batch) pending.erase(it);
      }
    };
    for (;;) {
      while (inFlight.size() < cap && next < calls.size()) {
        const size_t i = next++;
        if (!settled[i]) {
          std::lock_guard lock(pendingMutex);
          if (!pending.emplace(calls[i].id, PendingCall{batch, i, request.threadId, calls[i].name})
                   .second) {
            log("parley: tool call id \"" + calls[i].id +
                "\" is already pending for another request; the call gets an error result");
            settled[i] = errorResult(calls[i], "duplicate tool call id \"" + calls[i].id + "\"",
                                     ToolErrorKind::HandlerFailed);
          }
        }
        if (settled[i]) {
          std::lock_guard lock(batch->mutex);
          batch->results[i] = std::move(*settled[i]);
          continue;
        }
        inFlight.push_back({i, Clock::now() + options.toolCallTimeout});
        // Not under a lock: a worker may answer inline, from within publish().
        publishToolRequest(request, calls[i]);
      }
      if (inFlight.empty()) break;

      {
        std::unique_lock lock(batch->mutex);
        batch->resolved.wait_until(lock, stop, inFlight.front().deadline,
                                   [&] { return batch->answers != seenAnswers; });
        seenAnswers = batch->answers;
      }
      if (stop.stop_requested()) {
        forget(inFlight);
        throw CancelledError("the thread was cleaned up while tool calls were pending");
      }
      // Drop the answered calls, then time out the overdue ones.
      const auto now = Clock::now();
      std::vector<InFlight> overdue;
      {
        std::lock_guard lock(batch->mutex);
        std::erase_if(inFlight, [&](const InFlight& f) {
          if (batch->results[f.index]) return true;
          if (f.deadline > now) return false;
          overdue.push_back(f);
          return true;
        });
      }
      if (overdue.empty()) continue;
      forget(overdue);
      std::lock_guard lock(batch->mutex);
      for (const InFlight& f : overdue) {
        if (batch->results[f.index]) continue;  // answered just before it was forgotten
        ToolResult r = errorResult(calls[f.index],
                                   "tool \"" + calls[f.index].name + "\" did not answer within " +
                                       std::to_string(options.toolCallTimeout.count()) + " ms",
                                   ToolErrorKind::Timeout);
        log("parley: " + r.error + " (tool call " + r.toolCallId + ", trace " + request.traceId +
            ")");
        batch->results[f.index] = std::move(r);
      }
    }
    std::vector<ToolResult> results;
    results.reserve(calls.size());
    std::lock_guard lock(batch->mutex);
    for (auto& r : batch->results)
      results.push_back(std::move(*r));
    return results;
  }

  void resolveTool(const std::string& toolCallId, const std::string& threadId, ToolResult result,
                   const char* eventType) {
    PendingCall call;
    {
      std::lock_guard lock(pendingMutex);
      auto it = pending.find(toolCallId);
      if (it == pending.end()) {
        log(std::string("parley: ") + eventType + " for unknown or already answered tool call \"" +
            toolCallId + "\" ignored");
        return;
      }
      if (!threadId.empty() && threadId != it->second.threadId) {
        log(std::string("parley: ") + eventType + " for tool call \"" + toolCallId +
            "\" names thread \"" + threadId + "\", not \"" + it->second.threadId + "\"; ignored");
        return;
      }
      call = std::move(it->second);
      pending.erase(it);
    }
    result.toolCallId = toolCallId;
    result.name = call.name;
    {
      std::lock_guard lock(call.batch->mutex);
      call.batch->results[call.index] = std::move(result);
      ++call.batch->answers;
    }
    call.batch->resolved.notify_all();
  }

  void onToolCompleted(const ToolExecutionCompleted& e) {
    ToolResult r;
    r.success = e.result.success;
    r.result = e.result.result;
    r.error = e.result.error;
    if (!r.success && r.error.empty()) r.error = "the tool failed";
    r.errorKind = r.success ? ToolErrorKind::None : ToolErrorKind::HandlerFailed;
    r.executionTime = e.result.executionTime;
    r.retryCount = e.result.retryCount;
    resolveTool(e.toolCallId, e.threadId, std::move(r), ToolExecutionCompleted::kType);
  }

  void onToolFailed(const ToolExecutionFailed& e) {
    ToolResult r;
    r.error = e.error.empty() ? "the tool could not be run" : e.error;
    r.errorKind = ToolErrorKind::HandlerFailed;
    resolveTool(e.toolCallId, e.threadId, std::move(r), ToolExecutionFailed::kType);
  }

  // --- control -------------------------------------------------------------------------------

  bool cleanupThread(const std::string& threadId) {
    std::shared_ptr<ThreadState> state;
    std::deque<LlmExecutionRequest> dropped;
    {
      std::lock_guard lock(mutex);
      auto it = threads.find(threadId);
      if (it == threads.end()) return false;
      state = it->second;
      threads.erase(it);
      dropped.swap(state->queue);
      outstanding -= dropped.size();
    }
    state->stop.request_stop();
    for (const auto& request : dropped) {
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
  if (options.maxIterations < 1)
    throw ValidationError("options.maxIterations", "must be at least 1");
  if (options.maxToolCallsPerThread < 1) {
    throw ValidationError("options.maxToolCallsPerThread", "must be at least 1");
  }
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
      [self](const ToolExecutionCompleted& e) { self->onToolCompleted(e); }));
  impl.subscriptions.push_back(bus.subscribe<ToolExecutionFailed>(
      [self](const ToolExecutionFailed& e) { self->onToolFailed(e); }));
  impl.subscriptions.push_back(bus.subscribe<UserInteractionResponded>(
      [self](const UserInteractionResponded& e) { self->onInteractionResponded(e); }));
}

LlmExecutor::~LlmExecutor() {
  // New requests first: nothing may be queued after shutdown() has drained the queues.
  impl_->subscriptions.front().reset();
  impl_->shutdown();
  impl_->subscriptions.clear();
  impl_->worker.reset();
}

LlmExecutionResult LlmExecutor::execute(LlmExecutionRequest request) {
  if (request.traceId.empty()) request.traceId = impl_->newTraceId();
  auto promise = std::make_shared<std::promise<LlmExecutionResult>>();
  auto settled = std::make_shared<std::atomic<bool>>(false);
  const std::string trace = request.traceId;
  EventBus& bus = impl_->bus;
  Subscription done = bus.subscribe<LlmExecutionCompleted>(
      [promise, settled, trace](const LlmExecutionCompleted& e) {
        if (e.traceId != trace || settled->exchange(true)) return;
        promise->set_value(e.result);
      });
  Subscription failed =
      bus.subscribe<LlmExecutionFailed>([promise, settled, trace](const LlmExecutionFailed& e) {
        if (e.traceId != trace || settled->exchange(true)) return;
        const std::string kind = e.errorDetails.value("kind", "");
        std::exception_ptr error;
        if (kind == "validation") {
          error = std::make_exception_ptr(ValidationError(e.errorDetails.value("field", ""),
                                                          e.errorDetails.value("reason", e.error)));
        } else if (kind == "cancelled") {
          error = std::make_exception_ptr(CancelledError(e.error));
        } else if (kind == "timeout") {
          error = std::make_exception_ptr(TimeoutError(e.error));
        } else {
          error = std::make_exception_ptr(Error(e.error));
        }
        promise->set_exception(error);
      });
  bus.publish(request);
  return promise->get_future().get();
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

size_t LlmExecutor::threadCount() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->threads.size();
}

// --- ToolWorker ----------------------------------------------------------------------------

struct ToolWorker::Impl : std::enable_shared_from_this<ToolWorker::Impl> {
  Impl(EventBus& b, std::shared_ptr<ToolRegistry> tools, const ToolWorkerOptions& o)
      : bus(b),
        pool(o.pool ? o.pool : ThreadPool::shared()),
        executor(std::move(tools), ToolExecutorOptions{o.maxConcurrent, pool, {}}) {}

  EventBus& bus;
  std::shared_ptr<ThreadPool> pool;
  ToolExecutor executor;
  std::mutex mutex;
  std::condition_variable idle;
  size_t inFlight = 0;

  void finished() {
    {
      std::lock_guard lock(mutex);
      --inFlight;
    }
    idle.notify_all();
  }

  void onRequest(const ToolExecutionRequest& request) {
    {
      std::lock_guard lock(mutex);
      ++inFlight;
    }
    try {
      pool->submit([self = shared_from_this(), request] {
        ToolResult r = self->executor.execute(request.toolCall);
        ToolExecutionCompleted done;
        done.workflowId = request.workflowId;
        done.threadId = request.threadId;
        done.traceId = request.traceId;
        done.toolCallId = request.toolCall.id;
        done.result.success = r.success;
        done.result.result = r.result;
        done.result.error = r.error;
        done.result.executionTime = r.executionTime;
        done.result.retryCount = r.retryCount;
        self->bus.publish(done);
        self->finished();
      });
    } catch (...) {
      finished();
      ToolExecutionFailed failed;
      failed.workflowId = request.workflowId;
      failed.threadId = request.threadId;
      failed.traceId = request.traceId;
      failed.toolCallId = request.toolCall.id;
      failed.error = "no thread could be started to run the tool";
      bus.publish(failed);
    }
  }
};

ToolWorker::ToolWorker(EventBus& bus, std::shared_ptr<ToolRegistry> tools,
                       const ToolWorkerOptions& options) {
  if (!tools) throw ValidationError("tools", "must not be null");
  if (options.maxConcurrent < 1) {
    throw ValidationError("options.maxConcurrent", "must be at least 1");
  }
  impl_ = std::make_shared<Impl>(bus, std::move(tools), options);
  Impl* self = impl_.get();
  subscription_ = bus.subscribe<ToolExecutionRequest>(
      [self](const ToolExecutionRequest& e) { self->onRequest(e); });
}

ToolWorker::~ToolWorker() {
  subscription_.reset();
  std::unique_lock lock(impl_->mutex);
  impl_->idle.wait(lock, [&] { return impl_->inFlight == 0; });
}

}  // namespace parley
