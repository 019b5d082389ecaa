// The options of a worker loop that `parley worker` and `parley serve --workers N` share: the
// endpoint (endpoint.hpp), the tools (built-in sets, tool files, MCP servers, A2A agents),
// concurrency, lease, grace, the turn's settings (iterations, tool calls, timeouts, token limit,
// system prompt), the human tool, the price table and the cost limits.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "endpoint.hpp"
#include "parley/worker.hpp"

namespace parley::cli {

struct WorkerArgs {
  EndpointArgs endpoint;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  std::vector<std::string> mcpServers;  // --mcp NAME: [mcp.NAME] tables of the config file
  std::vector<std::string> a2aAgents;   // --a2a NAME: [a2a.NAME] tables of the config file
  int concurrency = 4;
  int64_t leaseMs = 30'000;
  int64_t graceMs = 10'000;
  int maxIterations = 10;
  int maxToolCalls = 64;            // --max-tool-calls: calls of one reply that run
  int64_t callTimeoutMs = 0;        // --call-timeout: each model call; 0: the profile's
  int64_t turnTimeoutMs = 600'000;  // --turn-timeout: a whole run; 0: none
  int64_t tokenLimit = 0;           // --token-limit
  std::string workerId;
  std::string system;
  std::string humanTool;
  std::string pricesFile;        // --prices (prices_option.hpp)
  double maxCostPerRun = -1;     // --max-cost-per-run USD; negative: no limit
  double maxCostPerWorker = -1;  // --max-cost-per-worker USD; negative: no limit
};

// Adds the options above (all but --db) to `cmd`.
void addWorkerOptions(CLI::App& cmd, WorkerArgs& args);

// The WorkerOptions they give: the endpoint as the default profile (named by --profile, else
// "default"), with a config file's other profiles for runs that name them; diagnostics on
// stderr. ValidationError naming the option for a bad value.
WorkerOptions workerOptions(const WorkerArgs& args);

}  // namespace parley::cli
