// `parley serve`: the HTTP service over a database's durable runs (service.hpp,
// docs/service.md) until SIGTERM or SIGINT.
//
//   parley serve [--db URL] [--host 127.0.0.1] [--port P] [--auth-token-env VAR]...
//                [--cors ORIGIN] [--allowed-host NAME]... [--workers N]
//                [--max-streams N] [--max-connections N] [--stream-threads N]
//                [--webhook-secret-env VAR] [--webhook-allow-loopback] [--webhook-allow-private]
//                [--a2a-card-key PEM_FILE [--a2a-card-key-id KID] [--a2a-card-jku URL]]
//                [the endpoint and worker options of `parley worker`]
//
// The first line on stdout is the base URL (http://HOST:PORT; --port 0 picks a free port), once
// it serves. Without --auth-token-env it listens on loopback only, and says so on stderr. With
// --workers N it also runs N worker loops in the same process (the options of `parley worker`);
// when no endpoint is configured they talk to the built-in mock's demo agent, with the demo
// tools, so one command gives a complete single-machine service.
#include <sys/resource.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli_store.hpp"
#include "commands.hpp"
#include "mcp_config.hpp"
#include "mock/mock_server.hpp"
#include "parley/run_store.hpp"
#include "parley/worker.hpp"
#include "prices_option.hpp"
#include "service/service.hpp"
#include "stop_signals.hpp"
#include "worker_options.hpp"

