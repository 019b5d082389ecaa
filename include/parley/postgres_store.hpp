// The PostgreSQL store, in its own library: link parley::postgres
// (find_package(parley COMPONENTS postgres)) to use it, so that programs that don't need it
// link without libpq.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/store.hpp"

namespace parley {

struct PostgresStoreOptions {
  size_t maxConnections = 4;  // per store object, opened on demand
  int retries = 10;           // whole-transaction retries on serialization failure / deadlock
  std::chrono::milliseconds connectTimeout{10'000};
  // Read only: no schema is created or migrated (a role without CREATE may list and export), and
  // every writing call throws StoreError.
  bool readOnly = false;
};

// The shared store over libpq: the same schema as the SQLite store; many processes may append
// to many threads at once. Writers of one thread are serialised by a row lock and checked
// against the expected version: one wins, the other gets StoreConflict. `conninfo` is anything
// libpq takes ("host=/tmp/x dbname=app" or "postgresql://user@host/app"); tables are created in
// the first schema of the search_path. A wrong password or an unreachable server is a StoreError
// naming libpq's reason (the password itself is never in the message). One exception to "a call
// that throws changed nothing": if the connection breaks during COMMIT, the outcome is unknown;
// the thread's version tells (a committed turn bumped it), and retrying with the old expected
// version is safe: it either commits once or raises StoreConflict.
std::unique_ptr<ConversationStore> openPostgresStore(const std::string& conninfo,
                                                     const PostgresStoreOptions& options = {});

// Makes openStore() open "postgresql://..." and "postgres://..." URLs with openPostgresStore (the
// URL is given to libpq as is; OpenStoreOptions::readOnly becomes PostgresStoreOptions::readOnly).
// Call it once, before openStore(); calling it again is harmless.
void registerPostgresStore();

}  // namespace parley
