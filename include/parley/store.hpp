// Conversation stores: threads of messages that outlive the process (SQLite, PostgreSQL).
//
// A thread is an append-only list of messages (one row each, in OpenAI JSON) plus one small
// state document, opaque to the store (a conversation keeps its view, batches and token usage
// there: stored_thread.hpp), rewritten on every turn. Saving a turn
// appends only the new rows and replaces the state in ONE transaction, so a turn costs the same
// whatever the length of the thread. Each thread has a version that every turn bumps; a writer
// names the version it started from and a stale writer gets StoreConflict (optimistic locking).
//
// A fork is stored as a parent and a position (a storage message count): it shares the parent's
// first `position` rows, nothing is copied. Deleting a parent that has forks hides it and keeps
// only the rows its forks need.
//
// Thread-safety: one store may be shared by any number of threads; each call is atomic. Any
// number of processes may open the same database (file or server) at once.
// Durability: when a writing call returns, its change survives a crash of this process. With
// openSqliteStore it also survives a power loss unless SqliteStoreOptions::synchronous is Normal.
// Failure: a call that throws has changed nothing in the store. Errors are StoreError (the
// database failed, is corrupt, of a newer schema, or the thread is unknown), StoreConflict (a
// stale expected version) and ValidationError (bad arguments, named).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"

namespace parley {

namespace detail {
class SqlStoreEngine;
}  // namespace detail

// One message that matched ConversationStore::searchMessages.
struct MessageSearchHit {
  std::string threadId;  // the thread that stores the message (a fork finds its shared prefix
                         // under the thread it was forked from)
  int64_t position = 0;  // its index among the thread's storage messages
  Role role = Role::User;
  std::string snippet;  // the text around the match, each matched word in [brackets]
};

struct MessageSearchOptions {
  size_t limit = 20;  // at most this many hits, best first; 1..1000
};

// What a store knows about one thread (listThreads, threadInfo).
struct ThreadInfo {
  std::string id;
  std::string parentId;      // the thread this one was forked from; "" for none
  int64_t forkPosition = 0;  // messages shared with the parent; 0 for none
  int64_t messageCount = 0;  // storage messages, the shared prefix included
  int64_t version = 0;
  std::chrono::system_clock::time_point createdAt;
  std::chrono::system_clock::time_point updatedAt;  // the last turn (or creation)
  std::string title;
  nlohmann::json metadata;  // an object, or null
};

// {"id", "parent_id" (null for none), "fork_position", "message_count", "version", "title",
// "metadata", "created_at", "updated_at"} (times ISO 8601 UTC with milliseconds), as
// `parley serve` answers it.
nlohmann::json toJson(const ThreadInfo& info);

// For createThread, forkThread and importThread.
struct ThreadOptions {
  std::string id{};  // "" generates a random id ("t-" + 32 hex digits)
  std::string title{};
  nlohmann::json metadata{};  // an object or null
};

// A whole thread as loadThread returns it.
struct ThreadData {
  ThreadInfo info;
  std::vector<Message> messages;  // all storage messages, the shared prefix included
  nlohmann::json state;           // as last saved; null when none was saved yet
};

// A page of listThreads.
struct ThreadListOptions {
  std::string parentId{};  // "" lists every thread; else only forks of this one
  size_t limit = 0;        // 0: no limit
  size_t offset = 0;
};

// The longest title setThreadTitle takes.
inline constexpr size_t kMaxThreadTitleBytes = 1000;

class ConversationStore {
 public:
  // Bumped by every turn; a new thread (or fork, or import) starts at version 1.
  using Version = int64_t;

  virtual ~ConversationStore() = default;

  // Creates a thread holding `messages` (validated first) and `state`, in one transaction, and
  // returns its info (version 1). Throws StoreError if the id is taken, ValidationError for an
  // over-long id, an id with control characters, or metadata that is not an object or null.
  virtual ThreadInfo createThread(const ThreadOptions& options = {},
                                  std::span<const Message> messages = {},
                                  const nlohmann::json& state = nullptr) = 0;

  // Appends the messages of one turn and replaces the state, in one transaction; returns the new
  // version. REQUIRES: the thread exists (else StoreError). Throws StoreConflict if
  // `expectedVersion` is not the current version (nothing is written then). Every message is
  // validated first (ValidationError "messages[i]...."); if `state` carries "storageSize" it must
  // equal the thread's message count after the turn. A null state keeps the previous one.
  virtual Version appendTurn(const std::string& threadId, std::span<const Message> messages,
                             const nlohmann::json& state, Version expectedVersion) = 0;

  // The whole thread. Throws StoreError if it does not exist or a row is corrupt (the error
  // names the thread and the row).
  virtual ThreadData loadThread(const std::string& threadId) = 0;
  // The info alone, or nullopt if there is no such thread. Cheap.
  virtual std::optional<ThreadInfo> threadInfo(const std::string& threadId) = 0;
  // Threads oldest first (then by id).
  virtual std::vector<ThreadInfo> listThreads(const ThreadListOptions& options = {}) = 0;

  // Deletes a thread; returns false if there was none. Forks of it keep working.
  virtual bool deleteThread(const std::string& threadId) = 0;

