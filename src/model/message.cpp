#include "parley/message.hpp"
#include "parley/server_tools.hpp"

#include <unordered_set>
#include <utility>

#include "parley/errors.hpp"
#include "parley/iso_time.hpp"

namespace parley {

namespace {

// Fields the Message struct models; extra may not hold them (except a content parts array).
constexpr std::array<std::string_view, 8> kModelledFields = {
    "role", "content", "tool_calls", "tool_call_id", "name", "usage", "model", "received_at"};

bool isModelled(std::string_view key) {
  for (auto field : kModelledFields) {
    if (field == key) return true;
  }
  return false;
}

std::string typeName(const json& value) {
  return value.type_name();
}

const std::string& requireString(const json& value, const std::string& field) {
  if (!value.is_string()) {
    throw ValidationError(field, "must be a string, got " + typeName(value));
  }
  return value.get_ref<const std::string&>();
}

std::string joinTextParts(const json& parts, const std::string& field) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    const json& part = parts[i];
    const std::string partField = field + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw ValidationError(partField, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      throw ValidationError(partField + ".type", "is required and must be a string");
    }
    if (*type == "text") {
      auto partText = part.find("text");
      if (partText == part.end()) throw ValidationError(partField + ".text", "is required");
      text += requireString(*partText, partField + ".text");
    }
  }
  return text;
}

ToolCall toolCallFromJson(const json& value, const std::string& field) {
  if (!value.is_object()) throw ValidationError(field, "must be an object");
  ToolCall call;
  if (auto id = value.find("id"); id != value.end() && !id->is_null()) {
    call.id = requireString(*id, field + ".id");
  }
  if (auto type = value.find("type"); type != value.end() && !type->is_null()) {
    if (requireString(*type, field + ".type") != "function") {
      throw ValidationError(field + ".type", "must be \"function\"");
    }
  }
  auto function = value.find("function");
  if (function == value.end() || !function->is_object()) {
    throw ValidationError(field + ".function", "is required and must be an object");
  }
  if (auto name = function->find("name"); name != function->end() && !name->is_null()) {
    call.name = requireString(*name, field + ".function.name");
  }
  if (auto args = function->find("arguments"); args != function->end() && !args->is_null()) {
    // Some servers send arguments as an object instead of JSON text; keep it as text.
    call.arguments = args->is_string() ? args->get<std::string>() : args->dump();
  }
  return call;
}

}  // namespace

std::string_view toString(Role role) noexcept {
  switch (role) {
    case Role::System:
      return "system";
    case Role::User:
      return "user";
    case Role::Assistant:
      return "assistant";
    case Role::Tool:
      return "tool";
  }
  return "unknown";
}

std::optional<Role> parseRole(std::string_view name) noexcept {
  if (name == "system" || name == "developer") return Role::System;
  if (name == "user") return Role::User;
  if (name == "assistant") return Role::Assistant;
  if (name == "tool") return Role::Tool;
  return std::nullopt;
}

Role roleFromString(std::string_view name, const std::string& field) {
  if (auto role = parseRole(name)) return *role;
  throw ValidationError(field, "unknown role \"" + std::string(name) +
                                   "\" (expected system, user, assistant or tool)");
}

Message Message::system(std::string content) {
  Message m;
  m.role = Role::System;
  m.content = std::move(content);
  return m;
}

Message Message::user(std::string content) {
  Message m;
  m.role = Role::User;
  m.content = std::move(content);
  return m;
}

Message Message::user(const std::vector<Part>& parts, const PartLimits& limits) {
  Message m;
  m.role = Role::User;
  m.extra["content"] = partsContentJson(parts, limits);
  for (const Part& part : parts) {
    if (part.kind == PartKind::Text) m.content += part.content;
  }
  return m;
}

Message Message::assistant(std::string content, std::vector<ToolCall> toolCalls) {
  Message m;
  m.role = Role::Assistant;
  m.content = std::move(content);
  m.toolCalls = std::move(toolCalls);
  return m;
}

Message Message::tool(std::string toolCallId, std::string content) {
  Message m;
  m.role = Role::Tool;
  m.toolCallId = std::move(toolCallId);
  m.content = std::move(content);
  return m;
}

void validate(const Message& message) {
  if (!parseRole(toString(message.role))) {
    throw ValidationError("message.role", "is not a valid role");
  }
  if (!message.extra.is_object()) {
    throw ValidationError("message.extra", "must be a JSON object");
  }
  for (const auto& [key, value] : message.extra.items()) {
    if (key == "content" && value.is_array()) continue;  // multi-part content, kept verbatim
    if (isModelled(key)) {
      throw ValidationError("message.extra." + key, "shadows a field Message models");
    }
  }
  const bool hasParts = message.extra.contains("content");
  if (message.role != Role::Assistant && !message.toolCalls.empty()) {
    throw ValidationError("message.tool_calls", "only assistant messages carry tool calls, not " +
                                                    std::string(toString(message.role)));
  }
  if (message.content.empty() && !hasParts && !hasProviderContent(message) &&
      !(message.role == Role::Assistant && !message.toolCalls.empty())) {
    throw ValidationError("message.content",
                          "must not be empty for a " + std::string(toString(message.role)) +
                              " message (only an assistant message with tool calls may have "
                              "empty content)");
  }
  if (message.role == Role::Tool && message.toolCallId.empty()) {
    throw ValidationError("message.tool_call_id",
                          "a tool message needs the id of the call it answers");
  }
  if (message.role != Role::Tool && !message.toolCallId.empty()) {
    throw ValidationError("message.tool_call_id", "only tool messages carry a tool_call_id");
  }
  std::unordered_set<std::string_view> ids;
  for (size_t i = 0; i < message.toolCalls.size(); ++i) {
    const ToolCall& call = message.toolCalls[i];
    const std::string field = "message.tool_calls[" + std::to_string(i) + "]";
    if (call.id.empty()) throw ValidationError(field + ".id", "must not be empty");
    if (call.name.empty()) throw ValidationError(field + ".function.name", "must not be empty");
    if (!ids.insert(call.id).second) {
      throw ValidationError(field + ".id", "duplicates the id \"" + call.id + "\" in this message");
    }
  }
}

