#include "mock/protocol_replies.hpp"

#include <cstdint>
#include <cstdio>

#include "parley/errors.hpp"
#include "parley/part.hpp"

namespace parley::mock {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string hash(std::string_view text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string textOf(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        text += part["text"].get<std::string>();
      }
    }
  }
  return text;
}

// An Anthropic image or document block, or a Responses input_image or input_file item, as the chat
// part it stands for (what the mock's rules see); null for any other block.
json chatPart(const json& block) {
  const std::string type = block.value("type", "");
  if (type == "input_image") {
    json image = {{"url", block.value("image_url", "")}};
    if (block.contains("detail")) image["detail"] = block["detail"];
    return {{"type", "image_url"}, {"image_url", std::move(image)}};
  }
  if (type == "input_file") {
    return {
        {"type", "file"},
        {"file",
         {{"filename", block.value("filename", "")}, {"file_data", block.value("file_data", "")}}}};
  }
  if (type != "image" && type != "document") return nullptr;
  const json source = block.value("source", json::object());
  const std::string kind = source.value("type", "");
  std::string data;
  if (kind == "url") {
    data = source.value("url", "");
  } else if (kind == "base64") {
    data = "data:" + source.value("media_type", "") + ";base64," + source.value("data", "");
  } else if (kind == "text") {
    data = "data:text/plain;base64," + base64Encode(source.value("data", ""));
  } else {
    throw ValidationError("source.type", "unknown source type \"" + kind + "\"");
  }
  if (type == "image") return {{"type", "image_url"}, {"image_url", {{"url", data}}}};
  return {{"type", "file"},
          {"file", {{"filename", block.value("title", "")}, {"file_data", data}}}};
}

// A content array with images or files, as chat parts; null when it holds only text.
json chatParts(const json& content) {
  if (!content.is_array()) return nullptr;
  json parts = json::array();
  bool media = false;
  for (const auto& block : content) {
    if (!block.is_object()) continue;
    const std::string type = block.value("type", "");
    if (type == "text" || type == "input_text") {
      parts.push_back({{"type", "text"}, {"text", block.value("text", "")}});
    } else if (json part = chatPart(block); !part.is_null()) {
      parts.push_back(std::move(part));
      media = true;
    }
  }
  return media ? parts : json();
}

std::string event(std::string_view type, const ojson& data) {
  std::string out = "event: ";
  out.append(type);
  out += "\ndata: ";
  out += data.dump();
  out += "\n\n";
  return out;
}

std::string stopReasonOf(const std::string& finish) {
  if (finish == "stop") return "end_turn";
  if (finish == "tool_calls") return "tool_use";
  if (finish == "length") return "max_tokens";
  return finish;
}

ojson anthropicUsage(const json& usage, bool start) {
  const json details = usage.value("prompt_tokens_details", json::object());
  const int64_t cached = num(details, "cached_tokens");
  const int64_t created = num(details, "cache_creation_tokens");
  ojson out;
  out["input_tokens"] = num(usage, "prompt_tokens") - cached - created;
  out["cache_creation_input_tokens"] = created;
  out["cache_read_input_tokens"] = cached;
  out["output_tokens"] = start ? 1 : num(usage, "completion_tokens");
  return out;
}

ojson responsesUsage(const json& usage) {
  ojson out;
  out["input_tokens"] = num(usage, "prompt_tokens");
  out["input_tokens_details"] = {
      {"cached_tokens",
       num(usage.value("prompt_tokens_details", json::object()), "cached_tokens")}};
  out["output_tokens"] = num(usage, "completion_tokens");
  out["output_tokens_details"] = {
      {"reasoning_tokens",
       num(usage.value("completion_tokens_details", json::object()), "reasoning_tokens")}};
  out["total_tokens"] = num(usage, "prompt_tokens") + num(usage, "completion_tokens");
  return out;
}

std::size_t argumentsChunk(const ConcreteReply& r) {
  return r.argumentsChunkSize > 0 ? r.argumentsChunkSize : 4;
}

