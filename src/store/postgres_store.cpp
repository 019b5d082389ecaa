#include "store/postgres_store.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "parley/errors.hpp"
#include "store/sql_store.hpp"

namespace parley {

namespace {

using detail::SqlParams;
using detail::SqlRow;
using detail::SqlValue;

// Any key for pg_advisory_xact_lock, shared by every parley process: "parley" in ASCII.
constexpr const char* kMigrationLockKey = "112585106499961";

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text;
}

// A text[] literal: every element quoted, with " and \ escaped.
std::string arrayLiteral(const std::vector<std::string>& items) {
  size_t size = 2;
  for (const auto& item : items)
    size += item.size() + 3;
  std::string out;
  out.reserve(size + size / 8);
  out += '{';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (char ch : items[i]) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  out += '}';
  return out;
}

class Result {
 public:
  explicit Result(PGresult* result) : result_(result) {}
  ~Result() { PQclear(result_); }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  PGresult* get() const { return result_; }

 private:
  PGresult* result_;
};

class PostgresConnection : public detail::SqlConnection {
 public:
  PostgresConnection(const std::string& conninfo, const PostgresStoreOptions& options) {
    // connect_timeout first: the keywords in `conninfo` (expanded from dbname) override it.
    const std::string timeout =
        std::to_string(std::max<int64_t>(1, (options.connectTimeout.count() + 999) / 1000));
    const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
    const char* values[] = {timeout.c_str(), "parley", conninfo.c_str(), nullptr};
    conn_ = PQconnectdbParams(keys, values, 1);
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
      std::string reason = conn_ ? trimmed(PQerrorMessage(conn_)) : "out of memory";
      PQfinish(conn_);
      conn_ = nullptr;
      throw StoreError("postgres: cannot connect: " + reason);
    }
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
  }

  ~PostgresConnection() override { PQfinish(conn_); }

  detail::SqlDialect dialect() const override { return detail::SqlDialect::Postgres; }

