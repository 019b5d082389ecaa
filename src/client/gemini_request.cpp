#include "client/gemini_request.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "client/http_transport.hpp"
#include "client/request_body.hpp"
#include "model/percent_encode.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/part.hpp"

namespace parley::detail {

namespace {

using ojson = nlohmann::ordered_json;

// The deepest schema converted (tool_schema.hpp caps a tool's schema the same way).
constexpr int kMaxSchemaDepth = 64;

ojson textPart(const std::string& text) {
  ojson part;
  part["text"] = text;
  return part;
}

// A tool call's arguments as the functionCall `args` object; "" is {}.
ojson callArgs(const ToolCall& call, const std::string& field) {
  if (call.arguments.empty()) return ojson::object();
  ojson args = parseOrderedJson(call.arguments, {}, false);
  if (args.is_discarded() || !args.is_object()) {
    throw ValidationError(field, "the arguments of tool call \"" + call.id +
                                     "\" are not a JSON object, which functionCall.args must be");
  }
  return args;
}

ojson inlineData(const std::string& mimeType, const std::string& bytes) {
  ojson data;
  data["mimeType"] = mimeType;
  data["data"] = base64Encode(bytes);
  ojson part;
  part["inlineData"] = std::move(data);
  return part;
}

// A user message's parts (docs/protocols.md, "Message parts").
void appendUserParts(ojson& out, const Message& m) {
  for (const Part& part : partsOf(m)) {
    switch (part.kind) {
      case PartKind::Text:
        out.push_back(textPart(part.content));
        break;
      case PartKind::Image:
        if (part.url.empty()) {
          out.push_back(inlineData(part.mimeType, part.bytes));
        } else {
          ojson file;
          if (!part.mimeType.empty()) file["mimeType"] = part.mimeType;
          file["fileUri"] = part.url;
          ojson p;
          p["fileData"] = std::move(file);
          out.push_back(std::move(p));
        }
        break;
      case PartKind::Audio:
      case PartKind::File:
        out.push_back(inlineData(part.mimeType, part.bytes));
        break;
    }
  }
}

struct Content {
  std::string role;  // "user" or "model"
  ojson parts = ojson::array();
};

// Keywords of the subset Gemini takes (the generationConfig.responseJsonSchema reference), kept.
constexpr std::array kKept = {"$id",
                              "$defs",
                              "$ref",
                              "$anchor",
                              "type",
                              "format",
                              "title",
                              "description",
                              "enum",
                              "items",
                              "prefixItems",
                              "minItems",
                              "maxItems",
                              "minimum",
                              "maximum",
                              "anyOf",
                              "oneOf",
                              "properties",
                              "additionalProperties",
                              "required",
                              "propertyOrdering",
                              "nullable"};
// Keywords whose loss would let the model send what the schema refuses, or refuse what it takes.
constexpr std::array kRefused = {"allOf",
                                 "not",
                                 "if",
                                 "then",
                                 "else",
                                 "patternProperties",
                                 "dependentSchemas",
                                 "dependentRequired",
                                 "dependencies",
                                 "unevaluatedProperties",
                                 "unevaluatedItems",
                                 "propertyNames",
                                 "contains",
                                 "$dynamicRef",
                                 "$recursiveRef"};

template <size_t N>
bool among(const std::array<const char*, N>& list, const std::string& key) {
  return std::any_of(list.begin(), list.end(), [&](const char* k) { return key == k; });
}

ojson convert(const nlohmann::json& schema, const std::string& path, const std::string& field,
              int depth) {
  if (depth > kMaxSchemaDepth) {
    throw ValidationError(
        field, "nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels at " + path);
  }
  if (schema.is_boolean()) return ojson(schema.get<bool>());
  if (!schema.is_object()) {
    throw ValidationError(field, "is not a JSON Schema object at " + path);
  }
  ojson out = ojson::object();
  for (const auto& [key, value] : schema.items()) {
    const std::string at = path + "/" + key;
    if (among(kRefused, key)) {
      throw ValidationError(field, "uses \"" + key + "\" at " + at +
                                       ", which Gemini's schema subset has no form for");
    }
    if (key == "const") {
      out["enum"] = ojson::array({ojson::parse(value.dump())});
      continue;
    }
    const std::string name = key == "definitions" ? "$defs" : key;
    if (!among(kKept, name)) continue;  // annotations and narrowing keywords: dropped
    if (name == "properties" || name == "$defs") {
      if (!value.is_object())
        throw ValidationError(field, "\"" + key + "\" is not an object at " + at);
      ojson map = ojson::object();
      for (const auto& [prop, sub] : value.items())
        map[prop] = convert(sub, at + "/" + prop, field, depth + 1);
      out[name] = std::move(map);
    } else if (name == "items" || name == "additionalProperties") {
      out[name] =
          value.is_object() ? convert(value, at, field, depth + 1) : ojson::parse(value.dump());
    } else if (name == "anyOf" || name == "oneOf" || name == "prefixItems") {
      if (!value.is_array())
        throw ValidationError(field, "\"" + key + "\" is not an array at " + at);
      ojson list = ojson::array();
      for (size_t i = 0; i < value.size(); ++i)
        list.push_back(convert(value[i], at + "/" + std::to_string(i), field, depth + 1));
      out[name] = std::move(list);
    } else if (name == "$ref" && value.is_string()) {
      std::string ref = value.get<std::string>();
      if (ref.rfind("#/definitions/", 0) == 0) ref = "#/$defs/" + ref.substr(14);
      out[name] = ref;
    } else {
      out[name] = ojson::parse(value.dump());
    }
  }
  return out;
}

ojson plain(const nlohmann::json& value) {
  return ojson::parse(value.dump());
}

// Merges `more` into `into` key by key (generationConfig from the profile and the request).
void mergeObject(ojson& into, const ojson& more) {
  for (const auto& [key, value] : more.items()) {
    if (value.is_object() && into.contains(key) && into[key].is_object()) {
      mergeObject(into[key], value);
    } else {
      into[key] = value;
    }
  }
}

}  // namespace

ojson geminiSchema(const nlohmann::json& schema, const std::string& field) {
  return convert(schema, "#", field, 0);
}

ojson geminiModelParts(const std::string& content, const std::vector<ToolCall>& calls) {
  ojson parts = ojson::array();
  if (!content.empty()) parts.push_back(textPart(content));
  for (size_t c = 0; c < calls.size(); ++c) {
    ojson call;
    call["id"] = calls[c].id;
    call["name"] = calls[c].name;
    call["args"] = callArgs(calls[c], "message.tool_calls[" + std::to_string(c) + "]");
    ojson part;
    part["functionCall"] = std::move(call);
    parts.push_back(std::move(part));
  }
  return parts;
}

std::string geminiUrl(const ChatRequest& request, const ClientOptions& options,
                      GeminiMethod method) {
  std::string model = requestModel(request, options);
  if (model.rfind("models/", 0) == 0) model.erase(0, 7);  // the API's resource name
  const char* verb = method == GeminiMethod::Stream        ? ":streamGenerateContent?alt=sse"
                     : method == GeminiMethod::CountTokens ? ":countTokens"
                                                           : ":generateContent";
  return joinUrl(options.baseUrl, "/models/" + percentEncode(model) + verb);
}

std::string buildGeminiBody(const ChatRequest& request, const ClientOptions& options) {
  requestModel(request, options);  // refuses a request without a model
  const std::vector<Message> messages = requestMessages(request);
  if (!request.extra.is_null() && !request.extra.is_object()) {
    throw ValidationError("request.extra", "must be a JSON object");
  }

  ojson system = ojson::array();
  std::vector<Content> contents;
  auto contentFor = [&](const char* role) -> Content& {
    if (contents.empty() || contents.back().role != role) contents.push_back(Content{role});
    return contents.back();
  };
  // Tool call id -> the name and the wire id (the functionCall's own id, "" when it had none).
  std::map<std::string, std::pair<std::string, std::string>> calls;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const std::string field = "request.messages[" + std::to_string(i) + "]";
    switch (m.role) {
      case Role::System:
        if (!m.content.empty()) system.push_back(textPart(m.content));
        break;
      case Role::User: {
        Content& c = contentFor("user");
        if (hasParts(m)) {
          appendUserParts(c.parts, m);
        } else {
          c.parts.push_back(textPart(m.content));
        }
        break;
      }
      case Role::Assistant: {
        Content& c = contentFor("model");
        std::set<std::string> wireIds;
        if (auto kept = m.extra.find(kGeminiParts); kept != m.extra.end() && kept->is_array()) {
          // What Gemini sent, exactly: thought parts, signatures, code, images.
          for (const auto& part : *kept) {
            c.parts.push_back(plain(part));
            if (auto fc = part.find("functionCall"); fc != part.end() && fc->contains("id")) {
              wireIds.insert(fc->value("id", ""));
            }
          }
        } else {
          ojson parts = geminiModelParts(m.content, m.toolCalls);
          for (const ToolCall& call : m.toolCalls)
            wireIds.insert(call.id);
          bool signed_ = false;
          for (ojson& part : parts) {
            if (!signed_ && part.contains("functionCall")) {
              part["thoughtSignature"] = kSkipSignature;
              signed_ = true;
            }
            c.parts.push_back(std::move(part));
          }
        }
        for (const ToolCall& call : m.toolCalls) {
          calls[call.id] = {call.name, wireIds.count(call.id) ? call.id : std::string()};
        }
        break;
      }
      case Role::Tool: {
        auto call = calls.find(m.toolCallId);
        if (call == calls.end()) {
          throw ValidationError(field + ".tool_call_id",
                                "answers no tool call of an earlier assistant message (\"" +
                                    m.toolCallId + "\"); Gemini needs the call's name");
        }
        const bool error = m.extra.value("is_error", false);
        ojson response;
        response[error ? "error" : "output"] = m.content;
        ojson fr;
        if (!call->second.second.empty()) fr["id"] = call->second.second;
        fr["name"] = call->second.first;
        fr["response"] = std::move(response);
        ojson part;
        part["functionResponse"] = std::move(fr);
        contentFor("user").parts.push_back(std::move(part));
        break;
      }
    }
  }
  if (contents.empty()) {
    throw ValidationError("request.messages", "holds no user or assistant message to send");
  }

