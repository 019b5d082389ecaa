#include "store/assistant_store.hpp"

#include "parley/errors.hpp"
#include "store/sql_store.hpp"

namespace parley::detail {

using json = nlohmann::json;

namespace {

const char* kVersionColumns =
    "SELECT v.assistant_id, v.version, v.graph_id, v.name, v.description, v.config, v.context, "
    "v.metadata, v.created_at";

AssistantVersion versionFromRow(const SqlRow& row) {
  AssistantVersion out;
  out.id = asText(row.at(0));
  out.version = asInt(row.at(1));
  out.graphId = asText(row.at(2));
  out.name = asText(row.at(3));
  if (!isNull(row.at(4))) out.description = asText(row.at(4));
  out.config = parseColumn(row.at(5), "assistant config");
  out.context = parseColumn(row.at(6), "assistant context");
  out.metadata = parseColumn(row.at(7), "assistant metadata");
  out.createdAt = fromMs(asInt(row.at(8)));
  return out;
}

// The assistant's current version with the assistant's times: row = version columns, then the
// head's created_at and updated_at.
StoredAssistant assistantFromRow(const SqlRow& row) {
  StoredAssistant out;
  out.current = versionFromRow(row);
  out.createdAt = fromMs(asInt(row.at(9)));
  out.updatedAt = fromMs(asInt(row.at(10)));
  return out;
}

std::optional<StoredAssistant> readAssistant(SqlConnection& c, const std::string& id) {
  auto rows = c.query(std::string(kVersionColumns) +
                          ", a.created_at, a.updated_at FROM parley_assistants a "
                          "JOIN parley_assistant_versions v ON v.assistant_id = a.assistant_id "
                          "AND v.version = a.latest_version WHERE a.assistant_id = $1",
                      {id});
  if (rows.empty()) return std::nullopt;
  return assistantFromRow(rows.front());
}

SqlValue descriptionValue(const std::optional<std::string>& description) {
  return description ? SqlValue(*description) : SqlValue();
}

void insertVersion(SqlConnection& c, const AssistantVersion& v, int64_t now) {
  c.execute(
      "INSERT INTO parley_assistant_versions (assistant_id, version, graph_id, name, description, "
      "config, context, metadata, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
      {v.id, v.version, v.graphId, v.name, descriptionValue(v.description),
       dumpJson(v.config, "config"), dumpJson(v.context, "context"),
       dumpJson(v.metadata, "metadata"), now});
}

}  // namespace

AssistantStore::AssistantStore(ConversationStore& store, size_t maxVersions)
    : maxVersions_(std::max<size_t>(1, maxVersions)) {
  engine_ = store.sqlEngine();
  if (!engine_) throw ValidationError("store", "this store cannot keep assistants");
}

bool AssistantStore::create(const AssistantVersion& first) {
  bool made = false;
  engine_->transaction(true, [&](SqlConnection& c) {
    made = false;
    const int64_t now = c.nowMs();
    if (c.execute("INSERT INTO parley_assistants (assistant_id, latest_version, created_at, "
                  "updated_at) VALUES ($1, 1, $2, $2) ON CONFLICT (assistant_id) DO NOTHING",
                  {first.id, now}) == 0) {
      return;
    }
    AssistantVersion v = first;
    v.version = 1;
    insertVersion(c, v, now);
    made = true;
  });
  return made;
}

std::optional<StoredAssistant> AssistantStore::get(const std::string& id) {
  std::optional<StoredAssistant> out;
  engine_->transaction(false, [&](SqlConnection& c) { out = readAssistant(c, id); });
  return out;
}

std::optional<AssistantVersion> AssistantStore::version(const std::string& id, int64_t version) {
  std::optional<AssistantVersion> out;
  engine_->transaction(false, [&](SqlConnection& c) {
    out.reset();
    auto rows = c.query(std::string(kVersionColumns) +
                            " FROM parley_assistant_versions v WHERE v.assistant_id = $1 AND "
                            "v.version = $2",
                        {id, version});
    if (!rows.empty()) out = versionFromRow(rows.front());
  });
  return out;
}

std::optional<StoredAssistant> AssistantStore::update(const std::string& id,
                                                      const AssistantChange& change) {
  std::optional<StoredAssistant> out;
  engine_->transaction(true, [&](SqlConnection& c) {
    out.reset();
    // Locks the head: two updates at once make two versions, one after the other.
    auto head = c.query("SELECT latest_version FROM parley_assistants WHERE assistant_id = $1" +
                            std::string(c.forUpdate()),
                        {id});
    if (head.empty()) return;
    auto current = readAssistant(c, id);
    if (!current) return;
    AssistantVersion next = current->current;
    if (change.graphId) next.graphId = *change.graphId;
    if (change.name) next.name = *change.name;
    if (change.description) next.description = *change.description;
    if (change.config) next.config = *change.config;
    if (change.context) next.context = *change.context;
    if (change.metadata && change.metadata->is_object()) {
      for (const auto& [key, value] : change.metadata->items())
        next.metadata[key] = value;
    }
    auto highest =
        c.query("SELECT MAX(version) FROM parley_assistant_versions WHERE assistant_id = $1", {id});
    next.version = asInt(highest.at(0).at(0)) + 1;
    const int64_t now = c.nowMs();
    insertVersion(c, next, now);
    c.execute(
        "UPDATE parley_assistants SET latest_version = $1, updated_at = $2 WHERE assistant_id = $3",
        {next.version, now, id});
    // Past the cap, the oldest versions go (never the current one: it is the newest here).
    auto count =
        c.query("SELECT COUNT(*) FROM parley_assistant_versions WHERE assistant_id = $1", {id});
    const int64_t over = asInt(count.at(0).at(0)) - static_cast<int64_t>(maxVersions_);
    if (over > 0) {
      auto old = c.query(
          "SELECT version FROM parley_assistant_versions WHERE assistant_id = $1 AND version <> "
          "$2 ORDER BY version LIMIT $3",
          {id, next.version, over});
      for (const auto& row : old) {
        c.execute("DELETE FROM parley_assistant_versions WHERE assistant_id = $1 AND version = $2",
                  {id, asInt(row.at(0))});
      }
    }
    out = readAssistant(c, id);
  });
  return out;
}

std::optional<StoredAssistant> AssistantStore::setLatest(const std::string& id, int64_t version) {
  std::optional<StoredAssistant> out;
  engine_->transaction(true, [&](SqlConnection& c) {
    out.reset();
    const int64_t changed = c.execute(
        "UPDATE parley_assistants SET latest_version = $1, updated_at = $2 WHERE assistant_id = $3 "
        "AND EXISTS (SELECT 1 FROM parley_assistant_versions WHERE assistant_id = $3 AND "
        "version = $1)",
        {version, c.nowMs(), id});
    if (changed > 0) out = readAssistant(c, id);
  });
  return out;
}

bool AssistantStore::remove(const std::string& id) {
  bool removed = false;
  engine_->transaction(true, [&](SqlConnection& c) {
    c.execute("DELETE FROM parley_assistant_versions WHERE assistant_id = $1", {id});
    removed = c.execute("DELETE FROM parley_assistants WHERE assistant_id = $1", {id}) > 0;
  });
  return removed;
}

std::vector<StoredAssistant> AssistantStore::list(size_t maxRows) {
  std::vector<StoredAssistant> out;
  engine_->transaction(false, [&](SqlConnection& c) {
    out.clear();
    auto rows = c.query(std::string(kVersionColumns) +
                            ", a.created_at, a.updated_at FROM parley_assistants a "
                            "JOIN parley_assistant_versions v ON v.assistant_id = a.assistant_id "
                            "AND v.version = a.latest_version ORDER BY a.assistant_id LIMIT $1",
                        {static_cast<int64_t>(maxRows)});
    for (const auto& row : rows)
      out.push_back(assistantFromRow(row));
  });
  return out;
}

std::vector<AssistantVersion> AssistantStore::versions(const std::string& id) {
  std::vector<AssistantVersion> out;
  engine_->transaction(false, [&](SqlConnection& c) {
    out.clear();
    auto rows = c.query(std::string(kVersionColumns) +
                            " FROM parley_assistant_versions v WHERE v.assistant_id = $1 "
                            "ORDER BY v.version DESC",
                        {id});
    for (const auto& row : rows)
      out.push_back(versionFromRow(row));
  });
  return out;
}

}  // namespace parley::detail