  // BEGIN goes with the transaction's first statement, deferred writes with the next statement
  // that has a result, and COMMIT with the notifications' transaction: one round trip each
  // (libpq's pipeline mode), where every statement alone would cost one.
  void begin(bool write, bool durable) override {
    // Writers lock the thread row (FOR UPDATE) under READ COMMITTED: the second writer waits,
    // then reads the winner's version and reports the conflict. Readers take one snapshot so
    // that a thread and its fork chain are read at a single point in time.
    pending_.clear();
    rows_ = {};
    open_ = true;
    if (!write) {
      pending_.push_back({"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", {}});
    } else {
      pending_.push_back({"BEGIN", {}});
      if (!durable) pending_.push_back({"SET LOCAL synchronous_commit = off", {}});
    }
  }
  // A transaction that NOTIFYs holds a database-wide lock from its commit until the commit is
  // on disk, so that notifications keep commit order: NOTIFY inside the writes would serialise
  // every writer behind one disk flush each (about 250 commits/s on a 4 ms disk, whatever the
  // number of connections). The notifications go in a transaction of their own, after the
  // writes committed, that does not wait for the disk (it changes no data); it is sent with the
  // COMMIT, and runs only if the COMMIT succeeded. Its failure is not the caller's: the writes
  // have committed, and a lost notification only delays a waiter until it polls. It is one
  // statement, an implicit transaction: every notification at once, and the setting that spares
  // its commit the disk (local to it), where BEGIN, SET, a NOTIFY each and COMMIT cost the
  // server a statement each.
  void commit() override {
    flushRows();
    const size_t commitAt = pending_.size();
    pending_.push_back({"COMMIT", {}});
    if (!notifications_.empty()) {
      std::vector<std::string> channels, payloads;
      for (const auto& [channel, payload] : notifications_) {
        channels.push_back(channel);
        payloads.push_back(payload);
      }
      static const std::string kNotify =
          "SELECT set_config('synchronous_commit', 'off', true), pg_notify(n.channel, n.payload) "
          "FROM unnest($1::text[], $2::text[]) AS n(channel, payload)";
      prepare(kNotify);
      pending_.push_back({kNotify, {arrayLiteral(channels), arrayLiteral(payloads)}});
    }
    notifications_.clear();
    open_ = false;
    Result last(sendPending(commitAt, /*failuresAfterWanted=*/false));
    if (PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      PQclear(PQexec(conn_, "ROLLBACK"));  // the notifications' transaction failed
    }
  }
  void rollback() noexcept override {
    notifications_.clear();
    pending_.clear();
    rows_ = {};
    open_ = false;
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) return;
    if (PQtransactionStatus(conn_) == PQTRANS_IDLE) return;
    PQclear(PQexec(conn_, "ROLLBACK"));
  }

  void exec(const std::string& sql) override {
    flushRows();
    flushPending();  // `sql` may hold several statements: not for the extended protocol
    Result result(PQexec(conn_, sql.c_str()));
    check(result.get(), sql);
  }

  void executeLater(const std::string& sql, const SqlParams& params) override {
    if (!open_) {  // outside a transaction: at once
      execute(sql, params);
      return;
    }
    flushRows();
    prepare(sql);
    Statement statement{sql, {}};
    statement.values.reserve(params.size());
    for (const auto& param : params)
      statement.values.push_back(textOf(param));
    pending_.push_back(std::move(statement));
  }

  std::vector<SqlRow> query(const std::string& sql, const SqlParams& params) override {
    Result result(run(sql, params));
    check(result.get(), sql);
    std::vector<SqlRow> rows;
    const int count = PQntuples(result.get());
    const int columns = PQnfields(result.get());
    rows.reserve(static_cast<size_t>(count));
    for (int r = 0; r < count; ++r) {
      SqlRow row;
      row.reserve(static_cast<size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(result.get(), r, c)) {
          row.emplace_back(std::monostate{});
        } else {
          row.emplace_back(std::string(PQgetvalue(result.get(), r, c),
                                       static_cast<size_t>(PQgetlength(result.get(), r, c))));
        }
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  int64_t execute(const std::string& sql, const SqlParams& params) override {
    Result result(run(sql, params));
    check(result.get(), sql);
    const char* changed = PQcmdTuples(result.get());
    return changed && *changed ? std::stoll(changed) : 0;
  }

  // One statement for the whole turn (a round trip per row would dominate a long import), and
  // for the turns of consecutive calls (a batch of finishes appends to several threads): the
  // rows wait (rows_) until another statement is queued or sent.
  void insertMessages(const std::string& threadId, int64_t firstSeq,
                      const std::vector<std::string>& bodies) override {
    startRows(RowKind::Messages);
    for (size_t i = 0; i < bodies.size(); ++i) {
      rows_.threads.push_back(threadId);
      rows_.seqs.push_back(std::to_string(firstSeq + static_cast<int64_t>(i)));
      rows_.texts.push_back(bodies[i]);
    }
    if (!open_) flushRows();
  }

  // As insertMessages: the rows of consecutive calls go in one statement.
  void insertEvents(const std::string& threadId, int64_t firstSeq,
                    const std::vector<detail::EventRow>& rows, int64_t now) override {
    startRows(RowKind::Events);
    for (size_t i = 0; i < rows.size(); ++i) {
      rows_.threads.push_back(threadId);
      rows_.seqs.push_back(std::to_string(firstSeq + static_cast<int64_t>(i)));
      rows_.runIds.push_back(rows[i].runId);
      rows_.traceIds.push_back(rows[i].traceId);
      rows_.types.push_back(rows[i].type);
      rows_.texts.push_back(rows[i].payload);
      rows_.times.push_back(std::to_string(now));
    }
    if (!open_) flushRows();
  }

  bool tableExists(const std::string& name) override {
    // A query on pg_class, not to_regclass(): the latter may answer from a catalog cache that
    // has not yet seen a table another session created while we waited for the migration lock.
    auto rows = query(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        "ON n.oid = c.relnamespace WHERE c.relname = $1 AND n.nspname = current_schema())",
        {name});
    return !rows.empty() && detail::asText(rows[0].at(0)) == "t";
  }

  void lockForMigration() override {
    exec(std::string("SELECT pg_advisory_xact_lock(") + kMigrationLockKey + ")");
  }

  const char* forUpdate() const override { return " FOR UPDATE"; }
  std::string forUpdateSkipLocked(const std::string& alias) const override {
    return " FOR UPDATE OF " + alias + " SKIP LOCKED";
  }
  std::string indexedBy(const std::string&) const override { return ""; }
  bool broken() const override { return !conn_ || PQstatus(conn_) != CONNECTION_OK; }

  int64_t nowMs() override {
    auto rows = query("SELECT " + nowMsExpression(false), {});
    return detail::asInt(rows.at(0).at(0));
  }
  std::string nowMsExpression(bool indexable) const override {
    return indexable ? "(EXTRACT(EPOCH FROM statement_timestamp()) * 1000)::bigint"
                     : "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";
  }

  void notifyAfterCommit(const std::string& channel, const std::string& payload) override {
    const auto entry = std::make_pair(channel, payload);
    if (std::find(notifications_.begin(), notifications_.end(), entry) == notifications_.end()) {
      notifications_.push_back(entry);
    }
  }

  bool listen(const std::vector<std::string>& channels) override {
    exec("SET application_name = 'parley-listener'");  // so that an operator can tell it apart
    for (const auto& channel : channels) {
      char* quoted = PQescapeIdentifier(conn_, channel.c_str(), channel.size());
      if (!quoted) throw StoreError("postgres: " + trimmed(PQerrorMessage(conn_)));
      std::string sql = std::string("LISTEN ") + quoted;
      PQfreemem(quoted);
      exec(sql);
    }
    return true;
  }

  std::vector<std::pair<std::string, std::string>> awaitNotifications(
      std::chrono::milliseconds timeout, int wakeFd) override {
    std::vector<std::pair<std::string, std::string>> received;
    auto collect = [&] {
      while (PGnotify* notify = PQnotifies(conn_)) {
        received.emplace_back(notify->relname, notify->extra ? notify->extra : "");
        PQfreemem(notify);
      }
    };
    collect();  // some may have arrived with the last command's result
    if (!received.empty()) return received;
    pollfd fds[2] = {{PQsocket(conn_), POLLIN, 0}, {wakeFd, POLLIN, 0}};
    if (fds[0].fd < 0) throw StoreError("postgres: the listening connection was lost");
    const int count = wakeFd >= 0 ? 2 : 1;
    int ready = ::poll(fds, static_cast<nfds_t>(count), static_cast<int>(timeout.count()));
    if (ready < 0 && errno != EINTR) throw StoreError("postgres: poll failed");
    if (ready > 0 && (fds[0].revents & (POLLIN | POLLERR | POLLHUP))) {
      if (!PQconsumeInput(conn_) || PQstatus(conn_) != CONNECTION_OK) {
        throw StoreError("postgres: the listening connection was lost: " +
                         trimmed(PQerrorMessage(conn_)));
      }
      collect();
    }
    return received;
  }

 private:
  // A statement waiting to be sent: a transaction's BEGIN, a deferred write, a COMMIT.
  // Values are text, as libpq sends them; nullopt is NULL.
  struct Statement {
    std::string sql;
    std::vector<std::optional<std::string>> values;
  };

  static std::optional<std::string> textOf(const detail::SqlValue& param) {
    if (const auto* number = std::get_if<int64_t>(&param)) return std::to_string(*number);
    if (const auto* string = std::get_if<std::string>(&param)) return *string;
    return std::nullopt;
  }

  // Rows of message or event inserts that wait for one statement (insertMessages, insertEvents).
  enum class RowKind { None, Messages, Events };
  struct RowInserts {
    RowKind kind = RowKind::None;
    std::vector<std::string> threads, seqs, texts;            // texts: the bodies, or the payloads
    std::vector<std::string> runIds, traceIds, types, times;  // events only
  };

  void startRows(RowKind kind) {
    if (rows_.kind != kind) flushRows();
    rows_.kind = kind;
  }

  // Queues the INSERT of the rows that wait (pending_).
  void flushRows() {
    const RowKind kind = rows_.kind;
    if (kind == RowKind::None) return;
    RowInserts rows = std::move(rows_);
    rows_ = {};
    if (rows.threads.empty()) return;
    if (kind == RowKind::Messages) {
      executeLater(
          "INSERT INTO parley_messages (thread_id, seq, body) SELECT t.thread, t.seq, t.body "
          "FROM unnest($1::text[], $2::bigint[], $3::text[]) AS t(thread, seq, body)",
          {arrayLiteral(rows.threads), arrayLiteral(rows.seqs), arrayLiteral(rows.texts)});
      return;
    }
    const std::string insert =
        "INSERT INTO parley_events (thread_id, seq, run_id, trace_id, type, payload, created_at) ";
    if (rows.threads.size() == 1) {  // the common case needs no arrays
      auto optional = [](const std::string& text) { return text.empty() ? SqlValue() : text; };
      executeLater(
          insert + "VALUES ($1, $2, $3, $4, $5, $6, $7)",
          {rows.threads[0], std::stoll(rows.seqs[0]), optional(rows.runIds[0]),
           optional(rows.traceIds[0]), rows.types[0], rows.texts[0], std::stoll(rows.times[0])});
      return;
    }
    executeLater(insert +
                     "SELECT t.thread, t.seq, NULLIF(t.run_id, ''), NULLIF(t.trace_id, ''), "
                     "t.type, t.payload, t.created_at FROM unnest($1::text[], $2::bigint[], "
                     "$3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[]) AS "
                     "t(thread, seq, run_id, trace_id, type, payload, created_at)",
                 {arrayLiteral(rows.threads), arrayLiteral(rows.seqs), arrayLiteral(rows.runIds),
                  arrayLiteral(rows.traceIds), arrayLiteral(rows.types), arrayLiteral(rows.texts),
                  arrayLiteral(rows.times)});
  }

  // Prepared once per connection and SQL text; returns the statement's name.
  const std::string& prepare(const std::string& sql) {
    auto found = prepared_.find(sql);
    if (found == prepared_.end()) {
      std::string name = "parley_" + std::to_string(prepared_.size());
      Result prepared(PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr));
      check(prepared.get(), sql);
      found = prepared_.emplace(sql, std::move(name)).first;
    }
    return found->second;
  }

  PGresult* run(const std::string& sql, const SqlParams& params) {
    flushRows();
    if (!pending_.empty()) {
      Statement statement{sql, {}};
      statement.values.reserve(params.size());
      for (const auto& param : params)
        statement.values.push_back(textOf(param));
      prepare(sql);
      pending_.push_back(std::move(statement));
      return sendPending(pending_.size() - 1);
    }
    const std::string& name = prepare(sql);
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      if (const auto* number = std::get_if<int64_t>(&params[i])) {
        text[i] = std::to_string(*number);
        values[i] = text[i].c_str();
      } else if (const auto* string = std::get_if<std::string>(&params[i])) {
        values[i] = string->c_str();
      }
    }
    return PQexecPrepared(conn_, name.c_str(), static_cast<int>(params.size()), values.data(),
                          nullptr, nullptr, 0);
  }

  void flushPending() {
    if (pending_.empty()) return;
    Result last(sendPending(pending_.size() - 1));
    check(last.get(), "(deferred statements)");
  }

  // Sends the pending statements in one pipeline and one round trip. The first that fails is
  // thrown (the server skips the rest); else returns the result of statement `wanted` (the
  // caller frees it). Without `failuresAfterWanted`, a failure after `wanted` is not thrown (a
  // COMMIT's caller is not told of the notifications' failure). Statements with parameters were
  // prepared when queued.
  PGresult* sendPending(size_t wanted, bool failuresAfterWanted = true) {
    std::vector<Statement> statements = std::move(pending_);
    pending_.clear();
    if (PQenterPipelineMode(conn_) != 1) {
      throw StoreError("postgres: cannot send statements: " + trimmed(PQerrorMessage(conn_)));
    }
    bool sent = true;
    for (const auto& statement : statements) {
      std::vector<const char*> values;
      for (const auto& value : statement.values)
        values.push_back(value ? value->c_str() : nullptr);
      auto found = prepared_.find(statement.sql);
      sent =
          found != prepared_.end()
              ? PQsendQueryPrepared(conn_, found->second.c_str(), static_cast<int>(values.size()),
                                    values.data(), nullptr, nullptr, 0) == 1
              : PQsendQueryParams(conn_, statement.sql.c_str(), static_cast<int>(values.size()),
                                  nullptr, values.data(), nullptr, nullptr, 0) == 1;
      if (!sent) break;
    }
    if (!sent || PQpipelineSync(conn_) != 1) {
      const std::string reason = trimmed(PQerrorMessage(conn_));
      PQfinish(conn_);  // a half-sent pipeline cannot be used again: the pool drops it
      conn_ = nullptr;
      throw StoreError("postgres: the connection was lost: " + reason);
    }
    PGresult* kept = nullptr;
    PGresult* failed = nullptr;  // the first error
    std::string failedSql;
    bool lost = false;
    for (size_t i = 0; i < statements.size() && !lost; ++i) {
      PGresult* result = PQgetResult(conn_);
      if (!result) {
        lost = true;
        break;
      }
      const ExecStatusType status = PQresultStatus(result);
      if (!failed && status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK &&
          status != PGRES_PIPELINE_ABORTED && (i <= wanted || failuresAfterWanted)) {
        failed = result;
        failedSql = statements[i].sql;
      } else if (i == wanted && !failed) {
        kept = result;
      } else {
        PQclear(result);
      }
      while (PGresult* extra = PQgetResult(conn_))  // the end of this statement's results
        PQclear(extra);
    }
    // The sync point ends the pipeline (a NULL between results ends a statement's; more than one
    // in a row would mean the count went wrong: the connection is dropped rather than trusted).
    for (int ends = 0;;) {
      PGresult* result = lost ? nullptr : PQgetResult(conn_);
      if (!result) {
        lost = lost || PQstatus(conn_) != CONNECTION_OK || ++ends > 1;
        if (lost) break;
        continue;
      }
      ends = 0;
      const bool sync = PQresultStatus(result) == PGRES_PIPELINE_SYNC;
      PQclear(result);
      if (sync) break;
    }
    if (lost || PQexitPipelineMode(conn_) != 1) {
      PQclear(kept);
      Result error(failed);
      const std::string reason = trimmed(PQerrorMessage(conn_));
      PQfinish(conn_);
      conn_ = nullptr;
      throw StoreError("postgres: the connection was lost: " + reason);
    }
    if (failed) {
      PQclear(kept);
      Result error(failed);
      check(failed, failedSql);
    }
    return kept;
  }

  void check(PGresult* result, const std::string& sql) {
    ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return;
    std::string reason = result ? trimmed(PQresultErrorMessage(result)) : "";
    if (reason.empty()) reason = trimmed(PQerrorMessage(conn_));
    if (PQstatus(conn_) != CONNECTION_OK) {
      throw StoreError("postgres: the connection was lost: " + reason);
    }
    const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    const std::string code = state ? state : "";
    // 40001 serialization_failure, 40P01 deadlock_detected: run the transaction again.
    if (code == "40001" || code == "40P01") {
      throw detail::RetryableStoreError("postgres: " + reason);
    }
    (void)sql;
    throw StoreError("postgres: " + reason);
  }

  PGconn* conn_ = nullptr;
  std::unordered_map<std::string, std::string> prepared_;
  std::vector<std::pair<std::string, std::string>> notifications_;  // sent after the commit
  std::vector<Statement> pending_;                                  // not sent yet (see begin())
  RowInserts rows_;                                                 // not queued yet
  bool open_ = false;  // between begin() and commit() or rollback()
};

}  // namespace

