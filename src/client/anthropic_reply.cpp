#include "client/anthropic_reply.hpp"

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
namespace ondemand = simdjson::ondemand;

std::string finishReasonOf(const std::string& stopReason) {
  if (stopReason == "end_turn" || stopReason == "stop_sequence") return "stop";
  if (stopReason == "tool_use") return "tool_calls";
  if (stopReason == "max_tokens") return "length";
  return stopReason;
}

[[noreturn]] void throwErrorEvent(std::string_view data, int status) {
  HttpError::Details details;
  details.status = status;
  details.body.assign(data);
  readApiError(data, details);
  // Anthropic answers 529 when overloaded; inside a stream the status is already 200, so the
  // error's type says it. Such an error is retried like the status.
  if (details.apiType == "overloaded_error") details.status = 529;
  if (details.apiMessage.empty()) details.apiMessage = "the server sent an error event";
  throw HttpError(std::move(details));
}

// What a content_block_delta carries, by its delta's type.
enum class DeltaKind { Text, InputJson, Thinking, Signature, Citations, Unknown };

DeltaKind deltaKindOf(std::string_view type) {
  if (type == "text_delta") return DeltaKind::Text;
  if (type == "input_json_delta") return DeltaKind::InputJson;
  if (type == "thinking_delta") return DeltaKind::Thinking;
  if (type == "signature_delta") return DeltaKind::Signature;
  if (type == "citations_delta") return DeltaKind::Citations;
  return DeltaKind::Unknown;
}

// The field holding the piece a delta of that kind carries; empty for kinds without one.
std::string_view pieceFieldOf(DeltaKind kind) {
  switch (kind) {
    case DeltaKind::Text:
      return "text";
    case DeltaKind::InputJson:
      return "partial_json";
    case DeltaKind::Thinking:
      return "thinking";
    case DeltaKind::Signature:
      return "signature";
    default:
      return {};
  }
}

// The one shape Anthropic sends for nearly every event of a stream, read without a JSON parser:
//   {"type":"content_block_delta","index":N,"delta":{"type":"T","F":"S"}}
// with F the piece field of T and S a string without escapes. Anything else (another key order,
// spaces, an escape, a control character, invalid UTF-8) returns false and takes the paths that
// read every form and name every mistake.
struct PlainDelta {
  size_t index = 0;
  DeltaKind kind = DeltaKind::Unknown;
  std::string_view type;
  std::string_view piece;
};

// Literal prefixes are compared with a constant size: a few loads, not a call.
template <size_t N>
bool consume(std::string_view& s, const char (&prefix)[N]) {
  if (s.size() < N - 1 || std::memcmp(s.data(), prefix, N - 1) != 0) return false;
  s.remove_prefix(N - 1);
  return true;
}
bool consume(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// ASCII that may stand in a JSON string as it is: not a quote, a backslash, a control character.
constexpr auto kPlainByte = [] {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c)
    plain[static_cast<size_t>(c)] = c != '"' && c != '\\';
  return plain;
}();

