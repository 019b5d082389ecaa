#include "mock/gemini_replies.hpp"

#include <cstdint>

#include "mock/protocol_replies.hpp"
#include "parley/errors.hpp"
#include "parley/part.hpp"

namespace parley::mock {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// The values Google documents for a call Gemini did not make (a transcript from elsewhere).
bool skipsValidation(const std::string& signature) {
  return signature == "skip_thought_signature_validator" ||
         signature == "context_engineering_is_the_way_to_go";
}

std::string finishReasonOf(const std::string& finish) {
  if (finish == "stop" || finish == "tool_calls") return "STOP";
  if (finish == "length") return "MAX_TOKENS";
  if (finish == "content_filter") return "SAFETY";
  std::string upper = finish;
  for (char& c : upper)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

ojson usageOf(const json& usage) {
  const int64_t prompt = num(usage, "prompt_tokens");
  const int64_t completion = num(usage, "completion_tokens");
  const int64_t cached = num(usage.value("prompt_tokens_details", json::object()), "cached_tokens");
  const int64_t thoughts =
      num(usage.value("completion_tokens_details", json::object()), "reasoning_tokens");
  ojson out;
  out["promptTokenCount"] = prompt;
  out["candidatesTokenCount"] = completion - thoughts;
  out["totalTokenCount"] = prompt + completion;
  if (cached > 0) out["cachedContentTokenCount"] = cached;
  if (thoughts > 0) out["thoughtsTokenCount"] = thoughts;
  return out;
}

ojson callPart(const ConcreteReply::Call& call, bool first) {
  ojson args = ojson::parse(call.arguments.empty() ? "{}" : call.arguments, nullptr, false);
  if (args.is_discarded() || !args.is_object()) args = ojson::object();
  ojson part;
  part["functionCall"] = {{"id", call.id}, {"name", call.name}, {"args", std::move(args)}};
  // Gemini 3 signs the first call of a reply (parallel calls: only the first).
  if (first) part["thoughtSignature"] = geminiCallSignature(call.name);
  return part;
}

ojson chunk(const ConcreteReply& r, ojson parts, const std::string& finish, bool finalUsage) {
  ojson candidate;
  candidate["content"] = {{"parts", std::move(parts)}, {"role", "model"}};
  if (!finish.empty()) candidate["finishReason"] = finish;
  candidate["index"] = 0;
  ojson out;
  out["candidates"] = ojson::array({std::move(candidate)});
  if (finalUsage) {
    out["usageMetadata"] = usageOf(r.usage);
  } else {
    out["usageMetadata"] = {{"promptTokenCount", num(r.usage, "prompt_tokens")},
                            {"totalTokenCount", num(r.usage, "prompt_tokens")}};
  }
  out["modelVersion"] = r.model;
  out["responseId"] = r.id;
  return out;
}

std::string sse(const ojson& data) {
  return "data: " + data.dump() + "\n\n";
}

// The signature a reply that thought but made no call ends with, on an empty text part.
ojson signaturePart(const ConcreteReply& r) {
  return {{"text", ""}, {"thoughtSignature", thinkingSignature(*r.reasoningContent)}};
}

// An inlineData or fileData part as the chat part it stands for.
json chatPartOfGemini(const json& part) {
  if (auto d = part.find("inlineData"); d != part.end() && d->is_object()) {
    const std::string mime = d->value("mimeType", "");
    const std::string uri = "data:" + mime + ";base64," + d->value("data", "");
    if (mime.rfind("image/", 0) == 0) return {{"type", "image_url"}, {"image_url", {{"url", uri}}}};
    return {{"type", "file"}, {"file", {{"filename", ""}, {"file_data", uri}}}};
  }
  if (auto f = part.find("fileData"); f != part.end() && f->is_object()) {
    return {{"type", "image_url"}, {"image_url", {{"url", f->value("fileUri", "")}}}};
  }
  return nullptr;
}

std::string responseText(const json& response) {
  if (response.is_object()) {
    for (const char* key : {"output", "error", "result"}) {
      if (auto it = response.find(key); it != response.end()) {
        return it->is_string() ? it->get<std::string>() : it->dump();
      }
    }
  }
  return response.dump();
}

}  // namespace

std::string geminiCallSignature(std::string_view name) {
  return thinkingSignature("gemini call " + std::string(name));
}

json chatRequestFromGemini(const json& body, const std::string& model, bool stream) {
  if (!body.is_object()) throw ValidationError("body", "expected a JSON object");
  if (!body.contains("contents") || !body["contents"].is_array() || body["contents"].empty()) {
    throw ValidationError("contents",
                          "* GenerateContentRequest.contents: contents is not specified");
  }
  json chat = {{"model", model}, {"stream", stream}};
  chat["stream_options"] = {{"include_usage", true}};
  json messages = json::array();
  if (auto s = body.find("systemInstruction"); s != body.end() && s->is_object()) {
    std::string text;
    for (const auto& p : s->value("parts", json::array()))
      text += p.value("text", "");
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  if (auto tools = body.find("tools"); tools != body.end() && tools->is_array()) {
    json out = json::array();
    for (const auto& t : *tools) {
      for (const auto& d : t.value("functionDeclarations", json::array())) {
        if (d.contains("parameters") && d.contains("parametersJsonSchema")) {
          throw ValidationError("tools.function_declarations",
                                "parameters and parameters_json_schema are mutually exclusive");
        }
        out.push_back({{"type", "function"}, {"function", {{"name", d.value("name", "")}}}});
      }
    }
    chat["tools"] = std::move(out);
  }
  if (auto tc = body.find("toolConfig"); tc != body.end() && tc->is_object()) {
    const json config = tc->value("functionCallingConfig", json::object());
    const json allowed = config.value("allowedFunctionNames", json::array());
    if (config.value("mode", "") == "ANY" && allowed.size() == 1) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", allowed[0]}}}};
    }
  }
  if (auto g = body.find("generationConfig"); g != body.end() && g->is_object()) {
    const bool hasSchema = g->contains("responseJsonSchema") || g->contains("responseSchema");
    if (g->contains("responseJsonSchema") && g->contains("responseSchema")) {
      throw ValidationError("generation_config",
                            "response_schema and response_json_schema are mutually exclusive");
    }
    if (hasSchema && g->value("responseMimeType", "") != "application/json" &&
        g->value("responseMimeType", "") != "text/x.enum") {
      throw ValidationError("generation_config.response_mime_type",
                            "a response schema needs response_mime_type application/json");
    }
    if (g->value("responseMimeType", "") == "application/json") {
      const bool schema = g->contains("responseJsonSchema") || g->contains("responseSchema");
      chat["response_format"] = {{"type", schema ? "json_schema" : "json_object"}};
    }
  }

  const json& contents = body["contents"];
  // The current turn starts after the last user content holding something else than function
  // responses: its calls must keep their signatures.
  size_t turnStart = 0;
  for (size_t i = 0; i < contents.size(); ++i) {
    if (contents[i].value("role", "user") != "user") continue;
    for (const auto& p : contents[i].value("parts", json::array())) {
      if (!p.contains("functionResponse")) turnStart = i + 1;
    }
  }
  size_t calls = 0;  // functionCall parts so far, for ids when the request names none
  for (size_t i = 0; i < contents.size(); ++i) {
    const json& c = contents[i];
    const std::string field = "contents[" + std::to_string(i) + "]";
    const std::string role = c.value("role", "user");
    if (role != "user" && role != "model") {
      throw ValidationError(field + ".role", "Please use a valid role: user, model.");
    }
    if (!c.contains("parts") || !c["parts"].is_array()) {
      throw ValidationError(field + ".parts", "must not be empty");
    }
    json assistant = {{"role", "assistant"}, {"content", ""}};
    json toolCalls = json::array();
    json userParts = json::array();
    bool media = false;
    bool firstCall = true;
    for (size_t k = 0; k < c["parts"].size(); ++k) {
      const json& p = c["parts"][k];
      const std::string at = field + ".parts[" + std::to_string(k) + "]";
      if (auto sig = p.find("thoughtSignature"); sig != p.end()) {
        const std::string s = sig->is_string() ? sig->get<std::string>() : std::string();
        if (!skipsValidation(s) && s.rfind("mocksig_", 0) != 0) {
          throw ValidationError(at + ".thought_signature", "Corrupted thought signature.");
        }
      }
      if (auto fc = p.find("functionCall"); fc != p.end()) {
        const std::string name = fc->value("name", "");
        if (role == "model" && firstCall && i >= turnStart) {
          const std::string s = p.value("thoughtSignature", "");
          if (s.empty() || (!skipsValidation(s) && s != geminiCallSignature(name))) {
            throw ValidationError(
                at,
                "Function call is missing a thought_signature in functionCall parts. This is "
                "required for tools to work correctly, and missing thought_signature may lead "
                "to degraded model performance. Additional data, function call `default_api:" +
                    name + "` , position " + std::to_string(k + 1) + ".");
          }
        }
        firstCall = false;
        ++calls;
        toolCalls.push_back(
            {{"id", fc->value("id", "gemini_call_" + std::to_string(calls))},
             {"type", "function"},
             {"function",
              {{"name", name}, {"arguments", fc->value("args", json::object()).dump()}}}});
      } else if (auto fr = p.find("functionResponse"); fr != p.end()) {
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", fr->value("id", fr->value("name", ""))},
                            {"content", responseText(fr->value("response", json()))}});
      } else if (p.contains("text")) {
        if (p.value("thought", false)) continue;  // thoughts are not part of the transcript
        const std::string text = p.value("text", "");
        if (role == "model") {
          assistant["content"] = assistant["content"].get<std::string>() + text;
        } else {
          userParts.push_back({{"type", "text"}, {"text", text}});
        }
      } else if (json part = chatPartOfGemini(p); !part.is_null()) {
        userParts.push_back(std::move(part));
        media = true;
      }
    }
    if (role == "model") {
      if (!toolCalls.empty()) assistant["tool_calls"] = std::move(toolCalls);
      messages.push_back(std::move(assistant));
    } else if (media) {
      messages.push_back({{"role", "user"}, {"content", std::move(userParts)}});
    } else if (!userParts.empty()) {
      std::string text;
      for (const auto& p : userParts)
        text += p.value("text", "");
      messages.push_back({{"role", "user"}, {"content", text}});
    }
  }
  // Tool results answer calls by id; a response without one answers the call of its name.
  for (json& m : messages) {
    if (m["role"] != "tool") continue;
    const std::string id = m["tool_call_id"];
    for (const json& a : messages) {
      for (const json& call : a.value("tool_calls", json::array())) {
        if (call["function"]["name"] == id) m["tool_call_id"] = call["id"];
      }
    }
  }
  chat["messages"] = std::move(messages);
  return chat;
}

