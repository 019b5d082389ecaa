// What running a tool call costs parley beyond the handler itself: parsing the arguments,
// checking them against the schema, handing the handler to a pool thread and waiting for it.
//   ./build/bench/tools_bench --benchmark_min_time=0.5
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "parley/tools.hpp"
#include "tools/tool_schema.hpp"

namespace {

using parley::json;

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string"},
    "days": {"type": "integer", "minimum": 1},
    "units": {"type": "string", "enum": ["C", "F"]}
  },
  "required": ["city"],
  "additionalProperties": false
})");

std::shared_ptr<parley::ToolRegistry> makeRegistry() {
  auto registry = std::make_shared<parley::ToolRegistry>();
  registry->add("get_weather", "Current weather for a city", kSchema,
                [](const json& args, parley::ToolContext&) -> json {
                  return {{"city", args["city"]}, {"tempC", -3}};
                });
  return registry;
}

void BM_SchemaCheck(benchmark::State& state) {
  parley::CompiledSchema schema(kSchema);
  json args = json::parse(R"({"city":"Oslo","days":3,"units":"C"})");
  for (auto _ : state)
    benchmark::DoNotOptimize(schema.check(args));
}
BENCHMARK(BM_SchemaCheck);

void BM_ExecuteOneCall(benchmark::State& state) {
  parley::ToolExecutor executor(makeRegistry());
  parley::ToolCall call{"c1", "get_weather", R"({"city":"Oslo","days":3,"units":"C"})"};
  for (auto _ : state)
    benchmark::DoNotOptimize(executor.execute(call));
}
BENCHMARK(BM_ExecuteOneCall)->UseRealTime();

void BM_ExecuteAllFourCalls(benchmark::State& state) {
  parley::ToolExecutor executor(makeRegistry());
  std::vector<parley::ToolCall> calls;
  for (int i = 0; i < 4; ++i)
    calls.push_back({"c" + std::to_string(i), "get_weather", R"({"city":"Oslo"})"});
  for (auto _ : state)
    benchmark::DoNotOptimize(executor.executeAll(calls));
}
BENCHMARK(BM_ExecuteAllFourCalls)->UseRealTime();

void BM_CachedDefinitions(benchmark::State& state) {
  auto registry = makeRegistry();
  for (auto _ : state)
    benchmark::DoNotOptimize(registry->definitions());
}
BENCHMARK(BM_CachedDefinitions);

}  // namespace

BENCHMARK_MAIN();
