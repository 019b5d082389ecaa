// The SQL engine both stores run on: migrations (every step is in schema.cpp), the connection
// pool, and every thread operation written once for SQLite and PostgreSQL. Over 600 lines
// because the two dialects' differences are kept next to each other, operation by operation,
// where a reviewer can compare them; split by backend they would drift apart.
#include "store/sql_store.hpp"
#include "store/thread_search.hpp"

#include "store/message_words.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>
#include <random>
#include <thread>
#include <unordered_set>
#include <utility>

#include "model/sha256.hpp"
#include "parley/json.hpp"

namespace parley::detail {

bool isNull(const SqlValue& value) {
  return std::holds_alternative<std::monostate>(value);
}

int64_t asInt(const SqlValue& value) {
  if (const auto* number = std::get_if<int64_t>(&value)) return *number;
  if (const auto* text = std::get_if<std::string>(&value)) {
    try {
      size_t used = 0;
      int64_t number = std::stoll(*text, &used);
      if (used == text->size()) return number;
    } catch (const std::exception&) {
    }
    throw StoreError("store: expected an integer column, got '" + *text + "'");
  }
  throw StoreError("store: expected an integer column, got NULL");
}

std::string asText(const SqlValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return *text;
  if (const auto* number = std::get_if<int64_t>(&value)) return std::to_string(*number);
  return {};
}

namespace {

using json = nlohmann::json;

constexpr size_t kMaxIdLength = 200;

}  // namespace

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::chrono::system_clock::time_point fromMs(int64_t ms) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

std::string generateId(const char* prefix) {
  thread_local std::mt19937_64 random{std::random_device{}() ^ static_cast<uint64_t>(nowMs()) ^
                                      std::hash<std::thread::id>{}(std::this_thread::get_id())};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int part = 0; part < 2; ++part) {
    uint64_t bits = random();
    for (int i = 0; i < 16; ++i, bits >>= 4)
      id += kHex[bits & 0xf];
  }
  return id;
}

void checkId(const std::string& id, const std::string& field) {
  if (id.empty()) throw ValidationError(field, "must not be empty");
  if (id.size() > kMaxIdLength) {
    throw ValidationError(field, "is longer than " + std::to_string(kMaxIdLength) + " bytes");
  }
  for (unsigned char c : id) {
    if (c < 0x20 || c == 0x7f) throw ValidationError(field, "contains a control character");
  }
}

std::string dumpJson(const json& value, const std::string& field) {
  try {
    return value.dump();
  } catch (const json::exception& e) {
    throw ValidationError(field, std::string("cannot be stored: ") + e.what());
  }
}

std::vector<std::string> messageBodies(std::span<const Message> messages) {
  std::vector<std::string> bodies;
  bodies.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    try {
      validate(messages[i]);
    } catch (const ValidationError& e) {
      // validate() names fields "message.x"; name them after the turn's index instead.
      const std::string& inner = e.field();
      throw ValidationError(
          inner.rfind("message", 0) == 0 ? field + inner.substr(7) : field + "." + inner,
          e.reason());
    }
    bodies.push_back(dumpJson(toJson(messages[i]), field));
  }
  return bodies;
}

SqlValue stateValue(const json& state) {
  if (state.is_null()) return std::monostate{};
  if (!state.is_object()) throw ValidationError("state", "must be a JSON object or null");
  return dumpJson(state, "state");
}

namespace {

void checkStateSize(const json& state, int64_t count) {
  if (!state.is_object()) return;
  auto size = state.find("storageSize");
  if (size == state.end()) return;
  if (!size->is_number_integer() || size->get<int64_t>() != count) {
    throw ValidationError(
        "state.storageSize",
        "is " + size->dump() + " but the thread would hold " + std::to_string(count) + " messages");
  }
}

SqlValue metadataValue(const json& metadata) {
  if (metadata.is_null()) return std::monostate{};
  if (!metadata.is_object()) throw ValidationError("metadata", "must be a JSON object or null");
  return dumpJson(metadata, "metadata");
}

}  // namespace

json parseColumn(const SqlValue& value, const std::string& what) {
  if (isNull(value)) return nullptr;
  try {
    return parseJson(asText(value));
  } catch (const std::exception& e) {  // not JSON, or nested too deep
    throw StoreError(what + " is corrupt: " + e.what());
  }
}

std::string named(const std::string& id) {
  return "'" + id + "'";
}

