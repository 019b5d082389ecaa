// Namespaced items (the LangGraph API's store, docs/service.md): JSON values by a namespace (a
// path of labels) and a key, with an optional time to live, in the database of the threads
// (SQLite or PostgreSQL; a table of their own, made on first use). Internal: the
// service's. Every call is one transaction; expired items are never answered and are removed by
// the writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/store.hpp"

namespace parley::detail {

struct StoredItem {
  std::vector<std::string> ns;
  std::string key;
  nlohmann::json value;
  std::chrono::system_clock::time_point createdAt;
  std::chrono::system_clock::time_point updatedAt;
};

// Caps (each past-the-cap input is a ValidationError naming it).
inline constexpr size_t kMaxItemValueBytes = 256 << 10;
inline constexpr size_t kMaxNamespaceDepth = 16;
inline constexpr size_t kMaxLabelBytes = 128;
inline constexpr size_t kMaxItemKeyBytes = 256;
inline constexpr int64_t kMaxItemTtlMinutes = 525'600;  // a year

class ItemStore {
 public:
  // ValidationError if `store` is not built on parley's SQL engine.
  explicit ItemStore(ConversationStore& store);

  // Creates or replaces; `ttl` in minutes (nullopt: kept until deleted).
  void put(const std::vector<std::string>& ns, const std::string& key, const nlohmann::json& value,
           std::optional<double> ttlMinutes);
  // nullopt if there is none (or it expired); `refreshTtl` restarts its time to live.
  std::optional<StoredItem> get(const std::vector<std::string>& ns, const std::string& key,
                                bool refreshTtl);
  bool remove(const std::vector<std::string>& ns, const std::string& key);
  // Compare and set: writes `value` only if the item's value is still `expected` (a null
  // `expected`: only if there is no item); true if it wrote. Of processes racing from the same
  // `expected`, exactly one wins (one conditional statement). For items without a time to live.
  bool replaceIf(const std::vector<std::string>& ns, const std::string& key,
                 const nlohmann::json& expected, const nlohmann::json& value);
  // Items under `prefix` (itself and below) whose value holds every key of `filter` with an
  // equal value, by namespace and key.
  std::vector<StoredItem> search(const std::vector<std::string>& prefix,
                                 const nlohmann::json& filter, size_t limit, size_t offset,
                                 bool refreshTtl);
  // The namespaces there are, cut at maxDepth labels (0: whole), matching prefix and suffix.
  std::vector<std::vector<std::string>> namespaces(const std::vector<std::string>& prefix,
                                                   const std::vector<std::string>& suffix,
                                                   size_t maxDepth, size_t limit, size_t offset);

  // ValidationError naming `field` for a namespace past the caps or with a label holding '.'.
  static void checkNamespace(const std::vector<std::string>& ns, const std::string& field,
                             bool allowEmpty);

 private:
  SqlStoreEngine* engine_;
};

}  // namespace parley::detail
