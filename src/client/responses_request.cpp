#include "client/responses_request.hpp"

#include "client/provider_fields.hpp"
#include "client/request_body.hpp"
#include "parley/errors.hpp"
#include "parley/part.hpp"

namespace parley::detail {

namespace {

using ojson = nlohmann::ordered_json;

ojson ordered(const nlohmann::json& value) {
  return ojson::parse(value.dump());
}

std::string itemIdOf(const Message& m, const std::string& key) {
  auto ids = m.extra.find(kResponseItemIds);
  if (ids == m.extra.end() || !ids->is_object()) return {};
  auto it = ids->find(key);
  return it != ids->end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A user message's parts as Responses input content (docs/protocols.md, "Message parts").
ojson inputParts(const Message& m, const std::string& field) {
  const std::vector<Part> parts = partsOf(m);
  ojson content = ojson::array();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    ojson item;
    switch (part.kind) {
      case PartKind::Text:
        item["type"] = "input_text";
        item["text"] = part.content;
        break;
      case PartKind::Image:
        item["type"] = "input_image";
        item["image_url"] = part.url.empty() ? dataUri(part) : part.url;
        item["detail"] = !part.detail                        ? "auto"
                         : *part.detail == ImageDetail::Low  ? "low"
                         : *part.detail == ImageDetail::High ? "high"
                                                             : "auto";
        break;
      case PartKind::File:
        item["type"] = "input_file";
        if (!part.filename.empty()) item["filename"] = part.filename;
        item["file_data"] = dataUri(part);
        break;
      case PartKind::Audio:
        throw ValidationError(field + ".content[" + std::to_string(i) + "]",
                              "is audio, which the openai-responses protocol cannot carry (send it "
                              "with the openai-chat protocol's input_audio)");
    }
    content.push_back(std::move(item));
  }
  return content;
}

}  // namespace

std::string buildResponsesBody(const ChatRequest& request, const ClientOptions& options,
                               bool stream) {
  const std::string& model = requestModel(request, options);
  const std::vector<Message> messages = requestMessages(request);
  if (!request.extra.is_null() && !request.extra.is_object()) {
    throw ValidationError("request.extra", "must be a JSON object");
  }
  if (!request.stop.empty()) {
    throw ValidationError("request.stop", "the openai-responses protocol has no stop sequences");
  }

  std::string instructions;
  ojson input = ojson::array();
  for (size_t index = 0; index < messages.size(); ++index) {
    const Message& m = messages[index];
    switch (m.role) {
      case Role::System:
        if (!instructions.empty()) instructions += "\n\n";
        instructions += m.content;
        break;
      case Role::User: {
        ojson item;
        item["type"] = "message";
        item["role"] = "user";
        if (hasParts(m)) {
          item["content"] = inputParts(m, "request.messages[" + std::to_string(index) + "]");
        } else {
          item["content"] = m.content;
        }
        input.push_back(std::move(item));
        break;
      }
      case Role::Tool: {
        ojson item;
        item["type"] = "function_call_output";
        item["call_id"] = m.toolCallId;
        item["output"] = m.content;
        input.push_back(std::move(item));
        break;
      }
      case Role::Assistant: {
        // A reply that held more than the message says (provider-run tool items, items parley
        // does not model) goes back whole and in order: each reasoning item followed by the
        // items it led to, as the API requires.
        if (auto o = m.extra.find(kResponseOutput); o != m.extra.end() && o->is_array()) {
          for (const auto& item : *o)
            input.push_back(ordered(item));
          break;
        }
        if (auto r = m.extra.find(kReasoningItems); r != m.extra.end() && r->is_array()) {
          for (const auto& item : *r)
            input.push_back(ordered(item));
        }
        if (!m.content.empty()) {
          ojson item;
          item["type"] = "message";
          item["role"] = "assistant";
          if (std::string id = itemIdOf(m, "message"); !id.empty()) item["id"] = id;
          ojson part;
          part["type"] = "output_text";
          part["text"] = m.content;
          part["annotations"] = ojson::array();
          item["content"] = ojson::array({std::move(part)});
          item["status"] = "completed";
          input.push_back(std::move(item));
        }
        for (const ToolCall& call : m.toolCalls) {
          ojson item;
          item["type"] = "function_call";
          if (std::string id = itemIdOf(m, call.id); !id.empty()) item["id"] = id;
          item["call_id"] = call.id;
          item["name"] = call.name;
          item["arguments"] = call.arguments.empty() ? "{}" : call.arguments;
          item["status"] = "completed";
          input.push_back(std::move(item));
        }
        break;
      }
    }
  }
  if (input.empty()) {
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
    out["type"] = "function";
    out["name"] = ordered((*function)["name"]);
    if (function->contains("description")) out["description"] = ordered((*function)["description"]);
    out["parameters"] = function->contains("parameters") ? ordered((*function)["parameters"])
                                                         : ojson{{"type", "object"}};
    if (function->contains("strict")) out["strict"] = ordered((*function)["strict"]);
    tools.push_back(std::move(out));
  }

  ojson body;
  body["model"] = model;
  if (!instructions.empty()) body["instructions"] = instructions;
  body["input"] = std::move(input);
  if (!tools.empty()) body["tools"] = std::move(tools);
  if (!request.toolChoice.is_null()) {
    const auto& c = request.toolChoice;
    if (c.is_string()) {
      body["tool_choice"] = c.get<std::string>();
    } else if (c.is_object() && c.contains("function") && c["function"].contains("name")) {
      body["tool_choice"] = ojson{{"type", "function"}, {"name", ordered(c["function"]["name"])}};
    } else {
      throw ValidationError("request.tool_choice",
                            "must be \"auto\", \"none\", \"required\" or {function: {name}}");
    }
  }
  if (request.parallelToolCalls) body["parallel_tool_calls"] = *request.parallelToolCalls;
  if (request.maxTokens) body["max_output_tokens"] = *request.maxTokens;
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.topP) body["top_p"] = *request.topP;
  if (request.responseFormat) {
    const ResponseFormat& f = *request.responseFormat;
    ojson format;
    switch (f.kind) {
      case ResponseFormat::Kind::Text:
        format["type"] = "text";
        break;
      case ResponseFormat::Kind::JsonObject:
        format["type"] = "json_object";
        break;
      case ResponseFormat::Kind::JsonSchema:
        if (f.schemaName.empty()) {
          throw ValidationError("request.response_format.json_schema.name", "must not be empty");
        }
        format["type"] = "json_schema";
        format["name"] = f.schemaName;
        format["schema"] = ordered(f.schema);
        format["strict"] = f.strict;
        break;
    }
    body["text"] = ojson{{"format", std::move(format)}};
  }
  body["store"] = options.responsesStore;
  if (!options.responsesStore) body["include"] = ojson::array({"reasoning.encrypted_content"});
  if (!options.promptCacheKey.empty()) body["prompt_cache_key"] = options.promptCacheKey;
  if (stream) body["stream"] = true;
  // The profile's parameters, then the request's own (e.g. "reasoning": {"effort": "low"} or
  // "previous_response_id").
  for (const nlohmann::json* more : {&options.defaultParameters, &request.extra}) {
    if (!more->is_object()) continue;
    for (const auto& [key, value] : more->items()) {
      if (key == "input" || key == "messages") {
        throw ValidationError("request.extra." + key,
                              "messages go in ChatRequest::messages, not in extra");
      }
      if (key == "stream") continue;
      body[key] = ordered(value);
    }
  }
  return body.dump();
}

}  // namespace parley::detail