// Ids of a Responses reply's items: reasoning rs_, message msg_, calls fc_ (fc_r_ after
// reasoning, which the next request must then carry back).
std::string itemId(const ConcreteReply& r, const char* prefix, std::size_t n) {
  return std::string(prefix) + r.id + "_" + std::to_string(n);
}

std::string callItemId(const ConcreteReply& r, std::size_t n) {
  return itemId(r, r.reasoningContent ? "fc_r_" : "fc_", n);
}

ojson anthropicBlocks(const ConcreteReply& r) {
  ojson content = ojson::array();
  if (r.reasoningContent) {
    content.push_back({{"type", "thinking"},
                       {"thinking", *r.reasoningContent},
                       {"signature", thinkingSignature(*r.reasoningContent)}});
  }
  if (r.content) content.push_back({{"type", "text"}, {"text", *r.content}});
  for (const auto& call : r.toolCalls) {
    ojson input = ojson::parse(call.arguments, nullptr, false);
    if (input.is_discarded() || !input.is_object()) input = ojson::object();
    content.push_back(
        {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}});
  }
  return content;
}

ojson anthropicMessage(const ConcreteReply& r, ojson content, bool start) {
  ojson m;
  m["id"] = r.id;
  m["type"] = "message";
  m["role"] = "assistant";
  m["model"] = r.model;
  m["content"] = std::move(content);
  m["stop_reason"] = start ? ojson() : ojson(stopReasonOf(r.finishReason));
  m["stop_sequence"] = nullptr;
  m["usage"] = anthropicUsage(r.usage, start);
  return m;
}

ojson reasoningItem(const ConcreteReply& r) {
  return {{"id", itemId(r, "rs_", 0)},
          {"type", "reasoning"},
          {"summary", ojson::array({{{"type", "summary_text"}, {"text", *r.reasoningContent}}})},
          {"encrypted_content", encryptedReasoning(*r.reasoningContent)}};
}

ojson textPart(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}};
}

