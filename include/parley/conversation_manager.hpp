// ConversationManager: one conversation's history, its visible view and batches (seeds 000,
// 003).
//
// A default-constructed manager has no model attached and serves as a plain message store.
// Every query works on the visible view and returns copies; getAllMessages() is the only way
// to storage. Message indices in queries are view positions; indices in the mark map and in
// isModified() are storage indices.
//
// Ownership: the caller owns the manager. clone() returns an independent manager that shares
// the common prefix of the history with this one (O(1) in the history's length); the two
// then evolve alone.
//
// Thread-safety: any number of threads may call the const methods while one thread writes;
// the manager holds a reader/writer lock (std::shared_mutex) around its state. Moving a
// manager is not synchronised: do not move one that other threads are using.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parley/message.hpp"
#include "parley/message_store.hpp"

namespace parley {

class ConversationManager {
 public:
  ConversationManager();
  ~ConversationManager();
  ConversationManager(ConversationManager&&) noexcept;
  ConversationManager& operator=(ConversationManager&&) noexcept;
  ConversationManager(const ConversationManager&) = delete;
  ConversationManager& operator=(const ConversationManager&) = delete;

  // --- adding -------------------------------------------------------------------------------
  // Validates and appends. Returns the number of visible messages. Throws ValidationError
  // naming the field; nothing is appended then.
  size_t addMessage(Message message);
  // All or nothing: every message is validated before any is appended.
  size_t addMessages(std::vector<Message> messages);

  // --- queries on the visible view (copies) -------------------------------------------------
  std::vector<Message> getMessages() const;
  size_t getMessageCount() const;
  std::vector<Message> getAllMessages() const;  // storage, including hidden messages
  size_t storageSize() const;
  // The last n visible messages (all of them when n exceeds the count).
  std::vector<Message> getRecentMessages(size_t n) const;
  // View positions [start, end); end is clamped to the count; start > end gives nothing.
  std::vector<Message> getMessagesByRange(size_t start, size_t end) const;
  // A scan of the view (seed 003 keeps it for compatibility); same result as getMessagesByRole.
  std::vector<Message> filterMessagesByRole(Role role) const;
  // From the role index: O(k) for k results.
  std::vector<Message> getMessagesByRole(Role role) const;
  std::vector<Message> getRecentMessagesByRole(Role role, size_t n) const;
  // Positions [start, end) among the visible messages of `role`; end is clamped.
  std::vector<Message> getMessagesByRoleRange(Role role, size_t start, size_t end) const;
  size_t getMessageCountByRole(Role role) const;

  // --- batches (seed 003) --------------------------------------------------------------------
  // Clears the view to its system messages (keepSystem) or to nothing, as a new batch.
  void clearMessages(bool keepSystem = true);
  MessageMarkMap getMarkMap() const;
  void startNewBatch(size_t boundary);
  void rollbackToBatch(size_t batch);
  bool isModified(size_t storageIndex) const;
  // Empty when every invariant holds, else a description of the first violation.
  std::string checkConsistency() const;

  // --- snapshots ----------------------------------------------------------------------------
  // The whole state as a versioned JSON document:
  //   {"format": "parley.snapshot/1", "storageSize": N, "messages": [storage, OpenAI JSON],
  //    "markMap": {"view": [[start, count], ...], "batchBoundaries": [...], "currentBatch": b,
  //                "savedViews": [[[start, count], ...], ...]}}
  nlohmann::json createSnapshot() const;
  // The same document without "messages": O(batches + runs in the view), so a store can
  // rewrite it every turn while appending only the new messages.
  nlohmann::json createStateSnapshot() const;
  // Replaces the whole state. Refuses (ValidationError naming the field, state unchanged) a
  // document of another or newer format, or one whose parts do not agree.
  void restoreFromSnapshot(const nlohmann::json& snapshot);
  // An independent manager sharing this one's history prefix.
  ConversationManager clone() const;

  // Bumps on every change; lets a caller (a store, a cache) see that something changed.
  uint64_t revision() const;

  // A copy of the underlying store (cheap: persistent vectors).
  MessageStore store() const;
  // Runs `edit` on a copy of the store under the write lock and keeps the copy only if `edit`
  // returns normally, so a throwing edit leaves the conversation as it was. Context
  // operations (context_ops.hpp) are applied this way.
  void modifyStore(const std::function<void(MessageStore&)>& edit);

 private:
  struct State;

  std::unique_ptr<State> state_;
};

inline constexpr const char* kSnapshotFormat = "parley.snapshot/1";

}  // namespace parley