void normalize(Message& message) {
  for (ToolCall& call : message.toolCalls) {
    if (call.arguments.empty()) call.arguments = "{}";
  }
}

Message messageFromJson(const json& value) {
  if (!value.is_object()) {
    throw ValidationError("message", "must be a JSON object, got " + typeName(value));
  }
  Message message;
  auto role = value.find("role");
  if (role == value.end()) throw ValidationError("message.role", "is required");
  message.role = roleFromString(requireString(*role, "message.role"));

  if (auto content = value.find("content"); content != value.end()) {
    if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      message.content = joinTextParts(*content, "message.content");
      message.extra["content"] = *content;
    } else if (!content->is_null()) {
      throw ValidationError("message.content", "must be a string, null or an array of parts, got " +
                                                   typeName(*content));
    }
  }
  if (auto calls = value.find("tool_calls"); calls != value.end() && !calls->is_null()) {
    if (!calls->is_array()) throw ValidationError("message.tool_calls", "must be an array");
    message.toolCalls.reserve(calls->size());
    for (size_t i = 0; i < calls->size(); ++i) {
      message.toolCalls.push_back(
          toolCallFromJson((*calls)[i], "message.tool_calls[" + std::to_string(i) + "]"));
    }
  }
  if (auto id = value.find("tool_call_id"); id != value.end() && !id->is_null()) {
    message.toolCallId = requireString(*id, "message.tool_call_id");
  }
  if (auto name = value.find("name"); name != value.end() && !name->is_null()) {
    message.name = requireString(*name, "message.name");
  }
  if (auto usage = value.find("usage"); usage != value.end() && !usage->is_null()) {
    if (!usage->is_object()) {
      throw ValidationError("message.usage", "must be an object, got " + typeName(*usage));
    }
    message.usage = usageFromJson(*usage);
  }
  if (auto model = value.find("model"); model != value.end() && !model->is_null()) {
    message.model = requireString(*model, "message.model");
  }
  if (auto at = value.find("received_at"); at != value.end() && !at->is_null()) {
    message.receivedAt = parseIsoTime(requireString(*at, "message.received_at"));
    if (!message.receivedAt) {
      throw ValidationError("message.received_at",
                            "must be an ISO 8601 UTC time such as 2025-01-31T12:00:00.000Z");
    }
  }
  for (const auto& [key, field] : value.items()) {
    if (!isModelled(key)) message.extra[key] = field;
  }
  validate(message);
  return message;
}

json toJson(const Message& message, const MessageJsonOptions& options) {
  json out = json::object();
  out["role"] = toString(message.role);
  if (auto parts = message.extra.find("content"); parts != message.extra.end()) {
    out["content"] = *parts;
  } else if (!message.content.empty() || message.toolCalls.empty()) {
    out["content"] = message.content;
  } else {
    switch (options.emptyToolCallContent) {
      case EmptyContent::Null:
        out["content"] = nullptr;
        break;
      case EmptyContent::EmptyString:
        out["content"] = "";
        break;
      case EmptyContent::Omit:
        break;
    }
  }
  if (!message.name.empty()) out["name"] = message.name;
  if (!message.toolCalls.empty()) {
    json calls = json::array();
    for (const ToolCall& call : message.toolCalls) {
      calls.push_back(
          {{"id", call.id},
           {"type", "function"},
           {"function",
            {{"name", call.name}, {"arguments", call.arguments.empty() ? "{}" : call.arguments}}}});
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!message.toolCallId.empty()) out["tool_call_id"] = message.toolCallId;
  for (const auto& [key, value] : message.extra.items()) {
    if (!isModelled(key)) out[key] = value;
  }
  if (message.usage) out["usage"] = toJson(*message.usage);
  if (!message.model.empty()) out["model"] = message.model;
  if (message.receivedAt) out["received_at"] = isoTime(*message.receivedAt);
  return out;
}

std::vector<Message> messagesFromJson(const json& array) {
  if (!array.is_array()) throw ValidationError("messages", "must be a JSON array");
  std::vector<Message> messages;
  messages.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    try {
      messages.push_back(messageFromJson(array[i]));
    } catch (const ValidationError& e) {
      // "message.role" -> "messages[3].role"
      std::string field = e.field();
      const std::string prefix = "messages[" + std::to_string(i) + "]";
      field = field.rfind("message", 0) == 0 ? prefix + field.substr(7) : prefix + "." + field;
      throw ValidationError(field, e.reason());
    }
  }
  return messages;
}

json toJson(const std::vector<Message>& messages, const MessageJsonOptions& options) {
  json out = json::array();
  for (const Message& m : messages)
    out.push_back(toJson(m, options));
  return out;
}

}  // namespace parley
