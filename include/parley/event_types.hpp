// The one event vocabulary's payloads (docs/architecture.md, "Events"): one struct per event
// type of event_names.hpp, and one JSON form of each. The executor publishes these structs on its
// EventBus (events.hpp); a durable run writes the same payloads to its thread's event log
// (run_store.hpp), and the service streams them; every protocol the service speaks is an
// encoding of them.
//
// JSON: eventToJson(e) is the payload (the struct's fields, snake_case, without the header);
// eventHeaderToJson(e) the header ({"type", "time", "workflow_id", "thread_id", "trace_id",
// "span_id"}); eventFromJson<E>(payload) reads a payload back (missing keys keep their defaults;
// a key of the wrong type is a ValidationError naming it). Context snapshots are not part of the
// JSON form (LlmExecutionRequest says has_context_snapshot; LlmExecutionCompleted leaves its
// updatedContext out).
//
// Thread-safety: plain values; the functions are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/context_snapshot.hpp"
#include "parley/event_names.hpp"
#include "parley/message.hpp"
#include "parley/usage.hpp"

namespace parley {

// The fields every event carries.
struct EventHeader {
  std::string type;  // eventName(E::kEventType), set by each event's constructor; do not change it
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
  // The W3C traceparent of the telemetry span the event was caused under (telemetry.hpp), ""
  // when there was none. Whoever takes the work on continues that trace: a ToolWorker's
  // execute_tool span is a child of the run's span, and an LlmExecutionRequest published with
  // one makes the executor's spans part of the publisher's trace (docs/telemetry.md).
  std::string traceparent;
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
  static constexpr EventType kEventType = EventType::LlmExecutionRequest;
  LlmExecutionRequest() { type = eventName(kEventType); }
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
  static constexpr EventType kEventType = EventType::LlmExecutionCompleted;
  LlmExecutionCompleted() { type = eventName(kEventType); }
  std::string nodeId;
  LlmExecutionResult result;
  // The thread's state after the request: taken in O(1), its JSON document built only if asked
  // for (updatedContext.json()).
  ContextSnapshot updatedContext;
};

struct LlmExecutionFailed : EventHeader {
  static constexpr EventType kEventType = EventType::LlmExecutionFailed;
  LlmExecutionFailed() { type = eventName(kEventType); }
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
  static constexpr EventType kEventType = EventType::LlmStreamChunk;
  LlmStreamChunk() { type = eventName(kEventType); }
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
  static constexpr EventType kEventType = EventType::StructuredOutputAttempt;
  StructuredOutputAttempt() { type = eventName(kEventType); }
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
  static constexpr EventType kEventType = EventType::TokenLimitExceeded;
  TokenLimitExceeded() { type = eventName(kEventType); }
  std::string nodeId;
  int64_t contextTokens = 0;
  int64_t tokenLimit = 0;
};

// A message was appended to the thread's conversation.
struct MessageAdded : EventHeader {
  static constexpr EventType kEventType = EventType::MessageAdded;
  MessageAdded() { type = eventName(kEventType); }
  std::string nodeId;
  Message message;
  // The storage index the message took in its thread (a durable run says; the executor
  // leaves -1).
  int64_t index = -1;
};

// --- tools -------------------------------------------------------------------------------------

struct ToolExecutionOptions {
  std::chrono::milliseconds timeout{60'000};  // how long the executor waits for the result
  int retries = 0;                            // the tool's registered retries
  std::chrono::milliseconds retryDelay{0};
};

struct ToolExecutionRequest : EventHeader {
  static constexpr EventType kEventType = EventType::ToolExecutionRequest;
  ToolExecutionRequest() { type = eventName(kEventType); }
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
  static constexpr EventType kEventType = EventType::ToolExecutionCompleted;
  ToolExecutionCompleted() { type = eventName(kEventType); }
  std::string toolCallId;
  std::string toolName;  // the called tool's name ("" when the publisher does not say)
  ToolExecutionOutcome result;
};

// The tool could not be run at all; `error` becomes the tool's error result.
struct ToolExecutionFailed : EventHeader {
  static constexpr EventType kEventType = EventType::ToolExecutionFailed;
  ToolExecutionFailed() { type = eventName(kEventType); }
  std::string toolCallId;
  std::string toolName;  // the called tool's name ("" when the publisher does not say)
  std::string error;     // what went wrong, for people and the model (errorDetails.message)
  // The error as errorToJson() writes it (errors.hpp), as in LlmExecutionFailed; a "kind" of
  // "timeout" counts the call as a timeout in LlmExecutor::toolStats(). When `error` is empty
  // the executor reads errorDetails.message.
  nlohmann::json errorDetails = nlohmann::json::object();
};

// A running tool's report on its progress (ToolContext::progress: a remote task's status
// messages and artifact chunks). Written by a durable run between the call's
// tool_execution_request and its tool_execution_completed.
struct ToolExecutionProgress : EventHeader {
  static constexpr EventType kEventType = EventType::ToolExecutionProgress;
  ToolExecutionProgress() { type = eventName(kEventType); }
  std::string toolCallId;
  std::string toolName;
  std::string message;                             // a line for people ("" when there is none)
  nlohmann::json data = nlohmann::json::object();  // the tool's details (docs/a2a.md for A2A)
};

// --- human interaction ----------------------------------------------------------------------

struct UserInteractionRequested : EventHeader {
  static constexpr EventType kEventType = EventType::UserInteractionRequested;
  UserInteractionRequested() { type = eventName(kEventType); }
  std::string nodeId;
  std::string interactionId;
  std::string prompt;
  std::chrono::milliseconds timeout{0};
  // "approval" (a call of a tool that requiresApproval), "interaction" (a question for a
  // person: the human tool, a user_interaction node), or "" when the publisher does not say.
  std::string kind;
};

struct UserInteractionResponded : EventHeader {
  static constexpr EventType kEventType = EventType::UserInteractionResponded;
  UserInteractionResponded() { type = eventName(kEventType); }
  std::string interactionId;
  std::string response;
};

// --- JSON ----------------------------------------------------------------------------------

nlohmann::json eventHeaderToJson(const EventHeader& event);
nlohmann::json eventToJson(const LlmExecutionRequest& event);
nlohmann::json eventToJson(const LlmExecutionCompleted& event);
nlohmann::json eventToJson(const LlmExecutionFailed& event);
nlohmann::json eventToJson(const LlmStreamChunk& event);
nlohmann::json eventToJson(const StructuredOutputAttempt& event);
nlohmann::json eventToJson(const TokenLimitExceeded& event);
nlohmann::json eventToJson(const MessageAdded& event);
nlohmann::json eventToJson(const ToolExecutionRequest& event);
nlohmann::json eventToJson(const ToolExecutionCompleted& event);
nlohmann::json eventToJson(const ToolExecutionFailed& event);
nlohmann::json eventToJson(const ToolExecutionProgress& event);
nlohmann::json eventToJson(const UserInteractionRequested& event);
nlohmann::json eventToJson(const UserInteractionResponded& event);

// The payload `json` read as an event E (the header fields stay empty). ValidationError naming
// the key ("payload.<key>") for a value of the wrong type.
template <class E>
E eventFromJson(const nlohmann::json& json);

}  // namespace parley