bool readPlainDelta(std::string_view s, PlainDelta& out) {
  if (!consume(s, R"({"type":"content_block_delta","index":)")) return false;
  size_t digits = 0;
  size_t index = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') {
    index = index * 10 + static_cast<size_t>(s[digits] - '0');
    ++digits;
  }
  if (digits == 0 || digits > 9 || (digits > 1 && s[0] == '0')) return false;
  s.remove_prefix(digits);
  if (!consume(s, R"(,"delta":{"type":")")) return false;
  std::string_view type = "text_delta";
  DeltaKind kind = DeltaKind::Text;
  if (!consume(s, R"(text_delta","text":")")) {  // the usual one, in one comparison
    size_t typeEnd = 0;
    while (typeEnd < s.size() && s[typeEnd] != '"')
      ++typeEnd;
    if (typeEnd == s.size()) return false;
    type = s.substr(0, typeEnd);
    kind = deltaKindOf(type);
    const std::string_view field = pieceFieldOf(kind);
    if (field.empty()) return false;
    s.remove_prefix(typeEnd);
    if (!consume(s, R"(",")") || !consume(s, field) || !consume(s, R"(":")")) return false;
  }
  // The piece: up to its closing quote, with no escape or control character (kPlainByte).
  bool ascii = true;
  size_t end = 0;
  for (;; ++end) {
    if (end == s.size()) return false;
    const auto c = static_cast<unsigned char>(s[end]);
    if (kPlainByte[c]) continue;
    if (c == '"') break;
    if (c < 0x80) return false;  // a backslash or a control character
    ascii = false;
  }
  const std::string_view piece(s.data(), end);
  if (!ascii && !simdjson::validate_utf8(piece.data(), piece.size())) return false;
  // The rest is exactly "}} (the string's quote, then the two objects' ends).
  if (s.size() != end + 3 || std::memcmp(s.data() + end, R"("}})", 3) != 0) return false;
  out.index = index;
  out.kind = kind;
  out.type = type;
  out.piece = piece;
  return true;
}

// What parley does with a block, by its type.
enum class BlockKind { Text, ClientTool, ServerTool, Thinking, Redacted, Other };

BlockKind blockKindOf(std::string_view type) {
  if (type == "text") return BlockKind::Text;
  if (type == "tool_use") return BlockKind::ClientTool;
  // Tools the provider runs itself (web search, web fetch, code execution, tool search, MCP).
  if (type == "server_tool_use" || type == "mcp_tool_use") return BlockKind::ServerTool;
  if (type == "thinking") return BlockKind::Thinking;
  if (type == "redacted_thinking") return BlockKind::Redacted;
  return BlockKind::Other;  // results of server tools, compaction, and types yet to come
}

nlohmann::json plain(const ojson& value) {
  return nlohmann::json::parse(value.dump());
}

struct Block {
  BlockKind kind = BlockKind::Other;
  std::string text;  // text, thinking text, or a tool's input JSON text
  std::string id, name, signature;
  ojson start;              // the block as content_block_start gave it, later deltas merged in
  size_t toolIndex = 0;     // ClientTool: among client calls; ServerTool: among server calls
  size_t bytes = 0;         // ServerTool, Other: its JSON text so far (kMaxServerToolResultBytes)
  bool inputGiven = false;  // a tool block whose start carried its whole input
  bool open = true;
};

void checkSize(const Block& b) {
  if (b.bytes > kMaxServerToolResultBytes) {
    throw ProtocolError("a \"" + stringOf(b.start, "type") +
                        "\" content block is over the cap of " +
                        std::to_string(kMaxServerToolResultBytes) + " bytes");
  }
}

}  // namespace

struct AnthropicAssembler::State {
  StreamDelta delta;
  std::vector<Block> blocks;
  size_t tools = 0, serverTools = 0;
  std::string id, model, stopReason;
  ojson stopDetails, serverToolUse;
  int64_t input = 0, output = 0, cacheRead = 0, cacheWrite = 0;
  bool started = false, stopped = false, sawUsage = false;

  void readUsage(const ojson& usage) {
    if (!usage.is_object()) return;
    sawUsage = true;
    // message_delta repeats the totals so far; a field it leaves out keeps its value.
    if (usage.contains("input_tokens")) input = count(usage, "input_tokens");
    if (usage.contains("output_tokens")) output = count(usage, "output_tokens");
    if (usage.contains("cache_read_input_tokens"))
      cacheRead = count(usage, "cache_read_input_tokens");
    if (usage.contains("cache_creation_input_tokens"))
      cacheWrite = count(usage, "cache_creation_input_tokens");
    if (auto u = usage.find("server_tool_use"); u != usage.end() && u->is_object()) {
      serverToolUse = *u;
    }
  }

