// The CTest fixture's two steps: `pg_test_cluster start FILE` starts a throwaway cluster and
// writes where it is to FILE; `pg_test_cluster stop FILE` stops it and removes its folder.
// `pg_test_cluster start FILE fsync` starts it with fsync on (bench/queue/run.sh: the queues
// are compared as they would run in production).
#include <cstdio>
#include <exception>
#include <string>

#include "pg_test_cluster.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[3]) == "fsync")) {
    std::fprintf(stderr, "usage: pg_test_cluster start|stop INFO_FILE [fsync]\n");
    return 2;
  }
  const std::string command = argv[1];
  const std::string infoFile = argv[2];
  try {
    if (command == "start") {
      auto cluster = parley::testing::PgTestCluster::start({.fsync = argc == 4});
      cluster->writeInfo(infoFile);
      cluster->keepRunning();
      std::printf("started a PostgreSQL cluster in %s\n", cluster->socketDir().c_str());
      return 0;
    }
    if (command == "stop") {
      auto cluster = parley::testing::PgTestCluster::attach(infoFile);
      cluster->takeOwnership();
      cluster->stop();
      std::remove(infoFile.c_str());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pg_test_cluster: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "pg_test_cluster: unknown command %s\n", command.c_str());
  return 2;
}
