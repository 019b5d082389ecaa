// SqliteStore: the conformance suite, plus what only a file can do wrong.
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "run_store_conformance.hpp"
#include "store/sqlite_store.hpp"
#include "store/writer_queue.hpp"
#include "store_conformance.hpp"

namespace parley::testing {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "parley-store-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct SqliteBackend {
  TempDir dir;
  std::string path = (dir.path() / "store.db").string();

  std::unique_ptr<ConversationStore> open() { return std::make_unique<SqliteStore>(path); }
  std::vector<std::string> writerArgs() { return {"sqlite", path}; }

  int64_t count(const std::string& sql) {
    int64_t result = -1;
    withDb([&](sqlite3* db) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
        throw std::runtime_error(sqlite3_errmsg(db));
      }
      if (sqlite3_step(stmt) == SQLITE_ROW) result = sqlite3_column_int64(stmt, 0);
      sqlite3_finalize(stmt);
    });
    return result;
  }
  void exec(const std::string& sql) {
    withDb([&](sqlite3* db) {
      char* error = nullptr;
      if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
        std::string reason = error ? error : "";
        sqlite3_free(error);
        throw std::runtime_error(sql + ": " + reason);
      }
    });
  }

 private:
  template <class Fn>
  void withDb(Fn&& fn) {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sqlite3_busy_timeout(db, 5000);
    try {
      fn(db);
    } catch (...) {
      sqlite3_close(db);
      throw;
    }
    sqlite3_close(db);
  }
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, StoreConformance, ::testing::Types<SqliteBackend>);
INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, RunStoreConformance, ::testing::Types<SqliteBackend>);

namespace {

TEST(SqliteStore, UsesWalMode) {
  SqliteBackend backend;
  backend.open();
  std::ifstream(backend.path);
  EXPECT_TRUE(fs::exists(backend.path + "-wal") || fs::exists(backend.path));
  sqlite3* db = nullptr;
  sqlite3_open(backend.path.c_str(), &db);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(SqliteStore, ANewFileIsTheOwnersAlone) {
  SqliteBackend backend;
  const mode_t previous = ::umask(022);  // the common umask, under which SQLite makes 0644
  {
    auto store = backend.open();
    store->createThread({.id = "t"}, std::vector<Message>{Message::user("private")});
    for (const std::string& file : {backend.path, backend.path + "-wal", backend.path + "-shm"}) {
      struct stat info {};
      ASSERT_EQ(::stat(file.c_str(), &info), 0) << file;
      EXPECT_EQ(info.st_mode & 0777, 0600u) << file;
    }
  }
  ::umask(previous);
}

TEST(SqliteStore, GarbageFileIsRefusedClearly) {
  TempDir dir;
  const std::string path = (dir.path() / "garbage.db").string();
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i)
      out.put(static_cast<char>((i * 7919) % 251));
  }
  std::string error = errorOf([&] { SqliteStore store(path); });
  EXPECT_NE(error.find("is not a SQLite database"), std::string::npos) << error;
}

TEST(SqliteStore, TruncatedFileIsAClearError) {
  TempDir dir;
  const std::string path = (dir.path() / "store.db").string();
  {
    SqliteStore store(path);
    std::vector<Message> messages;
    for (int i = 0; i < 400; ++i)
      messages.push_back(Message::user(std::string(500, 'x')));
    store.createThread({.id = "a"}, messages);
  }
  // Fold the WAL into the file, then cut the file in the middle of the message pages.
  {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE", nullptr,
                 nullptr, nullptr);
    sqlite3_close(db);
  }
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 100'000u);
  fs::resize_file(path, size / 2);
  std::string error = errorOf([&] {
    SqliteStore store(path);
    store.loadThread("a");
  });
  EXPECT_TRUE(error.find("damaged") != std::string::npos ||
              error.find("not a SQLite database") != std::string::npos)
      << error;
}

// Reads a checkpointed copy of `path` (all in the main file, rollback journal) and zeroes
// `count` bytes at `offset` of it.
void damage(const std::string& path, long offset, size_t count) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE", nullptr, nullptr,
               nullptr);
  sqlite3_close(db);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(offset);
  file.write(std::string(count, '\0').data(), static_cast<std::streamsize>(count));
}

void sqliteExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  const std::string reason = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error(sql + ": " + reason);
}

TEST(SqliteStore, ADamagedFirstPageIsCalledDamaged) {
  TempDir dir;
  const std::string path = (dir.path() / "store.db").string();
  // A version 1 database, whose schema fits on page 1: a zero cell count there reads as an
  // empty schema, on which a naive open would create parley's tables anew over the old pages.
  for (const auto& sql : schemaVersion1(true))
    sqliteExec(path, sql);
  damage(path, 103, 2);
  const auto size = fs::file_size(path);
  std::string error = errorOf([&] { SqliteStore store(path); });
  EXPECT_NE(error.find("is damaged"), std::string::npos) << error;
  EXPECT_NE(error.find("first page"), std::string::npos) << error;
  EXPECT_EQ(fs::file_size(path), size);  // nothing was written

  // Today's schema spans more pages; the same damage is still called damaged.
  const std::string current = (dir.path() / "current.db").string();
  SqliteStore(current).createThread({.id = "a"}, std::vector<Message>{Message::user("hi")});
  damage(current, 103, 2);
  const auto currentSize = fs::file_size(current);
  error = errorOf([&] { SqliteStore store(current); });
  EXPECT_NE(error.find("is damaged"), std::string::npos) << error;
  EXPECT_EQ(fs::file_size(current), currentSize);
}

TEST(SqliteStore, AnotherApplicationsDatabaseIsRefusedUnlessAsked) {
  TempDir dir;
  const std::string path = (dir.path() / "app.db").string();
  sqliteExec(path,
             "CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT); "
             "INSERT INTO accounts (name) VALUES ('ann')");
  std::string error = errorOf([&] { SqliteStore store(path); });
  EXPECT_NE(error.find("another application's database"), std::string::npos) << error;
  EXPECT_NE(error.find("accounts"), std::string::npos) << error;
  EXPECT_THROW(openStore(path), StoreError);
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'parley_%'", -1, &stmt,
                     nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 0);  // refused: nothing of parley's was added
  sqlite3_finalize(stmt);
  sqlite3_close(db);

  SqliteStore adopted(path, {.allowForeignTables = true});
  adopted.createThread({.id = "t"});
  EXPECT_TRUE(openStore(path)->threadInfo("t"));  // it is parley's too now
}

TEST(SqliteStore, ReadOnlyReadsAndRefusesEveryWrite) {
  TempDir dir;
  const std::string path = (dir.path() / "store.db").string();
  SqliteStore(path).createThread({.id = "a"}, std::vector<Message>{Message::user("hi")});
  auto store = std::make_shared<SqliteStore>(path, SqliteStoreOptions{.readOnly = true});
  ASSERT_EQ(store->listThreads().size(), 1u);
  EXPECT_EQ(store->loadThread("a").messages.size(), 1u);
  std::string error = errorOf([&] { store->createThread({.id = "b"}); });
  EXPECT_NE(error.find("read-only"), std::string::npos) << error;
  EXPECT_THROW(store->appendTurn("a", std::vector<Message>{Message::user("x")}, nullptr, 1),
               StoreError);
  EXPECT_THROW(store->deleteThread("a"), StoreError);
  RunStore runs(store);
  EXPECT_TRUE(runs.listRuns().empty());
  EXPECT_THROW(runs.submit("a", "hi"), StoreError);
  EXPECT_EQ(SqliteStore(path).loadThread("a").messages.size(), 1u);
}

TEST(SqliteStore, ReadOnlyCreatesAndMigratesNothing) {
  TempDir dir;
  const std::string missing = (dir.path() / "none.db").string();
  EXPECT_NE(errorOf([&] { SqliteStore store(missing, {.readOnly = true}); }).find("cannot open"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(missing));
  const std::string empty = (dir.path() / "empty.db").string();
  std::ofstream(empty).close();
  EXPECT_NE(
      errorOf([&] { SqliteStore store(empty, {.readOnly = true}); }).find("holds no parley tables"),
      std::string::npos);
  // A version 1 file is read as it is.
  const std::string old = (dir.path() / "old.db").string();
  for (const auto& sql : schemaVersion1(true))
    sqliteExec(old, sql);
  SqliteStore reader(old, {.readOnly = true});
  EXPECT_EQ(reader.loadThread("old").messages.size(), 2u);
  EXPECT_EQ(reader.listThreads().size(), 2u);
  sqlite3* db = nullptr;
  sqlite3_open(old.c_str(), &db);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "SELECT version FROM parley_schema", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 1);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(SqliteStore, MissingFileWithoutCreateIsRefused) {
  TempDir dir;
  const std::string path = (dir.path() / "none.db").string();
  std::string error = errorOf([&] { SqliteStore store(path, {.create = false}); });
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(path));
}

