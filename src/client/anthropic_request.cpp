#include "client/anthropic_request.hpp"

#include "client/provider_fields.hpp"
#include "client/request_body.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/part.hpp"

namespace parley::detail {

namespace {

using ojson = nlohmann::ordered_json;

ojson textBlock(const std::string& text) {
  ojson block;
  block["type"] = "text";
  block["text"] = text;
  return block;
}

ojson cacheControl(const ClientOptions& options) {
  ojson control;
  control["type"] = "ephemeral";
  if (!options.promptCache.ttl.empty()) control["ttl"] = options.promptCache.ttl;
  return control;
}

// A tool call's arguments as the `input` object; "" is {}.
ojson toolInput(const ToolCall& call, const std::string& field) {
  if (call.arguments.empty()) return ojson::object();
  ojson input = parseOrderedJson(call.arguments, {}, false);
  if (input.is_discarded() || !input.is_object()) {
    throw ValidationError(field, "the arguments of tool call \"" + call.id +
                                     "\" are not a JSON object, which tool_use.input must be");
  }
  return input;
}

// A user message's parts as content blocks (docs/protocols.md, "Message parts").
void appendPartBlocks(ojson& content, const Message& m, const std::string& field) {
  const std::vector<Part> parts = partsOf(m);
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    const std::string partField = field + ".content[" + std::to_string(i) + "]";
    ojson block;
    ojson source;
    switch (part.kind) {
      case PartKind::Text:
        block = textBlock(part.content);
        break;
      case PartKind::Image:
        if (part.url.empty()) {
          if (part.mimeType != "image/png" && part.mimeType != "image/jpeg" &&
              part.mimeType != "image/gif" && part.mimeType != "image/webp") {
            throw ValidationError(partField, "is a " + part.mimeType +
                                                 " image; the anthropic protocol takes png, jpeg, "
                                                 "gif and webp");
          }
          source["type"] = "base64";
          source["media_type"] = part.mimeType;
          source["data"] = base64Encode(part.bytes);
        } else {
          source["type"] = "url";
          source["url"] = part.url;
        }
        block["type"] = "image";
        block["source"] = std::move(source);
        break;
      case PartKind::File:
        if (part.mimeType == "application/pdf") {
          source["type"] = "base64";
          source["media_type"] = part.mimeType;
          source["data"] = base64Encode(part.bytes);
        } else if (part.mimeType == "text/plain") {
          source["type"] = "text";
          source["media_type"] = part.mimeType;
          source["data"] = part.bytes;
        } else {
          throw ValidationError(partField, "is a " + part.mimeType +
                                               " file; the anthropic protocol's documents are pdf "
                                               "or plain text");
        }
        block["type"] = "document";
        block["source"] = std::move(source);
        if (!part.filename.empty()) block["title"] = part.filename;
        break;
      case PartKind::Audio:
        throw ValidationError(partField,
                              "is audio, which the anthropic protocol cannot carry (send it with "
                              "the openai-chat protocol's input_audio)");
    }
    content.push_back(std::move(block));
  }
}

struct Turn {
  std::string role;  // "user" or "assistant"
  ojson content = ojson::array();
  bool cacheMark = false;  // an explicit breakpoint on one of its messages
  bool fromUser = false;   // holds a user message (not only tool results)
};

}  // namespace

