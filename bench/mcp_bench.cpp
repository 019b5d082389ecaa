// Round trip of one tools/call (server-everything's `echo`) through McpClient, over stdio (a
// child process) and over Streamable HTTP. bench/mcp/run.sh starts the servers and runs the
// official TypeScript SDK client on the same calls in the same run.
//   PARLEY_BENCH_MCP_NODE=node PARLEY_BENCH_MCP_EVERYTHING=.../server-everything/dist/index.js
//   PARLEY_BENCH_MCP_URL=http://127.0.0.1:PORT/mcp  [PARLEY_BENCH_MCP_PROTOCOL=2025-06-18]
//   mcp_bench
// A benchmark whose variable is unset is skipped with a message saying which.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "parley/mcp.hpp"

namespace {

using parley::McpClient;
using parley::McpServerOptions;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

void roundTrip(benchmark::State& state, McpServerOptions options) {
  McpClient client(std::move(options));
  client.connect();
  const nlohmann::json args = {{"message", "ping"}};
  for (int i = 0; i < 50; ++i)
    client.callTool("echo", args);  // warm-up: the server's JIT, the connection
  for (auto _ : state) {
    auto result = client.callTool("echo", args);
    if (result.isError) state.SkipWithError("echo failed");
    benchmark::DoNotOptimize(result);
  }
  state.counters["us/call"] = benchmark::Counter(
      static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert, benchmark::Counter::kIs1000);
}

void BM_McpCallStdio(benchmark::State& state) {
  const std::string node = env("PARLEY_BENCH_MCP_NODE");
  const std::string server = env("PARLEY_BENCH_MCP_EVERYTHING");
  if (node.empty() || server.empty()) {
    state.SkipWithError("set PARLEY_BENCH_MCP_NODE and PARLEY_BENCH_MCP_EVERYTHING");
    return;
  }
  McpServerOptions options;
  options.name = "everything";
  options.command = {node, server, "stdio"};
  options.shutdownGrace = std::chrono::milliseconds(200);
  roundTrip(state, std::move(options));
}
// cpu_time: the whole process's (the calls run on the transport's threads).
BENCHMARK(BM_McpCallStdio)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMicrosecond);

void BM_McpCallHttp(benchmark::State& state) {
  const std::string url = env("PARLEY_BENCH_MCP_URL");
  if (url.empty()) {
    state.SkipWithError("set PARLEY_BENCH_MCP_URL");
    return;
  }
  McpServerOptions options;
  options.name = "everything-http";
  options.url = url;
  // PARLEY_BENCH_MCP_PROTOCOL: a revision instead of "auto" (bench/mcp/run.sh measures 2025-06-18
  // too: server-everything takes longer to answer a 2025-11-25 client, see docs/mcp.md).
  if (const std::string protocol = env("PARLEY_BENCH_MCP_PROTOCOL"); !protocol.empty())
    options.protocol = protocol;
  roundTrip(state, std::move(options));
}
BENCHMARK(BM_McpCallHttp)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
