#include "client/responses_reply.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <simdjson.h>

#include "client/http_transport.hpp"
#include "client/provider_fields.hpp"
#include "client/reply_fields.hpp"
#include "client/stream_assembler.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/server_tools.hpp"

namespace parley::detail {

namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void throwApiError(std::string_view data, const ojson& event, int status) {
  // The error event is flat ({"type":"error","code","message"}) or holds the error
  // ({"type":"error","error":{"type","code","message"}}), as the API has sent both.
  const auto nested = event.is_object() ? event.find("error") : event.end();
  const ojson& error = nested != event.end() && nested->is_object() ? *nested : event;
  HttpError::Details details;
  details.status = status;
  details.body.assign(data);
  details.apiMessage = stringOf(error, "message");
  details.apiType = stringOf(error, "type");
  if (auto code = error.find("code"); code != error.end()) {
    details.apiCode = code->is_string() ? code->get<std::string>()
                      : code->is_null() ? std::string()
                                        : code->dump();
  }
  if (details.apiMessage.empty()) details.apiMessage = "the server reported an error";
  // The status the error stands for, when its code or type names one.
  if (details.apiType == "server_error" || details.apiCode == "server_error") details.status = 500;
  if (details.apiCode == "rate_limit_exceeded") details.status = 429;
  throw HttpError(std::move(details));
}

// Events this large are read by the fast path too: they repeat the output, and building a json
// value of it costs more than picking the few fields the reply needs.
constexpr size_t kLargeEventBytes = 4096;

// Responses items named "*_call" that the client runs, not the provider (server_tools.cpp
// reads the others as provider-run calls).
bool isServerItem(std::string_view type) {
  return type.size() > 5 && type.ends_with("_call") && type != "function_call" &&
         type != "custom_tool_call" && type != "local_shell_call" && type != "shell_call" &&
         type != "apply_patch_call" && type != "computer_call";
}

// A provider-run call's streamed input (code, MCP arguments), reported as it arrives.
bool isServerInputDelta(std::string_view type) {
  return type == "response.code_interpreter_call_code.delta" ||
         type == "response.mcp_call_arguments.delta";
}

struct Item {
  std::string type;  // message, function_call, reasoning, or another kept as is
  std::string id;
  std::string callId, name;
  std::string text;  // message text, arguments, or reasoning summary text
  std::string refusal;
  ojson done;              // the item as response.output_item.done sent it
  std::string rawContent;  // a message item read fast: its content's JSON text, not in `done`
  size_t toolIndex = 0;    // function_call: among client calls; provider-run: among those
  bool server = false;     // a provider-run tool call
};

}  // namespace

struct ResponsesAssembler::State {
  StreamDelta delta;
  std::vector<Item> items;
  size_t tools = 0, serverTools = 0;
  std::string id, model, status, incompleteReason;
  int64_t created = 0;
  std::optional<TokenUsage> usage;
  bool ended = false;

  Item& itemAt(const ojson& value) {
    auto index = value.find("output_index");
    if (index == value.end() || !index->is_number_unsigned() ||
        index->get<size_t>() >= items.size()) {
      throw ProtocolError("an event names an output item that was never added");
    }
    return items[index->get<size_t>()];
  }

  static bool isDelta(std::string_view type) {
    return type == "response.output_text.delta" ||
           type == "response.function_call_arguments.delta" ||
           type == "response.reasoning_summary_text.delta" ||
           type == "response.reasoning_text.delta";
  }

  void addDelta(std::string_view type, size_t index, std::string_view piece) {
    if (index >= items.size()) {
      throw ProtocolError("an event names an output item that was never added");
    }
    Item& it = items[index];
    it.text += piece;
    if (type == "response.output_text.delta") {
      delta.content = piece;
    } else if (type == "response.function_call_arguments.delta") {
      delta.toolCalls.push_back(ToolCallDelta{it.toolIndex, "", "", std::string(piece)});
    } else {
      delta.reasoning = piece;
    }
  }