ojson messageItem(const ConcreteReply& r, const std::string& status, ojson content) {
  return {{"id", itemId(r, "msg_", 0)},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

ojson callItem(const ConcreteReply& r, std::size_t i, const std::string& status,
               const std::string& arguments) {
  const auto& call = r.toolCalls[i];
  return {{"id", callItemId(r, i)}, {"type", "function_call"}, {"status", status},
          {"arguments", arguments}, {"call_id", call.id},      {"name", call.name}};
}

ojson responseObject(const ConcreteReply& r, const std::string& status, ojson output) {
  ojson o;
  o["id"] = "resp_" + r.id;
  o["object"] = "response";
  o["created_at"] = r.created;
  o["status"] = status;
  o["error"] = nullptr;
  o["incomplete_details"] =
      status == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson();
  o["model"] = r.model;
  o["output"] = std::move(output);
  o["parallel_tool_calls"] = true;
  o["tool_choice"] = "auto";
  o["tools"] = ojson::array();
  o["usage"] = status == "in_progress" ? ojson() : responsesUsage(r.usage);
  return o;
}

ojson responsesOutput(const ConcreteReply& r) {
  ojson output = ojson::array();
  if (r.reasoningContent) output.push_back(reasoningItem(r));
  if (r.content) {
    output.push_back(messageItem(r, "completed", ojson::array({textPart(*r.content)})));
  }
  for (std::size_t i = 0; i < r.toolCalls.size(); ++i) {
    output.push_back(callItem(r, i, "completed",
                              r.toolCalls[i].arguments.empty() ? "{}" : r.toolCalls[i].arguments));
  }
  return output;
}

}  // namespace

std::string thinkingSignature(std::string_view thinking) {
  return "mocksig_" + hash(thinking);
}

std::string encryptedReasoning(std::string_view summary) {
  return "mockenc_" + hash(summary);
}

json chatRequestFromAnthropic(const json& body) {
  if (!body.is_object()) throw ValidationError("body", "expected a JSON object");
  if (!body.contains("max_tokens") || !body["max_tokens"].is_number_integer()) {
    throw ValidationError("max_tokens", "Field required");
  }
  if (!body.contains("messages") || !body["messages"].is_array()) {
    throw ValidationError("messages", "expected an array of messages");
  }
  json chat = {{"model", body.value("model", "")}, {"stream", body.value("stream", false)}};
  chat["stream_options"] = {{"include_usage", true}};
  json messages = json::array();
  if (body.contains("system"))
    messages.push_back({{"role", "system"}, {"content", textOf(body["system"])}});
  if (body.contains("tools") && body["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : body["tools"]) {
      tools.push_back({{"type", "function"}, {"function", {{"name", t.value("name", "")}}}});
    }
    chat["tools"] = std::move(tools);
  }  // A forced tool (Anthropic {type: tool, name}) as the chat form, for match.tool_choice.
  if (body.contains("tool_choice") && body["tool_choice"].is_object() &&
      body["tool_choice"].value("type", "") == "tool") {
    chat["tool_choice"] = {{"type", "function"},
                           {"function", {{"name", body["tool_choice"].value("name", "")}}}};
  }

  const bool thinking = body.contains("thinking") && body["thinking"].is_object() &&
                        body["thinking"].value("type", "") == "enabled";
  const json& wire = body["messages"];
  size_t lastToolUse = wire.size();  // the last assistant message with a tool_use block
  size_t lastUserText = 0;           // the last user message with more than tool results
  for (size_t i = 0; i < wire.size(); ++i) {
    const json& m = wire[i];
    const std::string field = "messages." + std::to_string(i);
    const std::string role = m.value("role", "");
    if (role != "user" && role != "assistant") {
      throw ValidationError(field + ".role", "Input should be 'user' or 'assistant'");
    }
    if (i > 0 && wire[i - 1].value("role", "") == role) {
      throw ValidationError(field, "roles must alternate between \"user\" and \"assistant\"");
    }
    const json content = m.contains("content") && m["content"].is_string()
                             ? json::array({{{"type", "text"}, {"text", m["content"]}}})
                             : m.value("content", json::array());
    json assistant = {{"role", "assistant"}, {"content", ""}};
    json calls = json::array();
    // A user turn with images or documents is one user message of parts (its other blocks, tool
    // results, are read as usual).
    json parts = role == "user" ? chatParts(content) : json();
    if (!parts.is_null()) messages.push_back({{"role", "user"}, {"content", parts}});
    for (const auto& block : content) {
      const std::string type = block.value("type", "");
      if (!parts.is_null() && (type == "text" || type == "image" || type == "document")) {
        continue;  // in the message of parts
      } else if (type == "text") {
        if (role == "user") {
          messages.push_back({{"role", "user"}, {"content", block.value("text", "")}});
        } else {
          assistant["content"] = assistant["content"].get<std::string>() + block.value("text", "");
        }
      } else if (type == "tool_result") {
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", block.value("tool_use_id", "")},
                            {"content", textOf(block.value("content", json()))}});
      } else if (type == "tool_use") {
        if (!block.contains("input") || !block["input"].is_object()) {
          throw ValidationError(field + ".content.tool_use.input", "Input should be an object");
        }
        calls.push_back(
            {{"id", block.value("id", "")},
             {"type", "function"},
             {"function",
              {{"name", block.value("name", "")}, {"arguments", block["input"].dump()}}}});
        lastToolUse = i;
      } else if (type == "thinking") {
        if (block.value("signature", "") != thinkingSignature(block.value("thinking", ""))) {
          throw ValidationError(field + ".content", "Invalid `signature` in `thinking` block");
        }
      } else if (type != "redacted_thinking") {
        throw ValidationError(field + ".content", "unknown content block type \"" + type + "\"");
      }
    }
    if (role == "assistant") {
      if (!calls.empty()) assistant["tool_calls"] = std::move(calls);
      messages.push_back(std::move(assistant));
    }
  }
  // The rule holds in the current turn: a tool loop that a user message has not closed yet
  // (earlier turns, perhaps from another provider, need no thinking blocks).
  for (size_t i = 0; i < wire.size(); ++i) {
    if (wire[i].value("role", "") != "user") continue;
    const json& content = wire[i].value("content", json());
    if (content.is_string()) lastUserText = i;
    for (const auto& block : content.is_array() ? content : json::array()) {
      if (block.is_object() && block.value("type", "") != "tool_result") lastUserText = i;
    }
  }
  if (thinking && lastToolUse < wire.size() && lastToolUse > lastUserText) {
    const json& first = wire[lastToolUse]["content"][0];
    const std::string type = first.value("type", "");
    if (type != "thinking" && type != "redacted_thinking") {
      throw ValidationError("messages." + std::to_string(lastToolUse) + ".content.0.type",
                            "Expected `thinking` or `redacted_thinking`, but found `" + type +
                                "`. When `thinking` is enabled, a final `assistant` message must "
                                "start with a thinking block");
    }
  }
  chat["messages"] = std::move(messages);
  return chat;
}

