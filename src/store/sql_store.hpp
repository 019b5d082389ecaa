// The logic the SQLite and PostgreSQL stores share: schema and migrations, threads, turns, forks
// and their deletion, written once against a small connection interface each database
// implements (sqlite_store.cpp, postgres_store.cpp). The run queue (run_store.cpp) runs its own
// statements through the same engine. Internal; not installed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "parley/errors.hpp"
#include "parley/iso_time.hpp"
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

// A row of the event log to insert ("" ids are stored as NULL).
struct EventRow {
  std::string runId;
  std::string traceId;
  std::string type;
  std::string payload;  // JSON text
};

class SqlConnection;

// The changes a write transaction makes to one row of parley_threads, written as one UPDATE
// at its end (write()). Each UPDATE of a row makes a new version of it (on PostgreSQL a whole
// new tuple, and new index entries unless the update is HOT), so a transaction that appends a
// turn, frees the lease and counts its events writes the row once, not three times.
class ThreadRowWrite {
 public:
  // Sets `column` (a literal name) to `value`; a later set of the same column replaces it.
  void set(const char* column, SqlValue value);
  // Sets queue_head_at to the thread's head once run `runId` has left its unfinished runs
  // (queueHeadAfter).
  void setQueueHeadAfter(std::string runId) { headAfter_ = std::move(runId); }
  bool empty() const { return columns_.empty() && !headAfter_; }
  // The UPDATE of row `threadId`, deferred (SqlConnection::executeLater); forgets the changes.
  void write(SqlConnection& c, const std::string& threadId);

 private:
  friend void writeThreadRows(SqlConnection& c, std::map<std::string, struct LockedThread>& rows);
  // The columns it sets, in order: rows with the same one are written by one statement.
  std::string signature() const;
  std::vector<std::pair<const char*, SqlValue>> columns_;
  std::optional<std::string> headAfter_;
};

// A thread row as a write transaction locked and read it, and the changes the transaction
// makes to it. `version`, `messageCount` and `lastEventSeq` follow those changes; the lease and
// the rest are as read (the run queue's columns, run_queries.hpp's lockThread()).
struct LockedThread {
  int64_t version = 0;
  int64_t messageCount = 0;
  int64_t lastEventSeq = 0;
  int64_t lastRunSeq = 0;
  bool deleted = false;
  std::string leaseOwner;  // "" when no lease holds the thread
  std::string leaseRunId;
  int64_t leaseToken = 0;
  int64_t leaseExpiresAt = 0;
  ThreadRowWrite changes;
};

// Writes the changes of several locked thread rows (ThreadRowWrite::write of each), in one
// statement for the rows that set the same columns (a batch of finishes or claims), deferred.
void writeThreadRows(SqlConnection& c, std::map<std::string, LockedThread>& rows);

// One database connection, used by one thread at a time. SQL uses $1, $2... placeholders.
// Every method throws StoreError (or RetryableStoreError) on failure.
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  virtual SqlDialect dialect() const = 0;
  // write: take the write lock now (SQLite BEGIN IMMEDIATE); else a consistent read snapshot.
  // durable = false (write transactions only): its commit need not wait for the disk. Only for
  // transactions a crash may lose without harm (a claim or a lease renewal: the run is then
  // claimable again).
  virtual void begin(bool write, bool durable) = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  // Statements without parameters or results (DDL).
  virtual void exec(const std::string& sql) = 0;
  virtual std::vector<SqlRow> query(const std::string& sql, const SqlParams& params) = 0;
  // Returns the number of rows changed.
  virtual int64_t execute(const std::string& sql, const SqlParams& params) = 0;
  // A write whose result the caller does not need. It may go to the database with the next
  // statement that has a result, or with the commit (PostgreSQL sends them together: one round
  // trip); an error it meets is thrown there, and the transaction fails as a whole.
  virtual void executeLater(const std::string& sql, const SqlParams& params) {
    execute(sql, params);
  }
  // Inserts rows (threadId, firstSeq + i, bodies[i]) as cheaply as the database allows.
  virtual void insertMessages(const std::string& threadId, int64_t firstSeq,
                              const std::vector<std::string>& bodies) = 0;
  // Inserts event rows (threadId, firstSeq + i, rows[i]...) created at `now`: one statement per
  // row, unless the database can take them in one.
  virtual void insertEvents(const std::string& threadId, int64_t firstSeq,
                            const std::vector<EventRow>& rows, int64_t now);
  virtual bool tableExists(const std::string& name) = 0;
  // Serialises schema migrations between processes (inside a write transaction).
  virtual void lockForMigration() = 0;
  // " FOR UPDATE" where the database locks rows on read, "" where a write transaction already
  // excludes other writers (SQLite).
  virtual const char* forUpdate() const = 0;
  // Locks the rows of `alias` that a queue query returns and skips rows other transactions hold
  // (" FOR UPDATE OF alias SKIP LOCKED"); "" where a write transaction excludes other writers.
  virtual std::string forUpdateSkipLocked(const std::string& alias) const = 0;
  // Names the index a query on `table` (aliased) should read, where the planner needs telling
  // (SQLite without statistics picks a sort over a scan in order): " INDEXED BY index" or "".
  virtual std::string indexedBy(const std::string& index) const = 0;
  // A connection that failed beyond repair is dropped from the pool instead of reused.
  virtual bool broken() const = 0;
  // Milliseconds since the Unix epoch by the database's clock, so that the workers of many
  // machines agree on lease expiry (SQLite serves one machine: its clock is the system's).
  virtual int64_t nowMs() = 0;
  // The same clock as a SQL expression, so that a query can read it without a round trip of its
  // own; empty where nowMs() costs none. `indexable`: the time the statement began instead of
  // the running clock (microseconds apart), which the planner compares with an index where it
  // cannot compare a volatile function: for a query that looks leases up by their expiry.
  virtual std::string nowMsExpression(bool indexable = false) const {
    (void)indexable;
    return {};
  }
  // Called inside the migration transaction when the database has no parley schema yet, before
  // anything is created: refuses a damaged file or another application's tables (SQLite).
  virtual void checkBeforeCreate() {}

  // Inside a write transaction: wake the listeners of `channel` (PostgreSQL NOTIFY) once it has
  // committed; a no-op where the database has no notifications. Best effort: a notification lost
  // (the process dies right after the commit) only delays waiters until they poll.
  virtual void notifyAfterCommit(const std::string& channel, const std::string& payload) {
    (void)channel;
    (void)payload;
  }

  // Notifications (PostgreSQL LISTEN/NOTIFY), on a connection of their own that is not pooled.
  // listen() returns false where the database has none (then waiters poll).
  virtual bool listen(const std::vector<std::string>& channels) {
    (void)channels;
    return false;
  }
  // Waits until a notification arrives, `wakeFd` becomes readable or `timeout` passes, and
  // returns the notifications received as (channel, payload). Throws StoreError if the
  // connection broke.
  virtual std::vector<std::pair<std::string, std::string>> awaitNotifications(
      std::chrono::milliseconds timeout, int wakeFd) {
    (void)timeout;
    (void)wakeFd;
    return {};
  }
};

