#include "client/request_body.hpp"

#include <cstring>

#include "client/json_writer.hpp"
#include "client/provider_fields.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

namespace {

nlohmann::json responseFormatJson(const ResponseFormat& format) {
  switch (format.kind) {
    case ResponseFormat::Kind::Text:
      return {{"type", "text"}};
    case ResponseFormat::Kind::JsonObject:
      return {{"type", "json_object"}};
    case ResponseFormat::Kind::JsonSchema:
      if (format.schemaName.empty()) {
        throw ValidationError("request.response_format.json_schema.name", "must not be empty");
      }
      return {
          {"type", "json_schema"},
          {"json_schema",
           {{"name", format.schemaName}, {"schema", format.schema}, {"strict", format.strict}}}};
  }
  return nullptr;
}

// Whether an encoded message has fields parley does not model. encodeMessage() writes them right
// after the role, so the answer is at a fixed place and most messages are never searched.
bool hasExtraFields(std::string_view text) {
  constexpr std::string_view kRole = "{\"role\":\"";
  if (text.substr(0, kRole.size()) != kRole) return true;  // written elsewhere: search it
  const size_t end = text.find('"', kRole.size());
  if (end == std::string_view::npos) return true;
  const std::string_view rest = text.substr(end + 1);
  for (std::string_view next :
       {",\"content\":", ",\"name\":", ",\"tool_calls\":", ",\"tool_call_id\":", "}"}) {
    if (rest.substr(0, next.size()) == next) return false;
  }
  return true;
}

// Whether encoded message text may hold one of `keys` as a field name ("key":). A false hit
// (the text of a content) only costs a re-encoding.
bool mayHoldKey(std::string_view text, std::span<const std::string_view> keys) {
  if (!hasExtraFields(text)) return false;
  for (std::string_view key : keys) {
    const void* at = memmem(text.data(), text.size(), key.data(), key.size());
    if (at) return true;
  }
  return false;
}

}  // namespace

const std::string& requestModel(const ChatRequest& request, const ClientOptions& options) {
  const std::string& model = request.model.empty() ? options.model : request.model;
  if (model.empty()) {
    throw ValidationError("request.model", "no model given (set it in the request or the client)");
  }
  return model;
}

std::vector<Message> requestMessages(const ChatRequest& request) {
  if (request.messages.empty() && request.encodedMessages.empty()) {
    throw ValidationError("request.messages", "must not be empty");
  }
  std::vector<Message> messages;
  messages.reserve(request.encodedMessages.size() + request.messages.size());
  for (size_t i = 0; i < request.encodedMessages.size(); ++i) {
    const auto& encoded = request.encodedMessages[i];
    const std::string field = "request.encodedMessages[" + std::to_string(i) + "]";
    if (!encoded || encoded->empty()) throw ValidationError(field, "is empty");
    const nlohmann::json value = nlohmann::json::parse(*encoded, nullptr, false);
    if (value.is_discarded()) throw ValidationError(field, "is not JSON");
    messages.push_back(messageFromJson(value));
  }
  messages.insert(messages.end(), request.messages.begin(), request.messages.end());
  return messages;
}

std::string buildRequestBody(const ChatRequest& request, const ClientOptions& options,
                             bool stream) {
  const std::string& model = requestModel(request, options);
  if (request.messages.empty() && request.encodedMessages.empty()) {
    throw ValidationError("request.messages", "must not be empty");
  }
  if (!request.tools.is_null() && !request.tools.is_array()) {
    throw ValidationError("request.tools", "must be a JSON array of tool definitions");
  }
  if (!request.extra.is_null() && !request.extra.is_object()) {
    throw ValidationError("request.extra", "must be a JSON object");
  }
  if (!options.defaultParameters.is_null() && !options.defaultParameters.is_object()) {
    throw ValidationError("options.defaultParameters", "must be a JSON object");
  }

  // Everything but the messages: small, so a json value is fine.
  nlohmann::json params =
      options.defaultParameters.is_object() ? options.defaultParameters : nlohmann::json::object();
  params.erase("messages");
  params["model"] = model;
  if (request.tools.is_array() && !request.tools.empty()) params["tools"] = request.tools;
  if (!request.toolChoice.is_null()) params["tool_choice"] = request.toolChoice;
  if (request.parallelToolCalls) params["parallel_tool_calls"] = *request.parallelToolCalls;
  if (request.maxTokens) {
    params[options.maxTokensField == MaxTokensField::MaxTokens ? "max_tokens"
                                                               : "max_completion_tokens"] =
        *request.maxTokens;
  }
  if (request.temperature) params["temperature"] = *request.temperature;
  if (request.topP) params["top_p"] = *request.topP;
  if (!request.stop.empty()) params["stop"] = request.stop;
  if (request.seed) params["seed"] = *request.seed;
  if (request.responseFormat)
    params["response_format"] = responseFormatJson(*request.responseFormat);
  if (!options.promptCacheKey.empty()) params["prompt_cache_key"] = options.promptCacheKey;
  if (stream) {
    params["stream"] = true;
    if (options.includeUsage) params["stream_options"] = {{"include_usage", true}};
  } else {
    params.erase("stream");
    params.erase("stream_options");
  }
  if (request.extra.is_object()) {
    for (const auto& [key, value] : request.extra.items()) {
      if (key == "messages") {
        throw ValidationError("request.extra.messages",
                              "messages go in ChatRequest::messages, not in extra");
      }
      params[key] = value;
    }
  }

  const MessageJsonOptions messageOptions{options.emptyToolCallContent};
  // Provider fields this endpoint must not get (provider_fields.hpp): messages that hold one
  // are written again without it.
  const std::vector<std::string_view> dropped = chatDroppedKeys(options);
  size_t size = 64;
  for (const auto& encoded : request.encodedMessages)
    size += encoded ? encoded->size() + 1 : 0;
  for (const Message& m : request.messages)
    size += m.content.size() + 64;
  std::string body;
  body.reserve(size + 256);
  body.append("{\"messages\":[");
  bool first = true;
  for (size_t i = 0; i < request.encodedMessages.size(); ++i) {
    const auto& encoded = request.encodedMessages[i];
    if (!encoded || encoded->empty()) {
      throw ValidationError("request.encodedMessages[" + std::to_string(i) + "]", "is empty");
    }
    if (!first) body.push_back(',');
    first = false;
    if (mayHoldKey(*encoded, dropped)) {
      const nlohmann::json value = nlohmann::json::parse(*encoded, nullptr, false);
      if (value.is_discarded()) {
        throw ValidationError("request.encodedMessages[" + std::to_string(i) + "]", "is not JSON");
      }
      appendMessageJson(body, messageFromJson(value), messageOptions, dropped);
    } else {
      body.append(*encoded);
    }
  }
  for (const Message& m : request.messages) {
    if (!first) body.push_back(',');
    first = false;
    appendMessageJson(body, m, messageOptions, dropped);
  }
  body.push_back(']');
  const std::string rest = params.dump();  // "{...}" with at least "model"
  body.push_back(',');
  body.append(rest, 1, std::string::npos);
  return body;
}

}  // namespace parley::detail