namespace {

StoreError notFound(const std::string& threadId) {
  return StoreError("store: no thread " + named(threadId));
}

constexpr const char* kInfoColumns =
    "id, parent_id, fork_position, message_count, version, created_at, updated_at, title, "
    "metadata";

ThreadInfo infoFromRow(const SqlRow& row) {
  ThreadInfo info;
  info.id = asText(row.at(0));
  info.parentId = asText(row.at(1));
  info.forkPosition = asInt(row.at(2));
  info.messageCount = asInt(row.at(3));
  info.version = asInt(row.at(4));
  info.createdAt = fromMs(asInt(row.at(5)));
  info.updatedAt = fromMs(asInt(row.at(6)));
  info.title = asText(row.at(7));
  info.metadata = parseColumn(row.at(8), "thread " + named(info.id) + " metadata");
  return info;
}

// The row of a thread, deleted ones included. Columns: kInfoColumns, state, deleted.
std::optional<SqlRow> threadRow(SqlConnection& c, const std::string& id, bool lock) {
  auto rows = c.query(std::string("SELECT ") + kInfoColumns +
                          ", state, deleted FROM parley_threads WHERE id = $1" +
                          (lock ? c.forUpdate() : ""),
                      {id});
  if (rows.empty()) return std::nullopt;
  return std::move(rows.front());
}

bool rowDeleted(const SqlRow& row) {
  return asInt(row.at(10)) != 0;
}

// Removes a thread's own rows at or above `fromSeq`.
void trimRows(SqlConnection& c, const std::string& id, int64_t fromSeq) {
  c.execute("DELETE FROM parley_messages WHERE thread_id = $1 AND seq >= $2", {id, fromSeq});
}

// After a thread left `parentId`, removes deleted ancestors no fork needs any more and trims
// the rows of the one that is still needed to what its forks share.
void collectAncestors(SqlConnection& c, std::string parentId) {
  while (!parentId.empty()) {
    auto parent = threadRow(c, parentId, true);
    if (!parent || !rowDeleted(*parent)) return;
    auto children = c.query(
        "SELECT COUNT(*), MAX(fork_position) FROM parley_threads WHERE parent_id = $1", {parentId});
    if (!children.empty() && asInt(children[0].at(0)) > 0) {
      trimRows(c, parentId, asInt(children[0].at(1)));
      return;
    }
    trimRows(c, parentId, 0);
    c.execute("DELETE FROM parley_threads WHERE id = $1", {parentId});
    parentId = asText(parent->at(1));
  }
}

}  // namespace

void SqlConnection::insertEvents(const std::string& threadId, int64_t firstSeq,
                                 const std::vector<EventRow>& rows, int64_t now) {
  int64_t seq = firstSeq;
  for (const auto& row : rows) {
    executeLater(
        "INSERT INTO parley_events (thread_id, seq, run_id, trace_id, type, payload, created_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7)",
        {threadId, seq++, row.runId.empty() ? SqlValue() : SqlValue(row.runId),
         row.traceId.empty() ? SqlValue() : SqlValue(row.traceId), row.type, row.payload, now});
  }
}

// --- part bytes in blobs (schema version 5) ----------------------------------------------------

namespace {

// A stored body names a blob by its key after this marker, where the base64 was: a data URI's
// "data:image/png;base64,<base64>" is stored as "data:image/png;base64,parley-blob:<sha256>",
// input_audio's "<base64>" as "parley-blob:<sha256>". Neither is base64, so a reference cannot
// be mistaken for data.
constexpr std::string_view kBlobMarker = "parley-blob:";
constexpr std::string_view kBase64Marker = ";base64,";
constexpr size_t kSha256HexLength = 64;

// Calls fn(text, isDataUri) for each string of a content array that holds base64 bytes.
template <class Fn>
void forEachPayload(json& content, Fn&& fn) {
  if (!content.is_array()) return;
  for (json& item : content) {
    if (!item.is_object()) continue;
    auto type = item.find("type");
    if (type == item.end() || !type->is_string()) continue;
    const char* holderKey = nullptr;
    const char* key = nullptr;
    if (*type == "image_url") {
      holderKey = "image_url", key = "url";
    } else if (*type == "file") {
      holderKey = "file", key = "file_data";
    } else if (*type == "input_audio") {
      holderKey = "input_audio", key = "data";
    } else {
      continue;
    }
    auto holder = item.find(holderKey);
    if (holder == item.end() || !holder->is_object()) continue;
    auto text = holder->find(key);
    if (text == holder->end() || !text->is_string()) continue;
    fn(text->get_ref<std::string&>(), std::string_view(key) != "data");
  }
}

struct BlobRow {
  std::string key;
  int64_t size = 0;
  std::string base64;
};

// The body with each part's base64 moved into `blobs`, or nullopt when it holds none.
std::optional<std::string> externalizeBlobs(const std::string& body, std::vector<BlobRow>& blobs,
                                            const std::string& field) {
  // Most bodies hold no parts: a search of the text saves parsing them.
  if (body.find("\"content\":[") == std::string::npos) return std::nullopt;
  json value = parseJson(body);
  auto content = value.find("content");
  if (content == value.end()) return std::nullopt;
  bool changed = false;
  forEachPayload(*content, [&](std::string& text, bool isDataUri) {
    if (text.find(kBlobMarker) != std::string::npos) {
      throw ValidationError(field + ".content",
                            "holds a blob reference, which only a store writes");
    }
    size_t start = 0;
    if (isDataUri) {
      if (text.rfind("data:", 0) != 0) return;  // a URL: nothing to move
      const size_t marker = text.find(kBase64Marker);
      if (marker == std::string::npos) return;
      start = marker + kBase64Marker.size();
    }
    const std::string_view base64 = std::string_view(text).substr(start);
    auto bytes = base64Decode(base64);
    if (!bytes) return;  // kept in the body as it came
    BlobRow row{sha256Hex(*bytes), static_cast<int64_t>(bytes->size()), std::string(base64)};
    text.replace(start, std::string::npos, std::string(kBlobMarker) + row.key);
    blobs.push_back(std::move(row));
    changed = true;
  });
  if (!changed) return std::nullopt;
  return dumpJson(value, field);
}

}  // namespace

