#include "store/item_store.hpp"

#include <algorithm>
#include <set>

#include "parley/errors.hpp"
#include "store/sql_store.hpp"

namespace parley::detail {

using json = nlohmann::json;

namespace {

// Rows a search or a namespace listing reads at most (the filters run on the values here).
constexpr int64_t kMaxScan = 10'000;

// Made on first use by each store object (IF NOT EXISTS: any number of processes may race).
const char* kCreate =
    "CREATE TABLE IF NOT EXISTS parley_store_items ("
    " namespace TEXT NOT NULL,"  // the labels joined by '.' (a label holds no '.')
    " item_key TEXT NOT NULL,"
    " value TEXT NOT NULL,"         // JSON object
    " created_at BIGINT NOT NULL,"  // milliseconds since the Unix epoch
    " updated_at BIGINT NOT NULL,"
    " ttl_ms BIGINT,"      // NULL: kept until deleted
    " expires_at BIGINT,"  // NULL: never
    " PRIMARY KEY (namespace, item_key))";

std::string joined(const std::vector<std::string>& ns) {
  std::string out;
  for (size_t i = 0; i < ns.size(); ++i)
    out += (i ? "." : "") + ns[i];
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t at = 0;
  for (;;) {
    const size_t dot = text.find('.', at);
    out.push_back(text.substr(at, dot - at));
    if (dot == std::string::npos) return out;
    at = dot + 1;
  }
}

StoredItem itemFromRow(const SqlRow& row) {
  StoredItem item;
  item.ns = split(asText(row.at(0)));
  item.key = asText(row.at(1));
  item.value = parseColumn(row.at(2), "store item value");
  item.createdAt = fromMs(asInt(row.at(3)));
  item.updatedAt = fromMs(asInt(row.at(4)));
  return item;
}

bool matches(const json& value, const json& filter) {
  if (!filter.is_object()) return true;
  for (const auto& [key, wanted] : filter.items())
    if (!value.is_object() || !value.contains(key) || value[key] != wanted) return false;
  return true;
}

void checkKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxItemKeyBytes) {
    throw ValidationError("key", "must be 1 to " + std::to_string(kMaxItemKeyBytes) + " bytes");
  }
}

}  // namespace

ItemStore::ItemStore(ConversationStore& store) {
  engine_ = store.sqlEngine();
  if (!engine_) throw ValidationError("store", "this store cannot keep items");
  engine_->transaction(true, [](SqlConnection& c) { c.exec(kCreate); });
}

void ItemStore::checkNamespace(const std::vector<std::string>& ns, const std::string& field,
                               bool allowEmpty) {
  if (ns.empty() && !allowEmpty) throw ValidationError(field, "must hold one label at least");
  if (ns.size() > kMaxNamespaceDepth) {
    throw ValidationError(field,
                          "is deeper than " + std::to_string(kMaxNamespaceDepth) + " labels");
  }
  for (const auto& label : ns) {
    if (label.empty() || label.size() > kMaxLabelBytes) {
      throw ValidationError(field,
                            "labels must be 1 to " + std::to_string(kMaxLabelBytes) + " bytes");
    }
    if (label.find('.') != std::string::npos) {
      throw ValidationError(field, "a label may not hold '.'");
    }
  }
}

