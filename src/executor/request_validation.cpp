#include "executor/request_validation.hpp"

#include <algorithm>

#include "parley/context_ops.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

namespace {

// The kind a request's nodeType names (checked by validateRequest).
NodeKind nodeKind(const LlmExecutionRequest& request) {
  if (request.nodeType == "context_processor") return NodeKind::ContextProcessor;
  if (request.nodeType == "user_interaction") return NodeKind::UserInteraction;
  if (request.nodeType == "tool") return NodeKind::Tool;
  return request.requestData.parameters.is_object() &&
                 request.requestData.parameters.contains(kStructuredKey)
             ? NodeKind::Structured
             : NodeKind::Llm;
}

}  // namespace

// `text` cut to at most `maxBytes`, not inside a UTF-8 character.
std::string cutText(const std::string& text, size_t maxBytes) {
  if (text.size() <= maxBytes) return text;
  size_t end = maxBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
    --end;
  return text.substr(0, end);
}

// Reads and checks requestData.parameters.structured as runStructured would, before anything
// is sent; a ValidationError names the field under requestData.parameters.structured.
StructuredSpec parseStructured(const nlohmann::json& value) {
  const std::string field = std::string("requestData.parameters.") + kStructuredKey;
  if (!value.is_object()) {
    throw ValidationError(field,
                          "must be a JSON object {\"schema\": {...}, \"name\", \"mode\", "
                          "\"maxRepairs\"}");
  }
  for (const auto& [key, v] : value.items()) {
    if (key != "schema" && key != "name" && key != "mode" && key != "maxRepairs") {
      // Keys, names and modes come from outside: an error quotes at most 64 bytes of them.
      throw ValidationError(field + "." + cutText(key, 64),
                            "is not a key of a structured request (schema, name, mode, "
                            "maxRepairs)");
    }
  }
  StructuredSpec spec;
  if (!value.contains("schema")) throw ValidationError(field + ".schema", "is required");
  spec.schema = value["schema"];
  if (value.contains("name")) {
    if (!value["name"].is_string() || value["name"].get_ref<const std::string&>().size() > 64) {
      throw ValidationError(field + ".name",
                            "must be a string of 1 to 64 letters, digits, '_' "
                            "or '-'");
    }
    spec.options.name = value["name"].get<std::string>();
  }
  if (value.contains("mode")) {
    if (!value["mode"].is_string() || value["mode"].get_ref<const std::string&>().size() > 64) {
      throw ValidationError(field + ".mode",
                            "must be \"auto\", \"json_schema\", \"json_object\" or \"tool\"");
    }
    spec.options.mode =
        structuredOutputModeFromString(value["mode"].get<std::string>(), field + ".mode");
  }
  if (value.contains("maxRepairs")) {
    const nlohmann::json& repairs = value["maxRepairs"];
    if (!repairs.is_number_integer() || repairs.get<int64_t>() < 0 ||
        repairs.get<int64_t>() > kMaxStructuredRepairs) {
      throw ValidationError(field + ".maxRepairs", "must be an integer from 0 to " +
                                                       std::to_string(kMaxStructuredRepairs));
    }
    spec.options.maxRepairs = repairs.get<int>();
  }
  try {
    checkStructuredRequest(spec.schema, spec.options);
  } catch (const ValidationError& e) {
    throw ValidationError(field + "." + e.field(), e.reason());
  }
  return spec;
}

