// A throwaway PostgreSQL 15 cluster for tests and benchmarks: initdb into a temporary folder,
// pg_ctl start with the socket in that folder (no TCP), password (scram-sha-256) auth, stopped
// and removed by stop() or the destructor.
//
// initdb refuses to run as root, and tests run as root in CI: then initdb and pg_ctl run as the
// `postgres` system user (Debian's postgresql package creates it) via runuser, in a folder it
// owns.
//
// A CTest fixture starts one cluster for every test (`pg_test_cluster start FILE` writes its
// connection details to FILE; PARLEY_TEST_PG_INFO names that file for the tests). A test
// program run by hand, without the fixture, starts its own.
#pragma once

#include <memory>
#include <string>

namespace parley::testing {

class PgTestCluster {
 public:
  static constexpr const char* kPassword = "parley-test-secret";

  struct Options {
    bool fsync = false;  // tests do not need the server to survive a power loss
  };

  // Starts a new cluster; throws std::runtime_error with the server's log on failure.
  static std::unique_ptr<PgTestCluster> start(Options options);
  static std::unique_ptr<PgTestCluster> start() { return start(Options{}); }
  // Attaches to a cluster another process started (from its info file); does not own it.
  static std::unique_ptr<PgTestCluster> attach(const std::string& infoFile);
  // The cluster of this test run: the fixture's (PARLEY_TEST_PG_INFO) or one started on first
  // use and stopped at exit.
  static PgTestCluster& shared();

  ~PgTestCluster();
  void stop();
  // Writes what attach() reads.
  void writeInfo(const std::string& infoFile) const;
  // Leave the cluster running when this object goes (the fixture's start step), or take it
  // over to stop it (the fixture's stop step).
  void keepRunning() { owned_ = false; }
  void takeOwnership() { owned_ = !root_.empty(); }

  const std::string& socketDir() const { return socketDir_; }
  int port() const { return port_; }
  // A libpq key=value conninfo for the superuser, with the right password unless given.
  std::string conninfo(const std::string& password = kPassword) const;
  // A conninfo whose search_path is a new, empty schema: each test gets a fresh database.
  std::string freshSchemaConninfo();
  // Runs one SQL statement as superuser (test set-up); throws std::runtime_error on failure.
  void execSql(const std::string& sql) const;

 private:
  PgTestCluster() = default;
  std::string root_;  // the temporary folder; "" when attached
  std::string socketDir_;
  int port_ = 5432;
  bool owned_ = false;
};

}  // namespace parley::testing
