// A conversation kept in a ConversationStore (store.hpp): the conveniences that turn a
// ConversationManager into a thread's rows and state and back, and StoredThread, the turn
// sink that saves each whole turn of one conversation into one thread.
//
// A thread holds the manager's storage messages, one row each, and its state snapshot
// (createStateSnapshot(): mark map, batches, token usage) as the thread's opaque state. A
// thread without a state (made by ConversationStore::createThread, or a fork short of its
// parent's end) loads as a plain history: every message visible, one batch.
//
// Thread-safety: the free functions are as safe as the store and the manager they are given
// (a store call is atomic; the manager takes its own lock). StoredThread serialises its calls
// with an internal mutex; the store is shared.
// Failure: nothing is written by a call that throws, and a manager is unchanged by a load
// that throws.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"
#include "parley/store.hpp"
#include "parley/turn_sink.hpp"

namespace parley {

class ConversationManager;

// Restores `manager` from the thread; returns the thread's version, to pass to
// saveConversation(). StoreError if there is no such thread or it cannot be restored.
ConversationStore::Version loadConversation(ConversationStore& store, const std::string& threadId,
                                            ConversationManager& manager);
// Saves what is new in `manager` since `expectedVersion`: the storage messages past the stored
// count, and the manager's state snapshot, in one appendTurn. Returns the new version.
// StoreConflict if stale; StoreError if the manager holds fewer messages than the thread.
ConversationStore::Version saveConversation(ConversationStore& store, const std::string& threadId,
                                            const ConversationManager& manager,
                                            ConversationStore::Version expectedVersion);
// What a save appends to a thread that holds the first `storedCount` of the manager's storage
// messages: the messages past them and the manager's state snapshot. StoreError (naming
// `threadId`) if the manager holds fewer. saveConversation() and a durable run's fenced save
// (worker.hpp) both write this.
struct UnsavedTurn {
  std::vector<Message> messages;
  nlohmann::json state;
};
UnsavedTurn unsavedTurn(const ConversationManager& manager, int64_t storedCount,
                        const std::string& threadId);
// The thread as the manager's snapshot document ({"format": "parley.snapshot/1",
// "messages": [...], "markMap": {...}, ...}), which ConversationManager::restoreFromSnapshot
// and importThread() accept.
nlohmann::json exportThread(ConversationStore& store, const std::string& threadId);
// Creates a thread from a snapshot document; validates it fully first (ValidationError naming
// the field, nothing stored).
ThreadInfo importThread(ConversationStore& store, const nlohmann::json& snapshot,
                        const ThreadOptions& options = {});

// Ties one conversation to one thread of a store, so that saving each committed turn is one call:
//
//   auto thread = std::make_shared<StoredThread>(store, "ticket-42");
//   thread->attach(manager);         // restores the thread, or creates it from the manager
//   ... a turn commits ...
//   thread->save(manager);           // appends what is new; StoreConflict if another writer won
//
// or, as the conversation's turn sink (ConversationOptions::persist = thread), each whole turn
// is saved as it commits. It remembers the version it last loaded or saved, and the manager's
// revision() then, so a save with nothing new writes nothing. A revision names one state of
// one manager (ConversationManager::revision), so a different manager that happens to have made
// as many changes is not mistaken for the one saved: it is saved.
class StoredThread : public TurnSink {
 public:
  StoredThread(std::shared_ptr<ConversationStore> store, std::string threadId);

  // If the thread exists, restores `manager` from it (StoreError if it cannot be); else creates
  // it (with `options`, whose id is ignored) holding what `manager` holds. Returns true if the
  // thread existed.
  bool attach(ConversationManager& manager, const ThreadOptions& options = {});
  // Restores `manager` from the thread (StoreError if there is none).
  void load(ConversationManager& manager);
  // Saves what is new in `manager` since the last load/save. Throws StoreConflict if another
  // writer saved meanwhile (then load() again to continue from the stored thread).
  void save(const ConversationManager& manager);
  // TurnSink: save().
  void saveTurn(const ConversationManager& conversation) override { save(conversation); }
  // Saves `manager` (this thread's conversation), then forks the stored thread at its length
  // (ConversationStore::forkThread: the prefix is shared, not copied) with its current state,
  // and returns the fork's StoredThread, ready for manager.clone(fork).
  std::shared_ptr<StoredThread> fork(const ConversationManager& manager,
                                     const ThreadOptions& options = {});

  const std::string& threadId() const noexcept { return threadId_; }
  ConversationStore::Version version() const;
  ConversationStore& store() const noexcept { return *store_; }

 private:
  std::shared_ptr<ConversationStore> store_;
  std::string threadId_;
  mutable std::mutex mutex_;
  ConversationStore::Version version_ = 0;
  uint64_t savedRevision_ = 0;
  bool known_ = false;  // version_ and savedRevision_ are set
};

}  // namespace parley