void insertMessageRows(SqlConnection& c, const std::string& threadId, int64_t firstSeq,
                       const std::vector<std::string>& bodies) {
  std::vector<BlobRow> blobs;
  std::vector<std::string> stored;
  for (size_t i = 0; i < bodies.size(); ++i) {
    auto moved = externalizeBlobs(bodies[i], blobs, "messages[" + std::to_string(i) + "]");
    if (moved && stored.empty())
      stored.assign(bodies.begin(), bodies.begin() + static_cast<std::ptrdiff_t>(i));
    if (moved) {
      stored.push_back(std::move(*moved));
    } else if (!stored.empty()) {
      stored.push_back(bodies[i]);
    }
  }
  const int64_t now = nowMs();
  for (const BlobRow& blob : blobs) {
    c.execute(
        "INSERT INTO parley_blobs (sha256, size, data, created_at) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (sha256) DO NOTHING",
        {blob.key, blob.size, blob.base64, now});
  }
  c.insertMessages(threadId, firstSeq, stored.empty() ? bodies : stored);
}

json resolveBlobs(SqlConnection& c, json body) {
  auto content = body.find("content");
  if (content == body.end()) return body;
  forEachPayload(*content, [&](std::string& text, bool) {
    const size_t at = text.find(kBlobMarker);
    if (at == std::string::npos) return;
    const std::string key = text.substr(at + kBlobMarker.size());
    if (key.size() != kSha256HexLength) throw StoreError("a blob reference is malformed");
    auto rows = c.query("SELECT data FROM parley_blobs WHERE sha256 = $1", {key});
    if (rows.empty()) throw StoreError("blob " + key + " is missing");
    text.replace(at, std::string::npos, asText(rows[0].at(0)));
  });
  return body;
}

// --- the pool -------------------------------------------------------------------------------

SqlStoreEngine::SqlStoreEngine(Connect connect, SqlEngineOptions options)
    : connect_(std::move(connect)), options_(options) {
  if (options_.maxConnections == 0) options_.maxConnections = 1;
  auto connection = connect_();
  ++open_;
  dialect_ = connection->dialect();
  migrate(*connection);
  release(std::move(connection));
}

SqlStoreEngine::~SqlStoreEngine() = default;

std::unique_ptr<SqlConnection> SqlStoreEngine::acquire() {
  std::unique_lock lock(mutex_);
  available_.wait(lock, [&] { return !idle_.empty() || open_ < options_.maxConnections; });
  if (!idle_.empty()) {
    auto connection = std::move(idle_.back());
    idle_.pop_back();
    return connection;
  }
  ++open_;
  lock.unlock();
  try {
    return connect_();
  } catch (...) {
    lock.lock();
    --open_;
    available_.notify_one();
    throw;
  }
}

void SqlStoreEngine::release(std::unique_ptr<SqlConnection> connection) {
  std::lock_guard lock(mutex_);
  if (connection->broken()) {
    --open_;
  } else {
    idle_.push_back(std::move(connection));
  }
  available_.notify_one();
}

// Runs fn(connection) in one transaction; a transient failure reruns the whole of it.
template <class Fn>
auto SqlStoreEngine::transact(bool write, Fn&& fn, bool durable) {
  if (write && options_.readOnly) {
    throw StoreError("store: the store was opened read-only; this call writes");
  }
  thread_local std::minstd_rand jitter{std::random_device{}()};
  for (int attempt = 0;; ++attempt) {
    auto connection = acquire();
    try {
      connection->begin(write, durable || !write);
      if constexpr (std::is_void_v<decltype(fn(*connection))>) {
        fn(*connection);
        connection->commit();
        release(std::move(connection));
        return;
      } else {
        auto result = fn(*connection);
        connection->commit();
        release(std::move(connection));
        return result;
      }
    } catch (const RetryableStoreError&) {
      connection->rollback();
      release(std::move(connection));
      if (attempt >= options_.retries) throw;
      // Back off a little, randomly, so that two retrying writers do not collide again.
      std::this_thread::sleep_for(std::chrono::microseconds(
          100 + jitter() % (uint64_t{1000} * static_cast<uint64_t>(std::min(attempt + 1, 20)))));
    } catch (...) {
      connection->rollback();
      release(std::move(connection));
      throw;
    }
  }
}

