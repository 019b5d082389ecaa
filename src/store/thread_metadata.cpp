#include "store/thread_metadata.hpp"

#include "parley/errors.hpp"
#include "store/sql_store.hpp"

namespace parley::detail {

bool setThreadMetadata(ConversationStore& store, const std::string& threadId,
                       const nlohmann::json& metadata) {
  SqlStoreEngine* engine = store.sqlEngine();
  if (!engine) throw ValidationError("store", "this store cannot change a thread's metadata");
  if (!metadata.is_null() && !metadata.is_object()) {
    throw ValidationError("metadata", "must be a JSON object or null");
  }
  const SqlValue value = metadata.is_null() ? SqlValue{} : SqlValue{dumpJson(metadata, "metadata")};
  bool changed = false;
  engine->transaction(true, [&](SqlConnection& c) {
    changed = c.execute("UPDATE parley_threads SET metadata = $1 WHERE id = $2 AND deleted = 0",
                        {value, threadId}) > 0;
  });
  return changed;
}

}  // namespace parley::detail
