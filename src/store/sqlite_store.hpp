// The SQLite store's class; programs open it with openSqliteStore() or openStore(path)
// (parley/store.hpp), which say what it guarantees. Internal: tests use the class directly.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "parley/store.hpp"

namespace parley {

class SqliteStore : public ConversationStore {
 public:
  explicit SqliteStore(const std::string& path, SqliteStoreOptions options = {});
  ~SqliteStore() override;

  ThreadInfo createThread(const ThreadOptions& options = {}, std::span<const Message> messages = {},
                          const nlohmann::json& state = nullptr) override;
  Version appendTurn(const std::string& threadId, std::span<const Message> messages,
                     const nlohmann::json& state, Version expectedVersion) override;
  ThreadData loadThread(const std::string& threadId) override;
  std::optional<ThreadInfo> threadInfo(const std::string& threadId) override;
  std::vector<ThreadInfo> listThreads(const ThreadListOptions& options = {}) override;
  bool deleteThread(const std::string& threadId) override;
  bool setThreadTitle(const std::string& threadId, const std::string& title) override;
  ThreadInfo forkThread(const std::string& parentId, int64_t position,
                        const ThreadOptions& options = {},
                        const nlohmann::json& state = nullptr) override;
  std::vector<MessageSearchHit> searchMessages(const std::string& query,
                                               const MessageSearchOptions& options = {}) override;
  detail::SqlStoreEngine* sqlEngine() noexcept override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