namespace parley::cli {
namespace {

struct ServeArgs {
  std::string db;
  std::string host = "127.0.0.1";
  int port = 8377;
  std::vector<std::string> tokenVars;
  std::string cors;
  std::vector<std::string> allowedHosts;
  std::string webhookSecretVar;
  bool webhookLoopback = false;
  bool webhookPrivate = false;
  std::string cardKeyFile;
  std::string cardKeyId;
  std::string cardJku;
  int workers = 0;
  size_t maxStreams = ServiceOptions{}.maxStreams;
  size_t maxConnections = ServiceOptions{}.maxConnections;
  size_t streamThreads = ServiceOptions{}.streamThreads;
  WorkerArgs worker;
};

int runServe(ServeArgs args) {
  ServiceOptions options;
  options.host = args.host;
  options.port = args.port;
  options.corsOrigin = args.cors;
  options.allowedHosts = args.allowedHosts;
  options.maxStreams = args.maxStreams;
  options.maxConnections = args.maxConnections;
  options.streamThreads = args.streamThreads;
  if (!args.webhookSecretVar.empty()) {
    const char* value = std::getenv(args.webhookSecretVar.c_str());
    if (!value || !*value) {
      throw ValidationError("--webhook-secret-env",
                            "$" + args.webhookSecretVar + " is not set or empty");
    }
    options.webhooks.secret = value;
  }
  options.webhooks.allowLoopback = args.webhookLoopback;
  options.webhooks.allowPrivate = args.webhookPrivate;
  if (!args.cardKeyFile.empty()) {
    try {
      options.a2aCardSigner = std::make_shared<const A2aCardSigner>(
          readA2aKeyFile(args.cardKeyFile, "--a2a-card-key"), args.cardKeyId, args.cardJku);
    } catch (const ValidationError& e) {
      throw ValidationError("--a2a-card-key", args.cardKeyFile + ": " + e.what());
    }
  } else if (!args.cardKeyId.empty() || !args.cardJku.empty()) {
    throw ValidationError("--a2a-card-key-id", "goes with --a2a-card-key");
  }
  for (const std::string& var : args.tokenVars) {
    const char* value = std::getenv(var.c_str());
    if (!value || !*value) {
      throw ValidationError("--auth-token-env", "$" + var + " is not set or empty");
    }
    options.authTokens.emplace_back(value);
  }
  if (options.authTokens.empty()) {
    std::cerr << "parley serve: no --auth-token-env: anyone on this machine may use the service; "
                 "it listens on loopback only ("
              << args.host << ")\n";
  }

  std::unique_ptr<mock::MockServer> demo;
  if (args.workers > 0 && !endpointConfigured(args.worker.endpoint)) {
    mock::MockOptions demoOptions;
    demoOptions.maxRecorded = 0;  // it forgets what it has answered: nothing grows per run
    demo = std::make_unique<mock::MockServer>(demoOptions);
    demo->start();
    args.worker.endpoint.baseUrl = demo->baseUrl();
    if (args.worker.toolSets.empty() && args.worker.toolFiles.empty()) {
      args.worker.toolSets.push_back("demo");
    }
    std::cerr << "parley serve: no endpoint configured, the workers talk to the built-in mock's "
                 "demo agent at "
              << demo->baseUrl() << "\n";
  }
  // The cost per reply the chat page shows: --prices, else the shipped table and the config
  // file's [prices].
  options.prices = std::make_shared<const PriceTable>(
      cliPriceTable(args.worker.pricesFile, configFile(args.worker.endpoint)));
  std::vector<WorkerOptions> workerOptionsList;
  for (int i = 0; i < args.workers; ++i) {
    WorkerOptions w = workerOptions(args.worker);
    // GET /v1/models: the profiles the workers of this process serve.
    if (i == 0) options.models = w.profiles->names();
    if (!w.workerId.empty() && args.workers > 1) w.workerId += "-" + std::to_string(i + 1);
    workerOptionsList.push_back(std::move(w));
  }

  // Each event stream holds a socket: allow as many as the hard limit does.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  StopSignals stopSignals;  // before any thread exists

  auto runs = std::make_shared<RunStore>(openCliStore(args.db));
  std::vector<std::unique_ptr<Worker>> workers;
  for (auto& w : workerOptionsList) {
    workers.push_back(std::make_unique<Worker>(runs, std::move(w)));
    workers.back()->start();
  }
  Service service(runs, options);
  service.start();
  std::cout << service.baseUrl() << std::endl;
  const int received = stopSignals.wait();
  std::cerr << "parley serve: stopping (signal " << received << ")\n";
  service.stop();
  for (auto& worker : workers)
    worker->stop();
  return kExitOk;
}

}  // namespace

void addServeCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the HTTP API and the chat page over a database until SIGTERM or SIGINT");
  cmd->add_option("--db", args->db,
                  "Database: a SQLite file or postgresql://... (default: "
                  "the default database)");
  cmd->add_option("--host", args->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", args->port, "Port (default 8377; 0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--auth-token-env", args->tokenVars,
                  "Environment variable holding a bearer token clients must send (repeatable)");
  cmd->add_option("--cors", args->cors, "Allow this browser origin (CORS); default: none");
  cmd->add_option("--allowed-host", args->allowedHosts,
                  "A Host name (name or name:port) requests may be sent to (repeatable; "
                  "default: localhost, 127.0.0.1, [::1] and --host; '*': any)");
  cmd->add_option("--webhook-secret-env", args->webhookSecretVar,
                  "Environment variable holding the key that signs webhooks "
                  "(X-Parley-Signature-256: HMAC-SHA256 of the body)");
  cmd->add_flag("--webhook-allow-loopback", args->webhookLoopback,
                "Let webhooks go to loopback addresses, over http too (local receivers, tests)");
  cmd->add_flag("--webhook-allow-private", args->webhookPrivate,
                "Let webhooks go to private, link-local and unique-local addresses");
  cmd->add_option("--a2a-card-key", args->cardKeyFile,
                  "Sign the A2A Agent Card with this PEM private key (EC P-256: ES256; RSA: "
                  "RS256)");
  cmd->add_option("--a2a-card-key-id", args->cardKeyId,
                  "The signature's kid (default: the key's RFC 7638 thumbprint)");
  cmd->add_option("--a2a-card-jku", args->cardJku,
                  "The signature's jku: the URL of a JWK Set holding the public key");
  cmd->add_option("--workers", args->workers, "Also run N worker loops in this process (default 0)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--max-streams", args->maxStreams,
                  "Event streams (of every kind) open at once (default 1000); past it: 503")
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("--max-connections", args->maxConnections,
                  "Connections open at once (default 4096; each stream holds one)")
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("--stream-threads", args->streamThreads,
                  "Threads writing the streams that have news (default 4); a waiting stream holds "
                  "none. 0: a thread per stream")
      ->check(CLI::Range(0, 64));
  addWorkerOptions(*cmd, args->worker);
  cmd->callback([args, &exitCode] { exitCode = runServe(*args); });
}

}  // namespace parley::cli
