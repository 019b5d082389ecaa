#include "core/gen_ai_telemetry.hpp"

#include "model/secrets.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/server_tools.hpp"

namespace parley::detail {

namespace {

using nlohmann::json;

json textPart(const std::string& text) {
  return {{"type", "text"}, {"content", text}};
}

// Tool arguments and results are JSON text; kept as JSON when they parse (the conventions'
// "any"), else as the text.
json jsonOrText(const std::string& text) {
  json parsed = parseJson(text, {}, false);
  if (parsed.is_discarded()) return text;
  return redactSecretKeys(std::move(parsed));
}

// A chat content part (OpenAI shape) in the conventions' shape.
json contentPart(const json& part) {
  const std::string type = part.value("type", "");
  if (type == "text" && part.contains("text")) return textPart(part.value("text", ""));
  if (type == "image_url") {
    const json& image = part.contains("image_url") ? part["image_url"] : json();
    const std::string url = image.is_object() ? image.value("url", "") : "";
    if (url.rfind("data:", 0) == 0) {
      // data:<mime>;base64,<content>
      const size_t semi = url.find(';'), comma = url.find(',');
      json blob = {{"type", "blob"}, {"modality", "image"}};
      if (semi != std::string::npos) blob["mime_type"] = url.substr(5, semi - 5);
      blob["content"] = comma == std::string::npos ? "" : url.substr(comma + 1);
      return blob;
    }
    return {{"type", "uri"}, {"modality", "image"}, {"uri", url}};
  }
  if (type == "input_audio") {
    const json& audio = part.contains("input_audio") ? part["input_audio"] : json();
    json blob = {{"type", "blob"}, {"modality", "audio"}};
    if (audio.is_object()) {
      blob["mime_type"] = "audio/" + audio.value("format", "wav");
      blob["content"] = audio.value("data", "");
    }
    return blob;
  }
  return {{"type", type.empty() ? "unknown" : type}};
}

}  // namespace

json genAiMessages(const std::vector<json>& messages, json* system) {
  json out = json::array();
  for (const json& m : messages) {
    if (!m.is_object()) continue;
    const std::string role = m.value("role", "user");
    json parts = json::array();
    if (auto reasoning = m.find("reasoning_content");
        reasoning != m.end() && reasoning->is_string() &&
        !reasoning->get_ref<const std::string&>().empty()) {
      parts.push_back({{"type", "reasoning"}, {"content", *reasoning}});
    }
    const auto content = m.find("content");
    if (role == "tool") {
      const std::string text =
          content != m.end() && content->is_string() ? content->get<std::string>() : std::string();
      parts.push_back({{"type", "tool_call_response"},
                       {"id", m.value("tool_call_id", "")},
                       {"response", jsonOrText(text)}});
    } else if (content != m.end() && content->is_string()) {
      if (!content->get_ref<const std::string&>().empty())
        parts.push_back(textPart(content->get<std::string>()));
    } else if (content != m.end() && content->is_array()) {
      for (const json& part : *content)
        if (part.is_object()) parts.push_back(contentPart(part));
    }
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
      for (const json& call : *calls) {
        if (!call.is_object()) continue;
        const json& function = call.contains("function") ? call["function"] : json::object();
        parts.push_back({{"type", "tool_call"},
                         {"id", call.value("id", "")},
                         {"name", function.value("name", "")},
                         {"arguments", jsonOrText(function.value("arguments", "{}"))}});
      }
    }
    if (role == "system" && system) {
      for (json& part : parts)
        system->push_back(std::move(part));
      continue;
    }
    json message = {{"role", role}, {"parts", std::move(parts)}};
    if (auto name = m.find("name"); name != m.end() && name->is_string()) message["name"] = *name;
    out.push_back(std::move(message));
  }
  return out;
}