NodeKind validateRequest(const LlmExecutionRequest& r, const ExecutorOptions& options) {
  const NodeKind kind = nodeKind(r);
  if (r.workflowId.empty()) throw ValidationError("workflowId", "must not be empty");
  if (r.threadId.empty()) throw ValidationError("threadId", "must not be empty");
  if (r.nodeId.empty()) throw ValidationError("nodeId", "must not be empty");
  if (!r.nodeType.empty() && r.nodeType != "llm" && r.nodeType != "context_processor" &&
      r.nodeType != "user_interaction" && r.nodeType != "tool") {
    throw ValidationError("nodeType", "unknown node type \"" + r.nodeType +
                                          "\" (expected \"llm\", \"context_processor\", "
                                          "\"user_interaction\" or \"tool\")");
  }
  if (!r.contextSnapshot.isNull() && !r.contextSnapshot.isObject()) {
    throw ValidationError("contextSnapshot", "must be a snapshot object or null");
  }
  if (!r.requestData.parameters.is_object()) {
    throw ValidationError("requestData.parameters", "must be a JSON object");
  }
  if (r.requestData.parameters.contains(kStructuredKey) && kind != NodeKind::Structured) {
    throw ValidationError(std::string("requestData.parameters.") + kStructuredKey,
                          "only an llm node asks for a structured answer");
  }
  if (kind == NodeKind::ContextProcessor) {
    const bool read = isContextRead(r.requestData.parameters);
    ContextRead::Into into = ContextRead::Into::Result;
    try {
      if (read) {
        into = parseContextRead(r.requestData.parameters).into;
      } else {
        parseContextOperation(r.requestData.parameters);
      }
    } catch (const ValidationError& e) {
      throw ValidationError("requestData.parameters." + e.field(), e.reason());
    }
    if (into == ContextRead::Into::Result) return kind;
    // Read into the prompt: a model call, checked as an llm node's.
    if (r.requestData.prompt.empty()) {
      throw ValidationError("requestData.prompt",
                            "must not be empty when the read goes into the prompt");
    }
  }
  if (kind == NodeKind::Tool) {
    const nlohmann::json& params = r.requestData.parameters;
    const nlohmann::json tool = params.value("tool", nlohmann::json());
    if (!tool.is_string() || tool.get<std::string>().empty()) {
      throw ValidationError("requestData.parameters.tool", "must name the tool to run");
    }
    if (params.contains("arguments") && !params["arguments"].is_object()) {
      throw ValidationError("requestData.parameters.arguments", "must be a JSON object");
    }
    if (auto why = toolRefusal(r.requestData, tool.get<std::string>(), options)) {
      throw ValidationError("requestData.parameters.tool", *why);
    }
    return kind;
  }
  if (r.requestData.prompt.empty()) {
    throw ValidationError("requestData.prompt", "must not be empty");
  }
  if (kind == NodeKind::UserInteraction) {
    const auto& timeout = r.requestData.parameters.value("timeoutMs", nlohmann::json());
    if (!timeout.is_null() && !(timeout.is_number_integer() && timeout.get<int64_t>() > 0)) {
      throw ValidationError("requestData.parameters.timeoutMs", "must be a positive integer");
    }
    if (r.requestData.profileId.empty()) return kind;  // no model call after the answer
  }
  if (r.requestData.profileId.empty()) {
    throw ValidationError("requestData.profileId", "must name a profile");
  }
  if (!options.profiles->contains(r.requestData.profileId)) {
    throw ValidationError("requestData.profileId",
                          "unknown profile \"" + r.requestData.profileId + "\"");
  }
  for (size_t i = 0; i < r.requestData.tools.size(); ++i) {
    if (!options.tools || !options.tools->has(r.requestData.tools[i])) {
      throw ValidationError("requestData.tools[" + std::to_string(i) + "]",
                            "no tool \"" + r.requestData.tools[i] + "\" is registered");
    }
  }
  if (kind == NodeKind::Structured) {
    // A structured answer is one model call per attempt, not a tool loop: a tool offered
    // would never be called, so asking for one is a mistake better said at once.
    if (!r.requestData.tools.empty()) {
      throw ValidationError("requestData.tools", "a structured node offers no tools");
    }
    parseStructured(r.requestData.parameters.at(kStructuredKey));
  }
  return kind;
}

// Why a call of `name` may not run for a request with `data`, or nullopt: a tool not offered,
// or one the executor's own worker cannot run (its registry lacks it), would otherwise wait
// out its timeout. With toolWorker off, the caller's worker decides about unlisted tools.
std::optional<std::string> toolRefusal(const LlmRequestData& data, const std::string& name,
                                       const ExecutorOptions& options) {
  if (!data.tools.empty()) {
    if (std::find(data.tools.begin(), data.tools.end(), name) != data.tools.end()) return {};
    return "tool \"" + name + "\" was not offered for this request";
  }
  if (options.toolWorker && !(options.tools && options.tools->has(name))) {
    return "tool \"" + name + "\" is not registered";
  }
  return std::nullopt;
}

}  // namespace parley::detail
