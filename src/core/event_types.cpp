#include "parley/event_types.hpp"

#include "parley/errors.hpp"
#include "parley/iso_time.hpp"

namespace parley {
namespace {

using nlohmann::json;

// A payload key read as T, or `fallback` when absent or null; ValidationError naming it when
// present with another type.
template <class T>
T read(const json& j, const char* key, T fallback = T{}) {
  if (!j.is_object()) throw ValidationError("payload", "must be a JSON object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw ValidationError(std::string("payload.") + key,
                          "has the wrong type (" + std::string(it->type_name()) + ")");
  }
}

json rawOr(const json& j, const char* key, const json& fallback) {
  auto it = j.find(key);
  return it == j.end() ? fallback : *it;
}

// node_id is left out when empty (a durable run's events belong to no workflow node).
json withNode(json j, const std::string& nodeId) {
  if (!nodeId.empty()) j["node_id"] = nodeId;
  return j;
}

json toolCallJson(const ToolCall& call) {
  return {{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}};
}

ToolCall toolCallFrom(const json& j) {
  ToolCall call;
  call.id = read<std::string>(j, "id");
  call.name = read<std::string>(j, "name");
  call.arguments = read<std::string>(j, "arguments");
  return call;
}

}  // namespace

json eventHeaderToJson(const EventHeader& e) {
  json j = {{"type", e.type},
            {"time", isoTime(e.timestamp)},
            {"workflow_id", e.workflowId},
            {"thread_id", e.threadId},
            {"trace_id", e.traceId}};
  if (!e.spanId.empty()) j["span_id"] = e.spanId;
  if (!e.traceparent.empty()) j["traceparent"] = e.traceparent;
  return j;
}

json eventToJson(const LlmExecutionRequest& e) {
  const LlmRequestData& d = e.requestData;
  return withNode({{"node_type", e.nodeType},
                   {"request_data",
                    {{"prompt", d.prompt},
                     {"tools", d.tools},
                     {"profile_id", d.profileId},
                     {"parameters", d.parameters},
                     {"stream", d.stream}}},
                   {"has_context_snapshot", !e.contextSnapshot.isNull()}},
                  e.nodeId);
}

json eventToJson(const LlmExecutionCompleted& e) {
  json calls = json::array();
  for (const ToolCall& c : e.result.toolCalls)
    calls.push_back(toolCallJson(c));
  return withNode({{"result",
                    {{"content", e.result.content},
                     {"usage", toJson(e.result.usage)},
                     {"finish_reason", e.result.finishReason},
                     {"tool_calls", std::move(calls)},
                     {"iterations", e.result.iterations}}}},
                  e.nodeId);
}

json eventToJson(const LlmExecutionFailed& e) {
  return withNode({{"error", e.error}, {"error_details", e.errorDetails}}, e.nodeId);
}

json eventToJson(const LlmStreamChunk& e) {
  json j = {{"content", e.content}};
  if (e.iteration > 0) j["iteration"] = e.iteration;
  if (!e.reasoning.empty()) j["reasoning"] = e.reasoning;
  if (!e.partial.is_null()) j["partial"] = e.partial;
  return withNode(std::move(j), e.nodeId);
}

json eventToJson(const StructuredOutputAttempt& e) {
  json j = {{"attempt", e.attempt},
            {"rung_attempt", e.rungAttempt},
            {"rung", e.rung},
            {"refused", e.refused},
            {"valid", e.valid},
            {"errors", e.errors},
            {"error_count", e.errorCount}};
  if (e.usage) j["usage"] = toJson(*e.usage);
  return withNode(std::move(j), e.nodeId);
}

json eventToJson(const TokenLimitExceeded& e) {
  return withNode({{"context_tokens", e.contextTokens}, {"token_limit", e.tokenLimit}}, e.nodeId);
}

json eventToJson(const MessageAdded& e) {
  json j = {{"message", toJson(e.message)}};
  if (e.index >= 0) j["index"] = e.index;
  return withNode(std::move(j), e.nodeId);
}

