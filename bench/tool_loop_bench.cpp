// One turn of the tool loop against a model server on loopback (bench/toolloop/run.sh runs it
// beside `@openai/agents` and `ai` against the same `parley mock` with the same script): a fresh
// conversation, a prompt, the model's tool call, the tool run, the model's answer.
//   tool_loop_bench BASE_URL chat|responses TURNS
// Prints one JSON line: {"peer", "protocol", "turns", "cpu_ms_per_turn", "wall_ms_per_turn"}.
// CPU is the whole process's (getrusage), as node's process.cpuUsage() is for the peers; the
// server is another process, so the figure is the client's alone. A tenth of the turns (at
// least 3) run first as a warm-up, unmeasured.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "parley/conversation_manager.hpp"
#include "parley/protocol.hpp"
#include "parley/tools.hpp"

namespace {

using namespace parley;
using nlohmann::json;

double processCpuMs() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// What each peer script offers too: one function tool of one string parameter.
std::shared_ptr<ToolRegistry> weatherTool() {
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("get_weather", "The weather of a city",
             json{{"type", "object"},
                  {"properties", {{"city", {{"type", "string"}}}}},
                  {"required", {"city"}},
                  {"additionalProperties", false}},
             [](const json& args, ToolContext&) {
               return json{{"city", args.at("city")}, {"sky", "sunny"}, {"celsius", 21}};
             });
  return tools;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tool_loop_bench BASE_URL chat|responses TURNS\n");
    return 2;
  }
  const std::string protocol = argv[2];
  const int turns = std::atoi(argv[3]);
  if ((protocol != "chat" && protocol != "responses") || turns < 1) {
    std::fprintf(stderr, "tool_loop_bench: expected chat or responses and TURNS >= 1\n");
    return 2;
  }
  ClientOptions client;
  client.baseUrl = argv[1];
  client.model = "gpt-4o-mini";
  client.apiKey = "sk-bench";
  client.maxRetries = 0;
  client.protocol = protocol == "chat" ? Protocol::OpenAiChat : Protocol::OpenAiResponses;
  ConversationOptions options;
  options.llm = makeClient(client);
  options.tools = weatherTool();
  const auto turn = [&options] {
    ConversationManager manager(options);
    RunResult result = manager.run("What is the weather in Oslo?");
    if (result.content.find("sunny") == std::string::npos) {
      throw std::runtime_error("the answer did not use the tool result: " + result.content);
    }
  };
  for (int i = 0; i < std::max(3, turns / 10); ++i)
    turn();
  const double cpu0 = processCpuMs();
  const auto wall0 = std::chrono::steady_clock::now();
  for (int i = 0; i < turns; ++i)
    turn();
  const double wallMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  const double cpuMs = processCpuMs() - cpu0;
  std::printf(
      "{\"peer\": \"parley\", \"protocol\": \"%s\", \"turns\": %d, \"cpu_ms_per_turn\": %.4f, "
      "\"wall_ms_per_turn\": %.4f}\n",
      protocol.c_str(), turns, cpuMs / turns, wallMs / turns);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tool_loop_bench: %s\n", e.what());
  return 1;
}
