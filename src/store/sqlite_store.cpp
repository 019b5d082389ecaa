#include "store/sqlite_store.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <unordered_map>
#include <utility>

#include "parley/errors.hpp"
#include "store/sql_store.hpp"
#include "store/writer_queue.hpp"

namespace parley {

namespace {

using detail::SqlParams;
using detail::SqlRow;
using detail::SqlValue;

class SqliteConnection : public detail::SqlConnection {
 public:
  SqliteConnection(const std::string& path, const SqliteStoreOptions& options)
      : path_(path), allowForeignTables_(options.allowForeignTables) {
    if (options.readOnly) {
      openReadOnly(path, options);
      return;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    if (options.create) {
      flags |= SQLITE_OPEN_CREATE;
      createPrivately(path);
    }
    open(path, flags, options);
    writers_ = detail::WriterQueue::forFile(path);
    busyTimeout_ = options.busyTimeout;
    try {
      // The first statement that reads the file: a file that is not a database fails here.
      auto mode = query("PRAGMA journal_mode=WAL", {});
      if (mode.empty() || detail::asText(mode[0].at(0)) != "wal") {
        throw StoreError("sqlite: '" + path + "': cannot switch to WAL mode");
      }
      full_ = options.synchronous == SqliteStoreOptions::Synchronous::Full;
      exec(full_ ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
      // Statement journals (the pages one statement of a longer transaction changes, kept to undo
      // that statement alone) in memory, not a temporary file: an import of 10 000 messages
      // wrote 21 000 pages to one and back (42 000 system calls, most of its time).
      exec("PRAGMA temp_store=MEMORY");
    } catch (...) {
      close();
      throw;
    }
  }

  ~SqliteConnection() override { close(); }

  void checkBeforeCreate() override {
    // The file has no parley_schema table. An empty file is a new database; anything else is
    // either damaged (pages but no readable schema: a damaged first page reads as an empty
    // schema) or another application's.
    auto tables = query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name",
        {});
    const int64_t pages = detail::asInt(query("PRAGMA page_count", {}).at(0).at(0));
    if (tables.empty()) {
      if (pages > 1) {
        throw StoreError("sqlite: '" + path_ + "' is damaged: it holds " + std::to_string(pages) +
                         " pages but its schema (on the first page) lists no table; restore it "
                         "from a backup");
      }
      return;
    }
    bool parleyTables = false;
    std::string names;
    for (size_t i = 0; i < tables.size(); ++i) {
      const std::string name = detail::asText(tables[i].at(0));
      if (name.rfind("parley_", 0) == 0) parleyTables = true;
      if (i < 5) names += (i ? ", " : "") + name;
    }
    if (tables.size() > 5) names += ", ...";
    if (parleyTables) {
      throw StoreError("sqlite: '" + path_ + "' is damaged: it holds parley tables (" + names +
                       ") but no schema version; restore it from a backup");
    }
    if (!allowForeignTables_) {
      throw StoreError("sqlite: '" + path_ + "' is another application's database (tables " +
                       names +
                       "); parley adds its tables to it only when asked "
                       "(SqliteStoreOptions::allowForeignTables)");
    }
  }

  detail::SqlDialect dialect() const override { return detail::SqlDialect::Sqlite; }

  void begin(bool write, bool durable) override {
    // A transaction that need not wait for the disk: in WAL mode synchronous=NORMAL still keeps
    // the file consistent. The level cannot change inside a transaction: it is set before and
    // restored after.
    if (!durable && full_) {
      exec("PRAGMA synchronous=NORMAL");
      relaxed_ = true;
    }
    if (write && writers_) {
      if (!writers_->lock(busyTimeout_)) {
        restoreDurability();
        throw detail::RetryableStoreError("sqlite: '" + path_ + "': database is locked (waited " +
                                          std::to_string(busyTimeout_.count()) +
                                          " ms for this process's other writers)");
      }
      queued_ = true;
    }
    // IMMEDIATE takes the write lock before reading, so a writer never has to upgrade a read
    // lock (which SQLite cannot wait for: it would fail with SQLITE_BUSY at once).
    try {
      exec(write ? "BEGIN IMMEDIATE" : "BEGIN");
    } catch (...) {
      endTurn();
      throw;
    }
  }
  void commit() override {
    exec("COMMIT");
    endTurn();
    restoreDurability();
  }
  void rollback() noexcept override {
    if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    endTurn();
    restoreDurability();
  }

  void exec(const std::string& sql) override {
    char* message = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
    std::string reason = message ? message : "";
    sqlite3_free(message);
    if (rc != SQLITE_OK) fail(rc, reason);
  }

  std::vector<SqlRow> query(const std::string& sql, const SqlParams& params) override {
    sqlite3_stmt* stmt = prepare(sql, params);
    std::vector<SqlRow> rows;
    for (;;) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        sqlite3_reset(stmt);
        fail(rc, sqlite3_errmsg(db_));
      }
      int columns = sqlite3_column_count(stmt);
      SqlRow row;
      row.reserve(static_cast<size_t>(columns));
      for (int i = 0; i < columns; ++i) {
        switch (sqlite3_column_type(stmt, i)) {
          case SQLITE_NULL:
            row.emplace_back(std::monostate{});
            break;
          case SQLITE_INTEGER:
            row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, i)));
            break;
          default: {
            const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
            row.emplace_back(
                std::string(text ? text : "", static_cast<size_t>(sqlite3_column_bytes(stmt, i))));
          }
        }
      }
      rows.push_back(std::move(row));
    }
    sqlite3_reset(stmt);
    return rows;
  }

  int64_t execute(const std::string& sql, const SqlParams& params) override {
    sqlite3_stmt* stmt = prepare(sql, params);
    int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) fail(rc, sqlite3_errmsg(db_));
    return sqlite3_changes64(db_);
  }

  void insertMessages(const std::string& threadId, int64_t firstSeq,
                      const std::vector<std::string>& bodies) override {
    for (size_t i = 0; i < bodies.size(); ++i) {
      execute("INSERT INTO parley_messages (thread_id, seq, body) VALUES ($1, $2, $3)",
              {threadId, firstSeq + static_cast<int64_t>(i), bodies[i]});
    }
  }

  bool tableExists(const std::string& name) override {
    return !query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1", {name}).empty();
  }
  void lockForMigration() override {}  // BEGIN IMMEDIATE already excludes other writers
  const char* forUpdate() const override { return ""; }
  std::string forUpdateSkipLocked(const std::string&) const override { return ""; }
  std::string indexedBy(const std::string& index) const override { return " INDEXED BY " + index; }
  bool broken() const override { return db_ == nullptr; }
  int64_t nowMs() override { return detail::nowMs(); }

 private:
  void endTurn() noexcept {
    if (!queued_) return;
    queued_ = false;
    writers_->unlock();
  }

  void restoreDurability() noexcept {
    if (!relaxed_) return;
    relaxed_ = false;
    sqlite3_exec(db_, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr);
  }

  // A store holds conversations: a new file is the owner's alone (0600, whatever the umask),
  // not SQLite's 0644. Its -wal and -shm files take the file's permissions. An empty file is a
  // new database to SQLite; an existing file is left as it is.
  static void createPrivately(const std::string& path) {
    if (path.empty() || path == ":memory:" || path.rfind("file:", 0) == 0) return;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::fchmod(fd, 0600);  // the umask may have taken bits away; never added any
      ::close(fd);
    }
  }

  void open(const std::string& path, int flags, const SqliteStoreOptions& options) {
    int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) {
      std::string reason = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close_v2(db_);
      db_ = nullptr;
      throw StoreError("sqlite: cannot open '" + path_ + "': " + reason);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, static_cast<int>(options.busyTimeout.count()));
  }

  // Read-only: no journal mode switch (that writes), and a first read that fails here for a file
  // that is not a database. A WAL database needs its -shm file; where this process can neither
  // create nor open it (a folder it may not write) and no -wal file exists (no writer has
  // uncheckpointed changes), the file is read as immutable.
  void openReadOnly(const std::string& path, const SqliteStoreOptions& options) {
    std::string uri = "file:" + uriPath(path) + "?mode=ro";
    open(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, options);
    try {
      query("SELECT COUNT(*) FROM sqlite_master", {});
    } catch (const StoreError&) {
      std::error_code ignored;
      const int primary = lastError_ & 0xff;
      if ((primary != SQLITE_CANTOPEN && primary != SQLITE_READONLY) ||
          std::filesystem::exists(path + "-wal", ignored)) {
        close();
        throw;
      }
      close();
      open(uri + "&immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI,
           options);
      try {
        query("SELECT COUNT(*) FROM sqlite_master", {});
      } catch (...) {
        close();
        throw;
      }
    }
    exec("PRAGMA query_only=1");
  }

  // A path as a file: URI path (RFC 3986): %, ?, # and non-printable bytes percent-encoded.
  static std::string uriPath(const std::string& path) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char ch : path) {
      if (ch == '%' || ch == '?' || ch == '#' || ch <= 0x20 || ch >= 0x7f) {
        out += '%';
        out += kHex[ch >> 4];
        out += kHex[ch & 0xf];
      } else {
        out += static_cast<char>(ch);
      }
    }
    return out;
  }

  [[noreturn]] void fail(int rc, const std::string& reason) {
    lastError_ = rc;
    const std::string what = "sqlite: '" + path_ + "': " + reason + " (" + sqlite3_errstr(rc) + ")";
    switch (rc & 0xff) {
      case SQLITE_BUSY:
      case SQLITE_LOCKED:
        throw detail::RetryableStoreError(what);
      case SQLITE_NOTADB:
        throw StoreError("sqlite: '" + path_ + "' is not a SQLite database (" + reason + ")");
      case SQLITE_CORRUPT:
        throw StoreError("sqlite: '" + path_ + "' is damaged: " + reason);
      default:
        throw StoreError(what);
    }
  }

  // SQL uses PostgreSQL's $n placeholders; SQLite reads ?n the same way.
  sqlite3_stmt* prepare(const std::string& sql, const SqlParams& params) {
    auto found = statements_.find(sql);
    sqlite3_stmt* stmt = nullptr;
    if (found != statements_.end()) {
      stmt = found->second;
    } else {
      std::string text = sql;
      for (char& ch : text) {
        if (ch == '$') ch = '?';
      }
      int rc = sqlite3_prepare_v3(db_, text.c_str(), static_cast<int>(text.size()),
                                  SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
      if (rc != SQLITE_OK) fail(rc, sqlite3_errmsg(db_));
      statements_.emplace(sql, stmt);
    }
    sqlite3_clear_bindings(stmt);
    for (size_t i = 0; i < params.size(); ++i) {
      int index = static_cast<int>(i + 1);
      int rc = SQLITE_OK;
      if (const auto* number = std::get_if<int64_t>(&params[i])) {
        rc = sqlite3_bind_int64(stmt, index, *number);
      } else if (const auto* text = std::get_if<std::string>(&params[i])) {
        rc = sqlite3_bind_text64(stmt, index, text->data(), text->size(), SQLITE_STATIC,
                                 SQLITE_UTF8);
      } else {
        rc = sqlite3_bind_null(stmt, index);
      }
      if (rc != SQLITE_OK) fail(rc, sqlite3_errmsg(db_));
    }
    return stmt;
  }

  void close() {
    for (auto& [sql, stmt] : statements_)
      sqlite3_finalize(stmt);
    statements_.clear();
    if (db_) sqlite3_close_v2(db_);
    db_ = nullptr;
  }

  std::string path_;
  bool allowForeignTables_ = false;
  int lastError_ = SQLITE_OK;  // the result code of the last failure
  sqlite3* db_ = nullptr;
  bool full_ = false;     // the store's setting: synchronous=FULL
  bool relaxed_ = false;  // this transaction: synchronous=NORMAL until it ends
  std::shared_ptr<detail::WriterQueue> writers_;  // null when read-only or in memory
  std::chrono::milliseconds busyTimeout_{0};
  bool queued_ = false;  // this transaction holds the writers' turn
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace

struct SqliteStore::Impl {
  Impl(const std::string& path, const SqliteStoreOptions& options)
      : engine([path, options] { return std::make_unique<SqliteConnection>(path, options); },
               {options.maxConnections, options.busyRetries, options.readOnly}) {}
  detail::SqlStoreEngine engine;
};

SqliteStore::SqliteStore(const std::string& path, SqliteStoreOptions options) {
  if (path.empty()) throw ValidationError("path", "must not be empty");
  impl_ = std::make_unique<Impl>(path, options);
}

SqliteStore::~SqliteStore() = default;

detail::SqlStoreEngine* SqliteStore::sqlEngine() noexcept {
  return &impl_->engine;
}

std::unique_ptr<ConversationStore> openSqliteStore(const std::string& path,
                                                   const SqliteStoreOptions& options) {
  return std::make_unique<SqliteStore>(path, options);
}

ThreadInfo SqliteStore::createThread(const ThreadOptions& options,
                                     std::span<const Message> messages,
                                     const nlohmann::json& state) {
  return impl_->engine.createThread(options, messages, state);
}
ConversationStore::Version SqliteStore::appendTurn(const std::string& threadId,
                                                   std::span<const Message> messages,
                                                   const nlohmann::json& state,
                                                   Version expectedVersion) {
  return impl_->engine.appendTurn(threadId, messages, state, expectedVersion);
}
ThreadData SqliteStore::loadThread(const std::string& threadId) {
  return impl_->engine.loadThread(threadId);
}
std::optional<ThreadInfo> SqliteStore::threadInfo(const std::string& threadId) {
  return impl_->engine.threadInfo(threadId);
}
std::vector<ThreadInfo> SqliteStore::listThreads(const ThreadListOptions& options) {
  return impl_->engine.listThreads(options);
}
bool SqliteStore::deleteThread(const std::string& threadId) {
  return impl_->engine.deleteThread(threadId);
}

bool SqliteStore::setThreadTitle(const std::string& threadId, const std::string& title) {
  return impl_->engine.setThreadTitle(threadId, title);
}
ThreadInfo SqliteStore::forkThread(const std::string& parentId, int64_t position,
                                   const ThreadOptions& options, const nlohmann::json& state) {
  return impl_->engine.forkThread(parentId, position, options, state);
}

std::vector<MessageSearchHit> SqliteStore::searchMessages(const std::string& query,
                                                          const MessageSearchOptions& options) {
  return impl_->engine.searchMessages(query, options);
}

}  // namespace parley