  TokenUsage usage() const {
    TokenUsage u =
        normalisedUsage(input + cacheRead + cacheWrite, output, cacheRead, cacheWrite, 0);
    // Provider-run tools billed per call (web_search_requests, web_fetch_requests, ...).
    if (!serverToolUse.is_null()) u.raw["server_tool_use"] = plain(serverToolUse);
    return u;
  }

  void readStop(const ojson& holder) {
    if (const std::string stop = stringOf(holder, "stop_reason"); !stop.empty()) stopReason = stop;
    if (auto d = holder.find("stop_details"); d != holder.end() && d->is_object()) stopDetails = *d;
  }

  Block& block(const ojson& value) {
    auto index = value.find("index");
    if (index == value.end() || !index->is_number_unsigned() ||
        index->get<size_t>() >= blocks.size()) {
      throw ProtocolError("a content block event names a block that was never started");
    }
    return blocks[index->get<size_t>()];
  }

  // `bytes`: the size of the event that carried it (for the cap on what parley does not model).
  void startBlock(const ojson& value, size_t bytes) {
    const ojson& cb = value.contains("content_block") ? value["content_block"] : ojson();
    if (!cb.is_object()) throw ProtocolError("content_block_start without a content_block");
    const size_t index = value.value("index", blocks.size());
    if (index != blocks.size()) {
      throw ProtocolError("content block " + std::to_string(index) + " started out of order");
    }
    if (blocks.size() >= kMaxReplyItems) {
      throw ProtocolError("the reply has more than " + std::to_string(kMaxReplyItems) +
                          " content blocks");
    }
    Block b;
    b.kind = blockKindOf(stringOf(cb, "type"));
    b.start = cb;
    switch (b.kind) {
      case BlockKind::Text:
        b.text = stringOf(cb, "text");
        delta.content = b.text;
        break;
      case BlockKind::ClientTool:
      case BlockKind::ServerTool: {
        b.id = stringOf(cb, "id");
        b.name = stringOf(cb, "name");
        if (b.id.empty() || b.name.empty()) {
          throw ProtocolError("a " + stringOf(cb, "type") + " block without id or name");
        }
        // Usually `input: {}` and the input follows in input_json_delta events; a call made by
        // code (programmatic tool calling) or a whole message gives it here.
        if (auto in = cb.find("input"); in != cb.end() && in->is_object() && !in->empty()) {
          b.text = in->dump();
          b.inputGiven = true;
        }
        if (b.kind == BlockKind::ClientTool) {
          b.toolIndex = tools++;
          delta.toolCalls.push_back(ToolCallDelta{b.toolIndex, b.id, b.name, b.text});
        } else {
          b.toolIndex = serverTools++;
          b.bytes = bytes;
          delta.serverToolCalls.push_back(ServerToolCallDelta{b.toolIndex, b.id, b.name, b.text});
        }
        break;
      }
      case BlockKind::Thinking:
        b.text = stringOf(cb, "thinking");
        b.signature = stringOf(cb, "signature");
        delta.reasoning = b.text;
        break;
      case BlockKind::Redacted:
        break;
      case BlockKind::Other:
        b.bytes = bytes;
        break;
    }
    checkSize(b);
    blocks.push_back(std::move(b));
  }

  void addDelta(const ojson& value) {
    const auto index = value.find("index");
    const ojson& d = value.contains("delta") ? value["delta"] : ojson();
    const std::string type = d.is_object() ? stringOf(d, "type") : std::string();
    const DeltaKind kind = deltaKindOf(type);
    const size_t at =
        index != value.end() && index->is_number_unsigned() ? index->get<size_t>() : SIZE_MAX;
    if (kind == DeltaKind::Citations || kind == DeltaKind::Unknown) {
      mergeDelta(at, d, value.dump().size());
      return;
    }
    const std::string_view field = pieceFieldOf(kind);
    addDelta(at, kind, type, stringOf(d, std::string(field).c_str()));
  }

