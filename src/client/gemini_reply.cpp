#include "client/gemini_reply.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <simdjson.h>

#include "client/gemini_request.hpp"
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

// The finish reasons that mean the reply was blocked (the FinishReason enum of the API
// reference): the model did not answer, or stopped answering, for a policy reason.
constexpr std::array kBlocked = {"SAFETY",
                                 "RECITATION",
                                 "BLOCKLIST",
                                 "PROHIBITED_CONTENT",
                                 "SPII",
                                 "IMAGE_SAFETY",
                                 "IMAGE_PROHIBITED_CONTENT",
                                 "IMAGE_RECITATION",
                                 "LANGUAGE"};

bool blocked(const std::string& reason) {
  for (const char* b : kBlocked)
    if (reason == b) return true;
  return false;
}

std::string geminiFinishReason(const std::string& reason) {
  if (reason == "STOP") return "stop";
  if (reason == "MAX_TOKENS") return "length";
  if (blocked(reason)) return "content_filter";
  std::string lower = reason;
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

[[noreturn]] void throwError(const ojson& error, std::string_view data, int status) {
  HttpError::Details details;
  details.status = status;
  details.body.assign(data);
  if (error.is_object()) {
    details.apiMessage = stringOf(error, "message");
    details.apiType = stringOf(error, "status");  // INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...
    if (auto code = error.find("code"); code != error.end() && code->is_number_integer()) {
      details.apiCode = std::to_string(code->get<int64_t>());
      // Inside a stream the HTTP status is already 200: the error's code says what it is (a 429
      // or a 503 is retried while nothing has reached the caller).
      if (status < 300) details.status = static_cast<int>(code->get<int64_t>());
    }
  }
  if (details.apiMessage.empty()) details.apiMessage = "the server sent an error";
  throw HttpError(std::move(details));
}

// A text part that a later text piece of a stream may extend: text, the thought flag and a
// signature, nothing else.
bool plainText(const ojson& part) {
  if (!part.is_object()) return false;
  auto text = part.find("text");
  if (text == part.end() || !text->is_string()) return false;
  for (const auto& [key, value] : part.items()) {
    if (key != "text" && key != "thought" && key != "thoughtSignature") return false;
  }
  return true;
}

bool isThought(const ojson& part) {
  auto t = part.find("thought");
  return t != part.end() && t->is_boolean() && t->get<bool>();
}

}  // namespace

struct GeminiAssembler::State {
  StreamDelta delta;
  ojson parts = ojson::array();
  // parts.back() is a text part the next piece may join; its text so far is `openText` (written
  // into the part when another part starts or the reply ends: appending to it in place would copy
  // the whole text at every piece).
  bool textOpen = false;
  std::string openText;
  std::vector<ToolCall> calls;
  size_t serverCalls = 0;
  std::string content, reasoning;
  std::string finishReason, finishMessage, blockReason, blockMessage;
  std::string usageText;             // the last usageMetadata object, as sent
  ojson metadata = ojson::object();  // kGeminiMetadata: the last value of each field
  std::string id, model;
  bool stopped = false;

  void closeText() {
    if (!textOpen) return;
    parts.back()["text"] = std::move(openText);
    openText.clear();
    textOpen = false;
  }

  // A text piece (a thought when `thought`), with the signature it carries if any.
  void addText(std::string_view text, bool thought, const ojson* signature) {
    (thought ? reasoning : content) += text;
    (thought ? delta.reasoning : delta.content) += text;
    if (textOpen && isThought(parts.back()) == thought &&
        !parts.back().contains("thoughtSignature")) {
      openText += text;
      if (signature) parts.back()["thoughtSignature"] = *signature;
      return;
    }
    ojson part;
    part["text"] = "";
    if (thought) part["thought"] = true;
    if (signature) part["thoughtSignature"] = *signature;
    push(part);
    openText.assign(text);
    textOpen = true;
  }

