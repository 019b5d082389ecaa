#include "pg_test_cluster.hpp"

#include <fcntl.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace parley::testing {

namespace {

namespace fs = std::filesystem;

constexpr const char* kBinDir = "/usr/lib/postgresql/15/bin/";

struct Output {
  int status = -1;
  std::string text;
};

// Runs argv (as `postgres` when we are root), stdout and stderr captured.
Output run(std::vector<std::string> argv) {
  if (geteuid() == 0) argv.insert(argv.begin(), {"runuser", "-u", "postgres", "--"});
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  Output out;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0)
    out.text.append(buffer, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

void giveToPostgres(const std::string& path) {
  if (geteuid() != 0) return;
  const passwd* user = getpwnam("postgres");
  if (!user) throw std::runtime_error("no `postgres` system user: install the postgresql package");
  if (chown(path.c_str(), user->pw_uid, user->pw_gid) != 0) {
    throw std::runtime_error("cannot chown " + path);
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::unique_ptr<PgTestCluster> PgTestCluster::start(Options options) {
  std::unique_ptr<PgTestCluster> cluster(new PgTestCluster);
  std::string pattern = (fs::temp_directory_path() / "parley-pg-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  cluster->root_ = pattern;
  cluster->socketDir_ = pattern;
  cluster->owned_ = true;
  chmod(pattern.c_str(), 0700);
  giveToPostgres(pattern);
  const std::string pwfile = pattern + "/pw";
  { std::ofstream(pwfile) << kPassword << "\n"; }
  giveToPostgres(pwfile);
  const std::string data = pattern + "/data";
  Output init =
      run({std::string(kBinDir) + "initdb", "-D", data, "-U", "postgres", "--auth=scram-sha-256",
           "--pwfile=" + pwfile, "-E", "UTF8", "--no-sync", "--locale=C"});
  if (init.status != 0) {
    cluster->owned_ = false;
    fs::remove_all(pattern);
    throw std::runtime_error("initdb failed:\n" + init.text);
  }
  std::string serverOptions = "-k " + pattern + " -c listen_addresses= -p " +
                              std::to_string(cluster->port_) +
                              " -c max_connections=100 -c shared_buffers=32MB";
  if (!options.fsync) serverOptions += " -c fsync=off -c full_page_writes=off";
  Output started = run({std::string(kBinDir) + "pg_ctl", "-D", data, "-l", pattern + "/log", "-w",
                        "-t", "60", "-o", serverOptions, "start"});
  if (started.status != 0) {
    std::string log = readFile(pattern + "/log");
    cluster->owned_ = false;
    fs::remove_all(pattern);
    throw std::runtime_error("pg_ctl start failed:\n" + started.text + log);
  }
  return cluster;
}

std::unique_ptr<PgTestCluster> PgTestCluster::attach(const std::string& infoFile) {
  std::ifstream in(infoFile);
  std::unique_ptr<PgTestCluster> cluster(new PgTestCluster);
  if (!(in >> cluster->root_ >> cluster->port_)) {
    throw std::runtime_error("cannot read the cluster info file " + infoFile);
  }
  cluster->socketDir_ = cluster->root_;
  return cluster;
}

PgTestCluster& PgTestCluster::shared() {
  static std::unique_ptr<PgTestCluster> cluster = [] {
    const char* info = std::getenv("PARLEY_TEST_PG_INFO");
    if (info && *info && fs::exists(info)) return attach(info);
    return start();
  }();
  return *cluster;
}

PgTestCluster::~PgTestCluster() {
  try {
    stop();
  } catch (...) {
  }
}

void PgTestCluster::stop() {
  if (!owned_) return;
  owned_ = false;
  run({std::string(kBinDir) + "pg_ctl", "-D", root_ + "/data", "-m", "immediate", "-w", "stop"});
  std::error_code ignored;
  fs::remove_all(root_, ignored);
}

void PgTestCluster::writeInfo(const std::string& infoFile) const {
  std::ofstream(infoFile) << root_ << "\n" << port_ << "\n";
}

std::string PgTestCluster::conninfo(const std::string& password) const {
  return "host=" + socketDir_ + " port=" + std::to_string(port_) +
         " user=postgres dbname=postgres password=" + password;
}

std::string PgTestCluster::freshSchemaConninfo() {
  static std::atomic<int> counter{0};
  std::random_device random;
  const std::string schema = "t_" + std::to_string(getpid()) + "_" + std::to_string(counter++) +
                             "_" + std::to_string(random() % 100000);
  execSql("CREATE SCHEMA " + schema);
  return conninfo() + " options='-csearch_path=" + schema + "'";
}

void PgTestCluster::execSql(const std::string& sql) const {
  PGconn* conn = PQconnectdb(conninfo().c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string reason = PQerrorMessage(conn);
    PQfinish(conn);
    throw std::runtime_error("cannot connect to the test cluster: " + reason);
  }
  PGresult* result = PQexec(conn, sql.c_str());
  bool ok = PQresultStatus(result) == PGRES_COMMAND_OK || PQresultStatus(result) == PGRES_TUPLES_OK;
  std::string reason = ok ? "" : PQresultErrorMessage(result);
  PQclear(result);
  PQfinish(conn);
  if (!ok) throw std::runtime_error(sql + ": " + reason);
}

}  // namespace parley::testing
