#include "parley/llm.hpp"

#include <algorithm>

#include <simdjson.h>

#include "client/json_writer.hpp"
#include "parley/errors.hpp"

namespace parley {

namespace detail {

void appendJsonString(std::string& out, std::string_view text, const char* field) {
  if (!simdjson::validate_utf8(text.data(), text.size())) {
    throw ValidationError(field, "is not valid UTF-8");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  const char* p = text.data();
  const char* const end = p + text.size();
  const char* run = p;
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(run, p);
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default: {
        const char escaped[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out.append(escaped, sizeof(escaped));
      }
    }
    run = p + 1;
  }
  out.append(run, end);
  out.push_back('"');
}

}  // namespace detail

ResponseFormat ResponseFormat::jsonObject() {
  ResponseFormat format;
  format.kind = Kind::JsonObject;
  return format;
}

ResponseFormat ResponseFormat::jsonSchema(std::string name, nlohmann::json schema, bool strict) {
  ResponseFormat format;
  format.kind = Kind::JsonSchema;
  format.schemaName = std::move(name);
  format.schema = std::move(schema);
  format.strict = strict;
  return format;
}

const char* toString(StructuredOutputMode mode) noexcept {
  switch (mode) {
    case StructuredOutputMode::Auto:
      return "auto";
    case StructuredOutputMode::JsonSchema:
      return "json_schema";
    case StructuredOutputMode::JsonObject:
      return "json_object";
    case StructuredOutputMode::Tool:
      return "tool";
  }
  return "auto";
}

StructuredOutputMode structuredOutputModeFromString(const std::string& name,
                                                    const std::string& field) {
  for (auto mode : {StructuredOutputMode::Auto, StructuredOutputMode::JsonSchema,
                    StructuredOutputMode::JsonObject, StructuredOutputMode::Tool}) {
    if (name == toString(mode)) return mode;
  }
  throw ValidationError(
      field,
      "must be \"auto\", \"json_schema\", \"json_object\" or \"tool\", got \"" + name + "\"");
}

std::vector<ModelInfo> LlmClient::listModels(std::optional<std::chrono::milliseconds>,
                                             std::stop_token) {
  throw ValidationError("listModels", "this client cannot list the endpoint's models");
}

std::string encodeMessage(const Message& message, const MessageJsonOptions& options) {
  std::string out;
  out.reserve(message.content.size() + 64);
  detail::appendMessageJson(out, message, options);
  return out;
}

void detail::appendMessageJson(std::string& out, const Message& message,
                               const MessageJsonOptions& options,
                               std::span<const std::string_view> skipExtra) {
  using detail::appendJsonString;
  out.append("{\"role\":\"");
  out.append(toString(message.role));
  out.push_back('"');
  // Fields parley does not model come right after the role, so that a request writer sees at a
  // fixed place whether a message has any (request_body.cpp).
  if (message.extra.is_object()) {
    for (const auto& [key, value] : message.extra.items()) {
      if (key == "role" || key == "content" || key == "tool_calls" || key == "tool_call_id" ||
          key == "name") {
        continue;
      }
      if (std::find(skipExtra.begin(), skipExtra.end(), key) != skipExtra.end()) continue;
      out.push_back(',');
      appendJsonString(out, key, "message.extra");
      out.push_back(':');
      out.append(value.dump());
    }
  }
  // Content: the same rules as toJson() in message.cpp.
  if (auto parts = message.extra.find("content"); parts != message.extra.end()) {
    out.append(",\"content\":");
    out.append(parts->dump());
  } else if (!message.content.empty() || message.toolCalls.empty()) {
    out.append(",\"content\":");
    appendJsonString(out, message.content, "message.content");
  } else {
    switch (options.emptyToolCallContent) {
      case EmptyContent::Null:
        out.append(",\"content\":null");
        break;
      case EmptyContent::EmptyString:
        out.append(",\"content\":\"\"");
        break;
      case EmptyContent::Omit:
        break;
    }
  }
  if (!message.name.empty()) {
    out.append(",\"name\":");
    appendJsonString(out, message.name, "message.name");
  }
  if (!message.toolCalls.empty()) {
    out.append(",\"tool_calls\":[");
    bool first = true;
    for (const ToolCall& call : message.toolCalls) {
      if (!first) out.push_back(',');
      first = false;
      out.append("{\"id\":");
      appendJsonString(out, call.id, "message.tool_calls.id");
      out.append(",\"type\":\"function\",\"function\":{\"name\":");
      appendJsonString(out, call.name, "message.tool_calls.function.name");
      out.append(",\"arguments\":");
      appendJsonString(out, call.arguments.empty() ? std::string_view("{}") : call.arguments,
                       "message.tool_calls.function.arguments");
      out.append("}}");
    }
    out.push_back(']');
  }
  if (!message.toolCallId.empty()) {
    out.append(",\"tool_call_id\":");
    appendJsonString(out, message.toolCallId, "message.tool_call_id");
  }
  out.push_back('}');
}

}  // namespace parley