json chatRequestFromResponses(const json& body) {
  if (!body.is_object()) throw ValidationError("body", "expected a JSON object");
  json chat = {{"model", body.value("model", "")}, {"stream", body.value("stream", false)}};
  chat["stream_options"] = {{"include_usage", true}};
  json messages = json::array();
  if (body.contains("instructions") && body["instructions"].is_string()) {
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (body.contains("tools") && body["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : body["tools"]) {
      tools.push_back({{"type", "function"}, {"function", {{"name", t.value("name", "")}}}});
    }
    chat["tools"] = std::move(tools);
  }  // Responses' {type: function, name} and text.format, as the chat request's fields.
  if (body.contains("tool_choice") && body["tool_choice"].is_object() &&
      body["tool_choice"].value("type", "") == "function") {
    chat["tool_choice"] = {{"type", "function"},
                           {"function", {{"name", body["tool_choice"].value("name", "")}}}};
  }
  if (body.contains("text") && body["text"].is_object() && body["text"].contains("format") &&
      body["text"]["format"].is_object()) {
    chat["response_format"] = {{"type", body["text"]["format"].value("type", "")}};
  }

  const json input = body.contains("input") && body["input"].is_string()
                         ? json::array({{{"role", "user"}, {"content", body["input"]}}})
                         : body.value("input", json());
  if (!input.is_array()) throw ValidationError("input", "expected a string or an array of items");
  std::string reasoningSeen;  // the encrypted content of the reasoning item since the last message
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string field = "input[" + std::to_string(i) + "]";
    const std::string type = item.value("type", "message");
    if (type == "message") {
      std::string role = item.value("role", "");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system") {
        throw ValidationError(field + ".role", "unknown role \"" + role + "\"");
      }
      json parts = role == "user" ? chatParts(item.value("content", json())) : json();
      messages.push_back(
          {{"role", role},
           {"content", parts.is_null() ? json(textOf(item.value("content", json()))) : parts}});
      if (role == "user") reasoningSeen.clear();
    } else if (type == "reasoning") {
      reasoningSeen = item.value("encrypted_content", "");
      const json summary = item.value("summary", json::array());
      if (reasoningSeen != encryptedReasoning(textOf(summary))) {
        throw ValidationError(field + ".encrypted_content",
                              "The encrypted content could not be verified");
      }
    } else if (type == "function_call") {
      const std::string id = item.value("id", "");
      if (id.rfind("fc_r_", 0) == 0 && reasoningSeen.empty()) {
        throw ValidationError(field, "Item '" + id +
                                         "' of type 'function_call' was provided without its "
                                         "required 'reasoning' item");
      }
      json call = {
          {"id", item.value("call_id", "")},
          {"type", "function"},
          {"function",
           {{"name", item.value("name", "")}, {"arguments", item.value("arguments", "")}}}};
      // Calls join the assistant message before them (the same reply).
      if (messages.empty() || messages.back()["role"] != "assistant") {
        messages.push_back({{"role", "assistant"}, {"content", ""}});
      }
      if (!messages.back().contains("tool_calls")) messages.back()["tool_calls"] = json::array();
      messages.back()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", item.value("call_id", "")},
                          {"content", textOf(item.value("output", json()))}});
    } else {
      throw ValidationError(field + ".type", "unknown input item type \"" + type + "\"");
    }
  }
  chat["messages"] = std::move(messages);
  return chat;
}

std::string anthropicMessageBody(const ConcreteReply& reply) {
  return anthropicMessage(reply, anthropicBlocks(reply), false).dump();
}

