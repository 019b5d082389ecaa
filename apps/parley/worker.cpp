// `parley worker`: serves the run queue of a database (worker.hpp) until SIGTERM or SIGINT, then
// stops claiming, lets its runs finish within the grace period or hands them back, and exits 0.
//
//   parley worker --db URL [--profile NAME | --base-url URL --model M --api-key K |
//                 --api-key-env VAR] [--tools demo] [--tools-file F] [--concurrency N]
//                 [--lease-ms MS] [--worker-id ID] [--grace-ms MS] [--max-iterations N]
//                 [--system TEXT] [--human-tool NAME]
//
// The endpoint given is the worker's default profile (named by --profile, else "default"); with
// a config file its other profiles serve the runs that name them. The first line on stdout is
// the worker's id, once it serves; the last, when it stopped, what it did as JSON
// ({"worker", "claimed", "completed", "failed", "cancelled", "waiting", "handed_back", "lost"}).

#include <iostream>
#include <memory>

#include "cli_store.hpp"
#include "commands.hpp"
#include "parley/run_store.hpp"
#include "parley/worker.hpp"
#include "stop_signals.hpp"
#include "worker_options.hpp"

namespace parley::cli {
namespace {

int runWorker(const std::string& db, const WorkerArgs& args) {
  const WorkerOptions options = workerOptions(args);

  StopSignals stopSignals;  // before any thread exists

  auto runs = std::make_shared<RunStore>(openCliStore(db));
  Worker worker(runs, options);
  worker.start();
  std::cout << worker.id() << std::endl;
  const int received = stopSignals.wait();
  std::cerr << "parley worker: stopping (signal " << received << ")\n";
  worker.stop();
  const auto stats = worker.stats();
  std::cout << nlohmann::json{{"worker", worker.id()},    {"claimed", stats.claimed},
                              {"chained", stats.chained}, {"completed", stats.completed},
                              {"failed", stats.failed},   {"cancelled", stats.cancelled},
                              {"waiting", stats.waiting}, {"handed_back", stats.handedBack},
                              {"lost", stats.lost}}
                   .dump()
            << std::endl;
  return kExitOk;
}

}  // namespace

void addWorkerCommand(CLI::App& app, int& exitCode) {
  auto db = std::make_shared<std::string>();
  auto args = std::make_shared<WorkerArgs>();
  CLI::App* cmd =
      app.add_subcommand("worker", "Serve the run queue of a database until SIGTERM or SIGINT");
  cmd->add_option("--db", *db, "Database: a SQLite file or postgresql://...")->required();
  addWorkerOptions(*cmd, *args);
  cmd->callback([db, args, &exitCode] { exitCode = runWorker(*db, *args); });
}

}  // namespace parley::cli