  ojson body;
  ojson wire = ojson::array();
  for (Content& c : contents) {
    ojson content;
    content["role"] = c.role;
    content["parts"] = std::move(c.parts);
    wire.push_back(std::move(content));
  }
  body["contents"] = std::move(wire);
  if (!system.empty()) body["systemInstruction"] = {{"parts", std::move(system)}};

  if (!request.tools.is_null() && !request.tools.is_array()) {
    throw ValidationError("request.tools", "must be a JSON array of tool definitions");
  }
  ojson declarations = ojson::array();
  for (size_t i = 0; request.tools.is_array() && i < request.tools.size(); ++i) {
    const auto& tool = request.tools[i];
    const std::string field = "request.tools[" + std::to_string(i) + "]";
    const auto* function = tool.contains("function") ? &tool["function"] : &tool;
    if (!function->is_object() || !function->contains("name")) {
      throw ValidationError(field,
                            "is not an OpenAI function tool ({type, function: {name, ...}})");
    }
    ojson out;
    out["name"] = plain((*function)["name"]);
    if (function->contains("description")) out["description"] = plain((*function)["description"]);
    if (function->contains("parameters")) {
      out["parametersJsonSchema"] =
          geminiSchema((*function)["parameters"], field + ".function.parameters");
    }
    declarations.push_back(std::move(out));
  }
  ojson tools = ojson::array();
  if (!declarations.empty()) tools.push_back({{"functionDeclarations", std::move(declarations)}});