  void addPart(const ojson& part) {
    if (!part.is_object()) throw ProtocolError("a part of the reply is not a JSON object");
    if (auto fc = part.find("functionCall"); fc != part.end()) {
      if (!fc->is_object() || stringOf(*fc, "name").empty()) {
        throw ProtocolError("a functionCall part without a name");
      }
      std::string id = stringOf(*fc, "id");
      if (id.empty()) id = generateToolCallId();  // the Gemini API rarely names its calls
      std::string args = "{}";
      if (auto a = fc->find("args"); a != fc->end() && !a->is_null()) {
        if (!a->is_object()) throw ProtocolError("a functionCall whose args are not an object");
        args = a->dump();
      }
      const std::string name = stringOf(*fc, "name");
      delta.toolCalls.push_back(ToolCallDelta{calls.size(), id, name, args});
      calls.push_back(ToolCall{id, name, std::move(args)});
      push(part);
      return;
    }
    if (plainText(part)) {
      const std::string& text = part["text"].get_ref<const std::string&>();
      auto sig = part.find("thoughtSignature");
      if (text.empty() && sig == part.end()) return;  // carries nothing
      addText(text, isThought(part), sig == part.end() ? nullptr : &*sig);
      return;
    }
    if (auto code = part.find("executableCode"); code != part.end()) {
      // Code Gemini runs itself (the codeExecution tool): reported, never run by parley.
      delta.serverToolCalls.push_back(ServerToolCallDelta{
          serverCalls++, "code_" + std::to_string(serverCalls), "code_execution", code->dump()});
    }
    if (part.dump().size() > kMaxServerToolResultBytes) {
      throw ProtocolError("a part of the reply is over the cap of " +
                          std::to_string(kMaxServerToolResultBytes) + " bytes");
    }
    push(part);
  }

  void push(const ojson& part) {
    if (parts.size() >= kMaxReplyItems) {
      throw ProtocolError("the reply has more than " + std::to_string(kMaxReplyItems) + " parts");
    }
    closeText();
    parts.push_back(part);
  }

