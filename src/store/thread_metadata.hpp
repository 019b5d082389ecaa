// A thread's metadata replaced after its creation (the LangGraph API's PATCH /threads/{id}:
// docs/service.md). Not a turn: the version and the time of the last turn stay. Internal (the
// service's); on the stores built on parley's SQL engine (SQLite, PostgreSQL).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "parley/store.hpp"

namespace parley::detail {

// Replaces the metadata of `threadId` by `metadata` (an object or null) in one transaction;
// false if there is no such thread. ValidationError for metadata that is not an object or null,
// or a store that is not built on parley's SQL engine.
bool setThreadMetadata(ConversationStore& store, const std::string& threadId,
                       const nlohmann::json& metadata);

}  // namespace parley::detail