struct PostgresStore::Impl {
  Impl(const std::string& conninfo, const PostgresStoreOptions& options)
      : engine(
            [conninfo, options] { return std::make_unique<PostgresConnection>(conninfo, options); },
            {options.maxConnections, options.retries, options.readOnly}) {}
  detail::SqlStoreEngine engine;
};

PostgresStore::PostgresStore(const std::string& conninfo, PostgresStoreOptions options)
    : impl_(std::make_unique<Impl>(conninfo, options)) {}

PostgresStore::~PostgresStore() = default;

detail::SqlStoreEngine* PostgresStore::sqlEngine() noexcept {
  return &impl_->engine;
}

std::unique_ptr<ConversationStore> openPostgresStore(const std::string& conninfo,
                                                     const PostgresStoreOptions& options) {
  return std::make_unique<PostgresStore>(conninfo, options);
}

ThreadInfo PostgresStore::createThread(const ThreadOptions& options,
                                       std::span<const Message> messages,
                                       const nlohmann::json& state) {
  return impl_->engine.createThread(options, messages, state);
}
ConversationStore::Version PostgresStore::appendTurn(const std::string& threadId,
                                                     std::span<const Message> messages,
                                                     const nlohmann::json& state,
                                                     Version expectedVersion) {
  return impl_->engine.appendTurn(threadId, messages, state, expectedVersion);
}
ThreadData PostgresStore::loadThread(const std::string& threadId) {
  return impl_->engine.loadThread(threadId);
}
std::optional<ThreadInfo> PostgresStore::threadInfo(const std::string& threadId) {
  return impl_->engine.threadInfo(threadId);
}
std::vector<ThreadInfo> PostgresStore::listThreads(const ThreadListOptions& options) {
  return impl_->engine.listThreads(options);
}
bool PostgresStore::deleteThread(const std::string& threadId) {
  return impl_->engine.deleteThread(threadId);
}

bool PostgresStore::setThreadTitle(const std::string& threadId, const std::string& title) {
  return impl_->engine.setThreadTitle(threadId, title);
}
ThreadInfo PostgresStore::forkThread(const std::string& parentId, int64_t position,
                                     const ThreadOptions& options, const nlohmann::json& state) {
  return impl_->engine.forkThread(parentId, position, options, state);
}

std::vector<MessageSearchHit> PostgresStore::searchMessages(const std::string& query,
                                                            const MessageSearchOptions& options) {
  return impl_->engine.searchMessages(query, options);
}

void registerPostgresStore() {
  auto open = [](const std::string& url,
                 const OpenStoreOptions& options) -> std::unique_ptr<ConversationStore> {
    return std::make_unique<PostgresStore>(url, PostgresStoreOptions{.readOnly = options.readOnly});
  };
  registerStoreScheme("postgresql", open);
  registerStoreScheme("postgres", open);
}

}  // namespace parley