void SqlStoreEngine::migrate(SqlConnection& c) {
  auto readVersion = [&]() -> int64_t {
    if (!c.tableExists("parley_schema")) return 0;
    auto rows = c.query("SELECT MAX(version) FROM parley_schema", {});
    return rows.empty() || isNull(rows[0].at(0)) ? 0 : asInt(rows[0].at(0));
  };
  auto refuseNewer = [](int64_t version) {
    if (version > kStoreSchemaVersion) {
      throw StoreError("store: the database has schema version " + std::to_string(version) +
                       ", newer than the " + std::to_string(kStoreSchemaVersion) +
                       " this parley supports; use a newer parley");
    }
  };
  auto run = [&](bool write, auto&& fn) {
    c.begin(write, true);
    try {
      fn();
      c.commit();
    } catch (...) {
      c.rollback();
      throw;
    }
  };
  int64_t version = 0;
  run(false, [&] { version = readVersion(); });
  refuseNewer(version);
  if (version == kStoreSchemaVersion) return;
  if (options_.readOnly) {
    // An older version is read as it is: the tables of version 1 are all a reader needs.
    if (version == 0) {
      throw StoreError(
          "store: the database holds no parley tables (opened read-only: nothing "
          "was created)");
    }
    return;
  }
  run(true, [&] {
    c.lockForMigration();
    version = readVersion();  // another process may have migrated meanwhile
    refuseNewer(version);
    if (version == 0) c.checkBeforeCreate();
    for (int next = static_cast<int>(version) + 1; next <= kStoreSchemaVersion; ++next) {
      for (const auto& step : migrationSteps(c.dialect(), next)) {
        try {
          c.exec(step);
        } catch (const StoreError& e) {
          // A table that "already exists" although the schema version said it should not: the
          // schema pages and the version disagree.
          if (std::string(e.what()).find("already exists") == std::string::npos) throw;
          throw StoreError("store: the database is damaged: its schema version is " +
                           std::to_string(version) +
                           " but it already holds tables of a later "
                           "one (" +
                           e.what() + "); restore it from a backup");
        }
      }
    }
    if (version == 0) {
      c.execute("INSERT INTO parley_schema (version) VALUES ($1)",
                {static_cast<int64_t>(kStoreSchemaVersion)});
    } else {
      c.execute("UPDATE parley_schema SET version = $1",
                {static_cast<int64_t>(kStoreSchemaVersion)});
    }
  });
}

// --- operations -----------------------------------------------------------------------------

ThreadInfo SqlStoreEngine::createThread(const ThreadOptions& options,
                                        std::span<const Message> messages, const json& state) {
  std::string id = options.id.empty() ? generateId("t-") : options.id;
  checkId(id, "id");
  SqlValue metadata = metadataValue(options.metadata);
  auto bodies = messageBodies(messages);
  checkStateSize(state, static_cast<int64_t>(messages.size()));
  SqlValue stateText = stateValue(state);
  int64_t now = nowMs();
  return transact(true, [&](SqlConnection& c) {
    if (!c.query("SELECT 1 FROM parley_threads WHERE id = $1", {id}).empty()) {
      throw StoreError("store: a thread " + named(id) + " already exists");
    }
    c.execute(
        "INSERT INTO parley_threads (id, parent_id, fork_position, message_count, version, "
        "created_at, updated_at, title, metadata, state) "
        "VALUES ($1, NULL, 0, $2, 1, $3, $3, $4, $5, $6)",
        {id, static_cast<int64_t>(bodies.size()), now, options.title, metadata, stateText});
    if (!bodies.empty()) insertMessageRows(c, id, 0, bodies);
    ThreadInfo info;
    info.id = id;
    info.messageCount = static_cast<int64_t>(bodies.size());
    info.version = 1;
    info.createdAt = info.updatedAt = fromMs(now);
    info.title = options.title;
    info.metadata = options.metadata;
    return info;
  });
}

SqlStoreEngine::Version SqlStoreEngine::appendTurn(const std::string& threadId,
                                                   std::span<const Message> messages,
                                                   const json& state, Version expectedVersion) {
  auto bodies = messageBodies(messages);
  SqlValue stateText = stateValue(state);
  return transact(true, [&](SqlConnection& c) {
    return appendTurnIn(c, threadId, bodies, stateText, state, expectedVersion);
  });
}

