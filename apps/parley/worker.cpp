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
#include <pthread.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli_store.hpp"
#include "commands.hpp"
#include "endpoint.hpp"
#include "parley/run_store.hpp"
#include "parley/worker.hpp"
#include "tool_file.hpp"

namespace parley::cli {
namespace {

struct WorkerArgs {
  std::string db;
  EndpointArgs endpoint;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  int concurrency = 4;
  int64_t leaseMs = 30'000;
  int64_t graceMs = 10'000;
  int maxIterations = 10;
  std::string workerId;
  std::string system;
  std::string humanTool;
};

int runWorker(const WorkerArgs& args) {
  if (args.leaseMs <= 0) throw ValidationError("--lease-ms", "must be positive");
  if (args.graceMs < 0) throw ValidationError("--grace-ms", "must not be negative");
  auto profiles = std::make_shared<ProfileRegistry>();
  const std::string config = configFile(args.endpoint);
  std::error_code ignored;
  if (!args.endpoint.profile.empty() && std::filesystem::exists(config, ignored)) {
    profiles->loadToml(config);
  }
  const std::string name = args.endpoint.profile.empty() ? "default" : args.endpoint.profile;
  profiles->add(name, resolveEndpoint(args.endpoint));

  WorkerOptions options;
  options.workerId = args.workerId;
  options.concurrency = args.concurrency;
  options.leaseDuration = std::chrono::milliseconds(args.leaseMs);
  options.shutdownGrace = std::chrono::milliseconds(args.graceMs);
  options.maxIterations = args.maxIterations;
  options.systemPrompt = args.system;
  options.humanTool = args.humanTool;
  options.profiles = profiles;
  options.defaultProfile = name;
  options.tools = makeToolRegistry(args.toolSets, args.toolFiles);
  options.log = [](const std::string& line) { std::cerr << line << "\n"; };

  // Block the stop signals before any thread exists, so that this thread alone takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto runs = std::make_shared<RunStore>(openCliStore(args.db));
  Worker worker(runs, options);
  worker.start();
  std::cout << worker.id() << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  std::cerr << "parley worker: stopping (signal " << received << ")\n";
  worker.stop();
  const auto stats = worker.stats();
  std::cout << nlohmann::json{{"worker", worker.id()},           {"claimed", stats.claimed},
                              {"completed", stats.completed},    {"failed", stats.failed},
                              {"cancelled", stats.cancelled},    {"waiting", stats.waiting},
                              {"handed_back", stats.handedBack}, {"lost", stats.lost}}
                   .dump()
            << std::endl;
  return kExitOk;
}

}  // namespace

void addWorkerCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<WorkerArgs>();
  CLI::App* cmd =
      app.add_subcommand("worker", "Serve the run queue of a database until SIGTERM or SIGINT");
  cmd->add_option("--db", args->db, "Database: a SQLite file or postgresql://...")->required();
  addEndpointOptions(*cmd, args->endpoint);
  cmd->add_option("--tools", args->toolSets, "Built-in tool set to offer (demo)");
  cmd->add_option("--tools-file", args->toolFiles, "TOML file of command tools to offer");
  cmd->add_option("--concurrency", args->concurrency, "Runs at once (default 4)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--lease-ms", args->leaseMs, "Lease length in ms (default 30000)");
  cmd->add_option("--grace-ms", args->graceMs,
                  "On SIGTERM, how long runs may take to finish before they are handed back "
                  "(default 10000)");
  cmd->add_option("--worker-id", args->workerId, "Worker id (default host-pid-random)");
  cmd->add_option("--max-iterations", args->maxIterations,
                  "Model calls per run unless the run says (default 10)")
      ->check(CLI::Range(1, 10'000));
  cmd->add_option("--system", args->system, "System prompt of new threads");
  cmd->add_option("--human-tool", args->humanTool,
                  "Offer a tool of this name that asks a person (the run waits for "
                  "`parley runs respond`)");
  cmd->callback([args, &exitCode] { exitCode = runWorker(*args); });
}

}  // namespace parley::cli
