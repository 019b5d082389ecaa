// What telemetry costs (docs/telemetry.md): one turn of the in-process tool loop (a model that
// answers from memory: a tool call, then the answer; one tool) with telemetry off, with a
// Telemetry that drops every span, and with the OTLP exporter encoding protobuf on its thread
// into a receiver seam that drops the body; and one Span alone, off and on.
//   build/bench/telemetry_bench
#include <benchmark/benchmark.h>

#include <atomic>

#include "parley/conversation_manager.hpp"
#include "parley/otlp.hpp"
#include "parley/telemetry.hpp"
#include "parley/tools.hpp"

namespace {

using namespace parley;
using nlohmann::json;

// Answers a user message with a tool call and a tool result with text, at once.
class MemoryModel : public LlmClient {
 public:
  ChatResult generate(const ChatRequest& request) override {
    ChatResult result;
    result.model = "memory-model";
    result.id = "r-1";
    TokenUsage usage;
    usage.promptTokens = 100;
    usage.completionTokens = 10;
    usage.totalTokens = 110;
    result.usage = usage;
    const bool afterTool =
        !request.encodedMessages.empty() &&
        request.encodedMessages.back()->find("\"role\":\"tool\"") != std::string::npos;
    if (afterTool) {
      result.message = Message::assistant("It is sunny.");
      result.finishReason = "stop";
    } else {
      result.message = Message::assistant("");
      result.message.toolCalls.push_back({"call_1", "get_weather", R"({"city":"Oslo"})"});
      result.finishReason = "tool_calls";
    }
    return result;
  }
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler&) override {
    return generate(request);
  }
  LlmEndpoint endpoint() const override { return {"openai", "127.0.0.1", 8080, "memory-model"}; }
};

ConversationManager conversation() {
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("get_weather", "The weather of a city", json{{"type", "object"}},
             [](const json&, ToolContext&) {
               return json{{"sky", "sunny"}};
             });
  ConversationOptions options;
  options.llm = std::make_shared<MemoryModel>();
  options.tools = tools;
  return ConversationManager(std::move(options));
}

class DropAll : public Telemetry {
 public:
  void exportSpan(SpanData&& span) noexcept override { benchmark::DoNotOptimize(span.name.data()); }
};

void runTurns(benchmark::State& state) {
  for (auto _ : state) {
    ConversationManager manager = conversation();
    RunResult result = manager.run("What is the weather in Oslo?");
    benchmark::DoNotOptimize(result.content.data());
  }
}

void BM_TurnTelemetryOff(benchmark::State& state) {
  setTelemetry(nullptr);
  runTurns(state);
}
BENCHMARK(BM_TurnTelemetryOff);

void BM_TurnTelemetryDropAll(benchmark::State& state) {
  setTelemetry(std::make_shared<DropAll>());
  runTurns(state);
  setTelemetry(nullptr);
}
BENCHMARK(BM_TurnTelemetryDropAll);

void otlpTurns(benchmark::State& state, bool content) {
  TelemetryOptions options;
  options.captureContent = content;
  options.maxQueueSize = 1 << 16;
  std::atomic<size_t> bytes{0};
  options.send = [&](const std::string&, const std::string&, const std::string& body) {
    bytes += body.size();
    return 200;
  };
  auto exporter = std::make_shared<OtlpExporter>(options);
  setTelemetry(exporter);
  runTurns(state);
  setTelemetry(nullptr);
  exporter->shutdown();
  state.counters["dropped"] = static_cast<double>(exporter->stats().spansDropped);
  state.counters["body_bytes_per_turn"] =
      static_cast<double>(bytes.load()) / static_cast<double>(state.iterations());
}

void BM_TurnTelemetryOtlp(benchmark::State& state) {
  otlpTurns(state, false);
}
BENCHMARK(BM_TurnTelemetryOtlp);

void BM_TurnTelemetryOtlpContent(benchmark::State& state) {
  otlpTurns(state, true);
}
BENCHMARK(BM_TurnTelemetryOtlpContent);

void BM_SpanOff(benchmark::State& state) {
  setTelemetry(nullptr);
  for (auto _ : state) {
    Span span("chat", "gpt-4o", SpanKind::Client);
    span.set("gen_ai.operation.name", "chat");
    benchmark::DoNotOptimize(span.recording());
  }
}
BENCHMARK(BM_SpanOff);

void BM_SpanOn(benchmark::State& state) {
  setTelemetry(std::make_shared<DropAll>());
  for (auto _ : state) {
    Span span("chat", "gpt-4o", SpanKind::Client);
    span.set("gen_ai.operation.name", "chat");
    benchmark::DoNotOptimize(span.recording());
  }
  setTelemetry(nullptr);
}
BENCHMARK(BM_SpanOn);

}  // namespace

BENCHMARK_MAIN();