  // Nearly every chunk of a stream is candidate 0's text and the totals so far: read those with
  // simdjson, without building a json value. Returns false (nothing done) for any other chunk,
  // which takes the full path.
  bool fastChunk(std::string_view data) {
    padded.resize(data.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(padded.data(), data.data(), data.size());
    pieces.clear();
    std::string_view newId, newModel, newUsage;
    try {
      simdjson::ondemand::document doc = parser.iterate(padded.data(), data.size(), padded.size());
      for (auto field : doc.get_object()) {
        const std::string_view key = field.unescaped_key();
        if (key == "candidates") {
          int count = 0;
          for (auto candidate : field.value().get_array()) {
            if (++count > 1) return false;
            for (auto cf : candidate.get_object()) {
              const std::string_view ck = cf.unescaped_key();
              if (ck == "index") {
                if (int64_t(cf.value().get_int64()) != 0) return false;
              } else if (ck == "content") {
                for (auto content : cf.value().get_object()) {
                  const std::string_view k = content.unescaped_key();
                  if (k == "role") continue;
                  if (k != "parts") return false;
                  for (auto part : content.value().get_array()) {
                    Piece piece;
                    bool text = false;
                    for (auto pf : part.get_object()) {
                      const std::string_view pk = pf.unescaped_key();
                      if (pk == "text") {
                        piece.text = pf.value().get_string();
                        text = true;
                      } else if (pk == "thought") {
                        piece.thought = pf.value().get_bool();
                      } else {
                        return false;  // a signature, a call, ...: the full path
                      }
                    }
                    if (!text) return false;
                    pieces.push_back(piece);
                  }
                }
              } else {
                return false;  // finishReason, safetyRatings, ...
              }
            }
          }
        } else if (key == "usageMetadata") {
          newUsage = simdjson::ondemand::object(field.value().get_object()).raw_json();
        } else if (key == "modelVersion") {
          newModel = field.value().get_string();
        } else if (key == "responseId") {
          newId = field.value().get_string();
        } else {
          return false;
        }
      }
    } catch (const simdjson::simdjson_error&) {
      return false;  // the full path reports it
    }
    for (const Piece& piece : pieces) {
      if (!piece.text.empty()) addText(piece.text, piece.thought, nullptr);
    }
    if (!newId.empty()) id.assign(newId);
    if (!newModel.empty()) model.assign(newModel);
    if (!newUsage.empty()) usageText.assign(newUsage);
    return true;
  }

  struct Piece {
    std::string_view text;
    bool thought = false;
  };
  std::vector<Piece> pieces;
  simdjson::ondemand::parser parser;
  std::string padded;

  TokenUsage tokenUsage() const {
    const ojson usage = parseOrderedJson(usageText, {}, false);
    const int64_t thoughts = count(usage, "thoughtsTokenCount");
    TokenUsage u =
        normalisedUsage(count(usage, "promptTokenCount") + count(usage, "toolUsePromptTokenCount"),
                        count(usage, "candidatesTokenCount") + thoughts,
                        count(usage, "cachedContentTokenCount"), 0, thoughts);
    return u;
  }
};

GeminiAssembler::GeminiAssembler() : state_(std::make_unique<State>()) {}
GeminiAssembler::~GeminiAssembler() = default;

bool GeminiAssembler::sawStop() const noexcept {
  return state_->stopped;
}

const StreamDelta& GeminiAssembler::addEvent(std::string_view data, int status) {
  State& s = *state_;
  s.delta.clear();
  if (s.fastChunk(data)) return s.delta;
  // Ordered: a call's args keep their keys in the order the model wrote them.
  const ojson value = parseOrderedJson(data, {}, false);
  if (value.is_discarded() || !value.is_object()) {
    throw ProtocolError("a reply chunk is not a JSON object: " + std::string(data.substr(0, 120)));
  }
  if (auto error = value.find("error"); error != value.end()) throwError(*error, data, status);
  if (const std::string id = stringOf(value, "responseId"); !id.empty()) s.id = id;
  if (const std::string model = stringOf(value, "modelVersion"); !model.empty()) s.model = model;
  if (auto usage = value.find("usageMetadata"); usage != value.end() && usage->is_object()) {
    s.usageText = usage->dump();  // each chunk repeats the totals so far
  }
  if (auto feedback = value.find("promptFeedback");
      feedback != value.end() && feedback->is_object()) {
    if (const std::string reason = stringOf(*feedback, "blockReason"); !reason.empty()) {
      s.blockReason = reason;
      s.blockMessage = stringOf(*feedback, "blockReasonMessage");
      s.stopped = true;
      s.delta.finishReason = reason;
    }
  }
  if (auto candidates = value.find("candidates"); candidates != value.end()) {
    if (!candidates->is_array()) throw ProtocolError("\"candidates\" is not an array");
    for (const ojson& candidate : *candidates) {
      if (!candidate.is_object() || candidate.value("index", 0) != 0) continue;  // candidate 0
      if (auto content = candidate.find("content");
          content != candidate.end() && content->is_object()) {
        if (auto parts = content->find("parts"); parts != content->end() && parts->is_array()) {
          for (const ojson& part : *parts)
            s.addPart(part);
        }
      }
      for (const char* field :
           {"groundingMetadata", "urlContextMetadata", "citationMetadata", "safetyRatings"}) {
        auto value = candidate.find(field);
        if (value == candidate.end() || value->is_null()) continue;
        if (value->dump().size() > kMaxServerToolResultBytes) {
          throw ProtocolError(std::string("the reply's ") + field + " is over the cap of " +
                              std::to_string(kMaxServerToolResultBytes) + " bytes");
        }
        s.metadata[field] = *value;
      }
      if (const std::string reason = stringOf(candidate, "finishReason");
          !reason.empty() && reason != "FINISH_REASON_UNSPECIFIED") {
        s.finishReason = reason;
        s.finishMessage = stringOf(candidate, "finishMessage");
        s.stopped = true;
        s.delta.finishReason = reason;
      }
    }
  }
  if (!s.delta.finishReason.empty() && !s.usageText.empty()) s.delta.usage = s.tokenUsage();
  return s.delta;
}

ChatResult GeminiAssembler::finish() {
  State& s = *state_;
  if (!s.stopped) {
    throw ProtocolError("the stream ended before a finishReason (the reply was cut short)");
  }
  s.closeText();
  ChatResult result;
  Message& m = result.message;
  m.role = Role::Assistant;
  m.content = std::move(s.content);
  m.toolCalls = std::move(s.calls);
  if (!s.reasoning.empty()) m.extra[std::string(kReasoningContent)] = s.reasoning;
  if (!s.metadata.empty()) {
    m.extra[std::string(kGeminiMetadata)] = nlohmann::json::parse(s.metadata.dump());
  }
  // The parts go back as they came when they say more than the content and the calls.
  if (s.parts != geminiModelParts(m.content, m.toolCalls)) {
    m.extra[std::string(kGeminiParts)] = nlohmann::json::parse(s.parts.dump());
  }
  const std::string& reported = s.blockReason.empty() ? s.finishReason : s.blockReason;
  if (!s.blockReason.empty()) {
    m.extra["refusal"] = "Gemini blocked the prompt (blockReason " + s.blockReason + ")" +
                         (s.blockMessage.empty() ? "" : ": " + s.blockMessage);
    result.finishReason = "content_filter";
  } else {
    if (blocked(s.finishReason) && m.content.empty() && m.toolCalls.empty()) {
      m.extra["refusal"] = "Gemini stopped the reply (finishReason " + s.finishReason + ")" +
                           (s.finishMessage.empty() ? "" : ": " + s.finishMessage);
    }
    result.finishReason =
        normaliseFinishReason(geminiFinishReason(s.finishReason), !m.toolCalls.empty());
  }
  result.reportedFinishReason = reported;
  if (!s.usageText.empty()) result.usage = s.tokenUsage();
  result.id = s.id;
  result.model = s.model;
  result.raw = completionObject(result, 0);
  return result;
}

ChatResult resultFromGeminiResponse(std::string_view body) {
  GeminiAssembler assembler;
  assembler.addEvent(body);
  return assembler.finish();
}

}  // namespace parley::detail
