#include "mock/chat_reply.hpp"

#include <cstdio>

#include "mock/prompt_cache.hpp"

namespace parley::mock {
namespace {

using nlohmann::json;

// Expands placeholders in every string value of a JSON value, keeping its structure.
json expandJson(const json& value, const ChatContext& ctx, const std::vector<std::string>& groups) {
  if (value.is_string()) return expandTemplate(value.get<std::string>(), ctx, groups);
  if (value.is_object() || value.is_array()) {
    json out = value;
    for (auto& item : out)
      item = expandJson(item, ctx, groups);
    return out;
  }
  return value;
}

}  // namespace

void appendJsonString(std::string& out, std::string_view text) {
  out += '"';
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::vector<std::string_view> splitPieces(std::string_view text, std::size_t size) {
  std::vector<std::string_view> pieces;
  std::size_t pos = 0;
  auto isSpace = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (pos < text.size()) {
    std::size_t end;
    if (size == 0) {
      end = pos;
      while (end < text.size() && isSpace(text[end]))
        ++end;
      while (end < text.size() && !isSpace(text[end]))
        ++end;
    } else {
      end = std::min(text.size(), pos + size);
      // Never cut a UTF-8 character: move past continuation bytes.
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
        ++end;
    }
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

ConcreteReply makeReply(const ReplySpec& spec, const ChatContext& ctx,
                        const std::vector<std::string>& groups, std::int64_t created) {
  ConcreteReply r;
  r.id = spec.id.empty() ? "chatcmpl-mock-" + std::to_string(ctx.requestNumber)
                         : expandTemplate(spec.id, ctx, groups);
  r.model = !spec.model.empty() ? spec.model : !ctx.model.empty() ? ctx.model : "parley-mock";
  r.created = created;
  std::size_t completionBytes = 0;
  if (spec.content) {
    std::string once = expandTemplate(*spec.content, ctx, groups);
    std::string content;
    content.reserve(once.size() * static_cast<std::size_t>(spec.repeat));
    for (int i = 0; i < spec.repeat; ++i)
      content += once;
    completionBytes += content.size();
    r.content = std::move(content);
  }
  if (spec.reasoningContent) {
    r.reasoningContent = expandTemplate(*spec.reasoningContent, ctx, groups);
    completionBytes += r.reasoningContent->size();
  }
  for (std::size_t i = 0; i < spec.toolCalls.size(); ++i) {
    const ToolCallSpec& call = spec.toolCalls[i];
    ConcreteReply::Call c;
    c.id = call.id.empty()
               ? "call_" + std::to_string(ctx.requestNumber) + "_" + std::to_string(i + 1)
               : expandTemplate(call.id, ctx, groups);
    c.name = expandTemplate(call.name, ctx, groups);
    c.arguments = call.arguments.is_string() ? call.arguments.get<std::string>()
                                             : expandJson(call.arguments, ctx, groups).dump();
    completionBytes += c.name.size() + c.arguments.size();
    r.toolCalls.push_back(std::move(c));
  }
  r.finishReason = !spec.finishReason.empty() ? spec.finishReason
                   : r.toolCalls.empty()      ? "stop"
                                              : "tool_calls";
  json usage = spec.usage.is_object() ? spec.usage : json::object();
  if (!usage.contains("prompt_tokens")) {
    usage["prompt_tokens"] = std::max<std::int64_t>(1, mockTokens(ctx.promptBytes));
  }
  if (!usage.contains("completion_tokens")) {
    usage["completion_tokens"] = std::max<std::int64_t>(1, mockTokens(completionBytes));
  }
  if (!usage.contains("total_tokens")) {
    usage["total_tokens"] =
        usage["prompt_tokens"].get<long>() + usage["completion_tokens"].get<long>();
  }
  r.usage = std::move(usage);
  r.chunkSize = spec.chunkSize;
  r.argumentsChunkSize = spec.argumentsChunkSize == 0 ? 4 : spec.argumentsChunkSize;
  return r;
}

std::string completionBody(const ConcreteReply& r) {
  json message = {{"role", "assistant"}, {"content", r.content ? json(*r.content) : json()}};
  if (r.reasoningContent) message["reasoning_content"] = *r.reasoningContent;
  if (!r.toolCalls.empty()) {
    json calls = json::array();
    for (const auto& c : r.toolCalls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  message["refusal"] = nullptr;
  json body = {{"id", r.id},
               {"object", "chat.completion"},
               {"created", r.created},
               {"model", r.model},
               {"choices", json::array({{{"index", 0},
                                         {"message", std::move(message)},
                                         {"logprobs", nullptr},
                                         {"finish_reason", r.finishReason}}})},
               {"usage", r.usage},
               {"system_fingerprint", "fp_parley_mock"}};
  return body.dump();
}

void forEachStreamEvent(const ConcreteReply& r, bool includeUsage, bool omitFinish,
                        const std::function<bool(std::string_view)>& emit) {
  // Every chunk shares this prefix; building it once keeps large streams cheap.
  std::string prefix = "data: {\"id\":";
  appendJsonString(prefix, r.id);
  prefix += ",\"object\":\"chat.completion.chunk\",\"created\":" + std::to_string(r.created) +
            ",\"model\":";
  appendJsonString(prefix, r.model);
  prefix += ",\"system_fingerprint\":\"fp_parley_mock\",\"choices\":[";
  const std::string choicePrefix = "{\"index\":0,\"delta\":";
  const std::string suffix = includeUsage ? "],"
                                            "\"usage\":null}\n\n"
                                          : "]}\n\n";
  std::string event;
  auto deltaEvent = [&](const std::string& delta, const char* finish) {
    event.clear();
    event += prefix;
    event += choicePrefix;
    event += delta;
    event += ",\"logprobs\":null,\"finish_reason\":";
    event += finish;
    event += '}';
    event += suffix;
    return emit(event);
  };
  std::string delta;
  auto field = [&](const char* name, std::string_view text) {
    delta = "{\"";
    delta += name;
    delta += "\":";
    appendJsonString(delta, text);
    delta += '}';
    return deltaEvent(delta, "null");
  };

  bool textFirst = r.content || r.reasoningContent;
  if (!deltaEvent(textFirst ? R"({"role":"assistant","content":"","refusal":null})"
                            : R"({"role":"assistant","content":null,"refusal":null})",
                  "null")) {
    return;
  }
  if (r.reasoningContent) {
    for (auto piece : splitPieces(*r.reasoningContent, r.chunkSize)) {
      if (!field("reasoning_content", piece)) return;
    }
  }
  if (r.content) {
    for (auto piece : splitPieces(*r.content, r.chunkSize)) {
      if (!field("content", piece)) return;
    }
  }
  for (std::size_t i = 0; i < r.toolCalls.size(); ++i) {
    const auto& c = r.toolCalls[i];
    std::string index = std::to_string(i);
    delta = "{\"tool_calls\":[{\"index\":" + index + ",\"id\":";
    appendJsonString(delta, c.id);
    delta += ",\"type\":\"function\",\"function\":{\"name\":";
    appendJsonString(delta, c.name);
    delta += ",\"arguments\":\"\"}}]}";
    if (!deltaEvent(delta, "null")) return;
    for (auto piece : splitPieces(c.arguments, r.argumentsChunkSize)) {
      delta = "{\"tool_calls\":[{\"index\":" + index + ",\"function\":{\"arguments\":";
      appendJsonString(delta, piece);
      delta += "}}]}";
      if (!deltaEvent(delta, "null")) return;
    }
  }
  if (omitFinish) return;
  std::string finish;
  appendJsonString(finish, r.finishReason);
  if (!deltaEvent("{}", finish.c_str())) return;
  if (includeUsage) {
    event = prefix + "],\"usage\":" + r.usage.dump() + "}\n\n";
    if (!emit(event)) return;
  }
}

}  // namespace parley::mock
