// The assistants of `parley serve` (docs/service.md, "Assistants"): the workers' profiles
// ("agent", their default, and each served model), read-only, and the assistants created over
// HTTP, each a versioned set of run settings (a profile, a system prompt, tool names, an
// iteration cap) kept in the database (store/assistant_store.hpp). A run, a chat completion or a
// response naming an assistant starts from its current version's settings. Internal to
// src/service/.
//
// Thread-safety: every member may be called from any request thread (the store is).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/run_store.hpp"
#include "service/service.hpp"
#include "store/assistant_store.hpp"

namespace parley::service {

// The assistant of the workers' default profile: LangGraph's default graph name.
inline constexpr const char* kDefaultAssistant = "agent";

// Caps of a created assistant (each past-the-cap input is a 400 naming it).
inline constexpr size_t kMaxAssistantNameBytes = 256;
inline constexpr size_t kMaxAssistantDescriptionBytes = 4 << 10;
inline constexpr size_t kMaxAssistantSettingsBytes = 64 << 10;  // config, context: each as JSON
inline constexpr size_t kMaxAssistantsListed = 10'000;          // a search reads at most

// Reads a LangGraph run's settings into `submit`: `config` (configurable: system_prompt, tools,
// max_iterations, thread_id; recursion_limit) and `context` (the same keys as configurable).
// What parley cannot honour is refused (ApError 400 naming it), never ignored. `threadId` ""
// when the run's thread is not known yet.
void readRunSettings(const nlohmann::json& config, const nlohmann::json& context,
                     SubmitOptions& submit, const std::string& threadId);

class Assistants {
 public:
  Assistants(RunStore& runs, const ServiceOptions& options);

  // The profiles' assistants, "agent" first: read-only (an update or a delete is refused).
  std::vector<std::string> profileIds() const;
  bool isProfile(const std::string& id) const;
  // The created ones; nullptr when the database keeps none (a store not on parley's SQL engine).
  detail::AssistantStore* store() { return store_.get(); }
  // A created assistant by id, if there is one.
  std::optional<detail::StoredAssistant> created(const std::string& id);
  // The settings a run on `assistantId` starts from: a created assistant's current version (its
  // graph_id the profile, its config and context), else the profile of that name ("agent": the
  // workers' default, "").
  void applyTo(const std::string& assistantId, SubmitOptions& submit, const std::string& threadId);
  // A created version's settings (as applyTo does with the current one).
  static void applyVersion(const detail::AssistantVersion& version, SubmitOptions& submit,
                           const std::string& threadId);

 private:
  const ServiceOptions& options_;
  std::unique_ptr<detail::AssistantStore> store_;
};

}  // namespace parley::service
