#include "client/stream_assembler.hpp"

#include "client/http_transport.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <simdjson.h>

#include "parley/json.hpp"
#include "parley/server_tools.hpp"

namespace parley::detail {

namespace ondemand = simdjson::ondemand;

namespace {

struct PendingCall {
  std::string id;
  std::string name;
  std::string arguments;
  std::optional<int64_t> serverIndex;
  bool idGenerated = false;
};

std::string_view stringOrEmpty(ondemand::value value) {
  if (value.type() == ondemand::json_type::string) return value.get_string();
  return {};
}

// Arguments are JSON text; a few servers send the object itself.
std::string_view argumentsText(ondemand::value value) {
  switch (value.type()) {
    case ondemand::json_type::string:
      return value.get_string();
    case ondemand::json_type::null:
      return {};
    case ondemand::json_type::object: {
      ondemand::object object = value.get_object();
      return object.raw_json();
    }
    case ondemand::json_type::array: {
      ondemand::array array = value.get_array();
      return array.raw_json();
    }
    default:
      return value.raw_json_token();
  }
}

// Text in either of the forms servers send it: a string, or an array of parts whose text parts
// are joined (Mistral's magistral: [{"type":"text","text":...}]). Thinking parts (their text in
// `thinking`, a string or again an array of text parts) go to `thinking` when given.
void appendText(ondemand::value value, std::string& text, std::string* thinking) {
  const ondemand::json_type type = value.type();
  if (type == ondemand::json_type::string) {
    text.append(std::string_view(value.get_string()));
    return;
  }
  if (type != ondemand::json_type::array) return;
  for (auto element : value.get_array()) {
    if (element.type() != ondemand::json_type::object) continue;
    std::string_view partType;
    for (auto field : element.get_object()) {
      const std::string_view key = field.unescaped_key();
      if (key == "type") {
        partType = stringOrEmpty(field.value());
      } else if (key == "text" && partType != "thinking") {
        text.append(stringOrEmpty(field.value()));
      } else if (key == "thinking" && thinking) {
        appendText(field.value(), *thinking, nullptr);
      }
    }
  }
}

// The same for a parsed value (a whole chat.completion).
void appendText(const nlohmann::json& value, std::string& text, std::string* thinking) {
  if (value.is_string()) {
    text += value.get_ref<const std::string&>();
    return;
  }
  if (!value.is_array()) return;
  for (const nlohmann::json& part : value) {
    if (!part.is_object()) continue;
    const std::string type = part.value("type", "");
    if (type == "text" && part.contains("text")) appendText(part["text"], text, nullptr);
    if (type == "thinking" && thinking && part.contains("thinking")) {
      appendText(part["thinking"], *thinking, nullptr);
    }
  }
}

}  // namespace

size_t makeToolCallIdsUnique(std::vector<ToolCall>& calls) {
  std::unordered_set<std::string> seen;
  size_t replaced = 0;
  for (ToolCall& call : calls) {
    if (seen.insert(call.id).second) continue;
    do {
      call.id = generateToolCallId();
    } while (!seen.insert(call.id).second);
    ++replaced;
  }
  return replaced;
}

std::string generateToolCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i)
    id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

std::string normaliseFinishReason(const std::string& reported, bool hasToolCalls) {
  if (hasToolCalls && (reported.empty() || reported == "stop")) return "tool_calls";
  return reported;
}

struct StreamAssembler::State {
  ondemand::parser parser;
  std::string padded;
  std::string content;
  std::string reasoning;
  std::string refusal;
  std::vector<PendingCall> calls;
  std::optional<TokenUsage> usage;
  std::string id;
  std::string model;
  std::string systemFingerprint;
  int64_t created = 0;

  // Where each call is, so that a chunk finds the call it continues in constant time: a reply
  // of n calls is assembled in O(n), not O(n^2). Generated ids are not indexed (no server
  // refers to them).
  struct IdPositions {
    size_t first = SIZE_MAX;                      // the first call with this id
    size_t firstUnindexed = SIZE_MAX;             // ... that came without an index
    std::unordered_map<int64_t, size_t> firstAt;  // ... by index
  };
  std::unordered_map<std::string, IdPositions> byId;
  std::unordered_map<int64_t, size_t> lastAt;  // the last call with each index
  std::unordered_map<size_t, size_t> entries;  // call position -> this chunk's delta entry

