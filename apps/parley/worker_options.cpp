#include "worker_options.hpp"

#include <filesystem>
#include <iostream>
#include <memory>

#include "mcp_config.hpp"
#include "prices_option.hpp"
#include "tool_file.hpp"

namespace parley::cli {

void addWorkerOptions(CLI::App& cmd, WorkerArgs& args) {
  addEndpointOptions(cmd, args.endpoint);
  cmd.add_option("--tools", args.toolSets, "Built-in tool set to offer (demo)");
  cmd.add_option("--tools-file", args.toolFiles, "TOML file of command tools to offer");
  addMcpOption(cmd, args.mcpServers);
  addA2aOption(cmd, args.a2aAgents);
  cmd.add_option("--concurrency", args.concurrency, "Runs at once (default 4)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--lease-ms", args.leaseMs, "Lease length in ms (default 30000)");
  cmd.add_option("--grace-ms", args.graceMs,
                 "On SIGTERM, how long runs may take to finish before they are handed back "
                 "(default 10000)");
  cmd.add_option("--worker-id", args.workerId, "Worker id (default host-pid-random)");
  cmd.add_option("--max-iterations", args.maxIterations,
                 "Model calls per run unless the run says (default 10)")
      ->check(CLI::Range(1, TurnDefaults::kMaxIterations));
  cmd.add_option("--max-tool-calls", args.maxToolCalls,
                 "Tool calls of one reply that run; the rest get an error result (default 64)")
      ->check(CLI::Range(1, TurnDefaults::kMaxToolCallsPerReply));
  cmd.add_option("--call-timeout", args.callTimeoutMs,
                 "Each model call with its retries, in ms (default 0: the endpoint's own timeouts)")
      ->check(CLI::Range(int64_t{0}, int64_t{TurnDefaults::kMaxTimeout.count()}));
  cmd.add_option("--turn-timeout", args.turnTimeoutMs,
                 "A whole run (model calls, retries, tools), in ms; past it the run fails with a "
                 "timeout (default 600000; 0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{TurnDefaults::kMaxTimeout.count()}));
  cmd.add_option(
         "--token-limit", args.tokenLimit,
         "Context size in tokens past which a run logs token_limit_exceeded (default 0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--system", args.system, "System prompt of new threads");
  cmd.add_option("--human-tool", args.humanTool,
                 "Offer a tool of this name that asks a person (the run waits for "
                 "`parley runs respond`)");
  addPricesOption(cmd, args.pricesFile);
  cmd.add_option("--max-cost-per-run", args.maxCostPerRun,
                 "Fail a run, before sending, when a model call could take its cost over this "
                 "many USD (the exact prompt count and the max_tokens bound, priced with "
                 "--prices; an unpriced model fails the run)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--max-cost-per-worker", args.maxCostPerWorker,
                 "The same over every run this worker makes until it stops")
      ->check(CLI::NonNegativeNumber);
}

WorkerOptions workerOptions(const WorkerArgs& args) {
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
  options.turn.maxIterations = args.maxIterations;
  options.turn.maxToolCallsPerReply = args.maxToolCalls;
  options.turn.callTimeout = std::chrono::milliseconds(args.callTimeoutMs);
  options.turn.turnTimeout = std::chrono::milliseconds(args.turnTimeoutMs);
  options.turn.tokenLimit = args.tokenLimit;
  options.turn.systemPrompt = args.system;
  options.humanTool = args.humanTool;
  options.profiles = profiles;
  options.defaultProfile = name;
  options.tools = makeToolRegistry(args.toolSets, args.toolFiles);
  // A run waits for an MCP tool's approval or a server's form like any other question.
  addMcpServers(*options.tools, args.mcpServers, config, std::cerr, nullptr, {}, {},
                McpAsking::DurableRun);
  // A remote agent's question is the run's; its task is journaled and resumed on a takeover.
  addA2aAgents(*options.tools, args.a2aAgents, config);
  options.log = [](const std::string& line) { std::cerr << line << "\n"; };
  if (args.maxCostPerRun >= 0) options.turn.budget.maxCostPerRun = args.maxCostPerRun;
  if (args.maxCostPerWorker >= 0) options.maxCostPerWorker = args.maxCostPerWorker;
  // Always: the runs' telemetry spans are priced (parley.cost.usd), and the limits need it.
  options.turn.budget.prices =
      std::make_shared<const PriceTable>(cliPriceTable(args.pricesFile, config));
  return options;
}

}  // namespace parley::cli
