#include "parley/stored_thread.hpp"

#include <utility>

#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/telemetry.hpp"

namespace parley {

namespace {

using json = nlohmann::json;

// The manager's snapshot document for a thread: its saved state plus its messages. A thread
// without a state (created by createThread, or a fork short of its parent's end) is a plain
// history: every message visible, one batch.
json snapshotOf(const ThreadData& data) {
  if (data.state.is_null()) {
    ConversationManager plain;
    plain.addMessages(data.messages);
    return plain.createSnapshot();
  }
  json document = data.state;
  document["messages"] = toJson(data.messages);
  document["storageSize"] = data.messages.size();
  return document;
}

}  // namespace

ConversationStore::Version loadConversation(ConversationStore& store, const std::string& threadId,
                                            ConversationManager& manager) {
  ThreadData data = store.loadThread(threadId);
  try {
    manager.restoreFromSnapshot(snapshotOf(data));
  } catch (const ValidationError& e) {
    throw StoreError("store: thread '" + threadId + "' cannot be restored: " + e.what());
  }
  return data.info.version;
}

UnsavedTurn unsavedTurn(const ConversationManager& manager, int64_t storedCount,
                        const std::string& threadId) {
  // The state first, then the storage: storage only grows, so its copy holds every message the
  // state counts even if another thread appends in between.
  UnsavedTurn turn;
  turn.state = manager.createStateSnapshot();
  MessageStore storage = manager.store();
  const auto size = static_cast<int64_t>(turn.state.at("storageSize").get<size_t>());
  if (size < storedCount) {
    throw StoreError("store: the conversation holds " + std::to_string(size) +
                     " messages but thread '" + threadId + "' already holds " +
                     std::to_string(storedCount) + "; was it loaded from this thread?");
  }
  turn.messages.reserve(static_cast<size_t>(size - storedCount));
  for (int64_t i = storedCount; i < size; ++i) {
    turn.messages.push_back(storage.stored(static_cast<size_t>(i)));
  }
  return turn;
}

ConversationStore::Version saveConversation(ConversationStore& store, const std::string& threadId,
                                            const ConversationManager& manager,
                                            ConversationStore::Version expectedVersion) {
  auto info = store.threadInfo(threadId);
  if (!info) throw StoreError("store: no thread '" + threadId + "'");
  if (info->version != expectedVersion) {
    throw StoreConflict("store: thread '" + threadId + "' is at version " +
                        std::to_string(info->version) + ", not the expected " +
                        std::to_string(expectedVersion) + " (another writer saved a turn)");
  }
  UnsavedTurn turn = unsavedTurn(manager, info->messageCount, threadId);
  // appendTurn checks the version again inside its transaction: if it still matches, the
  // message count read above is still the thread's.
  return store.appendTurn(threadId, turn.messages, turn.state, expectedVersion);
}

json exportThread(ConversationStore& store, const std::string& threadId) {
  return snapshotOf(store.loadThread(threadId));
}

ThreadInfo importThread(ConversationStore& store, const json& snapshot,
                        const ThreadOptions& options) {
  ConversationManager restored;
  restored.restoreFromSnapshot(snapshot);  // validates everything; throws ValidationError
  json state = restored.createStateSnapshot();
  std::vector<Message> messages = restored.getAllMessages();
  return store.createThread(options, messages, state);
}

StoredThread::StoredThread(std::shared_ptr<ConversationStore> store, std::string threadId)
    : store_(std::move(store)), threadId_(std::move(threadId)) {
  if (!store_) throw ValidationError("store", "must not be null");
  if (threadId_.empty()) throw ValidationError("threadId", "must not be empty");
}

bool StoredThread::attach(ConversationManager& manager, const ThreadOptions& options) {
  std::lock_guard lock(mutex_);
  if (store_->threadInfo(threadId_)) {
    version_ = loadConversation(*store_, threadId_, manager);
    savedRevision_ = manager.revision();
    known_ = true;
    return true;
  }
  ThreadOptions create = options;
  create.id = threadId_;
  const uint64_t revision = manager.revision();
  json state = manager.createStateSnapshot();
  MessageStore storage = manager.store();
  std::vector<Message> messages;
  const auto size = state.at("storageSize").get<size_t>();
  messages.reserve(size);
  for (size_t i = 0; i < size; ++i)
    messages.push_back(storage.stored(i));
  version_ = store_->createThread(create, messages, state).version;
  savedRevision_ = revision;
  known_ = true;
  return false;
}

void StoredThread::load(ConversationManager& manager) {
  std::lock_guard lock(mutex_);
  version_ = loadConversation(*store_, threadId_, manager);
  savedRevision_ = manager.revision();
  known_ = true;
}

void StoredThread::save(const ConversationManager& manager) {
  std::lock_guard lock(mutex_);
  if (!known_) {
    throw StoreError("store: thread '" + threadId_ + "' was not loaded or attached before save");
  }
  const uint64_t revision = manager.revision();
  if (revision == savedRevision_) return;
  // A store write is a span of the turn (docs/telemetry.md).
  Span span("parley.store.save", "", SpanKind::Client);
  span.set("gen_ai.conversation.id", threadId_);
  try {
    version_ = saveConversation(*store_, threadId_, manager, version_);
  } catch (const std::exception& e) {
    span.setError(e);
    throw;
  }
  savedRevision_ = revision;
}

std::shared_ptr<StoredThread> StoredThread::fork(const ConversationManager& manager,
                                                 const ThreadOptions& options) {
  save(manager);
  const ThreadInfo info = store_->forkThread(threadId_, static_cast<int64_t>(manager.storageSize()),
                                             options, manager.createStateSnapshot());
  auto forked = std::make_shared<StoredThread>(store_, info.id);
  forked->version_ = info.version;
  forked->savedRevision_ = manager.revision();  // a clone starts at the same revision
  forked->known_ = true;
  return forked;
}

ConversationStore::Version StoredThread::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

}  // namespace parley