  void indexId(size_t pos) {
    IdPositions& at = byId[calls[pos].id];
    at.first = std::min(at.first, pos);
    if (calls[pos].serverIndex) {
      auto [it, added] = at.firstAt.emplace(*calls[pos].serverIndex, pos);
      if (!added) it->second = std::min(it->second, pos);
    } else {
      at.firstUnindexed = std::min(at.firstUnindexed, pos);
    }
  }

  size_t startCall(StreamDelta& delta, std::string_view id, std::optional<int64_t> serverIndex) {
    if (calls.size() >= kMaxToolCallsPerReply)
      throw ProtocolError("the reply has more than " + std::to_string(kMaxToolCallsPerReply) +
                          " tool calls");
    PendingCall call;
    if (id.empty()) {
      call.id = generateToolCallId();
      call.idGenerated = true;
    } else {
      call.id.assign(id);
    }
    call.serverIndex = serverIndex;
    calls.push_back(std::move(call));
    const size_t pos = calls.size() - 1;
    if (!id.empty()) indexId(pos);
    if (serverIndex) lastAt[*serverIndex] = pos;
    ToolCallDelta d;
    d.index = pos;
    d.id = calls.back().id;
    entries[pos] = delta.toolCalls.size();
    delta.toolCalls.push_back(std::move(d));
    return pos;
  }

  // Finds the call a tool-call delta continues, or starts a new one. Returns its position and
  // the delta entry reporting it.
  ToolCallDelta& target(StreamDelta& delta, std::optional<int64_t> serverIndex, std::string_view id,
                        std::string_view name) {
    if (!id.empty()) {
      // The same id at another index is another call (its id is made unique at the end).
      if (auto known = byId.find(std::string(id)); known != byId.end()) {
        const IdPositions& at = known->second;
        size_t pos = serverIndex ? at.firstUnindexed : at.first;
        if (serverIndex) {
          if (auto same = at.firstAt.find(*serverIndex); same != at.firstAt.end())
            pos = std::min(pos, same->second);
        }
        if (pos != SIZE_MAX) return entryFor(delta, pos, false);
      }
      if (serverIndex) {
        if (auto last = lastAt.find(*serverIndex); last != lastAt.end()) {
          const size_t i = last->second;
          if (calls[i].idGenerated) {
            // The real id arrived after the call started without one: adopt it.
            calls[i].id.assign(id);
            calls[i].idGenerated = false;
            indexId(i);
            return entryFor(delta, i, true);
          }
          // Ollama reuses one index for parallel calls: a new id is a new call
        }
      }
      startCall(delta, id, serverIndex);
      return delta.toolCalls.back();
    }
    if (serverIndex) {
      if (auto last = lastAt.find(*serverIndex); last != lastAt.end())
        return entryFor(delta, last->second, false);
      startCall(delta, {}, serverIndex);
      return delta.toolCalls.back();
    }
    // Neither id nor index: continue the last call unless this names a different tool.
    if (!calls.empty() &&
        (name.empty() || calls.back().name.empty() || calls.back().name == name)) {
      return entryFor(delta, calls.size() - 1, false);
    }
    startCall(delta, {}, std::nullopt);
    return delta.toolCalls.back();
  }

  ToolCallDelta& entryFor(StreamDelta& delta, size_t pos, bool reportId) {
    if (auto entry = entries.find(pos); entry != entries.end()) {
      ToolCallDelta& d = delta.toolCalls[entry->second];
      if (reportId) d.id = calls[pos].id;
      return d;
    }
    ToolCallDelta d;
    d.index = pos;
    if (reportId) d.id = calls[pos].id;
    entries[pos] = delta.toolCalls.size();
    delta.toolCalls.push_back(std::move(d));
    return delta.toolCalls.back();
  }

  void readToolCall(StreamDelta& delta, ondemand::object object) {
    std::optional<int64_t> index;
    std::string_view id, name, arguments;
    std::string idCopy, nameCopy, argumentsCopy;
    for (auto field : object) {
      std::string_view key = field.unescaped_key();
      ondemand::value value = field.value();
      if (key == "index") {
        if (value.type() == ondemand::json_type::number) index = value.get_int64();
      } else if (key == "id") {
        idCopy = stringOrEmpty(value);
      } else if (key == "function") {
        if (value.type() != ondemand::json_type::object) continue;
        for (auto fn : value.get_object()) {
          std::string_view fnKey = fn.unescaped_key();
          if (fnKey == "name") {
            nameCopy = stringOrEmpty(fn.value());
          } else if (fnKey == "arguments") {
            argumentsCopy = argumentsText(fn.value());
          }
        }
      }
    }
    id = idCopy;
    name = nameCopy;
    arguments = argumentsCopy;
    ToolCallDelta& entry = target(delta, index, id, name);
    PendingCall& call = calls[entry.index];
    if (call.name.empty() && !name.empty()) {
      call.name.assign(name);  // set once: some servers resend it on every chunk
      entry.name.assign(name);
    }
    call.arguments.append(arguments);
    entry.arguments.append(arguments);
  }