struct SqlEngineOptions {
  size_t maxConnections = 4;
  int retries = 10;
  bool readOnly = false;  // migrate nothing; writing transactions throw StoreError
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
  std::vector<MessageSearchHit> searchMessages(const std::string& query,
                                               const MessageSearchOptions& options);
  bool deleteThread(const std::string& threadId);
  bool setThreadTitle(const std::string& threadId, const std::string& title);
  ThreadInfo forkThread(const std::string& parentId, int64_t position, const ThreadOptions& options,
                        const nlohmann::json& state);

  // For the run queue (run_store.cpp) ---------------------------------------------------------

  // Runs fn(connection) in one transaction (rerun whole on a transient failure; rolled back if it
  // throws). Results leave through what fn captures.
  void transaction(bool write, const std::function<void(SqlConnection&)>& fn, bool durable = true);
  // appendTurn's body inside the caller's write transaction: locks the thread row, checks the
  // version, appends `bodies` (from messageBodies) and sets the state (from stateValue).
  // `locked`: the row as the caller locked and read it in this transaction (not read again);
  // the thread row's changes are then left in locked->changes for the caller to write.
  Version appendTurnIn(SqlConnection& c, const std::string& threadId,
                       const std::vector<std::string>& bodies, const SqlValue& stateText,
                       const nlohmann::json& state, Version expectedVersion,
                       LockedThread* locked = nullptr);
  SqlDialect dialect() const { return dialect_; }
  // A new connection outside the pool (the notification listener's).
  std::unique_ptr<SqlConnection> connectDedicated() { return connect_(); }

 private:
  template <class Fn>
  auto transact(bool write, Fn&& fn, bool durable = true);
  std::unique_ptr<SqlConnection> acquire();
  void release(std::unique_ptr<SqlConnection> connection);
  void migrate(SqlConnection& connection);

  Connect connect_;
  SqlEngineOptions options_;
  SqlDialect dialect_ = SqlDialect::Sqlite;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<SqlConnection>> idle_;
  size_t open_ = 0;
};

// The SQL that migrates a database of version toVersion - 1 to toVersion, per dialect
// (schema.cpp: every step of both engines).
const std::vector<std::string>& migrationSteps(SqlDialect dialect, int toVersion);
// The value parley_threads.queue_head_at takes once run `run` has left the unfinished runs of
// thread `thread` (both SQL expressions): the queue-head triggers' expression (schema.cpp),
// for a write that sets the head itself, before the run's update, so that the trigger finds it
// set and writes the row no second time.
std::string queueHeadAfter(const std::string& thread, const std::string& run);

// Helpers the run queue shares with the thread operations.
int64_t nowMs();  // the system clock, milliseconds since the Unix epoch
std::chrono::system_clock::time_point fromMs(int64_t ms);
std::string generateId(const char* prefix);  // prefix + 32 random hex digits
// Refuses an empty, over-long (200 bytes) id or one with control characters (ValidationError).
void checkId(const std::string& id, const std::string& field);
std::string dumpJson(const nlohmann::json& value, const std::string& field);
// Validates and serialises messages; errors name "messages[i].field".
std::vector<std::string> messageBodies(std::span<const Message> messages);

// Inserts message rows (bodies from messageBodies) with the base64 bytes of their parts moved into
// the blob table (schema version 5), in the caller's transaction. Throws ValidationError for a
// body that already holds a blob reference.
void insertMessageRows(SqlConnection& c, const std::string& threadId, int64_t firstSeq,
                       const std::vector<std::string>& bodies);

// A stored body with its blob references replaced by the blobs' base64; StoreError when a blob
// is missing.
nlohmann::json resolveBlobs(SqlConnection& c, nlohmann::json body);
// The state column's text, or NULL for a null state. REQUIRES an object or null.
SqlValue stateValue(const nlohmann::json& state);
// A JSON column (NULL -> null); StoreError "<what> is corrupt" if it does not parse.
nlohmann::json parseColumn(const SqlValue& value, const std::string& what);
std::string named(const std::string& id);  // 'id', for messages

}  // namespace parley::detail
