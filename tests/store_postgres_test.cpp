// PostgresStore: the conformance suite against a throwaway cluster, plus connection failures.
#include <libpq-fe.h>

#include <functional>
#include <future>

#include "parley/postgres_store.hpp"
#include "pg_test_cluster.hpp"
#include "run_store_conformance.hpp"
#include "store/postgres_store.hpp"
#include "store/sql_store.hpp"
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

// A pooled connection the server ends (a restart, an administrator) fails the call that meets
// it, naming the lost connection; the pool drops it and the next call connects again.
TEST(PostgresStore, ALostConnectionFailsOneCallAndThePoolConnectsAgain) {
  PostgresStoreOptions options;
  options.maxConnections = 1;
  PostgresStore store(
      PgTestCluster::shared().freshSchemaConninfo() + " application_name=parley-lost-connection",
      options);
  const std::string id = store.createThread().id;
  auto terminate = [] {
    PgTestCluster::shared().execSql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'parley-lost-connection'");
  };
  terminate();
  std::string error = errorOf([&] { store.threadInfo(id); });
  EXPECT_NE(error.find("connection was lost"), std::string::npos) << error;
  ASSERT_TRUE(store.threadInfo(id));
  // The same in a write transaction with deferred writes waiting for the commit.
  terminate();
  error = errorOf([&] { store.setThreadTitle(id, "lost"); });
  EXPECT_NE(error.find("connection was lost"), std::string::npos) << error;
  EXPECT_TRUE(store.setThreadTitle(id, "kept"));
  EXPECT_EQ(store.threadInfo(id)->title, "kept");
}

// Writes whose results no one needs go to the server with the next statement or the commit
// (one round trip); the first that fails fails its whole transaction, which writes nothing, and
// the connection serves the next transaction.
TEST(PostgresStore, ADeferredWriteThatFailsFailsItsTransaction) {
  PostgresStoreOptions options;
  options.maxConnections = 1;  // every transaction on the same connection
  PostgresStore store(PgTestCluster::shared().freshSchemaConninfo(), options);
  const std::string id = store.createThread().id;
  detail::SqlStoreEngine& engine = *store.sqlEngine();
  auto setTitle = [&](detail::SqlConnection& c, const std::string& title) {
    c.executeLater("UPDATE parley_threads SET title = $1 WHERE id = $2", {title, id});
  };
  auto duplicate = [&](detail::SqlConnection& c) {
    c.executeLater(
        "INSERT INTO parley_threads (id, fork_position, message_count, version, "
        "created_at, updated_at, title) VALUES ($1, 0, 0, 1, 0, 0, '')",
        {id});
  };
  std::string error = errorOf([&] {
    engine.transaction(true, [&](detail::SqlConnection& c) {
      setTitle(c, "first");
      duplicate(c);
      setTitle(c, "second");
      c.query("SELECT 1", {});  // sends them
      ADD_FAILURE() << "the failed write was not reported by the next statement";
    });
  });
  EXPECT_NE(error.find("duplicate key"), std::string::npos) << error;
  EXPECT_EQ(store.threadInfo(id)->title, "");
  // Nothing after the failing write: the commit reports it.
  error = errorOf([&] {
    engine.transaction(true, [&](detail::SqlConnection& c) {
      setTitle(c, "third");
      duplicate(c);
    });
  });
  EXPECT_NE(error.find("duplicate key"), std::string::npos) << error;
  EXPECT_EQ(store.threadInfo(id)->title, "");
  engine.transaction(true, [&](detail::SqlConnection& c) { setTitle(c, "kept"); });
  EXPECT_EQ(store.threadInfo(id)->title, "kept");
}

// With every poll an hour long, only a wake-up can end these waits: NOTIFY from another store
// object (another connection), or the listener (re)connecting, which makes every waiter re-read.
RunStoreOptions wakeOnlyByNotify() {
  RunStoreOptions options;
  options.pollMin = options.pollMax = options.listenPoll = std::chrono::hours(1);
  return options;
}

