// The state a ContextSnapshot shares between its copies (context_snapshot.hpp).
#pragma once

#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "parley/context_snapshot.hpp"
#include "parley/conversation_manager.hpp"

namespace parley {

struct ContextSnapshot::Frozen {
  // The conversation as it was (a clone sharing its store; never changed), or none for a
  // snapshot made from a document.
  std::optional<ConversationManager> conversation;
  // The document: given, or built from `conversation` once, on first use.
  mutable std::once_flag built;
  mutable nlohmann::json document;
};

}  // namespace parley