  // A delta parley does not read piece by piece (citations_delta, compaction_delta, and types yet
  // to come) is merged into its block as the API's unstreamed form has it: a string field is
  // appended to, a `citation` joins `citations`, anything else replaces the field.
  void mergeDelta(size_t index, const ojson& d, size_t bytes) {
    if (index >= blocks.size()) {
      throw ProtocolError("a content block event names a block that was never started");
    }
    Block& b = blocks[index];
    if (!b.open) throw ProtocolError("a delta for a content block that was already stopped");
    if (!d.is_object()) throw ProtocolError("a content_block_delta without a delta");
    for (const auto& [key, piece] : d.items()) {
      if (key == "type") continue;
      if (key == "citation") {
        ojson& citations = b.start["citations"];
        if (!citations.is_array()) citations = ojson::array();
        citations.push_back(piece);
        continue;
      }
      ojson& field = b.start[key];
      if (piece.is_string() && (field.is_string() || field.is_null())) {
        field = (field.is_string() ? field.get<std::string>() : std::string()) +
                piece.get<std::string>();
      } else {
        field = piece;
      }
    }
    b.bytes += bytes;
    checkSize(b);
  }

  // `type` names the kind in an error only.
  void addDelta(size_t index, DeltaKind kind, std::string_view type, std::string_view piece) {
    if (index >= blocks.size()) {
      throw ProtocolError("a content block event names a block that was never started");
    }
    Block& b = blocks[index];
    if (!b.open) throw ProtocolError("a delta for a content block that was already stopped");
    switch (kind) {
      case DeltaKind::Text:
        b.text += piece;
        delta.content = piece;
        break;
      case DeltaKind::InputJson:
        if (b.inputGiven && !piece.empty()) {  // deltas after a whole input restate it
          b.text.clear();
          b.inputGiven = false;
        }
        b.text += piece;
        if (b.kind == BlockKind::ServerTool) {
          b.bytes += piece.size();
          checkSize(b);
          delta.serverToolCalls.push_back(
              ServerToolCallDelta{b.toolIndex, "", "", std::string(piece)});
        } else {
          delta.toolCalls.push_back(ToolCallDelta{b.toolIndex, "", "", std::string(piece)});
        }
        break;
      case DeltaKind::Thinking:
        b.text += piece;
        delta.reasoning = piece;
        break;
      case DeltaKind::Signature:
        b.signature += piece;
        break;
      case DeltaKind::Citations:
      case DeltaKind::Unknown:
        throw ProtocolError("a \"" + std::string(type) + "\" delta read as a piece");
    }
  }