json eventToJson(const ToolExecutionRequest& e) {
  return withNode({{"tool_call_id", e.toolCall.id},
                   {"tool_name", e.toolCall.name},
                   {"arguments", e.toolCall.arguments},
                   {"timeout_ms", e.executionOptions.timeout.count()},
                   {"retries", e.executionOptions.retries},
                   {"retry_delay_ms", e.executionOptions.retryDelay.count()}},
                  e.nodeId);
}

json eventToJson(const ToolExecutionCompleted& e) {
  json j = {
      {"tool_call_id", e.toolCallId},       {"tool_name", e.toolName},
      {"success", e.result.success},        {"execution_time_us", e.result.executionTime.count()},
      {"retry_count", e.result.retryCount}, {"timed_out", e.result.timedOut}};
  if (e.result.success) {
    j["result"] = e.result.result;
  } else {
    j["error"] = e.result.error;
  }
  return j;
}

json eventToJson(const ToolExecutionFailed& e) {
  return {{"tool_call_id", e.toolCallId},
          {"tool_name", e.toolName},
          {"error", e.error},
          {"error_details", e.errorDetails}};
}

json eventToJson(const ToolExecutionProgress& e) {
  return {{"tool_call_id", e.toolCallId},
          {"tool_name", e.toolName},
          {"message", e.message},
          {"data", e.data}};
}

json eventToJson(const UserInteractionRequested& e) {
  json j = {
      {"interaction_id", e.interactionId}, {"prompt", e.prompt}, {"timeout_ms", e.timeout.count()}};
  if (!e.kind.empty()) j["kind"] = e.kind;
  return withNode(std::move(j), e.nodeId);
}

json eventToJson(const UserInteractionResponded& e) {
  return {{"interaction_id", e.interactionId}, {"response", e.response}};
}

template <>
LlmExecutionRequest eventFromJson<LlmExecutionRequest>(const json& j) {
  LlmExecutionRequest e;
  e.nodeId = read<std::string>(j, "node_id");
  e.nodeType = read<std::string>(j, "node_type", "llm");
  const json d = rawOr(j, "request_data", json::object());
  e.requestData.prompt = read<std::string>(d, "prompt");
  e.requestData.tools = read<std::vector<std::string>>(d, "tools");
  e.requestData.profileId = read<std::string>(d, "profile_id");
  e.requestData.parameters = rawOr(d, "parameters", json::object());
  e.requestData.stream = read<bool>(d, "stream");
  return e;
}

template <>
LlmExecutionCompleted eventFromJson<LlmExecutionCompleted>(const json& j) {
  LlmExecutionCompleted e;
  e.nodeId = read<std::string>(j, "node_id");
  const json r = rawOr(j, "result", json::object());
  e.result.content = read<std::string>(r, "content");
  if (auto usage = usageFromJson(rawOr(r, "usage", json()))) e.result.usage = *usage;
  e.result.finishReason = read<std::string>(r, "finish_reason");
  for (const json& c : rawOr(r, "tool_calls", json::array()))
    e.result.toolCalls.push_back(toolCallFrom(c));
  e.result.iterations = read<int>(r, "iterations");
  return e;
}

template <>
LlmExecutionFailed eventFromJson<LlmExecutionFailed>(const json& j) {
  LlmExecutionFailed e;
  e.nodeId = read<std::string>(j, "node_id");
  e.error = read<std::string>(j, "error");
  e.errorDetails = rawOr(j, "error_details", json::object());
  return e;
}

template <>
LlmStreamChunk eventFromJson<LlmStreamChunk>(const json& j) {
  LlmStreamChunk e;
  e.nodeId = read<std::string>(j, "node_id");
  e.iteration = read<int>(j, "iteration");
  e.content = read<std::string>(j, "content");
  e.reasoning = read<std::string>(j, "reasoning");
  e.partial = rawOr(j, "partial", json());
  return e;
}