  // Most events of a stream are deltas, and the few large ones repeat the whole output (the
  // done events, response.completed): read those with simdjson, taking only the fields the reply
  // needs, without building a json value of the output. Returns false (nothing done) for any
  // other event or anything unexpected, which then takes the full path.
  bool fastEvent(std::string_view data) {
    const bool maybeDelta = data.find(".delta\"") != std::string_view::npos;
    if (!maybeDelta && data.size() < kLargeEventBytes) return false;
    padded.resize(data.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(padded.data(), data.data(), data.size());
    try {
      simdjson::ondemand::document doc = parser.iterate(padded.data(), data.size(), padded.size());
      std::string_view type, piece;
      size_t index = SIZE_MAX;
      bool havePiece = false;
      ojson lite = ojson::object();  // a large event's small fields
      std::string rawContent;        // and its item's content, as raw JSON text
      for (auto field : doc.get_object()) {
        const std::string_view key = field.unescaped_key();
        if (key == "type") {
          type = field.value().get_string();
        } else if (key == "output_index") {
          index = static_cast<size_t>(field.value().get_uint64());
        } else if (key == "delta") {
          piece = field.value().get_string();
          havePiece = true;
        } else if (!maybeDelta && (key == "response" || key == "item")) {
          lite[std::string(key)] =
              fieldsExcept(field.value().get_object(), "output", "content", &rawContent);
        }
      }
      if (ended) return false;
      if (maybeDelta) {
        if (!isDelta(type) || !havePiece) return false;
        addDelta(type, index, piece);
        return true;
      }
      if (type == "response.output_text.done" || type == "response.content_part.done") {
        return true;  // the deltas brought the text (a stream without them has it in the item)
      }
      if (type == "response.output_item.done" && index < items.size() && lite.contains("item")) {
        Item& it = items[index];
        // A message item whose text the deltas brought: its content is that text again.
        if (it.type != "message" || it.text.empty() ||
            stringOf(lite["item"], "type") != "message") {
          return false;
        }
        if (it.id.empty()) it.id = stringOf(lite["item"], "id");
        // Kept unparsed: read only if the output is kept whole (annotations and all).
        it.done = std::move(lite["item"]);
        it.rawContent = std::move(rawContent);
        return true;
      }
      if (type == "response.completed" && lite.contains("response")) {
        readResponse(lite["response"]);
        endStream("completed");
        return true;
      }
      return false;
    } catch (const simdjson::simdjson_error&) {
      return false;  // the full path reports it
    }
  }

  // The object's fields as json, less the two named ones (left unread: simdjson skips them).
  // `skipped2`: where the raw JSON text of `skip2`'s value goes (copied, not parsed).
  static ojson fieldsExcept(simdjson::ondemand::object object, std::string_view skip1,
                            std::string_view skip2, std::string* skipped2) {
    ojson out = ojson::object();
    for (auto field : object) {
      const std::string_view key = field.unescaped_key();
      if (key == skip1) continue;
      if (key == skip2) {
        simdjson::ondemand::value value = field.value();
        if (value.type() == simdjson::ondemand::json_type::array) {
          const std::string_view raw = simdjson::ondemand::array(value.get_array()).raw_json();
          skipped2->assign(raw);
        }
        continue;
      }
      simdjson::ondemand::value value = field.value();
      std::string_view raw;
      switch (value.type()) {
        case simdjson::ondemand::json_type::object:
          raw = simdjson::ondemand::object(value.get_object()).raw_json();
          break;
        case simdjson::ondemand::json_type::array:
          raw = simdjson::ondemand::array(value.get_array()).raw_json();
          break;
        default:
          raw = value.raw_json_token();
      }
      ojson parsed = parseOrderedJson(raw, {}, false);
      if (parsed.is_discarded()) throw simdjson::simdjson_error(simdjson::TAPE_ERROR);
      out[std::string(key)] = std::move(parsed);
    }
    return out;
  }

  void endStream(const std::string& finishReason) {
    ended = true;
    delta.usage = usage;
    delta.finishReason = finishReason;
  }

  simdjson::ondemand::parser parser;
  std::string padded;

  void readResponse(const ojson& response) {
    if (!response.is_object()) return;
    if (auto v = stringOf(response, "id"); !v.empty()) id = v;
    if (auto v = stringOf(response, "model"); !v.empty()) model = v;
    if (auto v = count(response, "created_at")) created = v;
    status = stringOf(response, "status");
    if (auto u = response.find("usage"); u != response.end() && u->is_object()) {
      const ojson none = ojson::object();
      const auto in = u->find("input_tokens_details");
      const auto out = u->find("output_tokens_details");
      usage = normalisedUsage(count(*u, "input_tokens"), count(*u, "output_tokens"),
                              count(in != u->end() ? *in : none, "cached_tokens"), 0,
                              count(out != u->end() ? *out : none, "reasoning_tokens"));
    }
    if (auto d = response.find("incomplete_details"); d != response.end()) {
      incompleteReason = stringOf(*d, "reason");
    }
  }

  void addItem(const ojson& value) {
    const ojson& item = value.contains("item") ? value["item"] : ojson();
    if (!item.is_object()) throw ProtocolError("response.output_item.added without an item");
    const size_t index = value.value("output_index", items.size());
    if (index < items.size()) {
      throw ProtocolError("output item " + std::to_string(index) + " added out of order");
    }
    if (index >= kMaxReplyItems) {
      throw ProtocolError("the reply has more than " + std::to_string(kMaxReplyItems) +
                          " output items");
    }
    // The API may skip an index (an item it does not show); the gap holds no item.
    items.resize(index);
    Item it;
    it.type = stringOf(item, "type");
    it.id = stringOf(item, "id");
    if (isServerItem(it.type)) {
      it.server = true;
      it.toolIndex = serverTools++;
      delta.serverToolCalls.push_back(ServerToolCallDelta{
          it.toolIndex, it.id, it.type.substr(0, it.type.size() - 5), std::string()});
    } else if (it.type == "function_call") {
      it.callId = stringOf(item, "call_id");
      it.name = stringOf(item, "name");
      if (it.callId.empty() || it.name.empty()) {
        throw ProtocolError("a function_call item without call_id or name");
      }
      it.text = stringOf(item, "arguments");
      it.toolIndex = tools++;
      delta.toolCalls.push_back(ToolCallDelta{it.toolIndex, it.callId, it.name, it.text});
    }
    items.push_back(std::move(it));
  }

  // The whole item: what the deltas left out (a server that sent none) is read from it.
  void itemDone(Item& it, const ojson& item) {
    if (!item.is_object()) throw ProtocolError("response.output_item.done without an item");
    it.done = item;
    if (it.id.empty()) it.id = stringOf(item, "id");
    if (it.type == "message" && it.text.empty()) {
      if (auto parts = item.find("content"); parts != item.end() && parts->is_array()) {
        for (const auto& part : *parts) {
          const std::string type = stringOf(part, "type");
          if (type == "output_text") it.text += stringOf(part, "text");
          if (type == "refusal" && it.refusal.empty()) it.refusal = stringOf(part, "refusal");
        }
      }
    } else if (it.type == "function_call" && it.text.empty()) {
      it.text = stringOf(item, "arguments");
    } else if (it.type == "reasoning" && it.text.empty()) {
      // The summary, else the reasoning text itself (open models served by LM Studio, vLLM).
      for (const char* key : {"summary", "content"}) {
        if (auto parts = item.find(key); parts != item.end() && parts->is_array()) {
          for (const auto& part : *parts) {
            if (!it.text.empty()) it.text += "\n\n";
            it.text += stringOf(part, "text");
          }
        }
        if (!it.text.empty()) break;
      }
    }
  }
};

ResponsesAssembler::ResponsesAssembler() : state_(std::make_unique<State>()) {}
ResponsesAssembler::~ResponsesAssembler() = default;

bool ResponsesAssembler::sawEnd() const noexcept {
  return state_->ended;
}

const StreamDelta& ResponsesAssembler::addEvent(std::string_view data, int status) {
  State& s = *state_;
  s.delta.clear();
  if (s.fastEvent(data)) return s.delta;
  const ojson value = parseOrderedJson(data, {}, false);
  if (value.is_discarded() || !value.is_object()) {
    throw ProtocolError("a stream event is not a JSON object: " + std::string(data.substr(0, 120)));
  }
  const std::string type = stringOf(value, "type");
  if (type == "error") throwApiError(data, value, status);
  if (type == "response.failed") {
    const ojson& response = value.contains("response") ? value["response"] : ojson();
    throwApiError(data,
                  response.is_object() && response.contains("error") ? response["error"] : ojson(),
                  status);
  }
  if (s.ended) throw ProtocolError("an event after the response ended: " + type);
  if (State::isDelta(type)) {
    const auto index = value.find("output_index");
    s.addDelta(
        type, index != value.end() && index->is_number_unsigned() ? index->get<size_t>() : SIZE_MAX,
        stringOf(value, "delta"));
  } else if (isServerInputDelta(type)) {
    Item& it = s.itemAt(value);
    const std::string piece = stringOf(value, "delta");
    if (it.server) {
      s.delta.serverToolCalls.push_back(ServerToolCallDelta{it.toolIndex, "", "", piece});
    }
  } else if (type == "response.refusal.delta") {
    s.itemAt(value).refusal += stringOf(value, "delta");
  } else if (type == "response.output_item.added") {
    s.addItem(value);
  } else if (type == "response.output_item.done") {
    Item& it = s.itemAt(value);
    if (it.type != "message" && data.size() > kMaxServerToolResultBytes) {
      throw ProtocolError("a \"" + it.type + "\" output item is over the cap of " +
                          std::to_string(kMaxServerToolResultBytes) + " bytes");
    }
    s.itemDone(it, value.contains("item") ? value["item"] : ojson());
  } else if (type == "response.completed" || type == "response.incomplete") {
    s.readResponse(value.contains("response") ? value["response"] : ojson());
    const std::string reason = type == "response.completed" ? "completed" : s.incompleteReason;
    s.endStream(reason.empty() ? "incomplete" : reason);
  } else if (type == "response.created" || type == "response.in_progress") {
    s.readResponse(value.contains("response") ? value["response"] : ojson());
  }
  // Every other event (a provider-run tool's progress, its partial images, the done events that
  // repeat what the deltas brought, and types yet to come) carries nothing the reply needs: an
  // item's final state arrives in response.output_item.done.
  return s.delta;
}

namespace {

// An item as response.output_item.done gave it; a message or call the fast path read without
// keeping the done form is written back from what was read.
nlohmann::json wholeItem(const Item& it) {
  if (it.done.is_object()) {
    nlohmann::json item = nlohmann::json::parse(it.done.dump());
    if (!it.rawContent.empty()) item["content"] = nlohmann::json::parse(it.rawContent);
    return item;
  }
  nlohmann::json item = {{"type", it.type}};
  if (!it.id.empty()) item["id"] = it.id;
  if (it.type == "message") {
    item["role"] = "assistant";
    item["status"] = "completed";
    item["content"] = nlohmann::json::array(
        {{{"type", "output_text"}, {"text", it.text}, {"annotations", nlohmann::json::array()}}});
  } else if (it.type == "function_call") {
    item["call_id"] = it.callId;
    item["name"] = it.name;
    item["arguments"] = it.text.empty() ? "{}" : it.text;
    item["status"] = "completed";
  }
  return item;
}

}  // namespace

ChatResult ResponsesAssembler::finish() {
  State& s = *state_;
  if (!s.ended) {
    throw ProtocolError("the stream ended before response.completed (the reply was cut short)");
  }
  ChatResult result;
  Message& m = result.message;
  m.role = Role::Assistant;
  nlohmann::json reasoningItems = nlohmann::json::array();
  nlohmann::json ids = nlohmann::json::object();
  std::string reasoning, refusal;
  // The output whole, kept when it holds an item beyond message, function_call and reasoning.
  nlohmann::json output = nlohmann::json::array();
  bool keepOutput = false;
  size_t webSearches = 0;
  // The rebuilt order is reasoning items, one message, function calls: any other is kept.
  int lastRank = 0;
  size_t messages = 0;
  for (const Item& it : s.items) {
    if (it.type.empty()) continue;  // a gap in the output indexes
    const int rank = it.type == "reasoning"       ? 0
                     : it.type == "message"       ? 1
                     : it.type == "function_call" ? 2
                                                  : 3;
    messages += it.type == "message" ? 1 : 0;
    keepOutput = keepOutput || rank == 3 || rank < lastRank || messages > 1;
    lastRank = rank;
    if (it.type == "web_search_call") ++webSearches;
  }
  for (Item& it : s.items) {
    if (keepOutput && !it.type.empty()) output.push_back(wholeItem(it));
    if (it.type == "message") {
      m.content += it.text;
      if (!it.id.empty()) ids["message"] = it.id;
      refusal += it.refusal;
    } else if (it.type == "function_call") {
      if (!it.id.empty()) ids[it.callId] = it.id;
      m.toolCalls.push_back(
          ToolCall{it.callId, it.name, it.text.empty() ? "{}" : std::move(it.text)});
    } else if (it.type == "reasoning") {
      if (!it.text.empty()) {
        if (!reasoning.empty()) reasoning += "\n\n";
        reasoning += it.text;
      }
      if (it.done.is_object()) reasoningItems.push_back(nlohmann::json::parse(it.done.dump()));
    }
  }
  if (!reasoningItems.empty()) m.extra[std::string(kReasoningItems)] = std::move(reasoningItems);
  if (!reasoning.empty()) m.extra[std::string(kReasoningContent)] = std::move(reasoning);
  if (!ids.empty()) m.extra[std::string(kResponseItemIds)] = std::move(ids);
  if (!refusal.empty()) m.extra["refusal"] = std::move(refusal);
  if (keepOutput) m.extra[std::string(kResponseOutput)] = std::move(output);
  if (s.status == "incomplete") {
    result.reportedFinishReason = s.incompleteReason.empty() ? "incomplete" : s.incompleteReason;
    result.finishReason =
        result.reportedFinishReason == "max_output_tokens" ? "length" : result.reportedFinishReason;
  } else {
    result.reportedFinishReason = s.status.empty() ? "completed" : s.status;
    result.finishReason = m.toolCalls.empty() ? "stop" : "tool_calls";
  }
  result.usage = s.usage;
  // Web searches are billed per call; the API counts them only as items.
  if (result.usage && webSearches > 0) {
    result.usage->raw["server_tool_use"] = {{"web_search_requests", webSearches}};
  }
  result.id = s.id;
  result.model = s.model;
  result.raw = completionObject(result, s.created);
  return result;
}

ChatResult resultFromResponse(std::string_view body) {
  const ojson value = parseOrderedJson(body, {}, false);
  if (value.is_discarded() || !value.is_object()) {
    throw ProtocolError("the response is not JSON: " + std::string(body.substr(0, 120)));
  }
  if (auto error = value.find("error"); error != value.end() && error->is_object()) {
    throwApiError(body, *error, 200);
  }
  if (stringOf(value, "object") != "response" || !value.contains("output") ||
      !value["output"].is_array()) {
    throw ProtocolError("the response is not a Responses object: " +
                        std::string(body.substr(0, 120)));
  }
  ResponsesAssembler assembler;
  ResponsesAssembler::State& s = *assembler.state_;
  const ojson& output = value["output"];
  for (size_t i = 0; i < output.size(); ++i) {
    s.addItem(ojson{{"output_index", i}, {"item", output[i]}});
    s.itemDone(s.items.back(), output[i]);
  }
  s.readResponse(value);
  s.ended = true;
  return assembler.finish();
}

}  // namespace parley::detail
