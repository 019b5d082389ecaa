#include "parley/event_log.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>

#include "model/secrets.hpp"
#include "parley/iso_time.hpp"

namespace parley {
namespace {

nlohmann::json header(const EventHeader& e) {
  return eventHeaderToJson(e);
}

nlohmann::json redacted(const nlohmann::json& value) {
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : value.items())
      out[k] = detail::looksSecret(k) ? nlohmann::json("[redacted]") : redacted(v);
    return out;
  }
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : value)
      out.push_back(redacted(v));
    return out;
  }
  return value;
}

}  // namespace

nlohmann::json describeEvent(const LlmExecutionRequest& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["node_type"] = e.nodeType;
  j["profile_id"] = e.requestData.profileId;
  j["stream"] = e.requestData.stream;
  j["prompt_bytes"] = e.requestData.prompt.size();
  j["tools"] = e.requestData.tools;
  j["parameters"] = redacted(e.requestData.parameters);
  j["has_context_snapshot"] = !e.contextSnapshot.isNull();
  return j;
}

nlohmann::json describeEvent(const LlmExecutionCompleted& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["finish_reason"] = e.result.finishReason;
  j["iterations"] = e.result.iterations;
  j["content_bytes"] = e.result.content.size();
  j["tool_calls"] = e.result.toolCalls.size();
  j["usage"] = {{"prompt_tokens", e.result.usage.promptTokens},
                {"completion_tokens", e.result.usage.completionTokens},
                {"total_tokens", e.result.usage.totalTokens}};
  return j;
}

nlohmann::json describeEvent(const LlmExecutionFailed& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["error"] = e.error;
  j["error_details"] = redacted(e.errorDetails);
  return j;
}

nlohmann::json describeEvent(const LlmStreamChunk& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["iteration"] = e.iteration;
  j["content_bytes"] = e.content.size();
  j["reasoning_bytes"] = e.reasoning.size();
  if (!e.partial.is_null()) j["has_partial"] = true;
  return j;
}

nlohmann::json describeEvent(const StructuredOutputAttempt& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["attempt"] = e.attempt;
  j["rung_attempt"] = e.rungAttempt;
  j["rung"] = e.rung;
  j["refused"] = e.refused;
  j["valid"] = e.valid;
  j["errors"] = e.errors;
  j["error_count"] = e.errorCount;
  if (e.usage) {
    j["usage"] = {{"prompt_tokens", e.usage->promptTokens},
                  {"completion_tokens", e.usage->completionTokens},
                  {"total_tokens", e.usage->totalTokens}};
  }
  return j;
}

nlohmann::json describeEvent(const TokenLimitExceeded& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["context_tokens"] = e.contextTokens;
  j["token_limit"] = e.tokenLimit;
  return j;
}

nlohmann::json describeEvent(const MessageAdded& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["role"] = std::string(toString(e.message.role));
  j["content_bytes"] = e.message.content.size();
  j["tool_calls"] = e.message.toolCalls.size();
  if (!e.message.toolCallId.empty()) j["tool_call_id"] = e.message.toolCallId;
  return j;
}

nlohmann::json describeEvent(const ToolExecutionRequest& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["tool_call_id"] = e.toolCall.id;
  j["tool"] = e.toolCall.name;
  j["arguments_bytes"] = e.toolCall.arguments.size();
  j["timeout_ms"] = e.executionOptions.timeout.count();
  j["retries"] = e.executionOptions.retries;
  return j;
}

nlohmann::json describeEvent(const ToolExecutionCompleted& e) {
  auto j = header(e);
  j["tool_call_id"] = e.toolCallId;
  j["success"] = e.result.success;
  if (!e.result.success) j["error"] = e.result.error;
  j["execution_time_us"] = e.result.executionTime.count();
  j["retry_count"] = e.result.retryCount;
  return j;
}

nlohmann::json describeEvent(const ToolExecutionFailed& e) {
  auto j = header(e);
  j["tool_call_id"] = e.toolCallId;
  j["error"] = e.error;
  j["error_details"] = redacted(e.errorDetails);
  return j;
}

nlohmann::json describeEvent(const ToolExecutionProgress& e) {
  auto j = header(e);
  j["tool_call_id"] = e.toolCallId;
  j["message_bytes"] = e.message.size();
  return j;
}

nlohmann::json describeEvent(const UserInteractionRequested& e) {
  auto j = header(e);
  j["node_id"] = e.nodeId;
  j["interaction_id"] = e.interactionId;
  j["timeout_ms"] = e.timeout.count();
  return j;
}

nlohmann::json describeEvent(const UserInteractionResponded& e) {
  auto j = header(e);
  j["interaction_id"] = e.interactionId;
  j["response_bytes"] = e.response.size();
  return j;
}

EventLog::EventLog(EventBus& bus, std::ostream& out, EventLogOptions options) : out_(out) {
  auto add = [&]<typename Event>(Event*) {
    subscriptions_.push_back(
        bus.subscribe<Event>([this](const Event& e) { write(describeEvent(e)); }));
  };
  add(static_cast<LlmExecutionRequest*>(nullptr));
  add(static_cast<LlmExecutionCompleted*>(nullptr));
  add(static_cast<LlmExecutionFailed*>(nullptr));
  if (options.streamChunks) add(static_cast<LlmStreamChunk*>(nullptr));
  add(static_cast<StructuredOutputAttempt*>(nullptr));
  add(static_cast<TokenLimitExceeded*>(nullptr));
  add(static_cast<MessageAdded*>(nullptr));
  add(static_cast<ToolExecutionRequest*>(nullptr));
  add(static_cast<ToolExecutionCompleted*>(nullptr));
  add(static_cast<ToolExecutionFailed*>(nullptr));
  add(static_cast<ToolExecutionProgress*>(nullptr));
  add(static_cast<UserInteractionRequested*>(nullptr));
  add(static_cast<UserInteractionResponded*>(nullptr));
}

EventLog::~EventLog() {
  subscriptions_.clear();
}

void EventLog::write(const nlohmann::json& line) {
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mutex_);
  out_ << text << std::flush;
}

}  // namespace parley
