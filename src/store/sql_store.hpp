// The logic SqliteStore and PostgresStore share: schema and migrations, threads, turns, forks
// and their deletion, written once against a small connection interface each database
// implements (sqlite_store.cpp, postgres_store.cpp). Internal; not installed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "parley/errors.hpp"
#include "parley/store.hpp"

namespace parley::detail {

// A column value or a parameter: NULL, an integer or text. PostgreSQL returns every column as
// text; asInt() reads either.
using SqlValue = std::variant<std::monostate, int64_t, std::string>;
using SqlRow = std::vector<SqlValue>;
using SqlParams = std::vector<SqlValue>;

bool isNull(const SqlValue& value);
int64_t asInt(const SqlValue& value);
std::string asText(const SqlValue& value);

// A transient failure (SQLite busy after its timeout, a PostgreSQL serialization failure or
// deadlock): the whole transaction is rolled back and run again.
class RetryableStoreError : public StoreError {
 public:
  using StoreError::StoreError;
};

enum class SqlDialect { Sqlite, Postgres };

// One database connection, used by one thread at a time. SQL uses $1, $2... placeholders.
// Every method throws StoreError (or RetryableStoreError) on failure.
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  virtual SqlDialect dialect() const = 0;
  // write: take the write lock now (SQLite BEGIN IMMEDIATE); else a consistent read snapshot.
  virtual void begin(bool write) = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  // Statements without parameters or results (DDL).
  virtual void exec(const std::string& sql) = 0;
  virtual std::vector<SqlRow> query(const std::string& sql, const SqlParams& params) = 0;
  // Returns the number of rows changed.
  virtual int64_t execute(const std::string& sql, const SqlParams& params) = 0;
  // Inserts rows (threadId, firstSeq + i, bodies[i]) as cheaply as the database allows.
  virtual void insertMessages(const std::string& threadId, int64_t firstSeq,
                              const std::vector<std::string>& bodies) = 0;
  virtual bool tableExists(const std::string& name) = 0;
  // Serialises schema migrations between processes (inside a write transaction).
  virtual void lockForMigration() = 0;
  // " FOR UPDATE" where the database locks rows on read, "" where a write transaction already
  // excludes other writers (SQLite).
  virtual const char* forUpdate() const = 0;
  // A connection that failed beyond repair is dropped from the pool instead of reused.
  virtual bool broken() const = 0;
};

struct SqlEngineOptions {
  size_t maxConnections = 4;
  int retries = 10;
};

// Implements the ConversationStore operations over a pool of connections.
class SqlStoreEngine {
 public:
  using Connect = std::function<std::unique_ptr<SqlConnection>()>;
  using Version = ConversationStore::Version;

  // Opens the first connection and creates or migrates the schema; throws StoreError when the
  // database is unusable or of a newer schema version.
  SqlStoreEngine(Connect connect, SqlEngineOptions options);
  ~SqlStoreEngine();

  ThreadInfo createThread(const ThreadOptions& options, std::span<const Message> messages,
                          const nlohmann::json& state);
  Version appendTurn(const std::string& threadId, std::span<const Message> messages,
                     const nlohmann::json& state, Version expectedVersion);
  ThreadData loadThread(const std::string& threadId);
  std::optional<ThreadInfo> threadInfo(const std::string& threadId);
  std::vector<ThreadInfo> listThreads(const ThreadListOptions& options);
  bool deleteThread(const std::string& threadId);
  ThreadInfo forkThread(const std::string& parentId, int64_t position, const ThreadOptions& options,
                        const nlohmann::json& state);

 private:
  class Lease;
  template <class Fn>
  auto transact(bool write, Fn&& fn);
  std::unique_ptr<SqlConnection> acquire();
  void release(std::unique_ptr<SqlConnection> connection);
  void migrate(SqlConnection& connection);

  Connect connect_;
  SqlEngineOptions options_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<SqlConnection>> idle_;
  size_t open_ = 0;
};

// The SQL of one schema version, per dialect (index 0 creates version 1).
const std::vector<std::string>& migrationSteps(SqlDialect dialect, int toVersion);

}  // namespace parley::detail
