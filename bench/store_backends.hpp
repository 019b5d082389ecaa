// The stores the store benchmarks run on: SQLite with synchronous FULL and NORMAL in a temporary
// folder, and PostgreSQL on a throwaway cluster (fsync on) started on first use;
// PARLEY_BENCH_NO_PG=1 leaves PostgreSQL out.
#pragma once

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parley/postgres_store.hpp"
#include "parley/store.hpp"
#include "pg_test_cluster.hpp"
#include "store/postgres_store.hpp"
#include "store/sqlite_store.hpp"

namespace parley::bench {

// A kind of store: `create` makes a new, empty database and returns what `open` takes (a file
// path or a conninfo); several store objects may open the same database.
struct Backend {
  std::string name;
  std::function<std::string()> create;
  std::function<std::unique_ptr<ConversationStore>(const std::string&)> open;
  std::unique_ptr<ConversationStore> openFresh() const { return open(create()); }
};

inline std::string benchDir() {
  static std::string dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "parley-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data())) std::abort();
    return pattern;
  }();
  return dir;
}

inline parley::testing::PgTestCluster* cluster() {
  static std::unique_ptr<parley::testing::PgTestCluster> instance =
      parley::testing::PgTestCluster::start({.fsync = true});
  return instance.get();
}

inline std::vector<Backend> backends() {
  static int counter = 0;
  auto file = [](const char* prefix) {
    return [prefix] { return benchDir() + "/" + prefix + std::to_string(counter++) + ".db"; };
  };
  std::vector<Backend> list;
  list.push_back({"sqlite_full", file("full"),
                  [](const std::string& path) { return std::make_unique<SqliteStore>(path); }});
  list.push_back({"sqlite_normal", file("normal"), [](const std::string& path) {
                    SqliteStoreOptions options;
                    options.synchronous = SqliteStoreOptions::Synchronous::Normal;
                    return std::make_unique<SqliteStore>(path, options);
                  }});
  if (!std::getenv("PARLEY_BENCH_NO_PG")) {
    list.push_back(
        {"postgres", [] { return cluster()->freshSchemaConninfo(); },
         [](const std::string& conninfo) { return std::make_unique<PostgresStore>(conninfo); }});
  }
  return list;
}

// A benchmark program's main: registers, runs, then removes the temporary folder.
inline int runBenchmarks(int argc, char** argv, void (*registerAll)()) {
  benchmark::Initialize(&argc, argv);
  registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(benchDir());
  return 0;
}

}  // namespace parley::bench
