#include "parley/run_request.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "parley/errors.hpp"

namespace parley {

using json = nlohmann::json;

namespace {

// The string at `key`, if the body has one (null counts as absent).
std::optional<std::string> optionalText(const json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_string()) throw ValidationError(key, "must be a string");
  return body[key].get<std::string>();
}

std::vector<Message> readInput(const json& body) {
  if (!body.contains("input")) throw ValidationError("input", "is required");
  const json& given = body["input"];
  std::vector<Message> input;
  if (given.is_string()) {
    if (given.get<std::string>().empty()) throw ValidationError("input", "is empty");
    input.push_back(Message::user(given.get<std::string>()));
    return input;
  }
  if (!given.is_array() || given.empty()) {
    throw ValidationError("input", "must be a string or an array of messages");
  }
  for (size_t i = 0; i < given.size(); ++i) {
    try {
      input.push_back(messageFromJson(given[i]));
    } catch (const std::exception& e) {
      throw ValidationError("input", "[" + std::to_string(i) + "]: " + e.what());
    }
  }
  return input;
}

int readMaxIterations(const json& value) {
  // Range-checked as 64 bits: get<int>() wrapped 4294967297 to 1.
  constexpr int64_t kMost = std::numeric_limits<int>::max();
  const bool inRange =
      value.is_number_unsigned()
          ? value.get<uint64_t>() >= 1 && value.get<uint64_t>() <= static_cast<uint64_t>(kMost)
          : value.is_number_integer() && value.get<int64_t>() >= 1 && value.get<int64_t>() <= kMost;
  if (!inRange) {
    throw ValidationError("max_iterations",
                          "must be an integer from 1 to " + std::to_string(kMost));
  }
  return static_cast<int>(value.get<int64_t>());
}

}  // namespace

RunRequest readRunRequest(const json& body) {
  if (!body.is_object()) throw ValidationError("body", "must be a JSON object");
  RunRequest request;
  request.input = readInput(body);
  SubmitOptions& options = request.options;
  options.stream = true;
  if (auto policy = optionalText(body, "policy")) {
    auto parsed = parseDoubleTextPolicy(*policy);
    if (!parsed) {
      throw ValidationError("policy", "'" + *policy +
                                          "' is not a policy: enqueue, reject, interrupt or "
                                          "rollback");
    }
    options.policy = *parsed;
  }
  options.id = optionalText(body, "id").value_or("");
  options.profile = optionalText(body, "profile").value_or("");
  options.systemPrompt = optionalText(body, "system");
  if (body.contains("stream")) {
    if (!body["stream"].is_boolean()) throw ValidationError("stream", "must be a boolean");
    options.stream = body["stream"].get<bool>();
  }
  if (body.contains("max_iterations"))
    options.maxIterations = readMaxIterations(body["max_iterations"]);
  if (body.contains("tools") && !body["tools"].is_null()) {
    const json& tools = body["tools"];
    if (!tools.is_array()) throw ValidationError("tools", "must be an array of names");
    std::vector<std::string> names;
    for (const auto& t : tools) {
      if (!t.is_string()) throw ValidationError("tools", "must be an array of names");
      names.push_back(t.get<std::string>());
    }
    options.tools = std::move(names);
  }
  if (body.contains("metadata")) options.metadata = body["metadata"];
  return request;
}

}  // namespace parley
