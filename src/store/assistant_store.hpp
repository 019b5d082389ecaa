// The assistants of `parley serve` (the LangGraph API's, docs/service.md): a named, versioned
// set of run settings over a workers' profile, in the database of the threads (SQLite or
// PostgreSQL; tables parley_assistants and parley_assistant_versions, schema version 6).
// Internal: the service's. Every call is one transaction; the caller checks the values (the
// service's caps) before they reach here.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/store.hpp"

namespace parley::detail {

// One version of an assistant, as created or updated.
struct AssistantVersion {
  std::string id;
  int64_t version = 0;  // from 1
  std::string graphId;  // the workers' profile ("agent": their default)
  std::string name;
  std::optional<std::string> description;
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json context = nlohmann::json::object();
  nlohmann::json metadata = nlohmann::json::object();
  std::chrono::system_clock::time_point createdAt;  // of this version
};

// An assistant: the version its runs use (the latest, or the one setLatest chose), and when the
// assistant was made and last changed.
struct StoredAssistant {
  AssistantVersion current;
  std::chrono::system_clock::time_point createdAt;
  std::chrono::system_clock::time_point updatedAt;
};

// What an update changes; the rest is the current version's. `metadata` is merged key by key.
struct AssistantChange {
  std::optional<std::string> graphId;
  std::optional<std::string> name;
  std::optional<std::string> description;
  std::optional<nlohmann::json> config;
  std::optional<nlohmann::json> context;
  std::optional<nlohmann::json> metadata;
};

// Versions kept per assistant: past it the oldest one runs do not use is removed.
inline constexpr size_t kMaxAssistantVersions = 100;

class AssistantStore {
 public:
  // ValidationError if `store` is not built on parley's SQL engine.
  explicit AssistantStore(ConversationStore& store, size_t maxVersions = kMaxAssistantVersions);

  // Creates `first` as version 1 (its version and time are set here); false, nothing written,
  // if the id is taken.
  bool create(const AssistantVersion& first);
  std::optional<StoredAssistant> get(const std::string& id);
  std::optional<AssistantVersion> version(const std::string& id, int64_t version);
  // A new version (one past the highest) from the current one with `change` applied, made the
  // current one; nullopt if there is no such assistant.
  std::optional<StoredAssistant> update(const std::string& id, const AssistantChange& change);
  // Makes `version` the one runs use; nullopt if the assistant or that version is not there.
  std::optional<StoredAssistant> setLatest(const std::string& id, int64_t version);
  bool remove(const std::string& id);
  // Assistants by id, at most `maxRows`.
  std::vector<StoredAssistant> list(size_t maxRows);
  // The versions of one, newest first.
  std::vector<AssistantVersion> versions(const std::string& id);

 private:
  SqlStoreEngine* engine_;
  size_t maxVersions_;
};

}  // namespace parley::detail
