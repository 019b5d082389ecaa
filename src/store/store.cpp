#include "parley/store.hpp"

#include <map>
#include <mutex>
#include <utility>

#include "parley/errors.hpp"
#include "store/sql_store.hpp"
#include "store/sqlite_store.hpp"

namespace parley {

namespace {

bool startsWith(const std::string& text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

nlohmann::json toJson(const ThreadInfo& info) {
  return {{"id", info.id},
          {"parent_id",
           info.parentId.empty() ? nlohmann::json(nullptr) : nlohmann::json(info.parentId)},
          {"fork_position", info.forkPosition},
          {"message_count", info.messageCount},
          {"version", info.version},
          {"title", info.title},
          {"metadata", info.metadata},
          {"created_at", isoTime(info.createdAt)},
          {"updated_at", isoTime(info.updatedAt)}};
}

bool ConversationStore::setThreadTitle(const std::string&, const std::string&) {
  throw ValidationError("setThreadTitle", "this store cannot rename threads");
}

std::vector<MessageSearchHit> ConversationStore::searchMessages(const std::string&,
                                                                const MessageSearchOptions&) {
  throw ValidationError("searchMessages", "this store cannot search its messages");
}

namespace {

struct StoreSchemes {
  std::mutex mutex;
  std::map<std::string, StoreOpener> openers;
};

StoreSchemes& storeSchemes() {
  static StoreSchemes schemes;
  return schemes;
}

}  // namespace

void registerStoreScheme(const std::string& scheme, StoreOpener opener) {
  if (scheme.empty()) throw ValidationError("scheme", "must not be empty");
  if (!opener) throw ValidationError("opener", "must not be empty");
  std::lock_guard lock(storeSchemes().mutex);
  storeSchemes().openers[scheme] = std::move(opener);
}

std::shared_ptr<ConversationStore> openStore(const std::string& url,
                                             const OpenStoreOptions& options) {
  if (url.empty()) throw ValidationError("url", "must not be empty");
  std::string path = url;
  if (startsWith(url, "sqlite://")) {
    path = url.substr(9);
  } else if (startsWith(url, "sqlite:")) {
    path = url.substr(7);
  } else if (auto end = url.find("://"); end != std::string::npos) {
    const std::string scheme = url.substr(0, end);
    StoreOpener opener;
    {
      std::lock_guard lock(storeSchemes().mutex);
      if (auto it = storeSchemes().openers.find(scheme); it != storeSchemes().openers.end()) {
        opener = it->second;
      }
    }
    if (opener) return opener(url, options);
    if (scheme == "postgresql" || scheme == "postgres") {
      throw ValidationError("url", "'" + scheme +
                                       "://' needs the PostgreSQL store: link parley::postgres "
                                       "and call parley::registerPostgresStore() first");
    }
    throw ValidationError("url", "unsupported store '" + scheme +
                                     "://': use a file path, sqlite://PATH or postgresql://...");
  }
  if (path.empty()) throw ValidationError("url", "names no file");
  return std::make_unique<SqliteStore>(
      path, SqliteStoreOptions{.create = !options.readOnly,
                               .readOnly = options.readOnly,
                               .allowForeignTables = options.allowForeignTables});
}

}  // namespace parley
