// The events of the event-driven executor and the EventBus that carries them.
//
// Every event carries type (a constant per event struct, e.g. "llm_execution_request"),
// timestamp, workflowId, threadId and traceId. Events are plain values.
//
// EventBus: subscribe<E>(handler) registers a handler for events of type E and returns a
// Subscription that unregisters it when destroyed (or reset()); publish(event) calls the
// handlers of E synchronously, on the publishing thread, in the order they subscribed.
//
// Ownership: the caller owns the bus; a Subscription may outlive its bus (it then does nothing).
// Thread-safety: every member may be called from any thread at any time, also from inside a
// handler (publishing another event, subscribing, unsubscribing itself or another handler).
// Unsubscribing waits for calls of that handler running on other threads to return, so once
// reset() returns the handler is not running and will not run again (except when a handler
// unsubscribes itself: that call cannot wait for itself and returns at once). A handler that
// throws is logged and the other handlers still run.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/context_snapshot.hpp"
#include "parley/message.hpp"
#include "parley/usage.hpp"

namespace parley {

// The fields every event carries.
struct EventHeader {
  std::string type;  // set by each event's default constructor; do not change it
  std::chrono::system_clock::time_point timestamp = std::chrono::system_clock::now();
  std::string workflowId;
  std::string threadId;
  std::string traceId;  // the request that caused the event (LLM -> tools -> LLM)
  // The model call the event belongs to, a span under traceId: each model call of a request
  // gets its own id, carried by the events of that call (TokenLimitExceeded, LlmStreamChunk,
  // the MessageAdded of its prompt, its reply and the tool results of that reply, the
  // ToolExecutionRequest/Completed/Failed and approval questions of its tool calls). Empty on
  // events of the request as a whole (LlmExecutionRequest/Completed/Failed) and of
  // context_processor and user_interaction nodes outside their model calls.
  std::string spanId;
};

// --- LLM execution -------------------------------------------------------------------------

struct LlmRequestData {
  // The user message appended before the call; for a user_interaction node, the question.
  std::string prompt;
  // Names of registered tools to offer; empty: every tool of the executor's registry.
  std::vector<std::string> tools;
  std::string profileId;  // a ProfileRegistry name
  // Request body fields merged into every call of this request (temperature, max_tokens,
  // model, ...). For a context_processor node: the context operation (context_ops.hpp); for a
  // tool node: {"tool": name, "arguments": {...}}.
  nlohmann::json parameters = nlohmann::json::object();
  bool stream = false;  // stream the replies (LlmStreamChunk per delta)
};

struct LlmExecutionRequest : EventHeader {
  static constexpr const char* kType = "llm_execution_request";
  LlmExecutionRequest() { type = kType; }
  std::string nodeId;
  // "llm" (the default; "" is read as "llm"), "context_processor", "user_interaction" or
  // "tool" (executor.hpp).
  std::string nodeType = "llm";
  LlmRequestData requestData;
  // Non-null: a snapshot the thread is restored from before the prompt is appended; it replaces
  // the thread's current conversation. An updatedContext handed back costs O(1) to restore; a
  // JSON document (ConversationManager::createSnapshot()'s format) converts implicitly.
  ContextSnapshot contextSnapshot;
};

struct LlmExecutionResult {
  std::string content;       // the last reply's text
  TokenUsage usage;          // summed over the request's model calls
  std::string finishReason;  // the last reply's, or "max_iterations"
  // Every tool call the model made during the request, in order.
  std::vector<ToolCall> toolCalls;
  int iterations = 0;  // model calls made
};

struct LlmExecutionCompleted : EventHeader {
  static constexpr const char* kType = "llm_execution_completed";
  LlmExecutionCompleted() { type = kType; }
  std::string nodeId;
  LlmExecutionResult result;
  // The thread's state after the request: taken in O(1), its JSON document built only if asked
  // for (updatedContext.json()).
  ContextSnapshot updatedContext;
};

struct LlmExecutionFailed : EventHeader {
  static constexpr const char* kType = "llm_execution_failed";
  LlmExecutionFailed() { type = kType; }
  std::string nodeId;
  std::string error;  // what went wrong, for people (errorDetails.message)
  // The error as errorToJson() writes it (errors.hpp): {"kind": "validation" | "cancelled" |
  // "timeout" | "http" | "connection" | "protocol" | "store" | "store_conflict" | "error",
  // "message", "retryable", "field" and "reason" (validation), "status", "body", "apiMessage",
  // ... (http)}. errorFromJson() turns it back into the exception, as LlmExecutor::execute does.
  nlohmann::json errorDetails = nlohmann::json::object();
};

// One streamed delta of a model reply.
struct LlmStreamChunk : EventHeader {
  static constexpr const char* kType = "llm_stream_chunk";
  LlmStreamChunk() { type = kType; }
  std::string nodeId;
  int iteration = 0;  // which model call of the request (1-based)
  std::string content;
  std::string reasoning;
  // A structured node's answer so far, closed JSON (docs/structured-output.md), when this delta
  // added to it; null otherwise.
  nlohmann::json partial;
};

// One model call of a structured llm node (requestData.parameters.structured, executor.hpp),
// published as the call ends; spanId is that call's.
struct StructuredOutputAttempt : EventHeader {
  static constexpr const char* kType = "structured_output_attempt";
  StructuredOutputAttempt() { type = kType; }
  // `errors` keeps the first kMaxErrors failures, each cut at kMaxErrorBytes.
  static constexpr size_t kMaxErrors = 16;
  static constexpr size_t kMaxErrorBytes = 1024;
  std::string nodeId;
  int attempt = 1;                  // the node's model calls so far, refusals included (1-based)
  int rungAttempt = 1;              // on this rung: 1 the first answer, 2 and up the repairs
  std::string rung;                 // "json_schema", "json_object" or "tool"
  bool refused = false;             // the server refused the rung (HTTP 400); the next rung follows
  bool valid = false;               // the reply parsed and matched the schema
  std::vector<std::string> errors;  // why not: "<path>: <why>", or the refusal
  size_t errorCount = 0;            // all of them, also those past kMaxErrors
  std::optional<TokenUsage> usage;  // the call's, as the server reported it
};

// The thread's context went over its token limit before a model call.
struct TokenLimitExceeded : EventHeader {
  static constexpr const char* kType = "token_limit_exceeded";
  TokenLimitExceeded() { type = kType; }
  std::string nodeId;
  int64_t contextTokens = 0;
  int64_t tokenLimit = 0;
};

// A message was appended to the thread's conversation.
struct MessageAdded : EventHeader {
  static constexpr const char* kType = "message_added";
  MessageAdded() { type = kType; }
  std::string nodeId;
  Message message;
};

// --- tools -------------------------------------------------------------------------------------

struct ToolExecutionOptions {
  std::chrono::milliseconds timeout{60'000};  // how long the executor waits for the result
  int retries = 0;                            // the tool's registered retries
  std::chrono::milliseconds retryDelay{0};
};

struct ToolExecutionRequest : EventHeader {
  static constexpr const char* kType = "tool_execution_request";
  ToolExecutionRequest() { type = kType; }
  std::string nodeId;
  ToolCall toolCall;
  ToolExecutionOptions executionOptions;
};

struct ToolExecutionOutcome {
  bool success = false;
  nlohmann::json result;  // the tool's return value (success)
  std::string error;      // for the model (failure)
  std::chrono::microseconds executionTime{0};
  int retryCount = 0;
  bool timedOut = false;  // the failure is the tool's timeout (counted in ToolStats::timeouts)
};

// The tool ran (successfully or not: see result.success).
struct ToolExecutionCompleted : EventHeader {
  static constexpr const char* kType = "tool_execution_completed";
  ToolExecutionCompleted() { type = kType; }
  std::string toolCallId;
  ToolExecutionOutcome result;
};

// The tool could not be run at all; `error` becomes the tool's error result.
struct ToolExecutionFailed : EventHeader {
  static constexpr const char* kType = "tool_execution_failed";
  ToolExecutionFailed() { type = kType; }
  std::string toolCallId;
  std::string error;  // what went wrong, for people and the model (errorDetails.message)
  // The error as errorToJson() writes it (errors.hpp), as in LlmExecutionFailed; a "kind" of
  // "timeout" counts the call as a timeout in LlmExecutor::toolStats(). When `error` is empty
  // the executor reads errorDetails.message.
  nlohmann::json errorDetails = nlohmann::json::object();
};

// --- human interaction ----------------------------------------------------------------------

struct UserInteractionRequested : EventHeader {
  static constexpr const char* kType = "user_interaction_requested";
  UserInteractionRequested() { type = kType; }
  std::string nodeId;
  std::string interactionId;
  std::string prompt;
  std::chrono::milliseconds timeout{0};
};

struct UserInteractionResponded : EventHeader {
  static constexpr const char* kType = "user_interaction_responded";
  UserInteractionResponded() { type = kType; }
  std::string interactionId;
  std::string response;
};

// --- the bus -----------------------------------------------------------------------------------

namespace detail {
struct EventBusState;
}

// Unregisters its handler when destroyed. Move-only; a default-constructed one holds nothing.
class Subscription {
 public:
  Subscription() = default;
  ~Subscription();
  Subscription(Subscription&& other) noexcept;
  Subscription& operator=(Subscription&& other) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  // Unregisters now (see the header comment for when it waits). Idempotent.
  void reset();
  bool active() const noexcept { return id_ != 0; }