// Two run stores on one fresh database: `reader` (with the given options) waits, `writer`
// holds the lease of a run on thread "t" and writes.
struct ReaderAndWriter {
  explicit ReaderAndWriter(RunStoreOptions readerOptions)
      : conninfo(PgTestCluster::shared().freshSchemaConninfo()),
        reader(std::make_shared<PostgresStore>(conninfo), std::move(readerOptions)),
        writer(std::make_shared<PostgresStore>(conninfo)) {
    writer.submit("t", "hi");
    lease = writer.claim("w", std::chrono::minutes(5)).value().lease;
  }
  // Appends `event` while the reader waits for events after the last one (`between` runs after
  // the waiter started, before the append); returns what the reader got.
  std::vector<StoredEvent> appendWhileWaiting(const EventInput& event,
                                              const std::function<void()>& between = {}) {
    const int64_t last = writer.readEvents("t", 0).back().seq;
    std::vector<StoredEvent> got;
    std::thread waiter([&] { got = reader.waitForEvents("t", last, std::chrono::seconds(60)); });
    if (between) between();
    writer.appendEvents(lease, std::span<const EventInput>(&event, 1));
    waiter.join();
    for (const auto& e : got)
      EXPECT_EQ(e.seq, last + 1);
    return got;
  }

  std::string conninfo;
  RunStore reader;
  RunStore writer;
  Lease lease;
};

TEST(PostgresRunStore, NotifyWakesWaitersOfAnotherConnection) {
  ReaderAndWriter stores(wakeOnlyByNotify());
  // The first wait may end by the listener's connecting, which wakes every waiter; once it
  // listens, only a notification (sent with the writer's commit) ends a wait before its hour.
  ASSERT_EQ(stores.appendWhileWaiting({"message_added", 1}).size(), 1u);
  auto got = stores.appendWhileWaiting({"message_added", 2});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, "message_added");
  EXPECT_EQ(got[0].payload, 2);
  std::promise<void> claimed;
  bool woken = false;
  std::thread runWaiter([&] {
    EXPECT_FALSE(stores.reader.claim("r", std::chrono::seconds(10)));  // what it has seen
    claimed.set_value();
    woken = stores.reader.waitForRuns(std::chrono::seconds(60));
  });
  claimed.get_future().wait();
  stores.writer.submit("u", "more");
  runWaiter.join();
  EXPECT_TRUE(woken);
}

TEST(PostgresRunStore, TheListenerReconnectsAfterItsConnectionIsKilled) {
  ReaderAndWriter stores(wakeOnlyByNotify());
  for (int round = 1; round <= 3; ++round) {
    auto got = stores.appendWhileWaiting({"round", round}, [&] {
      if (round == 1) return;
      PgTestCluster::shared().execSql(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
          "WHERE application_name = 'parley-listener'");
    });
    ASSERT_EQ(got.size(), 1u) << "round " << round;
    EXPECT_EQ(got[0].payload, round);
  }
}

TEST(PostgresRunStore, WithoutListenWaitersPoll) {
  RunStoreOptions polling;
  polling.listen = false;  // as behind a PgBouncer in transaction pooling mode
  polling.pollMin = std::chrono::milliseconds(1);
  polling.pollMax = std::chrono::milliseconds(5);
  polling.listenPoll = std::chrono::hours(1);  // would never end the wait if it were used
  ReaderAndWriter stores(polling);
  auto got = stores.appendWhileWaiting({"message_added", 1});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, "message_added");
}

TEST(OpenStore, PostgresUrlsOpenPostgresStoresOnceRegistered) {
  const PgTestCluster& cluster = PgTestCluster::shared();
  const std::string unregistered = "postgresql://postgres@/postgres?host=" + cluster.socketDir();
  try {
    openStore(unregistered);
    ADD_FAILURE() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "link parley::postgres and call parley::registerPostgresStore()"),
              std::string::npos)
        << e.what();
  }
  registerPostgresStore();
  registerPostgresStore();  // harmless twice
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