std::string responsesBody(const ConcreteReply& reply) {
  const std::string status = reply.finishReason == "length" ? "incomplete" : "completed";
  return responseObject(reply, status, responsesOutput(reply)).dump();
}

void forEachAnthropicEvent(const ConcreteReply& r, bool omitFinish,
                           const std::function<bool(std::string_view)>& emit) {
  if (!emit(event("message_start", {{"type", "message_start"},
                                    {"message", anthropicMessage(r, ojson::array(), true)}})))
    return;
  if (!emit(event("ping", {{"type", "ping"}}))) return;
  std::size_t index = 0;
  auto block = [&](const ojson& start, const char* deltaType, const char* field,
                   const std::vector<std::string_view>& pieces, const ojson& extraDelta) {
    if (!emit(event("content_block_start",
                    {{"type", "content_block_start"}, {"index", index}, {"content_block", start}})))
      return false;
    for (auto piece : pieces) {
      if (!emit(event("content_block_delta", {{"type", "content_block_delta"},
                                              {"index", index},
                                              {"delta", {{"type", deltaType}, {field, piece}}}})))
        return false;
    }
    if (!extraDelta.is_null() &&
        !emit(event("content_block_delta",
                    {{"type", "content_block_delta"}, {"index", index}, {"delta", extraDelta}})))
      return false;
    if (!emit(event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}})))
      return false;
    ++index;
    return true;
  };
  if (r.reasoningContent &&
      !block({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, "thinking_delta",
             "thinking", splitPieces(*r.reasoningContent, r.chunkSize),
             {{"type", "signature_delta"}, {"signature", thinkingSignature(*r.reasoningContent)}}))
    return;
  if (r.content && !block({{"type", "text"}, {"text", ""}}, "text_delta", "text",
                          splitPieces(*r.content, r.chunkSize), ojson()))
    return;
  for (const auto& call : r.toolCalls) {
    const std::string& args = call.arguments;
    std::vector<std::string_view> pieces;
    for (std::size_t at = 0; at < args.size(); at += argumentsChunk(r))
      pieces.push_back(std::string_view(args).substr(at, argumentsChunk(r)));
    if (!block({{"type", "tool_use"},
                {"id", call.id},
                {"name", call.name},
                {"input", ojson::object()}},
               "input_json_delta", "partial_json", pieces, ojson()))
      return;
  }
  if (omitFinish) return;
  if (!emit(event(
          "message_delta",
          {{"type", "message_delta"},
           {"delta", {{"stop_reason", stopReasonOf(r.finishReason)}, {"stop_sequence", nullptr}}},
           {"usage", anthropicUsage(r.usage, false)}})))
    return;
  emit(event("message_stop", {{"type", "message_stop"}}));
}

