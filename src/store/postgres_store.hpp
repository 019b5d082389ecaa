// The PostgreSQL store's class (library parley::postgres); programs open it with
// openPostgresStore() or openStore("postgresql://...") (parley/postgres_store.hpp), which say what
// it guarantees. Internal: tests use the class directly.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "parley/postgres_store.hpp"

namespace parley {

// What it guarantees: openPostgresStore (parley/postgres_store.hpp).
class PostgresStore : public ConversationStore {
 public:
  explicit PostgresStore(const std::string& conninfo, PostgresStoreOptions options = {});
  ~PostgresStore() override;

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