  // Most events of a stream are content_block_delta: read those by hand when they have the usual
  // shape, else with simdjson, without building a json value. Returns false (nothing done) for
  // any other event, which takes the full path.
  bool fastDelta(std::string_view data) {
    if (PlainDelta plain; started && !stopped && readPlainDelta(data, plain)) {
      addDelta(plain.index, plain.kind, plain.type, plain.piece);
      return true;
    }
    if (data.find("\"content_block_delta\"") == std::string_view::npos) return false;
    padded.resize(data.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(padded.data(), data.data(), data.size());
    try {
      ondemand::document doc = parser.iterate(padded.data(), data.size(), padded.size());
      std::string_view type, deltaType, piece;
      size_t index = SIZE_MAX;
      for (auto field : doc.get_object()) {
        const std::string_view key = field.unescaped_key();
        if (key == "type") {
          type = field.value().get_string();
        } else if (key == "index") {
          index = static_cast<size_t>(field.value().get_uint64());
        } else if (key == "delta") {
          std::string_view wanted;
          for (auto d : field.value().get_object()) {
            const std::string_view k = d.unescaped_key();
            if (k == "type") {
              deltaType = d.value().get_string();
              wanted = pieceFieldOf(deltaKindOf(deltaType));
            } else if (k == "text" || k == "partial_json" || k == "thinking" || k == "signature") {
              if (!wanted.empty() && k != wanted) continue;
              piece = d.value().get_string();
            }
          }
          if (wanted.empty()) return false;  // rare kinds: the full path
        }
      }
      if (type != "content_block_delta") return false;
      if (!started || stopped) return false;  // the full path names the mistake
      addDelta(index, deltaKindOf(deltaType), deltaType, piece);
      return true;
    } catch (const simdjson::simdjson_error&) {
      return false;  // the full path reports it
    }
  }

  simdjson::ondemand::parser parser;
  std::string padded;
};

AnthropicAssembler::AnthropicAssembler() : state_(std::make_unique<State>()) {}
AnthropicAssembler::~AnthropicAssembler() = default;

bool AnthropicAssembler::sawStop() const noexcept {
  return state_->stopped;
}

const StreamDelta& AnthropicAssembler::addEvent(std::string_view data, int status) {
  State& s = *state_;
  s.delta.clear();
  if (s.fastDelta(data)) return s.delta;
  // Ordered: a tool input given whole keeps its keys in the order the model wrote them.
  const ojson value = parseOrderedJson(data, {}, false);
  if (value.is_discarded() || !value.is_object()) {
    throw ProtocolError("a stream event is not a JSON object: " + std::string(data.substr(0, 120)));
  }
  const std::string type = stringOf(value, "type");
  if (type == "error") throwErrorEvent(data, status);
  if (type == "ping") return s.delta;
  if (s.stopped) throw ProtocolError("an event after message_stop: " + type);
  if (type != "message_start" && !s.started) {
    throw ProtocolError("the stream did not begin with message_start (got \"" + type + "\")");
  }
  if (type == "message_start") {
    if (s.started) throw ProtocolError("a second message_start");
    s.started = true;
    const ojson& message = value.contains("message") ? value["message"] : ojson();
    if (!message.is_object()) throw ProtocolError("message_start without a message");
    s.id = stringOf(message, "id");
    s.model = stringOf(message, "model");
    if (message.contains("usage")) s.readUsage(message["usage"]);
    s.readStop(message);
    // Blocks the message starts with (a call made by code, programmatic tool calling): each
    // complete, as a whole message gives them.
    if (auto content = message.find("content"); content != message.end() && content->is_array()) {
      for (const ojson& block : *content) {
        s.startBlock(ojson{{"index", s.blocks.size()}, {"content_block", block}},
                     block.dump().size());
        s.blocks.back().open = false;
      }
    }
  } else if (type == "content_block_start") {
    s.startBlock(value, data.size());
  } else if (type == "content_block_delta") {
    s.addDelta(value);
  } else if (type == "content_block_stop") {
    s.block(value).open = false;
  } else if (type == "message_delta") {
    if (const auto d = value.find("delta"); d != value.end() && d->is_object()) {
      s.readStop(*d);
      if (const std::string stop = stringOf(*d, "stop_reason"); !stop.empty()) {
        s.delta.finishReason = stop;
      }
    }
    if (value.contains("usage")) s.readUsage(value["usage"]);
  } else if (type == "message_stop") {
    for (const Block& b : s.blocks) {
      if (b.open) throw ProtocolError("message_stop while a content block was still open");
    }
    s.stopped = true;
    if (s.sawUsage) s.delta.usage = s.usage();
  }
  // Any other event type is one the API added since (its versioning policy says clients must
  // ignore those): nothing in it is part of the reply.
  return s.delta;
}

ChatResult AnthropicAssembler::finish() {
  State& s = *state_;
  if (!s.stopped) {
    throw ProtocolError("the stream ended before message_stop (the reply was cut short)");
  }
  ChatResult result;
  Message& m = result.message;
  m.role = Role::Assistant;
  nlohmann::json thinking = nlohmann::json::array();
  std::string reasoning;
  // The blocks as the API gives them unstreamed, kept when the reply holds more than the message
  // says (server tools and their results, citations, compaction, a call's caller).
  ojson content = ojson::array();
  bool keepContent = false;
  for (Block& b : s.blocks) {
    ojson whole = std::move(b.start);
    switch (b.kind) {
      case BlockKind::Text:
        m.content += b.text;
        whole["text"] = b.text;
        if (auto c = whole.find("citations"); c != whole.end() && c->is_array() && !c->empty()) {
          keepContent = true;
        }
        break;
      case BlockKind::ClientTool:
      case BlockKind::ServerTool: {
        const std::string input = b.text.empty() ? "{}" : b.text;
        ojson parsed = parseOrderedJson(input, {}, false);
        whole["input"] = parsed.is_object() ? std::move(parsed) : ojson::object();
        if (b.kind == BlockKind::ServerTool) {
          keepContent = true;
        } else {
          // A call made by code names its caller; the next request must name it again.
          keepContent = keepContent || whole.size() > 4;
          m.toolCalls.push_back(ToolCall{b.id, b.name, input});
        }
        break;
      }
      case BlockKind::Thinking:
        if (!reasoning.empty()) reasoning += "\n\n";
        reasoning += b.text;
        thinking.push_back(
            {{"type", "thinking"}, {"thinking", b.text}, {"signature", b.signature}});
        whole = ojson{{"type", "thinking"}, {"thinking", b.text}, {"signature", b.signature}};
        break;
      case BlockKind::Redacted:
        thinking.push_back({{"type", "redacted_thinking"}, {"data", stringOf(whole, "data")}});
        break;
      case BlockKind::Other:
        keepContent = true;
        break;
    }
    content.push_back(std::move(whole));
  }
  if (!thinking.empty()) m.extra[std::string(kThinkingBlocks)] = std::move(thinking);
  if (!reasoning.empty()) m.extra[std::string(kReasoningContent)] = std::move(reasoning);
  if (keepContent) m.extra[std::string(kAnthropicContent)] = plain(content);
  if (s.stopReason == "refusal") {
    // The explanation the API gives (stop_details), else a plain one: never an empty reply.
    std::string why = stringOf(s.stopDetails, "explanation");
    if (why.empty()) why = "the model declined to answer (stop_reason \"refusal\")";
    m.extra["refusal"] = why;
    if (!s.stopDetails.is_null()) m.extra[std::string(kStopDetails)] = plain(s.stopDetails);
  }
  result.reportedFinishReason = s.stopReason;
  result.finishReason = normaliseFinishReason(finishReasonOf(s.stopReason), !m.toolCalls.empty());
  if (s.sawUsage) result.usage = s.usage();
  result.id = s.id;
  result.model = s.model;
  result.raw = completionObject(result, 0);
  return result;
}

ChatResult resultFromAnthropicMessage(std::string_view body) {
  // Ordered, so that a tool_use input keeps its keys in the order the model wrote them.
  const ojson value = parseOrderedJson(body, {}, false);
  if (value.is_discarded() || !value.is_object()) {
    throw ProtocolError("the response is not JSON: " + std::string(body.substr(0, 120)));
  }
  const std::string type = stringOf(value, "type");
  if (type == "error") throwErrorEvent(body, 200);
  if (type != "message" || !value.contains("content") || !value["content"].is_array()) {
    throw ProtocolError("the response is not an Anthropic message: " +
                        std::string(body.substr(0, 120)));
  }
  // The same assembly as a stream: the message starts with its blocks whole.
  AnthropicAssembler assembler;
  ojson delta = {{"type", "message_delta"}, {"delta", ojson::object()}};
  for (const char* key : {"stop_reason", "stop_details"}) {
    if (value.contains(key)) delta["delta"][key] = value[key];
  }
  if (value.contains("usage")) delta["usage"] = value["usage"];
  ojson start = {{"type", "message_start"}, {"message", value}};
  start["message"].erase("stop_reason");
  start["message"].erase("stop_details");
  start["message"].erase("usage");
  assembler.addEvent(start.dump());
  assembler.addEvent(delta.dump());
  assembler.addEvent(R"({"type":"message_stop"})");
  return assembler.finish();
}

}  // namespace parley::detail