SqlStoreEngine::Version SqlStoreEngine::appendTurnIn(SqlConnection& c, const std::string& threadId,
                                                     const std::vector<std::string>& bodies,
                                                     const SqlValue& stateText, const json& state,
                                                     Version expectedVersion,
                                                     LockedThread* locked) {
  LockedThread own;
  if (!locked) {
    auto rows = c.query(std::string("SELECT version, message_count, deleted FROM parley_threads "
                                    "WHERE id = $1") +
                            c.forUpdate(),
                        {threadId});
    if (rows.empty() || asInt(rows[0].at(2)) != 0) throw notFound(threadId);
    own.version = asInt(rows[0].at(0));
    own.messageCount = asInt(rows[0].at(1));
  }
  LockedThread& row = locked ? *locked : own;
  const Version version = row.version;
  const int64_t count = row.messageCount;
  if (version != expectedVersion) {
    throw StoreConflict("store: thread " + named(threadId) + " is at version " +
                        std::to_string(version) + ", not the expected " +
                        std::to_string(expectedVersion) + " (another writer saved a turn)");
  }
  int64_t newCount = count + static_cast<int64_t>(bodies.size());
  checkStateSize(state, newCount);
  if (!bodies.empty()) insertMessageRows(c, threadId, count, bodies);
  row.version = version + 1;
  row.messageCount = newCount;
  row.changes.set("version", row.version);
  row.changes.set("message_count", newCount);
  row.changes.set("updated_at", nowMs());
  if (!isNull(stateText)) row.changes.set("state", stateText);
  if (!locked) own.changes.write(c, threadId);
  return row.version;
}

void ThreadRowWrite::set(const char* column, SqlValue value) {
  for (auto& [name, current] : columns_) {
    if (std::string_view(name) == column) {
      current = std::move(value);
      return;
    }
  }
  columns_.emplace_back(column, std::move(value));
}

std::string ThreadRowWrite::signature() const {
  std::string names;
  for (const auto& [name, value] : columns_)
    names += std::string(name) + (std::holds_alternative<int64_t>(value) ? ":int," : ",");
  return names + (headAfter_ ? "queue_head_at" : "");
}

void writeThreadRows(SqlConnection& c, std::map<std::string, LockedThread>& rows) {
  std::map<std::string, std::vector<std::pair<const std::string*, ThreadRowWrite*>>> groups;
  for (auto& [id, thread] : rows)
    if (!thread.changes.empty())
      groups[thread.changes.signature()].push_back({&id, &thread.changes});
  for (auto& [signature, group] : groups) {
    if (group.size() == 1) {
      group[0].second->write(c, *group[0].first);
      continue;
    }
    // UPDATE ... FROM (VALUES (id, value, ...), ...): the values of each column are cast where
    // they are integers (PostgreSQL reads a parameter in VALUES as text).
    const ThreadRowWrite& first = *group[0].second;
    const size_t width = first.columns_.size() + 1 + (first.headAfter_ ? 1 : 0);
    std::string sql = "UPDATE parley_threads SET ";
    for (size_t i = 0; i < first.columns_.size(); ++i) {
      sql += std::string(i ? ", " : "") + first.columns_[i].first + " = v.column" +
             std::to_string(i + 2);
    }
    if (first.headAfter_) {
      sql += std::string(first.columns_.empty() ? "" : ", ") +
             "queue_head_at = " + queueHeadAfter("v.column1", "v.column" + std::to_string(width));
    }
    sql += " FROM (VALUES ";
    SqlParams params;
    params.reserve(group.size() * width);
    for (size_t row = 0; row < group.size(); ++row) {
      ThreadRowWrite& write = *group[row].second;
      params.emplace_back(*group[row].first);
      sql += std::string(row ? ", ($" : "($") + std::to_string(params.size());
      for (auto& [name, value] : write.columns_) {
        const bool integer = std::holds_alternative<int64_t>(value);
        params.push_back(std::move(value));
        sql += integer ? ", CAST($" + std::to_string(params.size()) + " AS BIGINT)"
                       : ", $" + std::to_string(params.size());
      }
      if (write.headAfter_) {
        params.emplace_back(std::move(*write.headAfter_));
        sql += ", $" + std::to_string(params.size());
      }
      sql += ")";
      write.columns_.clear();
      write.headAfter_.reset();
    }
    sql += ") AS v WHERE parley_threads.id = v.column1";
    c.executeLater(sql, params);
  }
}

void ThreadRowWrite::write(SqlConnection& c, const std::string& threadId) {
  if (empty()) return;
  std::string sql = "UPDATE parley_threads SET ";
  SqlParams params;
  params.reserve(columns_.size() + 2);
  for (auto& [name, value] : columns_) {
    if (!params.empty()) sql += ", ";
    params.push_back(std::move(value));
    sql += std::string(name) + " = $" + std::to_string(params.size());
  }
  params.emplace_back(threadId);
  const std::string thread = "$" + std::to_string(params.size());
  if (headAfter_) {
    params.emplace_back(std::move(*headAfter_));
    sql += std::string(columns_.empty() ? "" : ", ") +
           "queue_head_at = " + queueHeadAfter(thread, "$" + std::to_string(params.size()));
  }
  sql += " WHERE id = " + thread;
  columns_.clear();
  headAfter_.reset();
  c.executeLater(sql, params);
}