std::string geminiBody(const ConcreteReply& r) {
  ojson parts = ojson::array();
  if (r.reasoningContent) parts.push_back({{"text", *r.reasoningContent}, {"thought", true}});
  if (r.content) parts.push_back({{"text", *r.content}});
  for (size_t i = 0; i < r.toolCalls.size(); ++i)
    parts.push_back(callPart(r.toolCalls[i], i == 0));
  if (r.reasoningContent && r.toolCalls.empty()) parts.push_back(signaturePart(r));
  return chunk(r, std::move(parts), finishReasonOf(r.finishReason), true).dump();
}

void forEachGeminiEvent(const ConcreteReply& r, bool omitFinish,
                        const std::function<bool(std::string_view)>& emit) {
  if (r.reasoningContent) {
    for (auto piece : splitPieces(*r.reasoningContent, r.chunkSize)) {
      if (!emit(sse(chunk(r, ojson::array({{{"text", piece}, {"thought", true}}}), "", false))))
        return;
    }
  }
  if (r.content) {
    for (auto piece : splitPieces(*r.content, r.chunkSize)) {
      if (!emit(sse(chunk(r, ojson::array({{{"text", piece}}}), "", false)))) return;
    }
  }
  if (!r.toolCalls.empty()) {
    ojson parts = ojson::array();
    for (size_t i = 0; i < r.toolCalls.size(); ++i)
      parts.push_back(callPart(r.toolCalls[i], i == 0));
    if (!emit(sse(chunk(r, std::move(parts), "", false)))) return;
  }
  if (omitFinish) return;
  ojson last = ojson::array();
  last.push_back(r.reasoningContent && r.toolCalls.empty() ? signaturePart(r)
                                                           : ojson{{"text", ""}});
  emit(sse(chunk(r, std::move(last), finishReasonOf(r.finishReason), true)));
}

std::string geminiErrorBody(int code, const std::string& message) {
  const char* status = code == 400   ? "INVALID_ARGUMENT"
                       : code == 401 ? "UNAUTHENTICATED"
                       : code == 403 ? "PERMISSION_DENIED"
                       : code == 404 ? "NOT_FOUND"
                       : code == 429 ? "RESOURCE_EXHAUSTED"
                       : code == 503 ? "UNAVAILABLE"
                                     : "INTERNAL";
  return ojson{{"error", {{"code", code}, {"message", message}, {"status", status}}}}.dump();
}

std::string geminiModelList(const std::vector<std::string>& models) {
  ojson list = ojson::array();
  for (const auto& m : models) {
    list.push_back({{"name", "models/" + m},
                    {"version", "001"},
                    {"displayName", "Parley " + m},
                    {"inputTokenLimit", 1048576},
                    {"outputTokenLimit", 65536},
                    {"supportedGenerationMethods", {"generateContent", "countTokens"}}});
  }
  return ojson{{"models", std::move(list)}}.dump();
}

}  // namespace parley::mock
