// Elicitation and sampling requests of a server: their caps, the schema rules of the MCP
// specification (2025-11-25: a flat object of primitives; enums single- or multi-select, titled
// or not, SEP-1330), defaults (SEP-1034) and the check of a form's answer. The form check is
// written here rather than given to valijson: the schema comes from the server, and this subset
// needs no regular expressions nor references.
#include "tools/mcp_elicitation.hpp"

#include <algorithm>
#include <cmath>

#include "parley/errors.hpp"

namespace parley::detail {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxEnumValues = 256;  // options of one enum property

std::string stringField(const json& object, const char* key) {
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

// The values an enum property allows (enum, oneOf/anyOf consts), or nullopt if not an enum.
std::optional<std::vector<json>> allowedValues(const json& schema) {
  if (auto values = schema.find("enum"); values != schema.end() && values->is_array())
    return std::vector<json>(values->begin(), values->end());
  for (const char* key : {"oneOf", "anyOf"}) {
    auto options = schema.find(key);
    if (options == schema.end() || !options->is_array()) continue;
    std::vector<json> out;
    for (const json& option : *options)
      if (option.is_object() && option.contains("const")) out.push_back(option["const"]);
    return out;
  }
  return std::nullopt;
}

// Why `property` is not a primitive the specification allows, or "".
std::string checkProperty(const std::string& name, const json& property) {
  if (!property.is_object()) return "property \"" + name + "\" is not an object";
  if (property.contains("$ref")) return "property \"" + name + "\" uses $ref";
  std::string type = stringField(property, "type");
  if (type == "string" || type == "number" || type == "integer" || type == "boolean") {
    if (auto values = allowedValues(property); values && values->size() > kMaxEnumValues)
      return "property \"" + name + "\" has more than " + std::to_string(kMaxEnumValues) +
             " options";
    return "";
  }
  if (type == "array") {
    auto items = property.find("items");
    if (items == property.end() || !items->is_object())
      return "property \"" + name + "\" is an array without items";
    auto values = allowedValues(*items);
    if (!values) return "property \"" + name + "\" is an array whose items are not an enum";
    if (values->size() > kMaxEnumValues)
      return "property \"" + name + "\" has more than " + std::to_string(kMaxEnumValues) +
             " options";
    return "";
  }
  return "property \"" + name + "\" has type \"" + type +
         "\"; a form takes string, number, integer, boolean or an enum";
}

bool isOneOf(const json& value, const std::vector<json>& values) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// Why `value` does not fit `property`, or "".
std::string checkValue(const std::string& name, const json& property, const json& value) {
  std::string type = stringField(property, "type");
  std::string at = "\"" + name + "\"";
  if (type == "string") {
    if (!value.is_string()) return at + " must be a string";
    std::size_t length = value.get_ref<const std::string&>().size();
    if (auto min = property.find("minLength"); min != property.end() && min->is_number() &&
                                               static_cast<double>(length) < min->get<double>())
      return at + " is shorter than minLength";
    if (auto max = property.find("maxLength"); max != property.end() && max->is_number() &&
                                               static_cast<double>(length) > max->get<double>())
      return at + " is longer than maxLength";
  } else if (type == "number" || type == "integer") {
    if (!value.is_number()) return at + " must be a number";
    double number = value.get<double>();
    if (type == "integer" && std::floor(number) != number) return at + " must be an integer";
    if (auto min = property.find("minimum");
        min != property.end() && min->is_number() && number < min->get<double>())
      return at + " is below its minimum";
    if (auto max = property.find("maximum");
        max != property.end() && max->is_number() && number > max->get<double>())
      return at + " is above its maximum";
  } else if (type == "boolean") {
    if (!value.is_boolean()) return at + " must be true or false";
  } else if (type == "array") {
    if (!value.is_array()) return at + " must be an array";
    std::vector<json> values = allowedValues(property["items"]).value_or(std::vector<json>{});
    for (const json& item : value)
      if (!isOneOf(item, values)) return at + " has a value that is not one of its options";
    if (auto min = property.find("minItems");
        min != property.end() && min->is_number() &&
        static_cast<double>(value.size()) < min->get<double>())
      return at + " has fewer than minItems values";
    if (auto max = property.find("maxItems");
        max != property.end() && max->is_number() &&
        static_cast<double>(value.size()) > max->get<double>())
      return at + " has more than maxItems values";
    return "";
  }
  if (auto values = allowedValues(property); values && !isOneOf(value, *values))
    return at + " is not one of its options";
  return "";
}

}  // namespace

std::string checkElicitation(const json& params, const McpServerOptions& options) {
  if (!params.is_object()) return "elicitation/create: params must be an object";
  std::size_t bytes = params.dump().size();
  if (bytes > options.maxElicitationSchemaBytes)
    return "elicitation/create: the request takes " + std::to_string(bytes) + " bytes, more than " +
           std::to_string(options.maxElicitationSchemaBytes) + " (maxElicitationSchemaBytes)";
  std::string mode = params.contains("mode") ? stringField(params, "mode") : "form";
  if (mode == "url") {
    std::string url = stringField(params, "url");
    if (url.rfind("https://", 0) != 0 && url.rfind("http://", 0) != 0)
      return "elicitation/create: url mode needs an http(s) url";
    if (stringField(params, "elicitationId").empty())
      return "elicitation/create: url mode needs an elicitationId";
    return "";
  }
  if (mode != "form") return "elicitation/create: unknown mode \"" + mode.substr(0, 40) + "\"";
  auto schema = params.find("requestedSchema");
  if (schema == params.end() || !schema->is_object() || stringField(*schema, "type") != "object")
    return "elicitation/create: requestedSchema must be an object schema";
  auto properties = schema->find("properties");
  if (properties == schema->end() || !properties->is_object())
    return "elicitation/create: requestedSchema has no properties";
  if (properties->size() > options.maxElicitationProperties)
    return "elicitation/create: requestedSchema has " + std::to_string(properties->size()) +
           " properties, more than " + std::to_string(options.maxElicitationProperties) +
           " (maxElicitationProperties)";
  for (const auto& [name, property] : properties->items()) {
    std::string problem = checkProperty(name, property);
    if (!problem.empty()) return "elicitation/create: requestedSchema: " + problem;
  }
  return "";
}

json withElicitationDefaults(const json& schema, json content) {
  if (!content.is_object()) content = json::object();
  auto properties = schema.find("properties");
  if (properties == schema.end() || !properties->is_object()) return content;
  for (const auto& [name, property] : properties->items()) {
    if (!content.contains(name) && property.is_object() && property.contains("default"))
      content[name] = property["default"];
  }
  return content;
}

json runElicitation(const json& params, const McpServerOptions& options,
                    const McpElicitationHandler& handler, std::stop_token stop) {
  McpElicitation request;
  request.server = options.name;
  request.mode = params.contains("mode") ? stringField(params, "mode") : "form";
  request.message = stringField(params, "message");
  if (request.mode == "url") {
    request.url = stringField(params, "url");
    request.elicitationId = stringField(params, "elicitationId");
  } else {
    request.requestedSchema = params["requestedSchema"];
  }
  McpElicitationAnswer answer = handler(request, stop);
  if (stop.stop_requested()) throw CancelledError("the elicitation was cancelled");
  switch (answer.action) {
    case McpElicitationAnswer::Action::Decline:
      return {{"action", "decline"}};
    case McpElicitationAnswer::Action::Cancel:
      return {{"action", "cancel"}};
    case McpElicitationAnswer::Action::Accept:
      break;
  }
  if (request.mode == "url") return {{"action", "accept"}};
  json content = withElicitationDefaults(request.requestedSchema, std::move(answer.content));
  const json& properties = request.requestedSchema["properties"];
  for (const auto& [name, value] : content.items()) {
    if (!properties.contains(name))
      throw ValidationError("elicitation", "the answer has \"" + name +
                                               "\", which the form does "
                                               "not ask for");
    std::string problem = checkValue(name, properties[name], value);
    if (!problem.empty()) throw ValidationError("elicitation", problem);
  }
  if (auto required = request.requestedSchema.find("required");
      required != request.requestedSchema.end() && required->is_array()) {
    for (const json& name : *required)
      if (name.is_string() && !content.contains(name.get<std::string>()))
        throw ValidationError("elicitation", "the answer leaves out \"" + name.get<std::string>() +
                                                 "\", which is required");
  }
  return {{"action", "accept"}, {"content", std::move(content)}};
}

std::string checkSampling(const json& params, const McpServerOptions& options) {
  if (!params.is_object()) return "sampling/createMessage: params must be an object";
  std::size_t bytes = params.dump().size();
  if (bytes > options.maxSamplingBytes)
    return "sampling/createMessage: the request takes " + std::to_string(bytes) +
           " bytes, more than " + std::to_string(options.maxSamplingBytes) + " (maxSamplingBytes)";
  auto messages = params.find("messages");
  if (messages == params.end() || !messages->is_array() || messages->empty())
    return "sampling/createMessage: messages must be a non-empty array";
  if (messages->size() > options.maxSamplingMessages)
    return "sampling/createMessage: " + std::to_string(messages->size()) + " messages, more than " +
           std::to_string(options.maxSamplingMessages) + " (maxSamplingMessages)";
  for (const json& message : *messages) {
    if (!message.is_object() || !message.contains("content"))
      return "sampling/createMessage: every message needs a role and content";
    std::string role = stringField(message, "role");
    if (role != "user" && role != "assistant")
      return "sampling/createMessage: a message's role must be user or assistant";
  }
  return "";
}

json runSampling(const json& params, const McpServerOptions& options, std::stop_token stop) {
  McpSamplingRequest request;
  request.server = options.name;
  request.params = params;
  int asked = 0;
  if (auto max = params.find("maxTokens"); max != params.end() && max->is_number_integer())
    asked = static_cast<int>(std::clamp<int64_t>(max->get<int64_t>(), 0, INT32_MAX));
  request.params["maxTokens"] =
      asked > 0 ? std::min(asked, options.samplingMaxTokens) : options.samplingMaxTokens;
  json result = options.onSampling(request, stop);
  if (stop.stop_requested()) throw CancelledError("the sampling request was cancelled");
  if (!result.is_object() || !result.contains("content") || !result.contains("model"))
    throw ProtocolError("the sampling handler's answer needs content and model");
  if (!result.contains("role")) result["role"] = "assistant";
  return result;
}

}  // namespace parley::detail
