// The GenAI spans and metrics of the turn loop (docs/telemetry.md): `invoke_agent` per run and
// `chat {model}` per model call, with their attributes and the client metrics of the semantic
// conventions. Internal to the core; everything here does nothing when telemetry is off.
#pragma once

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/cost.hpp"
#include "parley/llm.hpp"
#include "parley/message.hpp"
#include "parley/telemetry.hpp"
#include "parley/usage.hpp"

namespace parley::detail {

// Messages in the conventions' JSON shape (gen_ai.input.messages: [{"role", "parts": [...]}]),
// from the OpenAI-shaped messages parley keeps; system messages go to `system` (the shape of
// gen_ai.system_instructions) when it is given. Values of keys that name a credential in tool
// arguments and results are redacted.
nlohmann::json genAiMessages(const std::vector<nlohmann::json>& openAiMessages,
                             nlohmann::json* system);
// One assistant reply as gen_ai.output.messages.
nlohmann::json genAiOutputMessages(const Message& reply, const std::string& finishReason);

// One model call's span and metrics.
class ChatTelemetry {
 public:
  ChatTelemetry(const LlmClient& llm, const ChatRequest& request,
                const std::string& conversationId);
  bool recording() const noexcept { return span_.recording(); }
  // A streamed delta arrived (the first one sets the time to first chunk).
  void chunk() noexcept;
  // With `prices` (ConversationOptions::budget.prices) and the requested model priced, the span
  // says what the call cost (parley.cost.usd: its tokens and web searches).
  void finish(const ChatResult& result, const PriceTable* prices = nullptr);
  void fail(const std::exception& e);

 private:
  void recordMetrics(const std::string& errorType, const std::optional<TokenUsage>& usage,
                     const std::string& responseModel);
  Span span_;
  LlmEndpoint endpoint_;
  std::string requestModel_;
  std::chrono::steady_clock::time_point start_;
  std::optional<double> firstChunkSeconds_;
};

// The attributes every GenAI span of a run shares.
void describeAgent(Span& span, const LlmClient* llm, const std::string& model,
                   const std::string& conversationId);
// The usage attributes (gen_ai.usage.*) of a reply or of a run's sum.
void describeUsage(Span& span, const TokenUsage& usage);

}  // namespace parley::detail