 private:
  friend class EventBus;
  Subscription(std::weak_ptr<detail::EventBusState> bus, uint64_t id)
      : bus_(std::move(bus)), id_(id) {}
  std::weak_ptr<detail::EventBusState> bus_;
  uint64_t id_ = 0;
};

class EventBus {
 public:
  // `log` receives handler failures; null: stderr.
  explicit EventBus(std::function<void(const std::string&)> log = {});
  ~EventBus();
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  template <typename Event>
  [[nodiscard]] Subscription subscribe(std::function<void(const Event&)> handler) {
    return subscribeRaw(
        std::type_index(typeid(Event)),
        [h = std::move(handler)](const void* event) { h(*static_cast<const Event*>(event)); });
  }

  template <typename Event>
  void publish(const Event& event) {
    publishRaw(std::type_index(typeid(Event)), &event, event.type);
  }

  // Handlers registered for `Event` now.
  template <typename Event>
  size_t subscriberCount() const {
    return subscriberCountRaw(std::type_index(typeid(Event)));
  }

 private:
  Subscription subscribeRaw(std::type_index type, std::function<void(const void*)> handler);
  void publishRaw(std::type_index type, const void* event, const std::string& typeName);
  size_t subscriberCountRaw(std::type_index type) const;
  std::shared_ptr<detail::EventBusState> state_;
};

}  // namespace parley