  // Gives a thread a new title (a name people find it by; not a turn: the version and the time
  // of the last turn stay). Returns false if there is no such thread. ValidationError for a
  // title over kMaxThreadTitleBytes or with control characters; a store that cannot rename says
  // so (ValidationError).
  virtual bool setThreadTitle(const std::string& threadId, const std::string& title);

  // Creates a thread that shares the first `position` storage messages of `parentId` (no copy)
  // and returns its info (version 1). 0 <= position <= the parent's message count, else
  // ValidationError. The fork's state is `state` when given, else the parent's state when
  // position is the parent's whole length, else null (a plain history: everything visible).
  virtual ThreadInfo forkThread(const std::string& parentId, int64_t position,
                                const ThreadOptions& options = {},
                                const nlohmann::json& state = nullptr) = 0;

  // The messages whose text holds every word of `query` (case and accents ignored), best
  // matches first, from threads that are not deleted. Words are matched whole; the query is
  // words, not a query language (quotes and operators are taken as text). ValidationError for an
  // empty query or a limit outside 1..1000; a store that cannot search says so.
  virtual std::vector<MessageSearchHit> searchMessages(const std::string& query,
                                                       const MessageSearchOptions& options = {});

  // The SQL engine beneath the stores parley ships (SQLite, PostgreSQL), so that the run queue
  // (run_store.hpp) and the service's own tables work in the same database through the same
  // connections; nullptr for any other store. Internal: not a stable interface.
  virtual detail::SqlStoreEngine* sqlEngine() noexcept { return nullptr; }
};

// --- SQLite ---------------------------------------------------------------------------------

struct SqliteStoreOptions {
  // Full: each commit is fsync'ed (survives power loss). Normal: WAL is synced at checkpoints
  // only (a power loss may lose the last turns; a process crash loses nothing).
  enum class Synchronous { Normal, Full };
  Synchronous synchronous = Synchronous::Full;
  std::chrono::milliseconds busyTimeout{5'000};  // how long one statement waits for a lock
  int busyRetries = 10;       // whole-transaction retries after the busy timeout expired
  size_t maxConnections = 4;  // per store object; a reader does not wait for a writer (WAL)
  bool create = true;         // create the file if missing; else StoreError
  // Open for reading only (listing, showing, exporting a file this process may not write):
  // nothing is created or migrated, and every writing call throws StoreError. A file of an older
  // schema version is read as it is.
  bool readOnly = false;
  // A database that already holds tables but not parley's is refused (it is probably another
  // application's file) unless this is set; then parley adds its tables beside the others.
  bool allowForeignTables = false;
};

// The embedded default: one file, WAL mode, each turn one BEGIN IMMEDIATE transaction. Several
// threads and several processes may use one file at once. The schema is created (or migrated)
// on first use; a file of an unknown newer schema version, not a database, damaged, or holding
// another application's tables is refused with StoreError here; an empty path is a
// ValidationError.
std::unique_ptr<ConversationStore> openSqliteStore(const std::string& path,
                                                   const SqliteStoreOptions& options = {});

// The schema version this build writes; a database with a higher one is refused. Version 2 added
// the run queue, leases, the tool journal and the event log (run_store.hpp); version 3 the index
// of message text that searchMessages() reads; version 4 the queue heads a claim reads (one index
// entry per claim, whatever the queue's depth); version 5 the content-addressed blobs that hold the
// bytes of message parts (docs/parts.md); version 6 the service's assistants and their versions
// (docs/service.md); version 7 keeps the queue heads with less work (a run's update touches its
// thread's head only when it can move it). An older database is upgraded when it is opened for
// writing.
inline constexpr int kStoreSchemaVersion = 7;

// For openStore.
struct OpenStoreOptions {
  bool readOnly = false;            // SqliteStoreOptions::readOnly, PostgresStoreOptions::readOnly
  bool allowForeignTables = false;  // SqliteStoreOptions::allowForeignTables
};

// Opens a store from a URL (the CLI's --db): "sqlite://PATH" or a plain path -> openSqliteStore;
// "SCHEME://..." -> the opener registered for SCHEME (registerStoreScheme), e.g.
// "postgresql://..." and "postgres://..." -> openPostgresStore once registerPostgresStore()
// (postgres_store.hpp, library parley::postgres) has run. Throws StoreError when the store
// cannot be opened, ValidationError for an empty url or a scheme nothing registered. Shared, as
// the AI facade, StoredThread and RunStore take it: `ai.createConversation(openStore(url), id)`.
std::shared_ptr<ConversationStore> openStore(const std::string& url,
                                             const OpenStoreOptions& options = {});

// Makes openStore() open "SCHEME://..." URLs with `opener` (given the whole URL), replacing an
// earlier opener of that scheme (given the whole URL and openStore's options). For stores that
// live in their own library, so that a program links their client library only when it uses
// them. Safe to call from any thread.
using StoreOpener = std::function<std::unique_ptr<ConversationStore>(
    const std::string& url, const OpenStoreOptions& options)>;
void registerStoreScheme(const std::string& scheme, StoreOpener opener);

}  // namespace parley