std::string buildAnthropicBody(const ChatRequest& request, const ClientOptions& options,
                               bool stream) {
  const std::string& model = requestModel(request, options);
  const std::vector<Message> messages = requestMessages(request);
  if (!request.extra.is_null() && !request.extra.is_object()) {
    throw ValidationError("request.extra", "must be a JSON object");
  }
  if (request.responseFormat && request.responseFormat->kind != ResponseFormat::Kind::Text) {
    throw ValidationError("request.response_format",
                          "the anthropic protocol has no response_format; describe the format in "
                          "the prompt or use a tool");
  }
  const bool explicitCache = options.promptCache.mode == PromptCachePolicy::Mode::Explicit;

  ojson system = ojson::array();
  bool systemMark = false;
  std::vector<Turn> turns;
  auto turnFor = [&](const std::string& role) -> Turn& {
    if (turns.empty() || turns.back().role != role) turns.push_back(Turn{role});
    return turns.back();
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const std::string field = "request.messages[" + std::to_string(i) + "]";
    const bool marked = explicitCache && m.extra.contains(kCacheControl) &&
                        m.extra[std::string(kCacheControl)] != false;
    switch (m.role) {
      case Role::System:
        if (!m.content.empty()) system.push_back(textBlock(m.content));
        systemMark = systemMark || marked;
        break;
      case Role::User: {
        Turn& turn = turnFor("user");
        if (hasParts(m)) {
          appendPartBlocks(turn.content, m, field);
        } else {
          turn.content.push_back(textBlock(m.content));
        }
        turn.fromUser = true;
        turn.cacheMark = turn.cacheMark || marked;
        break;
      }
      case Role::Tool: {
        Turn& turn = turnFor("user");
        ojson block;
        block["type"] = "tool_result";
        block["tool_use_id"] = m.toolCallId;
        block["content"] = m.content;
        if (auto e = m.extra.find("is_error"); e != m.extra.end() && e->is_boolean()) {
          block["is_error"] = e->get<bool>();
        }
        turn.content.push_back(std::move(block));
        turn.cacheMark = turn.cacheMark || marked;
        break;
      }
      case Role::Assistant: {
        Turn& turn = turnFor("assistant");
        // A reply that held more than the message says (provider-run tools and their results,
        // citations, compaction, a call's caller) goes back as it came, in order, signatures
        // and all; only empty text blocks, which the API refuses in a request, are left out.
        if (auto c = m.extra.find(kAnthropicContent); c != m.extra.end() && c->is_array()) {
          for (const auto& block : *c) {
            if (block.is_object() && block.value("type", "") == "text" &&
                block.value("text", "").empty()) {
              continue;
            }
            turn.content.push_back(ojson::parse(block.dump()));
          }
          turn.cacheMark = turn.cacheMark || marked;
          break;
        }
        if (auto t = m.extra.find(kThinkingBlocks); t != m.extra.end() && t->is_array()) {
          for (const auto& block : *t)
            turn.content.push_back(ojson::parse(block.dump()));
        }
        if (!m.content.empty()) turn.content.push_back(textBlock(m.content));
        for (size_t c = 0; c < m.toolCalls.size(); ++c) {
          const ToolCall& call = m.toolCalls[c];
          ojson block;
          block["type"] = "tool_use";
          block["id"] = call.id;
          block["name"] = call.name;
          block["input"] = toolInput(call, field + ".tool_calls[" + std::to_string(c) + "]");
          turn.content.push_back(std::move(block));
        }
        turn.cacheMark = turn.cacheMark || marked;
        break;
      }
    }
  }
  if (turns.empty()) {
    throw ValidationError("request.messages", "holds no user or assistant message to send");
  }

  ojson tools = ojson::array();
  if (!request.tools.is_null() && !request.tools.is_array()) {
    throw ValidationError("request.tools", "must be a JSON array of tool definitions");
  }
  for (size_t i = 0; request.tools.is_array() && i < request.tools.size(); ++i) {
    const auto& tool = request.tools[i];
    const auto* function = tool.contains("function") ? &tool["function"] : &tool;
    if (!function->is_object() || !function->contains("name")) {
      throw ValidationError("request.tools[" + std::to_string(i) + "]",
                            "is not an OpenAI function tool ({type, function: {name, ...}})");
    }
    ojson out;
    out["name"] = (*function)["name"];
    if (function->contains("description")) out["description"] = (*function)["description"];
    out["input_schema"] = function->contains("parameters")
                              ? ojson::parse((*function)["parameters"].dump())
                              : ojson{{"type", "object"}};
    tools.push_back(std::move(out));
  }

  // Cache breakpoints: explicit marks, or the tools, the system prompt and the last user turns.
  int breakpoints = 0;
  auto markLast = [&](ojson& blocks) {
    if (blocks.empty()) return;
    blocks.back()["cache_control"] = cacheControl(options);
    ++breakpoints;
  };
  if (options.promptCache.mode == PromptCachePolicy::Mode::Automatic) {
    markLast(tools);
    markLast(system);
    int left = std::min(options.promptCache.lastUserTurns, kMaxCacheBreakpoints - breakpoints);
    for (auto turn = turns.rbegin(); turn != turns.rend() && left > 0; ++turn) {
      if (turn->role != "user") continue;
      markLast(turn->content);
      --left;
    }
  } else if (explicitCache) {
    if (systemMark) markLast(system);
    for (Turn& turn : turns) {
      if (turn.cacheMark) markLast(turn.content);
    }
    if (breakpoints > kMaxCacheBreakpoints) {
      throw ValidationError("request.messages", "marks " + std::to_string(breakpoints) +
                                                    " cache breakpoints; the API takes at most " +
                                                    std::to_string(kMaxCacheBreakpoints));
    }
  }

  ojson body;
  body["model"] = model;
  body["max_tokens"] = request.maxTokens ? *request.maxTokens : options.defaultMaxTokens;
  if (!system.empty()) body["system"] = std::move(system);
  ojson wire = ojson::array();
  for (Turn& turn : turns) {
    ojson message;
    message["role"] = turn.role;
    message["content"] = std::move(turn.content);
    wire.push_back(std::move(message));
  }
  body["messages"] = std::move(wire);
  if (!tools.empty()) body["tools"] = std::move(tools);
  if (!request.toolChoice.is_null() || (request.parallelToolCalls && !*request.parallelToolCalls)) {
    ojson choice;
    const auto& c = request.toolChoice;
    if (c.is_null() || c == "auto") {
      choice["type"] = "auto";
    } else if (c == "none") {
      choice["type"] = "none";
    } else if (c == "required") {
      choice["type"] = "any";
    } else if (c.is_object() && c.contains("function") && c["function"].contains("name")) {
      choice["type"] = "tool";
      choice["name"] = c["function"]["name"];
    } else {
      throw ValidationError("request.tool_choice",
                            "must be \"auto\", \"none\", \"required\" or {function: {name}}");
    }
    if (request.parallelToolCalls && !*request.parallelToolCalls) {
      choice["disable_parallel_tool_use"] = true;
    }
    body["tool_choice"] = std::move(choice);
  }
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.topP) body["top_p"] = *request.topP;
  if (!request.stop.empty()) body["stop_sequences"] = request.stop;
  if (stream) body["stream"] = true;
  // The profile's parameters, then the request's own: both may add anything the API takes
  // (e.g. "thinking": {"type": "enabled", "budget_tokens": 2048}).
  for (const nlohmann::json* more : {&options.defaultParameters, &request.extra}) {
    if (!more->is_object()) continue;
    for (const auto& [key, value] : more->items()) {
      if (key == "messages") {
        throw ValidationError("request.extra.messages",
                              "messages go in ChatRequest::messages, not in extra");
      }
      if (key == "stream") continue;
      body[key] = ojson::parse(value.dump());
    }
  }
  return body.dump();
}

}  // namespace parley::detail