  void readChoice(StreamDelta& delta, ondemand::object choice, std::string& finishReason) {
    for (auto field : choice) {
      std::string_view key = field.unescaped_key();
      ondemand::value value = field.value();
      if (key == "index") {
        if (value.type() == ondemand::json_type::number && value.get_int64() != 0) return;
      } else if (key == "delta" || key == "message") {
        if (value.type() != ondemand::json_type::object) continue;
        for (auto part : value.get_object()) {
          std::string_view partKey = part.unescaped_key();
          ondemand::value partValue = part.value();
          if (partKey == "content") {
            appendText(partValue, delta.content, &delta.reasoning);
          } else if (partKey == "reasoning_content" || partKey == "reasoning") {
            appendText(partValue, delta.reasoning, nullptr);
          } else if (partKey == "refusal") {
            refusal.append(stringOrEmpty(partValue));
          } else if (partKey == "tool_calls") {
            if (partValue.type() != ondemand::json_type::array) continue;
            for (auto call : partValue.get_array()) {
              ondemand::object callObject = call.get_object();
              readToolCall(delta, callObject);
            }
          }
        }
      } else if (key == "finish_reason") {
        std::string_view reason = stringOrEmpty(value);
        if (!reason.empty()) {
          delta.finishReason.assign(reason);
          finishReason.assign(reason);
        }
      }
    }
  }
};

StreamAssembler::StreamAssembler() : state_(std::make_unique<State>()) {}
StreamAssembler::~StreamAssembler() = default;