  if (!request.toolChoice.is_null()) {
    const auto& c = request.toolChoice;
    ojson config;
    if (c == "auto") {
      config["mode"] = "AUTO";
    } else if (c == "none") {
      config["mode"] = "NONE";
    } else if (c == "required") {
      config["mode"] = "ANY";
    } else if (c.is_object() && c.contains("function") && c["function"].contains("name")) {
      config["mode"] = "ANY";
      config["allowedFunctionNames"] = ojson::array({plain(c["function"]["name"])});
    } else {
      throw ValidationError("request.tool_choice",
                            "must be \"auto\", \"none\", \"required\" or {function: {name}}");
    }
    body["toolConfig"] = {{"functionCallingConfig", std::move(config)}};
  }

  ojson generation = ojson::object();
  if (request.temperature) generation["temperature"] = *request.temperature;
  if (request.topP) generation["topP"] = *request.topP;
  if (request.maxTokens) generation["maxOutputTokens"] = *request.maxTokens;
  if (!request.stop.empty()) generation["stopSequences"] = request.stop;
  if (request.seed) generation["seed"] = *request.seed;
  if (request.responseFormat && request.responseFormat->kind != ResponseFormat::Kind::Text) {
    generation["responseMimeType"] = "application/json";
    if (request.responseFormat->kind == ResponseFormat::Kind::JsonSchema) {
      generation["responseJsonSchema"] =
          geminiSchema(request.responseFormat->schema, "request.response_format.schema");
    }
  }
  // The profile's parameters, then the request's own.
  for (const nlohmann::json* more : {&options.defaultParameters, &request.extra}) {
    if (!more->is_object()) continue;
    for (const auto& [key, value] : more->items()) {
      if (key == "contents") {
        throw ValidationError("request.extra.contents",
                              "contents go in ChatRequest::messages, not in extra");
      }
      if (key == "generationConfig" && value.is_object()) {
        mergeObject(generation, plain(value));
      } else if (key == "tools" && value.is_array()) {
        for (const auto& t : value)
          tools.push_back(plain(t));
      } else {
        body[key] = plain(value);
      }
    }
  }
  if (!tools.empty()) body["tools"] = std::move(tools);
  if (!generation.empty()) body["generationConfig"] = std::move(generation);
  return body.dump();
}

}  // namespace parley::detail
