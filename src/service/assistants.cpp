#include "service/assistants.hpp"

#include <algorithm>

#include "service/agent_protocol_impl.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

// What a run's configurable (or context) may set: the rest is refused, never ignored.
void readConfigurable(const json& settings, const std::string& field, SubmitOptions& submit,
                      const std::string& threadId) {
  if (settings.is_null()) return;
  if (!settings.is_object()) throw apBadRequest("invalid_config", field + " must be an object");
  for (const auto& [key, value] : settings.items()) {
    if (key == "thread_id") {
      if (!value.is_string() || (!threadId.empty() && value.get<std::string>() != threadId)) {
        throw apBadRequest("invalid_config", field + ".thread_id is not the run's thread");
      }
    } else if (key == "system_prompt") {
      if (!value.is_string())
        throw apBadRequest("invalid_config", field + "." + key + ": a string");
      submit.systemPrompt = value.get<std::string>();
    } else if (key == "tools") {
      if (!value.is_array())
        throw apBadRequest("invalid_config", field + ".tools: a list of names");
      std::vector<std::string> names;
      for (const auto& name : value) {
        if (!name.is_string()) throw apBadRequest("invalid_config", field + ".tools: names");
        names.push_back(name.get<std::string>());
      }
      submit.tools = names;
    } else if (key == "max_iterations") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 10'000) {
        throw apBadRequest("invalid_config", field + ".max_iterations: 1 to 10000");
      }
      submit.maxIterations = static_cast<int>(value.get<int64_t>());
    } else {
      throw apBadRequest("unsupported_config",
                         field + "." + key.substr(0, 64) +
                             " is not a setting parley can honour (thread_id, system_prompt, "
                             "tools, max_iterations; the model is the assistant's profile)");
    }
  }
}

}  // namespace

void readRunSettings(const json& config, const json& context, SubmitOptions& submit,
                     const std::string& threadId) {
  if (!config.is_null()) {
    if (!config.is_object()) throw apBadRequest("invalid_config", "config must be an object");
    for (const auto& [key, value] : config.items()) {
      if (key == "configurable") {
        readConfigurable(value, "config.configurable", submit, threadId);
      } else if (key == "recursion_limit") {
        if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
            value.get<int64_t>() > 10'000) {
          throw apBadRequest("invalid_config", "config.recursion_limit: 1 to 10000");
        }
        submit.maxIterations = static_cast<int>(value.get<int64_t>());
      } else if ((key == "tags" || key == "metadata") &&
                 (value.is_null() || (value.is_structured() && value.empty()))) {
        // Empty: nothing asked.
      } else {
        throw apBadRequest("unsupported_config",
                           "config." + key.substr(0, 64) +
                               " is not a setting parley can honour (configurable, "
                               "recursion_limit)");
      }
    }
  }
  readConfigurable(context, "context", submit, threadId);
}

Assistants::Assistants(RunStore& runs, const ServiceOptions& options) : options_(options) {
  // Not on parley's SQL engine (an in-memory store): the profiles only.
  if (runs.threads().sqlEngine()) {
    store_ = std::make_unique<detail::AssistantStore>(runs.threads());
  }
}

std::vector<std::string> Assistants::profileIds() const {
  std::vector<std::string> out = {kDefaultAssistant};
  for (const auto& model : options_.models)
    if (model != kDefaultAssistant) out.push_back(model);
  return out;
}

bool Assistants::isProfile(const std::string& id) const {
  if (id == kDefaultAssistant) return true;
  return std::find(options_.models.begin(), options_.models.end(), id) != options_.models.end();
}

std::optional<detail::StoredAssistant> Assistants::created(const std::string& id) {
  if (!store_ || isProfile(id)) return std::nullopt;
  return store_->get(id);
}

void Assistants::applyVersion(const detail::AssistantVersion& version, SubmitOptions& submit,
                              const std::string& threadId) {
  submit.profile = version.graphId == kDefaultAssistant ? "" : version.graphId;
  readRunSettings(version.config, version.context, submit, threadId);
}

void Assistants::applyTo(const std::string& assistantId, SubmitOptions& submit,
                         const std::string& threadId) {
  if (auto assistant = created(assistantId)) {
    applyVersion(assistant->current, submit, threadId);
    return;
  }
  submit.profile = assistantId == kDefaultAssistant ? "" : assistantId;
}

}  // namespace parley::service
