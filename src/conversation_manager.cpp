#include "parley/conversation_manager.hpp"

#include <mutex>
#include <shared_mutex>
#include <utility>

#include "parley/context_ops.hpp"
#include "parley/errors.hpp"

namespace parley {

struct ConversationManager::State {
  mutable std::shared_mutex mutex;
  MessageStore store;
  uint64_t revision = 0;
};

namespace {

std::vector<Message> copyOut(const MessageStore& store, const MessageStore::IndexList& indices,
                             size_t begin, size_t end) {
  std::vector<Message> out;
  out.reserve(end - begin);
  indices.forEach(begin, end, [&](MessageStore::Index i) { out.push_back(store.stored(i)); });
  return out;
}

}  // namespace

ConversationManager::ConversationManager() : state_(std::make_unique<State>()) {}
ConversationManager::~ConversationManager() = default;
ConversationManager::ConversationManager(ConversationManager&&) noexcept = default;
ConversationManager& ConversationManager::operator=(ConversationManager&&) noexcept = default;

size_t ConversationManager::addMessage(Message message) {
  std::unique_lock lock(state_->mutex);
  size_t size = state_->store.append(std::move(message));
  ++state_->revision;
  return size;
}

size_t ConversationManager::addMessages(std::vector<Message> messages) {
  std::unique_lock lock(state_->mutex);
  size_t size = state_->store.appendAll(std::move(messages));
  ++state_->revision;
  return size;
}

std::vector<Message> ConversationManager::getMessages() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  return copyOut(s, s.view(), 0, s.viewSize());
}

size_t ConversationManager::getMessageCount() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.viewSize();
}

std::vector<Message> ConversationManager::getAllMessages() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  std::vector<Message> out;
  out.reserve(s.storageSize());
  for (size_t i = 0; i < s.storageSize(); ++i)
    out.push_back(s.stored(i));
  return out;
}

size_t ConversationManager::storageSize() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.storageSize();
}

std::vector<Message> ConversationManager::getRecentMessages(size_t n) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  const size_t size = s.viewSize();
  return copyOut(s, s.view(), n >= size ? 0 : size - n, size);
}

std::vector<Message> ConversationManager::getMessagesByRange(size_t start, size_t end) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  end = std::min(end, s.viewSize());
  if (start >= end) return {};
  return copyOut(s, s.view(), start, end);
}

std::vector<Message> ConversationManager::filterMessagesByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  std::vector<Message> out;
  s.view().forEach(0, s.viewSize(), [&](MessageStore::Index i) {
    if (s.stored(i).role == role) out.push_back(s.stored(i));
  });
  return out;
}

std::vector<Message> ConversationManager::getMessagesByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  return copyOut(s, s.roleIndex(role), 0, s.roleIndex(role).size());
}

std::vector<Message> ConversationManager::getRecentMessagesByRole(Role role, size_t n) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  const size_t size = s.roleIndex(role).size();
  return copyOut(s, s.roleIndex(role), n >= size ? 0 : size - n, size);
}

std::vector<Message> ConversationManager::getMessagesByRoleRange(Role role, size_t start,
                                                                 size_t end) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  end = std::min(end, s.roleIndex(role).size());
  if (start >= end) return {};
  return copyOut(s, s.roleIndex(role), start, end);
}

size_t ConversationManager::getMessageCountByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.roleIndex(role).size();
}

void ConversationManager::clearMessages(bool keepSystem) {
  ClearOp op;
  op.keepSystemMessage = keepSystem;
  applyContextOperation(*this, op);
}

MessageMarkMap ConversationManager::getMarkMap() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.markMap();
}

void ConversationManager::startNewBatch(size_t boundary) {
  modifyStore([&](MessageStore& s) { s.startNewBatch(boundary); });
}

void ConversationManager::rollbackToBatch(size_t batch) {
  modifyStore([&](MessageStore& s) { s.rollbackToBatch(batch); });
}

bool ConversationManager::isModified(size_t storageIndex) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.isModified(storageIndex);
}

std::string ConversationManager::checkConsistency() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.checkConsistency();
}

nlohmann::json ConversationManager::createStateSnapshot() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  return {
      {"format", kSnapshotFormat}, {"storageSize", s.storageSize()}, {"markMap", s.markMapJson()}};
}

nlohmann::json ConversationManager::createSnapshot() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  json messages = json::array();
  for (size_t i = 0; i < s.storageSize(); ++i)
    messages.push_back(toJson(s.stored(i)));
  return {{"format", kSnapshotFormat},
          {"storageSize", s.storageSize()},
          {"messages", std::move(messages)},
          {"markMap", s.markMapJson()}};
}

void ConversationManager::restoreFromSnapshot(const nlohmann::json& snapshot) {
  if (!snapshot.is_object()) throw ValidationError("snapshot", "must be a JSON object");
  auto format = snapshot.find("format");
  if (format == snapshot.end() || !format->is_string()) {
    throw ValidationError("snapshot.format",
                          std::string("is required (expected \"") + kSnapshotFormat + "\")");
  }
  if (*format != kSnapshotFormat) {
    throw ValidationError("snapshot.format", "unsupported format \"" + format->get<std::string>() +
                                                 "\"; this parley reads \"" + kSnapshotFormat +
                                                 "\"");
  }
  auto messagesJson = snapshot.find("messages");
  if (messagesJson == snapshot.end()) throw ValidationError("snapshot.messages", "is required");
  std::vector<Message> messages;
  try {
    messages = messagesFromJson(*messagesJson);
  } catch (const ValidationError& e) {
    throw ValidationError("snapshot." + e.field(), e.reason());
  }
  if (auto size = snapshot.find("storageSize"); size != snapshot.end()) {
    if (!size->is_number_unsigned() || size->get<size_t>() != messages.size()) {
      throw ValidationError("snapshot.storageSize", "does not match the number of messages (" +
                                                        std::to_string(messages.size()) + ")");
    }
  }
  auto markMap = snapshot.find("markMap");
  if (markMap == snapshot.end()) throw ValidationError("snapshot.markMap", "is required");
  MessageStore restored;
  try {
    restored = MessageStore::fromJson(std::move(messages), *markMap);
  } catch (const ValidationError& e) {
    throw ValidationError("snapshot." + e.field(), e.reason());
  }
  std::unique_lock lock(state_->mutex);
  state_->store = std::move(restored);
  ++state_->revision;
}

ConversationManager ConversationManager::clone() const {
  ConversationManager copy;
  std::shared_lock lock(state_->mutex);
  copy.state_->store = state_->store;
  copy.state_->revision = state_->revision;
  return copy;
}

uint64_t ConversationManager::revision() const {
  std::shared_lock lock(state_->mutex);
  return state_->revision;
}

MessageStore ConversationManager::store() const {
  std::shared_lock lock(state_->mutex);
  return state_->store;
}

void ConversationManager::modifyStore(const std::function<void(MessageStore&)>& edit) {
  std::unique_lock lock(state_->mutex);
  MessageStore copy = state_->store;
  edit(copy);
  state_->store = std::move(copy);
  ++state_->revision;
}

}  // namespace parley