void SqlStoreEngine::transaction(bool write, const std::function<void(SqlConnection&)>& fn,
                                 bool durable) {
  transact(write, fn, durable);
}

ThreadData SqlStoreEngine::loadThread(const std::string& threadId) {
  return transact(false, [&](SqlConnection& c) {
    auto row = threadRow(c, threadId, false);
    if (!row || rowDeleted(*row)) throw notFound(threadId);
    ThreadData data;
    data.info = infoFromRow(*row);
    data.state = parseColumn(row->at(9), "thread " + named(threadId) + " state");

    // Walk up the forks: each thread holds its own rows [fork_position, limit); the rest come
    // from its parent, below the fork position.
    struct Segment {
      std::string id;
      int64_t from, to;
    };
    std::vector<Segment> segments;
    std::string id = threadId;
    int64_t from = data.info.forkPosition;
    int64_t to = data.info.messageCount;
    std::string parent = data.info.parentId;
    // However long the chain of forks: a loop (a damaged database) is found by the ids seen,
    // not by a depth that a legitimate chain could pass.
    std::unordered_set<std::string> seen{threadId};
    for (;;) {
      if (to > from) segments.push_back({id, from, to});
      to = std::min(to, from);
      if (parent.empty() || to == 0) break;
      if (!seen.insert(parent).second)
        throw StoreError("store: thread " + named(threadId) + " forks loop (database damaged)");
      auto parentRow = threadRow(c, parent, false);
      if (!parentRow) {
        throw StoreError("store: thread " + named(id) + " needs rows of thread " + named(parent) +
                         ", which is missing (database damaged)");
      }
      id = parent;
      parent = asText(parentRow->at(1));
      from = asInt(parentRow->at(2));
    }
    if (to != 0 && !segments.empty()) {
      // The root's rows start at 0; a fork chain that does not reach 0 is damaged.
      throw StoreError("store: thread " + named(threadId) + " has no rows below " +
                       std::to_string(to));
    }

    data.messages.reserve(static_cast<size_t>(data.info.messageCount));
    for (auto segment = segments.rbegin(); segment != segments.rend(); ++segment) {
      auto rows = c.query(
          "SELECT seq, body FROM parley_messages WHERE thread_id = $1 AND seq >= $2 AND seq < $3 "
          "ORDER BY seq",
          {segment->id, segment->from, segment->to});
      int64_t expected = segment->from;
      for (const auto& r : rows) {
        int64_t seq = asInt(r.at(0));
        if (seq != expected) break;
        try {
          const auto* body = std::get_if<std::string>(&r.at(1));
          if (!body) throw StoreError("the body is not text");
          json value = parseJson(*body);
          if (body->find(kBlobMarker) != std::string::npos) {
            value = resolveBlobs(c, std::move(value));
          }
          data.messages.push_back(messageFromJson(value));
        } catch (const std::exception& e) {
          throw StoreError("store: thread " + named(threadId) + ": message " + std::to_string(seq) +
                           " (row " + named(segment->id) + "/" + std::to_string(seq) +
                           ") is corrupt: " + e.what());
        }
        ++expected;
      }
      if (expected != segment->to) {
        throw StoreError("store: thread " + named(threadId) + ": message " +
                         std::to_string(expected) + " is missing (database damaged)");
      }
    }
    return data;
  });
}

std::optional<ThreadInfo> SqlStoreEngine::threadInfo(const std::string& threadId) {
  return transact(false, [&](SqlConnection& c) -> std::optional<ThreadInfo> {
    auto row = threadRow(c, threadId, false);
    if (!row || rowDeleted(*row)) return std::nullopt;
    return infoFromRow(*row);
  });
}