void forEachResponsesEvent(const ConcreteReply& r, bool omitFinish,
                           const std::function<bool(std::string_view)>& emit) {
  int sequence = 0;
  auto send = [&](const char* type, ojson data) {
    ojson out;
    out["type"] = type;
    for (auto& [key, value] : data.items())
      out[key] = std::move(value);
    out["sequence_number"] = sequence++;
    return emit(event(type, out));
  };
  if (!send("response.created", {{"response", responseObject(r, "in_progress", ojson::array())}}))
    return;
  if (!send("response.in_progress",
            {{"response", responseObject(r, "in_progress", ojson::array())}}))
    return;
  std::size_t index = 0;
  if (r.reasoningContent) {
    const std::string id = itemId(r, "rs_", 0);
    if (!send("response.output_item.added",
              {{"output_index", index},
               {"item", {{"id", id}, {"type", "reasoning"}, {"summary", ojson::array()}}}}))
      return;
    if (!send("response.reasoning_summary_part.added",
              {{"item_id", id},
               {"output_index", index},
               {"summary_index", 0},
               {"part", {{"type", "summary_text"}, {"text", ""}}}}))
      return;
    for (auto piece : splitPieces(*r.reasoningContent, r.chunkSize)) {
      if (!send("response.reasoning_summary_text.delta",
                {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"delta", piece}}))
        return;
    }
    if (!send("response.reasoning_summary_text.done", {{"item_id", id},
                                                       {"output_index", index},
                                                       {"summary_index", 0},
                                                       {"text", *r.reasoningContent}}))
      return;
    if (!send("response.reasoning_summary_part.done",
              {{"item_id", id},
               {"output_index", index},
               {"summary_index", 0},
               {"part", {{"type", "summary_text"}, {"text", *r.reasoningContent}}}}))
      return;
    if (!send("response.output_item.done", {{"output_index", index}, {"item", reasoningItem(r)}}))
      return;
    ++index;
  }
  if (r.content) {
    const std::string id = itemId(r, "msg_", 0);
    if (!send("response.output_item.added",
              {{"output_index", index}, {"item", messageItem(r, "in_progress", ojson::array())}}))
      return;
    if (!send("response.content_part.added", {{"item_id", id},
                                              {"output_index", index},
                                              {"content_index", 0},
                                              {"part", textPart("")}}))
      return;
    for (auto piece : splitPieces(*r.content, r.chunkSize)) {
      if (!send("response.output_text.delta", {{"item_id", id},
                                               {"output_index", index},
                                               {"content_index", 0},
                                               {"delta", piece},
                                               {"logprobs", ojson::array()}}))
        return;
    }
    if (!send("response.output_text.done", {{"item_id", id},
                                            {"output_index", index},
                                            {"content_index", 0},
                                            {"text", *r.content},
                                            {"logprobs", ojson::array()}}))
      return;
    if (!send("response.content_part.done", {{"item_id", id},
                                             {"output_index", index},
                                             {"content_index", 0},
                                             {"part", textPart(*r.content)}}))
      return;
    if (!send("response.output_item.done",
              {{"output_index", index},
               {"item", messageItem(r, "completed", ojson::array({textPart(*r.content)}))}}))
      return;
    ++index;
  }
  for (std::size_t i = 0; i < r.toolCalls.size(); ++i) {
    const std::string id = callItemId(r, i);
    const std::string& args = r.toolCalls[i].arguments;
    if (!send("response.output_item.added",
              {{"output_index", index}, {"item", callItem(r, i, "in_progress", "")}}))
      return;
    for (std::size_t at = 0; at < args.size(); at += argumentsChunk(r)) {
      if (!send("response.function_call_arguments.delta",
                {{"item_id", id},
                 {"output_index", index},
                 {"delta", std::string_view(args).substr(at, argumentsChunk(r))}}))
        return;
    }
    if (!send("response.function_call_arguments.done",
              {{"item_id", id}, {"output_index", index}, {"arguments", args}}))
      return;
    if (!send("response.output_item.done",
              {{"output_index", index}, {"item", callItem(r, i, "completed", args)}}))
      return;
    ++index;
  }
  if (omitFinish) return;
  const bool incomplete = r.finishReason == "length";
  send(incomplete ? "response.incomplete" : "response.completed",
       {{"response",
         responseObject(r, incomplete ? "incomplete" : "completed", responsesOutput(r))}});
}

std::string streamErrorEvent(WireProtocol protocol, const json& error) {
  switch (protocol) {
    case WireProtocol::Anthropic:
      return event("error", {{"type", "error"}, {"error", ojson::parse(error.dump())}});
    case WireProtocol::Responses: {
      ojson data = {{"type", "error"}, {"sequence_number", 0}};
      for (const char* key : {"code", "message", "param"}) {
        data[key] = error.contains(key) ? ojson::parse(error[key].dump()) : ojson();
      }
      return event("error", data);
    }
    case WireProtocol::Gemini: {
      // Google's shape: {"error": {"code", "message", "status"}} as a data line.
      ojson data;
      data["code"] = error.contains("code") && error["code"].is_number_integer()
                         ? ojson(error["code"].get<int>())
                         : ojson(500);
      data["message"] = error.value("message", "");
      data["status"] = error.value("type", "INTERNAL");
      return "data: " + ojson{{"error", std::move(data)}}.dump() + "\n\n";
    }
    case WireProtocol::Chat:
      break;
  }
  return "data: " + json{{"error", error}}.dump() + "\n\n";
}

}  // namespace parley::mock