void ItemStore::put(const std::vector<std::string>& ns, const std::string& key, const json& value,
                    std::optional<double> ttlMinutes) {
  checkNamespace(ns, "namespace", false);
  checkKey(key);
  if (!value.is_object()) throw ValidationError("value", "must be a JSON object");
  const std::string text = dumpJson(value, "value");
  if (text.size() > kMaxItemValueBytes) {
    throw ValidationError("value", "is over " + std::to_string(kMaxItemValueBytes) + " bytes");
  }
  int64_t ttlMs = 0;  // 0: none
  if (ttlMinutes) {
    if (!(*ttlMinutes > 0) || *ttlMinutes > kMaxItemTtlMinutes) {
      throw ValidationError("ttl", "must be more than 0 and at most " +
                                       std::to_string(kMaxItemTtlMinutes) + " minutes");
    }
    ttlMs = std::max<int64_t>(1, static_cast<int64_t>(*ttlMinutes * 60'000));
  }
  engine_->transaction(true, [&](SqlConnection& c) {
    const int64_t now = c.nowMs();
    c.execute("DELETE FROM parley_store_items WHERE expires_at IS NOT NULL AND expires_at <= $1",
              {now});
    // NULLIF: no time to live is stored as NULL (a plain integer parameter each way).
    c.execute(
        "INSERT INTO parley_store_items (namespace, item_key, value, created_at, updated_at, "
        "ttl_ms, expires_at) VALUES ($1, $2, $3, $4, $4, NULLIF($5, CAST(0 AS BIGINT)), NULLIF($6, "
        "CAST(0 AS BIGINT))) "
        "ON CONFLICT (namespace, item_key) DO UPDATE SET value = excluded.value, "
        "updated_at = excluded.updated_at, ttl_ms = excluded.ttl_ms, "
        "expires_at = excluded.expires_at",
        {joined(ns), key, text, now, ttlMs, ttlMs > 0 ? now + ttlMs : int64_t{0}});
  });
}

std::optional<StoredItem> ItemStore::get(const std::vector<std::string>& ns, const std::string& key,
                                         bool refreshTtl) {
  checkNamespace(ns, "namespace", false);
  checkKey(key);
  std::optional<StoredItem> out;
  engine_->transaction(refreshTtl, [&](SqlConnection& c) {
    out.reset();
    const int64_t now = c.nowMs();
    auto rows = c.query(
        "SELECT namespace, item_key, value, created_at, updated_at FROM parley_store_items "
        "WHERE namespace = $1 AND item_key = $2 AND (expires_at IS NULL OR expires_at > $3)",
        {joined(ns), key, now});
    if (rows.empty()) return;
    out = itemFromRow(rows.front());
    if (refreshTtl) {
      c.execute(
          "UPDATE parley_store_items SET expires_at = $1 + ttl_ms WHERE namespace = $2 AND "
          "item_key = $3 AND ttl_ms IS NOT NULL",
          {now, joined(ns), key});
    }
  });
  return out;
}

bool ItemStore::remove(const std::vector<std::string>& ns, const std::string& key) {
  checkNamespace(ns, "namespace", false);
  checkKey(key);
  bool removed = false;
  engine_->transaction(true, [&](SqlConnection& c) {
    removed = c.execute("DELETE FROM parley_store_items WHERE namespace = $1 AND item_key = $2",
                        {joined(ns), key}) > 0;
  });
  return removed;
}

bool ItemStore::replaceIf(const std::vector<std::string>& ns, const std::string& key,
                          const json& expected, const json& value) {
  checkNamespace(ns, "namespace", false);
  checkKey(key);
  if (!value.is_object()) throw ValidationError("value", "must be a JSON object");
  const std::string text = dumpJson(value, "value");
  if (text.size() > kMaxItemValueBytes) {
    throw ValidationError("value", "is over " + std::to_string(kMaxItemValueBytes) + " bytes");
  }
  bool wrote = false;
  engine_->transaction(true, [&](SqlConnection& c) {
    const int64_t now = c.nowMs();
    // The stored text is dumpJson's, so equal values compare equal as text.
    wrote = expected.is_null()
                ? c.execute(
                      "INSERT INTO parley_store_items (namespace, item_key, value, "
                      "created_at, updated_at) VALUES ($1, $2, $3, $4, $4) "
                      "ON CONFLICT (namespace, item_key) DO NOTHING",
                      {joined(ns), key, text, now}) > 0
                : c.execute(
                      "UPDATE parley_store_items SET value = $1, updated_at = $2 "
                      "WHERE namespace = $3 AND item_key = $4 AND value = $5",
                      {text, now, joined(ns), key, dumpJson(expected, "expected")}) > 0;
  });
  return wrote;
}

std::vector<StoredItem> ItemStore::search(const std::vector<std::string>& prefix,
                                          const json& filter, size_t limit, size_t offset,
                                          bool refreshTtl) {
  checkNamespace(prefix, "namespace_prefix", true);
  std::vector<StoredItem> out;
  engine_->transaction(refreshTtl, [&](SqlConnection& c) {
    out.clear();
    const int64_t now = c.nowMs();
    const std::string p = joined(prefix);
    // Itself or below it: the namespace, or one that starts with it and a '.'.
    const std::string columns =
        "SELECT namespace, item_key, value, created_at, updated_at FROM parley_store_items "
        "WHERE (expires_at IS NULL OR expires_at > $1) ";
    auto rows = p.empty()
                    ? c.query(columns + "ORDER BY namespace, item_key LIMIT $2", {now, kMaxScan})
                    : c.query(columns +
                                  "AND (namespace = $2 OR substr(namespace, 1, $3) = $4) "
                                  "ORDER BY namespace, item_key LIMIT $5",
                              {now, p, static_cast<int64_t>(p.size() + 1), p + ".", kMaxScan});
    size_t skipped = 0;
    for (const auto& row : rows) {
      StoredItem item = itemFromRow(row);
      if (!matches(item.value, filter)) continue;
      if (skipped++ < offset) continue;
      if (out.size() >= limit) break;
      out.push_back(std::move(item));
    }
    if (refreshTtl) {
      for (const auto& item : out) {
        c.execute(
            "UPDATE parley_store_items SET expires_at = $1 + ttl_ms WHERE namespace = $2 AND "
            "item_key = $3 AND ttl_ms IS NOT NULL",
            {now, joined(item.ns), item.key});
      }
    }
  });
  return out;
}

std::vector<std::vector<std::string>> ItemStore::namespaces(const std::vector<std::string>& prefix,
                                                            const std::vector<std::string>& suffix,
                                                            size_t maxDepth, size_t limit,
                                                            size_t offset) {
  checkNamespace(prefix, "prefix", true);
  checkNamespace(suffix, "suffix", true);
  std::set<std::vector<std::string>> found;
  engine_->transaction(false, [&](SqlConnection& c) {
    found.clear();
    auto rows = c.query(
        "SELECT DISTINCT namespace FROM parley_store_items WHERE expires_at IS NULL OR "
        "expires_at > $1 ORDER BY namespace LIMIT $2",
        {c.nowMs(), kMaxScan});
    for (const auto& row : rows) {
      auto ns = split(asText(row.at(0)));
      if (ns.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), ns.begin())) {
        continue;
      }
      if (ns.size() < suffix.size() || !std::equal(suffix.rbegin(), suffix.rend(), ns.rbegin())) {
        continue;
      }
      if (maxDepth > 0 && ns.size() > maxDepth) ns.resize(maxDepth);
      found.insert(std::move(ns));
    }
  });
  std::vector<std::vector<std::string>> out;
  size_t skipped = 0;
  for (const auto& ns : found) {
    if (skipped++ < offset) continue;
    if (out.size() >= limit) break;
    out.push_back(ns);
  }
  return out;
}

}  // namespace parley::detail