json genAiOutputMessages(const Message& reply, const std::string& finishReason) {
  json parts = json::array();
  if (auto reasoning = reply.extra.find("reasoning_content");
      reasoning != reply.extra.end() && reasoning->is_string()) {
    parts.push_back({{"type", "reasoning"}, {"content", *reasoning}});
  }
  if (!reply.content.empty()) parts.push_back(textPart(reply.content));
  for (const ToolCall& call : reply.toolCalls) {
    parts.push_back({{"type", "tool_call"},
                     {"id", call.id},
                     {"name", call.name},
                     {"arguments", jsonOrText(call.arguments.empty() ? "{}" : call.arguments)}});
  }
  for (const ServerToolCall& call : serverToolCallsOf(reply)) {
    parts.push_back(
        {{"type", "server_tool_call"},
         {"id", call.id},
         {"name", call.name},
         {"server_tool_call", {{"type", call.name}, {"input", jsonOrText(call.input)}}}});
  }
  // The conventions' reasons: stop, length, content_filter, tool_call, error.
  std::string reason = finishReason == "tool_calls" ? "tool_call" : finishReason;
  if (reason.empty()) reason = "stop";
  return json::array(
      {{{"role", "assistant"}, {"parts", std::move(parts)}, {"finish_reason", reason}}});
}

void describeUsage(Span& span, const TokenUsage& usage) {
  if (!span.recording()) return;
  const BilledTokens billed = billedTokens(usage);
  span.set("gen_ai.usage.input_tokens", usage.promptTokens);
  span.set("gen_ai.usage.output_tokens", usage.completionTokens);
  if (billed.cachedInput) span.set("gen_ai.usage.cache_read.input_tokens", billed.cachedInput);
  if (billed.cacheWrite) span.set("gen_ai.usage.cache_creation.input_tokens", billed.cacheWrite);
  if (billed.reasoning) span.set("gen_ai.usage.reasoning.output_tokens", billed.reasoning);
}

void describeAgent(Span& span, const LlmClient* llm, const std::string& model,
                   const std::string& conversationId) {
  if (!span.recording()) return;
  span.set("gen_ai.operation.name", "invoke_agent");
  if (llm) {
    const LlmEndpoint endpoint = llm->endpoint();
    if (!endpoint.provider.empty()) span.set("gen_ai.provider.name", endpoint.provider);
    const std::string& requested = model.empty() ? endpoint.defaultModel : model;
    if (!requested.empty()) span.set("gen_ai.request.model", requested);
    if (!endpoint.address.empty()) {
      span.set("server.address", endpoint.address);
      if (endpoint.port) span.set("server.port", endpoint.port);
    }
  }
  if (!conversationId.empty()) span.set("gen_ai.conversation.id", conversationId);
}

ChatTelemetry::ChatTelemetry(const LlmClient& llm, const ChatRequest& request,
                             const std::string& conversationId) {
  if (!telemetryEnabled()) return;
  endpoint_ = llm.endpoint();
  requestModel_ = request.model.empty() ? endpoint_.defaultModel : request.model;
  span_ = Span("chat", requestModel_, SpanKind::Client);
  start_ = std::chrono::steady_clock::now();
  if (!span_.recording()) return;
  span_.set("gen_ai.operation.name", "chat");
  if (!endpoint_.provider.empty()) span_.set("gen_ai.provider.name", endpoint_.provider);
  if (!requestModel_.empty()) span_.set("gen_ai.request.model", requestModel_);
  if (!endpoint_.address.empty()) {
    span_.set("server.address", endpoint_.address);
    if (endpoint_.port) span_.set("server.port", endpoint_.port);
  }
  if (!conversationId.empty()) span_.set("gen_ai.conversation.id", conversationId);
  if (request.maxTokens) span_.set("gen_ai.request.max_tokens", *request.maxTokens);
  if (request.temperature) span_.set("gen_ai.request.temperature", *request.temperature);
  if (request.topP) span_.set("gen_ai.request.top_p", *request.topP);
  if (request.seed) span_.set("gen_ai.request.seed", *request.seed);
  if (!request.stop.empty()) span_.set("gen_ai.request.stop_sequences", request.stop);
  if (request.responseFormat && request.responseFormat->kind != ResponseFormat::Kind::Text) {
    span_.set("gen_ai.output.type", "json");
  }
  span_.set("parley.stream", request.stream);
  auto sink = telemetry();
  if (!sink || !sink->captureContent()) return;
  // Opt-in content: the request as sent, in the conventions' shape.
  std::vector<json> messages;
  messages.reserve(request.encodedMessages.size() + request.messages.size());
  for (const auto& text : request.encodedMessages)
    if (text) messages.push_back(parseJson(*text, {}, false));
  for (const Message& m : request.messages)
    messages.push_back(toJson(m));
  json system = json::array();
  json input = genAiMessages(messages, &system);
  span_.set("gen_ai.input.messages", input.dump());
  if (!system.empty()) span_.set("gen_ai.system_instructions", system.dump());
  if (request.tools.is_array() && !request.tools.empty()) {
    span_.set("gen_ai.tool.definitions", request.tools.dump());
  }
}