const StreamDelta& StreamAssembler::addChunk(std::string_view json) {
  delta_.clear();
  State& s = *state_;
  s.entries.clear();
  s.padded.resize(json.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(s.padded.data(), json.data(), json.size());
  try {
    ondemand::document doc = s.parser.iterate(s.padded.data(), json.size(), s.padded.size());
    ondemand::object chunk = doc.get_object();
    for (auto field : chunk) {
      std::string_view key = field.unescaped_key();
      ondemand::value value = field.value();
      if (key == "choices") {
        if (value.type() != ondemand::json_type::array) continue;  // null: usage-only chunk
        for (auto choice : value.get_array()) {
          ondemand::object choiceObject = choice.get_object();
          s.readChoice(delta_, choiceObject, reportedFinishReason_);
        }
      } else if (key == "usage") {
        if (value.type() != ondemand::json_type::object) continue;
        ondemand::object usage = value.get_object();
        std::string_view raw = usage.raw_json();
        delta_.usage = usageFromJson(parseJson(raw));
        s.usage = delta_.usage;
      } else if (key == "id") {
        if (s.id.empty()) s.id = stringOrEmpty(value);
      } else if (key == "model") {
        if (s.model.empty()) s.model = stringOrEmpty(value);
      } else if (key == "created") {
        if (s.created == 0 && value.type() == ondemand::json_type::number) {
          s.created = value.get_int64();
        }
      } else if (key == "system_fingerprint") {
        if (s.systemFingerprint.empty()) s.systemFingerprint = stringOrEmpty(value);
      } else if (key == "error" || key == "type") {
        // {"error": {...}} or a flat {"type": "error", "message": ...}.
        if (value.type() == ondemand::json_type::null) continue;
        if (key == "type" && stringOrEmpty(value) != "error") continue;
        HttpError::Details details;
        details.body.assign(json);
        readApiError(json, details);
        if (details.apiMessage.empty())
          details.apiMessage = "the server sent an error in the stream";
        nlohmann::json parsed = parseJson(json, {}, /*allowExceptions=*/false);
        if (parsed.is_object() && parsed["error"].is_object()) {
          const nlohmann::json& code = parsed["error"]["code"];
          if (code.is_number_integer() && code.get<int64_t>() >= 400 && code.get<int64_t>() < 600) {
            details.status = code.get<int>();
          }
        }
        throw HttpError(std::move(details));
      }
    }
  } catch (const simdjson::simdjson_error& e) {
    std::string excerpt(json.substr(0, 120));
    throw ProtocolError(std::string("malformed stream chunk (") + e.what() + "): " + excerpt);
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(std::string("malformed usage in stream chunk: ") + e.what());
  }
  s.content.append(delta_.content);
  s.reasoning.append(delta_.reasoning);
  if (!delta_.content.empty() || !delta_.reasoning.empty() || !delta_.toolCalls.empty() ||
      delta_.usage) {
    sawContent_ = true;
  }
  return delta_;
}

ChatResult StreamAssembler::finish() {
  if (!done_ && reportedFinishReason_.empty()) {
    throw ProtocolError(
        "the stream ended before the reply was complete (no finish_reason and no [DONE])");
  }
  State& s = *state_;
  ChatResult result;
  result.message.role = Role::Assistant;
  result.message.content = std::move(s.content);
  for (PendingCall& call : s.calls) {
    if (call.arguments.empty()) call.arguments = "{}";
    result.message.toolCalls.push_back(
        ToolCall{std::move(call.id), std::move(call.name), std::move(call.arguments)});
  }
  makeToolCallIdsUnique(result.message.toolCalls);
  if (!s.reasoning.empty()) result.message.extra["reasoning_content"] = std::move(s.reasoning);
  if (!s.refusal.empty()) result.message.extra["refusal"] = std::move(s.refusal);
  result.reportedFinishReason = reportedFinishReason_;
  result.finishReason =
      normaliseFinishReason(reportedFinishReason_, !result.message.toolCalls.empty());
  result.usage = s.usage;
  result.id = s.id;
  result.model = s.model;

  result.raw = completionObject(result, s.created);
  if (!s.systemFingerprint.empty()) result.raw["system_fingerprint"] = s.systemFingerprint;
  return result;
}

nlohmann::json completionObject(const ChatResult& result, int64_t created) {
  nlohmann::json choice = {{"index", 0},
                           {"message", toJson(result.message)},
                           {"finish_reason", result.reportedFinishReason.empty()
                                                 ? nlohmann::json(nullptr)
                                                 : nlohmann::json(result.reportedFinishReason)}};
  return {{"id", result.id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", result.model},
          {"choices", nlohmann::json::array({std::move(choice)})},
          {"usage", result.usage ? toJson(*result.usage) : nlohmann::json(nullptr)}};
}

TokenUsage normalisedUsage(int64_t prompt, int64_t completion, int64_t cacheRead,
                           int64_t cacheWrite, int64_t reasoning) {
  TokenUsage usage;
  usage.promptTokens = prompt;
  usage.completionTokens = completion;
  usage.totalTokens = prompt + completion;
  usage.raw = {{"prompt_tokens", prompt},
               {"completion_tokens", completion},
               {"total_tokens", usage.totalTokens},
               {"prompt_tokens_details",
                {{"cached_tokens", cacheRead}, {"cache_creation_tokens", cacheWrite}}},
               {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
  return usage;
}

ChatResult resultFromCompletion(std::string_view body) {
  nlohmann::json value = parseJson(body);  // ProtocolError when not JSON or nested too deep
  if (value.is_discarded() || !value.is_object()) {
    throw ProtocolError("the response is not JSON: " + std::string(body.substr(0, 120)));
  }
  if (auto error = value.find("error"); error != value.end() && !error->is_null()) {
    HttpError::Details details;
    details.body.assign(body);
    readApiError(body, details);
    throw HttpError(std::move(details));
  }
  auto choices = value.find("choices");
  if (choices == value.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    throw ProtocolError("the response has no choices: " + std::string(body.substr(0, 120)));
  }
  const nlohmann::json& choice = (*choices)[0];
  auto messageIt = choice.find("message");
  if (messageIt == choice.end() || !messageIt->is_object()) {
    throw ProtocolError("the response's choices[0] has no message");
  }
  const nlohmann::json& m = *messageIt;
  ChatResult result;
  result.message.role = Role::Assistant;
  try {
    std::string thinking;
    if (auto c = m.find("content"); c != m.end()) appendText(*c, result.message.content, &thinking);
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
      if (calls->size() > kMaxToolCallsPerReply)
        throw ProtocolError("the reply has more than " + std::to_string(kMaxToolCallsPerReply) +
                            " tool calls");
      for (const nlohmann::json& call : *calls) {
        ToolCall tc;
        if (auto id = call.find("id"); id != call.end() && id->is_string()) {
          tc.id = id->get<std::string>();
        }
        if (tc.id.empty()) tc.id = generateToolCallId();
        if (auto fn = call.find("function"); fn != call.end() && fn->is_object()) {
          if (auto name = fn->find("name"); name != fn->end() && name->is_string()) {
            tc.name = name->get<std::string>();
          }
          if (auto args = fn->find("arguments"); args != fn->end() && !args->is_null()) {
            tc.arguments = args->is_string() ? args->get<std::string>() : args->dump();
          }
        }
        if (tc.arguments.empty()) tc.arguments = "{}";
        result.message.toolCalls.push_back(std::move(tc));
      }
    }
    if (!thinking.empty()) result.message.extra["reasoning_content"] = thinking;
    for (const auto& [key, field] : m.items()) {
      if (key == "role" || key == "content" || key == "tool_calls" || key == "tool_call_id" ||
          key == "name" || field.is_null()) {
        continue;
      }
      if (key == "reasoning" && !m.contains("reasoning_content")) {
        result.message.extra["reasoning_content"] = field;
      } else {
        result.message.extra[key] = field;
      }
    }
    if (auto reason = choice.find("finish_reason"); reason != choice.end() && reason->is_string()) {
      result.reportedFinishReason = reason->get<std::string>();
    }
    if (auto id = value.find("id"); id != value.end() && id->is_string()) {
      result.id = id->get<std::string>();
    }
    if (auto model = value.find("model"); model != value.end() && model->is_string()) {
      result.model = model->get<std::string>();
    }
    if (auto usage = value.find("usage"); usage != value.end())
      result.usage = usageFromJson(*usage);
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(std::string("malformed response: ") + e.what());
  }
  makeToolCallIdsUnique(result.message.toolCalls);
  result.finishReason =
      normaliseFinishReason(result.reportedFinishReason, !result.message.toolCalls.empty());
  result.raw = std::move(value);
  return result;
}

void ChatCompletionsReader::reset() {
  assembler_ = std::make_unique<StreamAssembler>();
  delivered_ = false;
}

bool ChatCompletionsReader::onEvent(const SseEvent& event, const HttpReplyInfo& reply) {
  if (assembler_->sawDone()) return true;  // nothing after [DONE] counts
  if (event.data == "[DONE]") {
    assembler_->markDone();
    return true;
  }
  if (event.type == "error") {
    HttpError::Details details;
    details.status = reply.status;
    details.body = event.data;
    details.requestId = reply.requestId;
    readApiError(event.data, details);
    if (details.apiMessage.empty()) details.apiMessage = "the server sent an error event";
    throw HttpError(std::move(details));
  }
  if (event.data.empty()) return true;
  const StreamDelta* delta;
  try {
    delta = &assembler_->addChunk(event.data);
  } catch (const HttpError& e) {
    HttpError::Details details = e.details();
    if (details.status == 0) details.status = reply.status;
    details.requestId = reply.requestId;
    throw HttpError(std::move(details));
  }
  if (!delta->empty() && onChunk_) {
    delivered_ = true;
    return (*onChunk_)(*delta);
  }
  return true;
}

void ChatCompletionsReader::onStreamEnd(const HttpReplyInfo&) {
  result_ = assembler_->finish();  // ProtocolError if the stream was cut short
}

void ChatCompletionsReader::onBody(std::string_view body, const HttpReplyInfo&) {
  result_ = resultFromCompletion(body);
  if (stream_ && onChunk_) deliverWhole(result_, *onChunk_);  // the server ignored "stream"
}

void deliverWhole(const ChatResult& result, const ChunkHandler& onChunk) {
  StreamDelta delta;
  delta.content = result.message.content;
  if (auto r = result.message.extra.find("reasoning_content");
      r != result.message.extra.end() && r->is_string()) {
    delta.reasoning = r->get<std::string>();
  }
  for (size_t i = 0; i < result.message.toolCalls.size(); ++i) {
    const ToolCall& call = result.message.toolCalls[i];
    delta.toolCalls.push_back(ToolCallDelta{i, call.id, call.name, call.arguments});
  }
  const std::vector<ServerToolCall> server = serverToolCallsOf(result.message);
  for (size_t i = 0; i < server.size(); ++i) {
    delta.serverToolCalls.push_back(
        ServerToolCallDelta{i, server[i].id, server[i].name, server[i].input});
  }
  delta.usage = result.usage;
  delta.finishReason = result.reportedFinishReason;
  if (!onChunk(delta)) throw CancelledError("the stream was stopped by its chunk handler");
}

}  // namespace parley::detail
