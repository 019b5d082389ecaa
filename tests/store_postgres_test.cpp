// PostgresStore: the conformance suite against a throwaway cluster, plus connection failures.
#include <libpq-fe.h>

#include "pg_test_cluster.hpp"
#include "run_store_conformance.hpp"
#include "store_conformance.hpp"

namespace parley::testing {
namespace {

struct PostgresBackend {
  std::string conninfo = PgTestCluster::shared().freshSchemaConninfo();

  std::unique_ptr<ConversationStore> open() { return std::make_unique<PostgresStore>(conninfo); }
  std::vector<std::string> writerArgs() { return {"postgres", conninfo}; }

  int64_t count(const std::string& sql) {
    int64_t result = -1;
    run(sql, [&](PGresult* r) { result = std::stoll(PQgetvalue(r, 0, 0)); });
    return result;
  }
  void exec(const std::string& sql) {
    run(sql, [](PGresult*) {});
  }

 private:
  template <class Fn>
  void run(const std::string& sql, Fn&& fn) {
    PGconn* conn = PQconnectdb(conninfo.c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
      std::string reason = PQerrorMessage(conn);
      PQfinish(conn);
      throw std::runtime_error(reason);
    }
    PGresult* result = PQexec(conn, sql.c_str());
    auto status = PQresultStatus(result);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      std::string reason = PQresultErrorMessage(result);
      PQclear(result);
      PQfinish(conn);
      throw std::runtime_error(sql + ": " + reason);
    }
    fn(result);
    PQclear(result);
    PQfinish(conn);
  }
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Postgres, StoreConformance, ::testing::Types<PostgresBackend>);
INSTANTIATE_TYPED_TEST_SUITE_P(Postgres, RunStoreConformance, ::testing::Types<PostgresBackend>);

namespace {

TEST(PostgresStore, WrongPasswordIsAClearError) {
  const std::string conninfo = PgTestCluster::shared().conninfo("not-the-password");
  std::string error = errorOf([&] { PostgresStore store(conninfo); });
  EXPECT_NE(error.find("password authentication failed"), std::string::npos) << error;
  EXPECT_EQ(error.find("not-the-password"), std::string::npos) << error;
}

TEST(PostgresStore, UnreachableServerIsAClearError) {
  std::string error = errorOf([&] { PostgresStore store("host=/nonexistent-parley-dir port=1"); });
  EXPECT_NE(error.find("cannot connect"), std::string::npos) << error;
}

TEST(PostgresStore, ManyStoresCreateTheSchemaOnceAtTheSameTime) {
  const std::string conninfo = PgTestCluster::shared().freshSchemaConninfo();
  std::vector<std::thread> openers;
  std::atomic<int> failures{0};
  for (int i = 0; i < 6; ++i) {
    openers.emplace_back([&] {
      try {
        PostgresStore store(conninfo);
        store.createThread();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : openers)
    t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(PostgresStore(conninfo).listThreads().size(), 6u);
}

TEST(OpenStore, PostgresUrlsOpenPostgresStores) {
  const PgTestCluster& cluster = PgTestCluster::shared();
  for (const char* scheme : {"postgresql://", "postgres://"}) {
    const std::string url = std::string(scheme) + "postgres:" + PgTestCluster::kPassword +
                            "@/postgres?host=" + cluster.socketDir() +
                            "&port=" + std::to_string(cluster.port());
    auto store = openStore(url);
    EXPECT_NE(dynamic_cast<PostgresStore*>(store.get()), nullptr);
    store->listThreads();
  }
}

}  // namespace
}  // namespace parley::testing