void ChatTelemetry::chunk() noexcept {
  if (!span_.recording() || firstChunkSeconds_) return;
  firstChunkSeconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ChatTelemetry::finish(const ChatResult& result, const PriceTable* prices) {
  if (!span_.recording()) return;
  if (prices && result.usage) {
    if (const auto price = prices->find(requestModel_)) {
      span_.set("parley.cost.usd",
                costOf(*result.usage, *price) + webSearchCost(result.message, *price));
    }
  }
  if (!result.id.empty()) span_.set("gen_ai.response.id", result.id);
  const std::string& responseModel = !result.model.empty() ? result.model : requestModel_;
  if (!responseModel.empty()) span_.set("gen_ai.response.model", responseModel);
  span_.set("gen_ai.response.finish_reasons",
            std::vector<std::string>{result.finishReason.empty() ? "stop" : result.finishReason});
  if (result.usage) describeUsage(span_, *result.usage);
  if (firstChunkSeconds_) span_.set("gen_ai.response.time_to_first_chunk", *firstChunkSeconds_);
  if (auto sink = telemetry(); sink && sink->captureContent()) {
    span_.set("gen_ai.output.messages",
              genAiOutputMessages(result.message, result.finishReason).dump());
  }
  // Provider-run tools ran inside this call: one span each, under it, with what the reply says.
  for (const ServerToolCall& call : serverToolCallsOf(result.message)) {
    Span tool("execute_tool", call.name, SpanKind::Internal);
    tool.set("gen_ai.operation.name", "execute_tool");
    tool.set("gen_ai.tool.name", call.name);
    if (!call.id.empty()) tool.set("gen_ai.tool.call.id", call.id);
    tool.set("gen_ai.tool.type", "extension");
    tool.set("parley.tool.provider_run", true);
    if (call.status == "failed") tool.setError("tool_error", "the provider says the call failed");
  }
  recordMetrics("", result.usage, responseModel);
  span_.end();
}

void ChatTelemetry::fail(const std::exception& e) {
  if (!span_.recording()) return;
  span_.setError(e);
  std::string type = "_OTHER";
  if (const auto* http = dynamic_cast<const HttpError*>(&e)) {
    type = std::to_string(http->status());
  } else if (const auto* error = dynamic_cast<const Error*>(&e)) {
    type = toString(error->kind());
  }
  recordMetrics(type, std::nullopt, "");
  span_.end();
}

void ChatTelemetry::recordMetrics(const std::string& errorType,
                                  const std::optional<TokenUsage>& usage,
                                  const std::string& responseModel) {
  std::vector<Attribute> attributes;
  attributes.push_back({"gen_ai.operation.name", std::string("chat")});
  if (!endpoint_.provider.empty())
    attributes.push_back({"gen_ai.provider.name", endpoint_.provider});
  if (!requestModel_.empty()) attributes.push_back({"gen_ai.request.model", requestModel_});
  if (!responseModel.empty()) attributes.push_back({"gen_ai.response.model", responseModel});
  if (!endpoint_.address.empty()) {
    attributes.push_back({"server.address", endpoint_.address});
    if (endpoint_.port) attributes.push_back({"server.port", int64_t{endpoint_.port}});
  }
  if (!errorType.empty()) attributes.push_back({"error.type", errorType});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  recordHistogram("gen_ai.client.operation.duration", seconds, attributes);
  if (firstChunkSeconds_) {
    recordHistogram("gen_ai.client.operation.time_to_first_chunk", *firstChunkSeconds_, attributes);
  }
  if (usage) {
    attributes.push_back({"gen_ai.token.type", std::string("input")});
    recordHistogram("gen_ai.client.token.usage", static_cast<double>(usage->promptTokens),
                    attributes);
    attributes.back().value = std::string("output");
    recordHistogram("gen_ai.client.token.usage", static_cast<double>(usage->completionTokens),
                    attributes);
  }
}

}  // namespace parley::detail