// The writers of one file in this process take turns first come, first served: SQLite's busy
// handler alone lets a writer lose its turn to newer ones again and again.
TEST(WriterQueue, GrantsTurnsInArrivalOrder) {
  detail::WriterQueue queue;
  ASSERT_TRUE(queue.lock(1s));
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread> writers;
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&, i] {
      ASSERT_TRUE(queue.lock(10s));
      {
        std::lock_guard lock(mutex);
        order.push_back(i);
      }
      queue.unlock();
    });
    // The next writer arrives once this one waits.
    while (queue.waiting() < static_cast<size_t>(i + 1))
      std::this_thread::yield();
  }
  queue.unlock();
  for (auto& w : writers)
    w.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(queue.waiting(), 0u);
}

TEST(WriterQueue, AWriterWhoseTurnDoesNotComeGivesUpAndLeavesTheQueue) {
  detail::WriterQueue queue;
  ASSERT_TRUE(queue.lock(1s));
  EXPECT_FALSE(queue.lock(20ms));
  EXPECT_EQ(queue.waiting(), 0u);
  queue.unlock();
  EXPECT_TRUE(queue.lock(0ms));  // free again: the one who gave up holds nothing
  queue.unlock();
}

TEST(WriterQueue, OneQueuePerFileHoweverItIsSpelled) {
  TempDir dir;
  const auto path = dir.path() / "a.db";
  auto first = detail::WriterQueue::forFile(path.string());
  auto second = detail::WriterQueue::forFile((dir.path() / "." / "a.db").string());
  ASSERT_TRUE(first);
  EXPECT_EQ(first, second);
  EXPECT_NE(first, detail::WriterQueue::forFile((dir.path() / "b.db").string()));
  EXPECT_FALSE(detail::WriterQueue::forFile(":memory:"));
}

// Writers of one file through two store objects of one process (each with its pool) all commit:
// they queue for their turn instead of failing on SQLite's lock.
TEST(SqliteStore, WritersOfOneFileInOneProcessAllCommit) {
  TempDir dir;
  const std::string path = (dir.path() / "w.db").string();
  SqliteStoreOptions options;
  options.synchronous = SqliteStoreOptions::Synchronous::Normal;
  SqliteStore a(path, options), b(path, options);
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&, t] {
      SqliteStore& store = t % 2 ? a : b;
      try {
        auto info = store.createThread();
        int64_t version = info.version;
        for (int i = 0; i < 20; ++i) {
          const Message m = Message::user("m" + std::to_string(i));
          version = store.appendTurn(info.id, std::span<const Message>(&m, 1), nullptr, version);
        }
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& w : writers)
    w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a.listThreads().size(), 8u);
  for (const auto& info : a.listThreads())
    EXPECT_EQ(info.messageCount, 20);
}

TEST(OpenStore, PathsAndSqliteUrlsOpenSqliteStores) {
  TempDir dir;
  const std::string path = (dir.path() / "a.db").string();
  openStore(path)->createThread({.id = "x"});
  EXPECT_TRUE(openStore("sqlite://" + path)->threadInfo("x"));
  EXPECT_TRUE(openStore("sqlite:" + path)->threadInfo("x"));
  EXPECT_NE(dynamic_cast<SqliteStore*>(openStore(path).get()), nullptr);
  EXPECT_THROW(openStore(""), ValidationError);
  EXPECT_THROW(openStore("sqlite://"), ValidationError);
  EXPECT_THROW(openStore("mysql://host/db"), ValidationError);
}

}  // namespace
}  // namespace parley::testing