template <>
StructuredOutputAttempt eventFromJson<StructuredOutputAttempt>(const json& j) {
  StructuredOutputAttempt e;
  e.nodeId = read<std::string>(j, "node_id");
  e.attempt = read<int>(j, "attempt", 1);
  e.rungAttempt = read<int>(j, "rung_attempt", 1);
  e.rung = read<std::string>(j, "rung");
  e.refused = read<bool>(j, "refused");
  e.valid = read<bool>(j, "valid");
  e.errors = read<std::vector<std::string>>(j, "errors");
  e.errorCount = read<size_t>(j, "error_count");
  e.usage = usageFromJson(rawOr(j, "usage", json()));
  return e;
}

template <>
TokenLimitExceeded eventFromJson<TokenLimitExceeded>(const json& j) {
  TokenLimitExceeded e;
  e.nodeId = read<std::string>(j, "node_id");
  e.contextTokens = read<int64_t>(j, "context_tokens");
  e.tokenLimit = read<int64_t>(j, "token_limit");
  return e;
}

template <>
MessageAdded eventFromJson<MessageAdded>(const json& j) {
  MessageAdded e;
  e.nodeId = read<std::string>(j, "node_id");
  if (auto it = j.find("message"); it != j.end() && it->is_object()) {
    e.message = messageFromJson(*it);
  }
  e.index = read<int64_t>(j, "index", -1);
  return e;
}

template <>
ToolExecutionRequest eventFromJson<ToolExecutionRequest>(const json& j) {
  ToolExecutionRequest e;
  e.nodeId = read<std::string>(j, "node_id");
  e.toolCall.id = read<std::string>(j, "tool_call_id");
  e.toolCall.name = read<std::string>(j, "tool_name");
  e.toolCall.arguments = read<std::string>(j, "arguments");
  e.executionOptions.timeout =
      std::chrono::milliseconds(read<int64_t>(j, "timeout_ms", e.executionOptions.timeout.count()));
  e.executionOptions.retries = read<int>(j, "retries");
  e.executionOptions.retryDelay = std::chrono::milliseconds(read<int64_t>(j, "retry_delay_ms"));
  return e;
}

template <>
ToolExecutionCompleted eventFromJson<ToolExecutionCompleted>(const json& j) {
  ToolExecutionCompleted e;
  e.toolCallId = read<std::string>(j, "tool_call_id");
  e.toolName = read<std::string>(j, "tool_name");
  e.result.success = read<bool>(j, "success");
  e.result.result = rawOr(j, "result", json());
  e.result.error = read<std::string>(j, "error");
  e.result.executionTime = std::chrono::microseconds(read<int64_t>(j, "execution_time_us"));
  e.result.retryCount = read<int>(j, "retry_count");
  e.result.timedOut = read<bool>(j, "timed_out");
  return e;
}

template <>
ToolExecutionFailed eventFromJson<ToolExecutionFailed>(const json& j) {
  ToolExecutionFailed e;
  e.toolCallId = read<std::string>(j, "tool_call_id");
  e.toolName = read<std::string>(j, "tool_name");
  e.error = read<std::string>(j, "error");
  e.errorDetails = rawOr(j, "error_details", json::object());
  return e;
}

template <>
ToolExecutionProgress eventFromJson<ToolExecutionProgress>(const json& j) {
  ToolExecutionProgress e;
  e.toolCallId = read<std::string>(j, "tool_call_id");
  e.toolName = read<std::string>(j, "tool_name");
  e.message = read<std::string>(j, "message");
  e.data = rawOr(j, "data", json::object());
  return e;
}

template <>
UserInteractionRequested eventFromJson<UserInteractionRequested>(const json& j) {
  UserInteractionRequested e;
  e.nodeId = read<std::string>(j, "node_id");
  e.interactionId = read<std::string>(j, "interaction_id");
  e.prompt = read<std::string>(j, "prompt");
  e.timeout = std::chrono::milliseconds(read<int64_t>(j, "timeout_ms"));
  e.kind = read<std::string>(j, "kind");
  return e;
}

template <>
UserInteractionResponded eventFromJson<UserInteractionResponded>(const json& j) {
  UserInteractionResponded e;
  e.interactionId = read<std::string>(j, "interaction_id");
  e.response = read<std::string>(j, "response");
  return e;
}

}  // namespace parley
