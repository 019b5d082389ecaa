// The message model: roles, tool calls and chat messages in OpenAI's chat shape.
//
// A Message is a plain value. History is kept in OpenAI chat shape natively; fields a message
// carries that parley does not model (e.g. a provider's `reasoning_content`) are kept in
// `extra` and written back by toJson(), so nothing a server sent is lost on a round trip.
//
// Thread-safety: values; no shared state.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/part.hpp"
#include "parley/usage.hpp"

namespace parley {

using json = nlohmann::json;

enum class Role { System, User, Assistant, Tool };

inline constexpr std::array<Role, 4> kAllRoles = {Role::System, Role::User, Role::Assistant,
                                                  Role::Tool};

// "system", "user", "assistant", "tool".
std::string_view toString(Role role) noexcept;
// The role named `name`, or nullopt. OpenAI's "developer" role is read as System.
std::optional<Role> parseRole(std::string_view name) noexcept;
// As parseRole(), but an unknown name throws ValidationError naming `field`.
Role roleFromString(std::string_view name, const std::string& field = "message.role");

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text exactly as the model wrote it; "" means {}

  bool operator==(const ToolCall&) const = default;
};

struct Message {
  Role role = Role::User;
  std::string content;
  std::vector<ToolCall> toolCalls;  // assistant messages only
  std::string toolCallId;           // tool messages only: the call this message answers
  std::string name;                 // optional participant name
  json extra = json::object();      // fields parley does not model, written back verbatim
  // On a model's reply: what the call that produced it cost, as the API reported it. Kept by
  // snapshots and stores (JSON key "usage") so a history can show per-turn usage; never sent
  // to a model.
  std::optional<TokenUsage> usage;
  // On a model's reply: the model that wrote it (as the server named it, else as it was asked
  // for) and when the reply was received. Kept by snapshots and stores (JSON keys "model" and
  // "received_at", ISO 8601 UTC with milliseconds) so a history can say who answered when and
  // price each reply; never sent to a model. Empty / nullopt on messages of other kinds and on
  // replies stored before parley kept them.
  std::string model;
  std::optional<std::chrono::system_clock::time_point> receivedAt;

  bool operator==(const Message&) const = default;

  static Message system(std::string content);
  static Message user(std::string content);
  // A user message made of parts (text, images, audio, files): content is their text joined,
  // extra["content"] their Chat Completions form (part.hpp). Throws ValidationError past `limits`
  // or for an empty list.
  static Message user(const std::vector<Part>& parts, const PartLimits& limits = {});
  static Message assistant(std::string content, std::vector<ToolCall> toolCalls = {});
  static Message tool(std::string toolCallId, std::string content);
};

// Checks the rules every stored message obeys (docs/architecture.md, "Messages"):
// - content is empty only on an assistant message that carries at least one tool call
//   (a multi-part content array kept in extra["content"] counts as content);
// - only assistant messages carry tool calls; each call has a non-empty id, unique in the
//   message, and a non-empty name;
// - a tool message has a toolCallId; no other role has one;
// - extra is a JSON object and does not shadow a modelled field.
// Throws ValidationError whose field is e.g. "message.content" or "message.tool_calls[1].id".
void validate(const Message& message);

// How an assistant message with tool calls and no text sends its content. Servers disagree:
// OpenAI documents null, some servers reject null and want "", some want the key omitted.
enum class EmptyContent { Null, EmptyString, Omit };

struct MessageJsonOptions {
  EmptyContent emptyToolCallContent = EmptyContent::Null;
};

// Puts a message in the canonical form stores keep: a tool call's empty arguments become "{}".
void normalize(Message& message);

// Reads one OpenAI chat message. `content` may be a string, null, absent, or an array of
// parts (its text parts are joined into content and the array itself is kept in extra so
// it is written back as it came). Unknown fields go to extra. Validates the result; throws
// ValidationError naming the field on bad input.
Message messageFromJson(const json& value);

// Writes one OpenAI chat message.
json toJson(const Message& message, const MessageJsonOptions& options = {});

// Many at once; field names in errors carry the index ("messages[3].role").
std::vector<Message> messagesFromJson(const json& array);
json toJson(const std::vector<Message>& messages, const MessageJsonOptions& options = {});

}  // namespace parley
