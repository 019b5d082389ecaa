// ContextSnapshot: a conversation's state, frozen. The executor hands one out after every request
// (LlmExecutionCompleted::updatedContext) and takes one back (LlmExecutionRequest::
// contextSnapshot) to replace a thread's conversation.
//
// Taking one from a conversation (ConversationManager::snapshot()) is O(batches), whatever the
// length of the history: it shares the conversation's persistent message store
// (message_store.hpp), and restoring it into another conversation is as cheap. Its JSON document,
// in createSnapshot()'s format, is built only when someone asks for it (json()), once. A snapshot
// may also be made from such a document, read from a file or another process; it is validated
// when it is used (restoreFromSnapshot throws ValidationError naming the field).
//
// Ownership: a value; copies share the frozen state.
// Thread-safety: immutable; every method may be called from several threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"

namespace parley {

class ConversationManager;

class ContextSnapshot {
 public:
  // No snapshot.
  ContextSnapshot() = default;
  ContextSnapshot(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): `= nullptr` reads well
  // A document as ConversationManager::createSnapshot() writes it (not validated here).
  ContextSnapshot(nlohmann::json document);  // NOLINT(google-explicit-constructor)

  bool isNull() const noexcept { return !frozen_; }
  // A snapshot taken from a conversation, or one made from a JSON object.
  bool isObject() const noexcept;

  // The JSON document (createSnapshot()'s format); null for no snapshot. Built on first use.
  const nlohmann::json& json() const;
  // The visible messages, in order. ValidationError for a document that is not a valid snapshot.
  std::vector<Message> messages() const;

 private:
  friend class ConversationManager;
  struct Frozen;
  explicit ContextSnapshot(std::shared_ptr<const Frozen> frozen) : frozen_(std::move(frozen)) {}
  // The frozen conversation; null for one made from a document.
  const ConversationManager* conversation() const noexcept;

  std::shared_ptr<const Frozen> frozen_;
};

}  // namespace parley
