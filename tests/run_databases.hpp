// The databases of the tests that run `parley worker` processes (cli_worker_test, chaos_test):
// each a scratch folder (for tools files, counters) and a database that processes name by URL
// (`--db`) and the test opens as a store. SqliteRunDb is a file in the folder; PostgresRunDb a
// database of its own on the shared throwaway cluster (pg_test_cluster.hpp), dropped at the end.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "parley/postgres_store.hpp"
#include "parley/store.hpp"
#include "pg_test_cluster.hpp"
#include "store/postgres_store.hpp"
#include "store/sqlite_store.hpp"

namespace parley::testing {

inline std::filesystem::path runScratchDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "parley-runs-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

struct SqliteRunDb {
  std::filesystem::path dir = runScratchDir();
  ~SqliteRunDb() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  std::string url() const { return (dir / "runs.db").string(); }
  std::shared_ptr<ConversationStore> open() const { return std::make_shared<SqliteStore>(url()); }
};

struct PostgresRunDb {
  std::filesystem::path dir = runScratchDir();
  std::string database = "runs_" + std::to_string(::getpid()) + "_" + std::to_string(next()++);
  PostgresRunDb() {
    PgTestCluster& cluster = PgTestCluster::shared();
    cluster.execSql("DROP DATABASE IF EXISTS " + database);
    cluster.execSql("CREATE DATABASE " + database);
  }
  ~PostgresRunDb() {
    try {
      PgTestCluster::shared().execSql("DROP DATABASE IF EXISTS " + database + " WITH (FORCE)");
    } catch (const std::exception&) {
      // the cluster goes away with the test run anyway
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  // As a user would write it: a postgresql:// URL.
  std::string url() const {
    PgTestCluster& cluster = PgTestCluster::shared();
    return std::string("postgresql://postgres:") + PgTestCluster::kPassword + "@/" + database +
           "?host=" + cluster.socketDir() + "&port=" + std::to_string(cluster.port());
  }
  std::shared_ptr<ConversationStore> open() const { return std::make_shared<PostgresStore>(url()); }
  static int& next() {
    static int n = 0;
    return n;
  }
};

}  // namespace parley::testing
