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
  nlohmann::json j = {{"type", e.type},
                      {"time", isoTime(e.timestamp)},
                      {"workflowId", e.workflowId},
                      {"threadId", e.threadId},
                      {"traceId", e.traceId}};
  if (!e.spanId.empty()) j["spanId"] = e.spanId;
  return j;
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
  j["nodeId"] = e.nodeId;
  j["nodeType"] = e.nodeType;
  j["profileId"] = e.requestData.profileId;
  j["stream"] = e.requestData.stream;
  j["promptBytes"] = e.requestData.prompt.size();
  j["tools"] = e.requestData.tools;
  j["parameters"] = redacted(e.requestData.parameters);
  j["hasContextSnapshot"] = !e.contextSnapshot.isNull();
  return j;
}

nlohmann::json describeEvent(const LlmExecutionCompleted& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["finishReason"] = e.result.finishReason;
  j["iterations"] = e.result.iterations;
  j["contentBytes"] = e.result.content.size();
  j["toolCalls"] = e.result.toolCalls.size();
  j["usage"] = {{"promptTokens", e.result.usage.promptTokens},
                {"completionTokens", e.result.usage.completionTokens},
                {"totalTokens", e.result.usage.totalTokens}};
  return j;
}

nlohmann::json describeEvent(const LlmExecutionFailed& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["error"] = e.error;
  j["errorDetails"] = redacted(e.errorDetails);
  return j;
}

nlohmann::json describeEvent(const LlmStreamChunk& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["iteration"] = e.iteration;
  j["contentBytes"] = e.content.size();
  j["reasoningBytes"] = e.reasoning.size();
  if (!e.partial.is_null()) j["hasPartial"] = true;
  return j;
}

nlohmann::json describeEvent(const StructuredOutputAttempt& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["attempt"] = e.attempt;
  j["rungAttempt"] = e.rungAttempt;
  j["rung"] = e.rung;
  j["refused"] = e.refused;
  j["valid"] = e.valid;
  j["errors"] = e.errors;
  j["errorCount"] = e.errorCount;
  if (e.usage) {
    j["usage"] = {{"promptTokens", e.usage->promptTokens},
                  {"completionTokens", e.usage->completionTokens},
                  {"totalTokens", e.usage->totalTokens}};
  }
  return j;
}

nlohmann::json describeEvent(const TokenLimitExceeded& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["contextTokens"] = e.contextTokens;
  j["tokenLimit"] = e.tokenLimit;
  return j;
}

nlohmann::json describeEvent(const MessageAdded& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["role"] = std::string(toString(e.message.role));
  j["contentBytes"] = e.message.content.size();
  j["toolCalls"] = e.message.toolCalls.size();
  if (!e.message.toolCallId.empty()) j["toolCallId"] = e.message.toolCallId;
  return j;
}

nlohmann::json describeEvent(const ToolExecutionRequest& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["toolCallId"] = e.toolCall.id;
  j["tool"] = e.toolCall.name;
  j["argumentsBytes"] = e.toolCall.arguments.size();
  j["timeoutMs"] = e.executionOptions.timeout.count();
  j["retries"] = e.executionOptions.retries;
  return j;
}

nlohmann::json describeEvent(const ToolExecutionCompleted& e) {
  auto j = header(e);
  j["toolCallId"] = e.toolCallId;
  j["success"] = e.result.success;
  if (!e.result.success) j["error"] = e.result.error;
  j["executionTimeUs"] = e.result.executionTime.count();
  j["retryCount"] = e.result.retryCount;
  return j;
}

nlohmann::json describeEvent(const ToolExecutionFailed& e) {
  auto j = header(e);
  j["toolCallId"] = e.toolCallId;
  j["error"] = e.error;
  j["errorDetails"] = redacted(e.errorDetails);
  return j;
}

nlohmann::json describeEvent(const UserInteractionRequested& e) {
  auto j = header(e);
  j["nodeId"] = e.nodeId;
  j["interactionId"] = e.interactionId;
  j["timeoutMs"] = e.timeout.count();
  return j;
}

nlohmann::json describeEvent(const UserInteractionResponded& e) {
  auto j = header(e);
  j["interactionId"] = e.interactionId;
  j["responseBytes"] = e.response.size();
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