std::vector<MessageSearchHit> SqlStoreEngine::searchMessages(const std::string& query,
                                                             const MessageSearchOptions& options) {
  if (options.limit < 1 || options.limit > 1000) {
    throw ValidationError("options.limit", "must be within 1..1000");
  }
  // The query's words, each quoted, so that no character of it is taken as query syntax.
  std::vector<std::string> words;
  std::string word;
  for (size_t i = 0; i <= query.size(); ++i) {
    const unsigned char c = i < query.size() ? static_cast<unsigned char>(query[i]) : ' ';
    if (c >= 0x80 || std::isalnum(c) || c == '_' || c == '\'') {
      word += static_cast<char>(c);
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  if (words.empty()) throw ValidationError("query", "has no words to search for");
  if (words.size() > 32) throw ValidationError("query", "has more than 32 words");
  std::vector<MessageSearchHit> hits;
  auto collect = [&](const std::vector<SqlRow>& rows) {
    for (const auto& r : rows) {
      MessageSearchHit hit;
      hit.threadId = asText(r.at(0));
      hit.position = asInt(r.at(1));
      hit.role = roleFromString(asText(r.at(2)));
      hit.snippet = asText(r.at(3));
      hits.push_back(std::move(hit));
    }
  };
  const auto limit = static_cast<int64_t>(options.limit);
  transaction(false, [&](SqlConnection& c) {
    if (dialect_ == SqlDialect::Sqlite) {
      if (!c.tableExists("parley_message_text")) {
        throw StoreError(
            "store: this database predates message search (schema version 2); "
            "open it once for writing (any parley command that saves) to upgrade it");
      }
      std::string match;
      for (const std::string& w : words) {
        std::string quoted;
        for (char ch : w)
          quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        match += (match.empty() ? "\"" : " \"") + quoted + "\"";
      }
      collect(
          c.query("SELECT k.thread_id, k.seq, json_extract(m.body, $3), "
                  "snippet(parley_message_text, 0, '[', ']', '...', 16) "
                  "FROM parley_message_text "
                  "JOIN parley_message_keys k ON k.id = parley_message_text.rowid "
                  "JOIN parley_messages m ON m.thread_id = k.thread_id AND m.seq = k.seq "
                  "JOIN parley_threads t ON t.id = k.thread_id AND t.deleted = 0 "
                  "WHERE parley_message_text MATCH $1 ORDER BY rank LIMIT $2",
                  {match, limit, std::string("$.role")}));  // a parameter: "$" in the text is one
    } else {
      std::string text;
      for (const std::string& w : words)
        text += (text.empty() ? "" : " ") + w;
      // The index's own expression, so that the planner uses it.
      collect(c.query(
          "SELECT m.thread_id, m.seq, (m.body::jsonb)->>'role', "  // valid JSON: it matched
          "ts_headline('simple', " PARLEY_FOLD(
              "parley_message_text(m.body)") ", q, "
                                             "'StartSel=[, StopSel=], MaxWords=16, MinWords=6, "
                                             "MaxFragments=1, "
                                             "FragmentDelimiter=...') "
                                             "FROM parley_messages m JOIN parley_threads t ON t.id "
                                             "= m.thread_id AND t.deleted = 0, "
                                             "plainto_tsquery('simple', " PARLEY_FOLD(
                                                 "$1") ") q "
                                                       "WHERE " PARLEY_MESSAGE_WORDS " @@ q "
                                                       "ORDER BY ts_rank(" PARLEY_MESSAGE_WORDS
                                                       ", q) DESC, m.thread_id, m.seq LIMIT $2",
          {text, limit}));
    }
  });
  return hits;
}

std::vector<ThreadInfo> SqlStoreEngine::listThreads(const ThreadListOptions& options) {
  const int64_t limit = options.limit == 0 ? std::numeric_limits<int64_t>::max()
                                           : static_cast<int64_t>(options.limit);
  const int64_t offset = static_cast<int64_t>(options.offset);
  return transact(false, [&](SqlConnection& c) {
    std::vector<SqlRow> rows;
    if (options.parentId.empty()) {
      rows = c.query(std::string("SELECT ") + kInfoColumns +
                         " FROM parley_threads WHERE deleted = 0 ORDER BY created_at, id "
                         "LIMIT $1 OFFSET $2",
                     {limit, offset});
    } else {
      rows = c.query(std::string("SELECT ") + kInfoColumns +
                         " FROM parley_threads WHERE deleted = 0 AND parent_id = $1 "
                         "ORDER BY created_at, id LIMIT $2 OFFSET $3",
                     {options.parentId, limit, offset});
    }
    std::vector<ThreadInfo> result;
    result.reserve(rows.size());
    for (const auto& row : rows)
      result.push_back(infoFromRow(row));
    return result;
  });
}

std::vector<ThreadInfo> searchThreadList(ConversationStore& store, const ThreadSearch& search) {
  SqlStoreEngine* engine = store.sqlEngine();
  if (!engine) throw ValidationError("store", "this store cannot search its threads");
  if (search.limit == 0) throw ValidationError("limit", "must be 1 or more");
  if (search.contains.size() > kMaxThreadSearchBytes) {
    throw ValidationError("contains",
                          "is longer than " + std::to_string(kMaxThreadSearchBytes) + " bytes");
  }
  // One text for both engines: LIKE with an escape, lower() on both sides (ASCII in SQLite).
  std::string where = "deleted = 0";
  SqlParams params;
  auto param = [&](SqlValue value) {
    params.push_back(std::move(value));
    return "$" + std::to_string(params.size());
  };
  if (!search.contains.empty()) {
    std::string pattern = "%";
    for (char ch : search.contains) {
      if (ch == '%' || ch == '_' || ch == '\\') pattern += '\\';
      pattern += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    pattern += '%';
    where += " AND (lower(title) LIKE " + param(pattern) + " ESCAPE '\\' OR lower(id) LIKE " +
             param(pattern) + " ESCAPE '\\')";
  }
  const std::string order = search.newestFirst ? "updated_at DESC, id DESC" : "created_at, id";
  const std::string sqlText = std::string("SELECT ") + kInfoColumns +
                              " FROM parley_threads WHERE " + where + " ORDER BY " + order +
                              " LIMIT " + param(static_cast<int64_t>(search.limit)) + " OFFSET " +
                              param(static_cast<int64_t>(search.offset));
  std::vector<ThreadInfo> result;
  engine->transaction(false, [&](SqlConnection& c) {
    result.clear();
    for (const auto& row : c.query(sqlText, params))
      result.push_back(infoFromRow(row));
  });
  return result;
}

bool SqlStoreEngine::setThreadTitle(const std::string& threadId, const std::string& title) {
  if (title.size() > kMaxThreadTitleBytes) {
    throw ValidationError("title",
                          "is longer than " + std::to_string(kMaxThreadTitleBytes) + " bytes");
  }
  if (std::any_of(title.begin(), title.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    throw ValidationError("title", "must be one line without control characters");
  }
  return transact(true, [&](SqlConnection& c) {
    return c.execute("UPDATE parley_threads SET title = $1 WHERE id = $2 AND deleted = 0",
                     {title, threadId}) > 0;
  });
}

bool SqlStoreEngine::deleteThread(const std::string& threadId) {
  return transact(true, [&](SqlConnection& c) {
    auto row = threadRow(c, threadId, true);
    if (!row || rowDeleted(*row)) return false;
    // Its runs, their journal and its events go with it; a worker still holding its lease loses
    // it (the token grows, and a thread row that goes away takes the lease with it).
    c.execute(
        "DELETE FROM parley_tool_calls WHERE run_id IN "
        "(SELECT id FROM parley_runs WHERE thread_id = $1)",
        {threadId});
    c.execute("DELETE FROM parley_runs WHERE thread_id = $1", {threadId});
    c.execute("DELETE FROM parley_events WHERE thread_id = $1", {threadId});
    c.execute(
        "UPDATE parley_threads SET lease_owner = NULL, lease_run_id = NULL, lease_expires_at = 0, "
        "lease_token = lease_token + 1 WHERE id = $1",
        {threadId});
    auto children = c.query(
        "SELECT COUNT(*), MAX(fork_position) FROM parley_threads WHERE parent_id = $1", {threadId});
    if (!children.empty() && asInt(children[0].at(0)) > 0) {
      // Forks read the rows below their fork position: keep those, hidden.
      c.execute(
          "UPDATE parley_threads SET deleted = 1, state = NULL, metadata = NULL WHERE id = $1",
          {threadId});
      trimRows(c, threadId, asInt(children[0].at(1)));
      return true;
    }
    trimRows(c, threadId, 0);
    c.execute("DELETE FROM parley_threads WHERE id = $1", {threadId});
    collectAncestors(c, asText(row->at(1)));
    return true;
  });
}

ThreadInfo SqlStoreEngine::forkThread(const std::string& parentId, int64_t position,
                                      const ThreadOptions& options, const json& state) {
  std::string id = options.id.empty() ? generateId("t-") : options.id;
  checkId(id, "id");
  SqlValue metadata = metadataValue(options.metadata);
  checkStateSize(state, position);
  SqlValue stateText = stateValue(state);
  if (position < 0) throw ValidationError("position", "must not be negative");
  int64_t now = nowMs();
  return transact(true, [&](SqlConnection& c) {
    // Locking the parent keeps a concurrent delete from trimming the rows being shared.
    auto parent = threadRow(c, parentId, true);
    if (!parent || rowDeleted(*parent)) throw notFound(parentId);
    int64_t parentCount = asInt(parent->at(3));
    if (position > parentCount) {
      throw ValidationError("position", std::to_string(position) + " is past the end of thread " +
                                            named(parentId) + " (" + std::to_string(parentCount) +
                                            " messages)");
    }
    if (!c.query("SELECT 1 FROM parley_threads WHERE id = $1", {id}).empty()) {
      throw StoreError("store: a thread " + named(id) + " already exists");
    }
    SqlValue forkState = stateText;
    if (state.is_null() && position == parentCount) forkState = parent->at(9);
    c.execute(
        "INSERT INTO parley_threads (id, parent_id, fork_position, message_count, version, "
        "created_at, updated_at, title, metadata, state) "
        "VALUES ($1, $2, $3, $3, 1, $4, $4, $5, $6, $7)",
        {id, parentId, position, now, options.title, metadata, forkState});
    ThreadInfo info;
    info.id = id;
    info.parentId = parentId;
    info.forkPosition = position;
    info.messageCount = position;
    info.version = 1;
    info.createdAt = info.updatedAt = fromMs(now);
    info.title = options.title;
    info.metadata = options.metadata;
    return info;
  });
}

}  // namespace parley::detail
