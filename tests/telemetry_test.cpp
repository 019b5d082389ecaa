// Spans, trace context and the OTLP exporter (docs/telemetry.md): the W3C traceparent rules; a
// turn against the in-process mock gives invoke_agent / chat / execute_tool spans with the GenAI
// conventions' names, kinds, parents and attribute types, and sends the chat span's traceparent
// to the provider; content only when opted in, in the conventions' JSON schemas, with secrets
// redacted; the exporter's JSON body, its bounded queue (drops counted, never blocking), a
// receiver that is down, metrics, and the OTEL_* variables.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mock_fixture.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/events.hpp"
#include "parley/executor.hpp"
#include "parley/otlp.hpp"
#include "parley/profiles.hpp"
#include "parley/telemetry.hpp"
#include "parley/tools.hpp"
#include "tools/tool_schema.hpp"

namespace parley {
namespace {

using nlohmann::json;

// Keeps every span and measurement in memory.
class Collector : public Telemetry {
 public:
  explicit Collector(bool content = false) : content_(content) {}
  void exportSpan(SpanData&& span) noexcept override {
    std::lock_guard lock(mutex_);
    spans_.push_back(std::move(span));
  }
  void recordHistogram(std::string_view name, double value,
                       const std::vector<Attribute>&) noexcept override {
    std::lock_guard lock(mutex_);
    histograms_.emplace_back(std::string(name), value);
  }
  bool captureContent() const noexcept override { return content_; }
  std::vector<SpanData> spans() const {
    std::lock_guard lock(mutex_);
    return spans_;
  }
  std::vector<std::pair<std::string, double>> histograms() const {
    std::lock_guard lock(mutex_);
    return histograms_;
  }

 private:
  bool content_;
  mutable std::mutex mutex_;
  std::vector<SpanData> spans_;
  std::vector<std::pair<std::string, double>> histograms_;
};

// Installs a Telemetry for one test.
struct Installed {
  explicit Installed(std::shared_ptr<Telemetry> t) { setTelemetry(std::move(t)); }
  ~Installed() { setTelemetry(nullptr); }
};

const Attribute* attribute(const SpanData& span, const std::string& key) {
  for (const Attribute& a : span.attributes)
    if (a.key == key) return &a;
  return nullptr;
}

template <typename T>
T value(const SpanData& span, const std::string& key) {
  const Attribute* a = attribute(span, key);
  if (!a) throw std::runtime_error("no attribute " + key + " on " + span.name);
  if (!std::holds_alternative<T>(a->value)) {
    throw std::runtime_error("attribute " + key + " on " + span.name + " has another type");
  }
  return std::get<T>(a->value);
}

std::vector<SpanData> named(const std::vector<SpanData>& spans, const std::string& name) {
  std::vector<SpanData> out;
  for (const SpanData& s : spans)
    if (s.name == name) out.push_back(s);
  return out;
}

json readJsonFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// --- W3C trace context ---------------------------------------------------------------------

TEST(TraceContextTest, ReadsAndWritesTraceparent) {
  const std::string header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto context = TraceContext::parse(header, "vendor=abc");
  ASSERT_TRUE(context);
  EXPECT_EQ(context->traceIdHex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(context->spanIdHex(), "00f067aa0ba902b7");
  EXPECT_EQ(context->flags, 1);
  EXPECT_EQ(context->traceState, "vendor=abc");
  EXPECT_TRUE(context->remote);
  EXPECT_EQ(context->traceparent(), header);
  // A later version may add fields after the four it shares with 00.
  EXPECT_TRUE(TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"));
}

TEST(TraceContextTest, IgnoresMalformedHeaders) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 with more
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
       }) {
    EXPECT_FALSE(TraceContext::parse(bad)) << bad;
  }
}

TEST(TraceContextTest, CarriesOnlyASafeTracestate) {
  const std::string header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_EQ(TraceContext::parse(header, "a=1\r\nx-injected: yes")->traceState, "");
  EXPECT_EQ(TraceContext::parse(header, std::string(513, 'a'))->traceState, "");
  EXPECT_EQ(TraceContext::parse(header, std::string(512, 'a'))->traceState.size(), 512u);
}

// --- spans ---------------------------------------------------------------------------------

TEST(SpanTest, RecordsNothingWhenNoTelemetryIsInstalled) {
  Span span("chat", "m", SpanKind::Client);
  EXPECT_FALSE(span.recording());
  EXPECT_FALSE(span.context().valid());
  EXPECT_FALSE(currentTraceContext().valid());
  span.set("gen_ai.request.model", "m");  // does nothing, throws nothing
}

TEST(SpanTest, NestsUnderTheCurrentSpanAndARemoteParent) {
  auto collector = std::make_shared<Collector>();
  Installed installed(collector);
  const auto remote =
      TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  {
    ContextScope scope(*remote);
    Span outer("outer", "", SpanKind::Server);
    {
      Span inner("inner", "x");
      EXPECT_EQ(currentTraceContext().spanId, inner.context().spanId);
    }
    EXPECT_EQ(currentTraceContext().spanId, outer.context().spanId);
  }
  EXPECT_FALSE(currentTraceContext().valid());
  const auto spans = collector->spans();
  ASSERT_EQ(spans.size(), 2u);
  const SpanData& inner = spans[0];
  const SpanData& outer = spans[1];
  EXPECT_EQ(inner.name, "inner x");
  EXPECT_EQ(inner.parentId, outer.context.spanId);
  EXPECT_EQ(outer.parentId, remote->spanId);
  EXPECT_TRUE(outer.parentRemote);
  EXPECT_EQ(outer.context.traceId, remote->traceId);
  EXPECT_EQ(inner.context.traceId, remote->traceId);
  EXPECT_LE(outer.startNs, inner.startNs);
  EXPECT_GE(outer.endNs, inner.endNs);
}

// --- a turn ----------------------------------------------------------------------------------

// JSON Lines: one rule a line.
const char* kWeatherScript =
    R"({"name": "answer", "match": {"last_role": "tool"}, "reply": {"content": "Sunny.", "usage": {"prompt_tokens": 50, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 40}, "completion_tokens_details": {"reasoning_tokens": 2}}}}
{"name": "call", "match": {"user_contains": "weather"}, "reply": {"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo", "api_key": "sk-live-0123456789abcdef"}}], "usage": {"prompt_tokens": 30, "completion_tokens": 9}}}
{"name": "broken", "match": {"user_contains": "fail"}, "error": {"status": 500}}
)";

ConversationManager weatherConversation(const mock::MockServer& server) {
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("get_weather", "The weather of a city",
             json{{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}},
             [](const json& args, ToolContext&) {
               return json{{"city", args["city"]}, {"sky", "sunny"}, {"token", "tok-secret-99999"}};
             });
  ConversationOptions options;
  options.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(server, "mock-model"));
  options.tools = tools;
  options.systemPrompt = "You are terse.";
  return ConversationManager(std::move(options));
}

TEST(GenAiSpansTest, ATurnIsAnAgentSpanWithItsChatAndToolSpans) {
  auto server = testing::startMockServer(kWeatherScript);
  auto collector = std::make_shared<Collector>();
  Installed installed(collector);
  ConversationManager manager = weatherConversation(*server);
  RunOptions run;
  run.conversationId = "t-42";
  manager.run("What is the weather in Oslo?", run);

  const auto spans = collector->spans();
  const auto agents = named(spans, "invoke_agent");
  const auto chats = named(spans, "chat mock-model");
  const auto tools = named(spans, "execute_tool get_weather");
  ASSERT_EQ(agents.size(), 1u);
  ASSERT_EQ(chats.size(), 2u);
  ASSERT_EQ(tools.size(), 1u);
  const SpanData& agent = agents[0];
  EXPECT_EQ(agent.parentId, (std::array<uint8_t, 8>{}));  // a root
  EXPECT_EQ(agent.kind, SpanKind::Internal);
  EXPECT_EQ(value<std::string>(agent, "gen_ai.operation.name"), "invoke_agent");
  EXPECT_EQ(value<std::string>(agent, "gen_ai.conversation.id"), "t-42");
  EXPECT_EQ(value<int64_t>(agent, "gen_ai.usage.input_tokens"), 80);
  for (const SpanData& chat : chats) {
    EXPECT_EQ(chat.kind, SpanKind::Client);
    EXPECT_EQ(chat.parentId, agent.context.spanId);
    EXPECT_EQ(chat.context.traceId, agent.context.traceId);
    EXPECT_EQ(value<std::string>(chat, "gen_ai.operation.name"), "chat");
    EXPECT_EQ(value<std::string>(chat, "gen_ai.provider.name"), "openai");
    EXPECT_EQ(value<std::string>(chat, "gen_ai.request.model"), "mock-model");
    EXPECT_EQ(value<std::string>(chat, "server.address"), "127.0.0.1");
    EXPECT_GT(value<int64_t>(chat, "server.port"), 0);
    EXPECT_EQ(value<std::string>(chat, "gen_ai.conversation.id"), "t-42");
    EXPECT_FALSE(attribute(chat, "gen_ai.input.messages"));  // content is opt-in
    EXPECT_FALSE(attribute(chat, "gen_ai.output.messages"));
    EXPECT_FALSE(chat.error);
  }
  EXPECT_EQ(value<std::vector<std::string>>(chats[0], "gen_ai.response.finish_reasons"),
            std::vector<std::string>{"tool_calls"});
  EXPECT_EQ(value<int64_t>(chats[0], "gen_ai.usage.output_tokens"), 9);
  EXPECT_EQ(value<int64_t>(chats[1], "gen_ai.usage.cache_read.input_tokens"), 40);
  EXPECT_EQ(value<int64_t>(chats[1], "gen_ai.usage.reasoning.output_tokens"), 2);
  const SpanData& tool = tools[0];
  EXPECT_EQ(tool.parentId, agent.context.spanId);
  EXPECT_EQ(value<std::string>(tool, "gen_ai.tool.name"), "get_weather");
  EXPECT_EQ(value<std::string>(tool, "gen_ai.tool.call.id"), "call_1");
  EXPECT_EQ(value<std::string>(tool, "gen_ai.tool.type"), "function");
  EXPECT_FALSE(attribute(tool, "gen_ai.tool.call.arguments"));

  // The provider got each call's own span as its parent.
  const auto requests = server->requests();
  ASSERT_EQ(requests.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(requests[i]["headers"].value("traceparent", ""),
              "00-" + chats[i].context.traceIdHex() + "-" + chats[i].context.spanIdHex() + "-01");
  }
  // And the client metrics of the conventions.
  size_t durations = 0, tokenUsages = 0;
  for (const auto& [name, v] : collector->histograms()) {
    durations += name == "gen_ai.client.operation.duration";
    tokenUsages += name == "gen_ai.client.token.usage";
  }
  EXPECT_EQ(durations, 2u);
  EXPECT_EQ(tokenUsages, 4u);  // input and output per call
}

// With prices, each chat span says what its call cost and the run's span what the run cost.
TEST(GenAiSpansTest, PricedCallsCarryTheirCost) {
  auto server = testing::startMockServer(kWeatherScript);
  auto collector = std::make_shared<Collector>();
  Installed installed(collector);
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("get_weather", "The weather of a city",
             json{{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}},
             [](const json& args, ToolContext&) {
               return json{{"city", args["city"]}};
             });
  ConversationOptions options;
  options.llm = std::make_shared<OpenAiClient>(testing::mockClientOptions(*server, "mock-model"));
  options.tools = tools;
  auto prices = std::make_shared<PriceTable>();
  prices->set("mock-model", {1, {}, {}, 2, {}, {}});
  options.budget.prices = prices;
  ConversationManager manager(std::move(options));
  manager.run("What is the weather in Oslo?");

  const auto spans = collector->spans();
  const auto chats = named(spans, "chat mock-model");
  const auto agents = named(spans, "invoke_agent");
  ASSERT_EQ(chats.size(), 2u);
  ASSERT_EQ(agents.size(), 1u);
  double sum = 0;
  for (const SpanData& chat : chats) {
    const double expected = (value<int64_t>(chat, "gen_ai.usage.input_tokens") * 1.0 +
                             value<int64_t>(chat, "gen_ai.usage.output_tokens") * 2.0) /
                            1e6;
    EXPECT_NEAR(value<double>(chat, "parley.cost.usd"), expected, 1e-12);
    sum += expected;
  }
  EXPECT_GT(sum, 0);
  EXPECT_NEAR(value<double>(agents[0], "parley.cost.usd"), sum, 1e-12);
}

// The executor's bus carries the trace: a request published with a traceparent (or from inside
// a span) runs its chat spans in that trace, and the ToolWorker's execute_tool span, on another
// thread, joins it too.
TEST(GenAiSpansTest, TheExecutorsBusCarriesTheTraceToItsToolWorker) {
  auto server = testing::startMockServer(kWeatherScript);
  auto collector = std::make_shared<Collector>();
  Installed installed(collector);
  auto profiles = std::make_shared<ProfileRegistry>();
  profiles->add("default", testing::mockClientOptions(*server, "mock-model"));
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("get_weather", "The weather of a city",
             json{{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}},
             [](const json& args, ToolContext&) {
               return json{{"city", args["city"]}};
             });
  EventBus bus;
  std::mutex mutex;
  std::vector<std::string> toolEventParents;
  auto seen = bus.subscribe<ToolExecutionRequest>([&](const ToolExecutionRequest& e) {
    std::lock_guard lock(mutex);
    toolEventParents.push_back(e.traceparent);
  });
  ExecutorOptions options;
  options.profiles = profiles;
  options.tools = tools;
  LlmExecutor executor(bus, options);
  const std::string parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  LlmExecutionRequest request;
  request.workflowId = "wf";
  request.threadId = "t-bus";
  request.nodeId = "n";
  request.requestData.prompt = "What is the weather in Oslo?";
  request.requestData.profileId = "default";
  request.traceparent = parent;
  const LlmExecutionResult result = executor.execute(request);
  ASSERT_EQ(result.iterations, 2);

  const auto spans = collector->spans();
  const auto chats = named(spans, "chat mock-model");
  const auto tool = named(spans, "execute_tool get_weather");
  ASSERT_EQ(chats.size(), 2u);
  ASSERT_EQ(tool.size(), 1u);
  for (const SpanData& chat : chats)
    EXPECT_EQ(chat.context.traceIdHex(), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(tool[0].context.traceIdHex(), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_NE(tool[0].parentId, (std::array<uint8_t, 8>{}));
  std::lock_guard lock(mutex);
  ASSERT_EQ(toolEventParents.size(), 1u);
  EXPECT_NE(toolEventParents[0].find("0af7651916cd43dd8448eb211c80319c"), std::string::npos);
}

TEST(GenAiSpansTest, NoHeaderAndNoSpanWhenTelemetryIsOff) {
  auto server = testing::startMockServer(kWeatherScript);
  ConversationManager manager = weatherConversation(*server);
  manager.run("What is the weather in Oslo?");
  for (const json& request : server->requests())
    EXPECT_FALSE(request["headers"].contains("traceparent"));
}

TEST(GenAiSpansTest, ContentOnlyWhenOptedInInTheConventionsShapeAndRedacted) {
  auto server = testing::startMockServer(kWeatherScript);
  auto collector = std::make_shared<Collector>(/*content=*/true);
  Installed installed(collector);
  ConversationManager manager = weatherConversation(*server);
  manager.run("What is the weather in Oslo?");

  const std::string dir = PARLEY_OTEL_SCHEMA_DIR;
  CompiledSchema input(readJsonFile(dir + "/gen-ai-input-messages.json"), "input", "messages");
  CompiledSchema output(readJsonFile(dir + "/gen-ai-output-messages.json"), "output", "messages");
  CompiledSchema system(readJsonFile(dir + "/gen-ai-system-instructions.json"), "system",
                        "instructions");
  const auto spans = collector->spans();
  const auto chats = named(spans, "chat mock-model");
  ASSERT_EQ(chats.size(), 2u);
  for (const SpanData& chat : chats) {
    const json in = json::parse(value<std::string>(chat, "gen_ai.input.messages"));
    const json out = json::parse(value<std::string>(chat, "gen_ai.output.messages"));
    const json sys = json::parse(value<std::string>(chat, "gen_ai.system_instructions"));
    EXPECT_EQ(input.check(in), "") << in.dump();
    EXPECT_EQ(output.check(out), "") << out.dump();
    EXPECT_EQ(system.check(sys), "") << sys.dump();
    EXPECT_EQ(sys, json::parse(R"([{"type": "text", "content": "You are terse."}])"));
  }
  // The second call's input: the question, the tool call and its result, in parts.
  const json in = json::parse(value<std::string>(chats[1], "gen_ai.input.messages"));
  ASSERT_EQ(in.size(), 3u);
  EXPECT_EQ(in[1]["parts"][0]["type"], "tool_call");
  EXPECT_EQ(in[1]["parts"][0]["arguments"]["city"], "Oslo");
  EXPECT_EQ(in[2]["role"], "tool");
  EXPECT_EQ(in[2]["parts"][0]["type"], "tool_call_response");
  EXPECT_EQ(in[2]["parts"][0]["response"]["sky"], "sunny");
  const auto tools = named(spans, "execute_tool get_weather");
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(json::parse(value<std::string>(tools[0], "gen_ai.tool.call.arguments"))["city"],
            "Oslo");
  // No secret reaches a span: the key-like argument and result fields are redacted, and the
  // API key is never recorded.
  for (const SpanData& span : spans) {
    for (const Attribute& a : span.attributes) {
      if (!std::holds_alternative<std::string>(a.value)) continue;
      const std::string& text = std::get<std::string>(a.value);
      EXPECT_EQ(text.find("sk-live-0123456789abcdef"), std::string::npos) << a.key;
      EXPECT_EQ(text.find("tok-secret-99999"), std::string::npos) << a.key;
      EXPECT_EQ(text.find("sk-test"), std::string::npos) << a.key;
    }
  }
}

TEST(GenAiSpansTest, AFailedCallIsAnErrorSpanWithItsType) {
  auto server = testing::startMockServer(kWeatherScript);
  auto collector = std::make_shared<Collector>();
  Installed installed(collector);
  ConversationManager manager = weatherConversation(*server);
  EXPECT_THROW(manager.run("please fail"), HttpError);
  const auto spans = collector->spans();
  const auto chats = named(spans, "chat mock-model");
  const auto agents = named(spans, "invoke_agent");
  ASSERT_EQ(chats.size(), 1u);
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_TRUE(chats[0].error);
  EXPECT_EQ(value<std::string>(chats[0], "error.type"), "500");
  EXPECT_TRUE(agents[0].error);
  EXPECT_EQ(value<std::string>(agents[0], "error.type"), "500");
}

TEST(GenAiSpansTest, EmbeddingsAreAClientSpanWithTheirModelAndSize) {
  auto server = testing::startMockServer(kWeatherScript);
  auto collector = std::make_shared<Collector>();
  Installed installed(collector);
  OpenAiClient client(testing::mockClientOptions(*server, "mock-model"));
  const EmbeddingResult result = client.createEmbeddings({"one two", "three"}, "embed-small");
  const auto spans = named(collector->spans(), "embeddings embed-small");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].kind, SpanKind::Client);
  EXPECT_FALSE(spans[0].error);
  EXPECT_EQ(value<std::string>(spans[0], "gen_ai.operation.name"), "embeddings");
  EXPECT_EQ(value<std::string>(spans[0], "gen_ai.request.model"), "embed-small");
  EXPECT_EQ(value<std::string>(spans[0], "server.address"), "127.0.0.1");
  ASSERT_FALSE(result.embeddings.empty());
  EXPECT_EQ(value<int64_t>(spans[0], "gen_ai.embeddings.dimension.count"),
            static_cast<int64_t>(result.embeddings[0].size()));
}

// --- the exporter ----------------------------------------------------------------------------

SpanData sampleSpan(const std::string& name) {
  SpanData span;
  span.name = name;
  span.kind = SpanKind::Client;
  span.context = *TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  span.parentId = {1, 2, 3, 4, 5, 6, 7, 8};
  span.startNs = 1'700'000'000'000'000'000;
  span.endNs = span.startNs + 5;
  span.attributes = {{"gen_ai.usage.input_tokens", int64_t{12}},
                     {"gen_ai.response.finish_reasons", std::vector<std::string>{"stop"}},
                     {"parley.stream", true}};
  span.error = true;
  span.statusMessage = "boom";
  return span;
}

// A receiver seam that keeps each post.
struct Posts {
  std::mutex mutex;
  std::vector<std::tuple<std::string, std::string, std::string>> posts;  // url, type, body
  TelemetryOptions options(TelemetryOptions::Encoding encoding) {
    TelemetryOptions o;
    o.encoding = encoding;
    o.send = [this](const std::string& url, const std::string& type, const std::string& body) {
      std::lock_guard lock(mutex);
      posts.emplace_back(url, type, body);
      return 200;
    };
    return o;
  }
};

TEST(OtlpExporterTest, PostsTheOtlpJsonMapping) {
  Posts posts;
  auto options = posts.options(TelemetryOptions::Encoding::Json);
  options.serviceName = "svc";
  options.resourceAttributes = {{"deployment.environment", "test"}};
  OtlpExporter exporter(options);
  exporter.exportSpan(sampleSpan("chat m"));
  ASSERT_TRUE(exporter.flush(std::chrono::seconds(30)));
  std::lock_guard lock(posts.mutex);
  ASSERT_GE(posts.posts.size(), 1u);
  const auto& [url, type, body] = posts.posts[0];
  EXPECT_EQ(url, "/v1/traces");
  EXPECT_EQ(type, "application/json");
  const json doc = json::parse(body);
  const json& rs = doc["resourceSpans"][0];
  json resource;
  for (const json& kv : rs["resource"]["attributes"])
    resource[kv["key"].get<std::string>()] = kv["value"];
  EXPECT_EQ(resource["service.name"]["stringValue"], "svc");
  EXPECT_EQ(resource["deployment.environment"]["stringValue"], "test");
  const json& span = rs["scopeSpans"][0]["spans"][0];
  EXPECT_EQ(span["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");  // hex, not base64
  EXPECT_EQ(span["spanId"], "00f067aa0ba902b7");
  EXPECT_EQ(span["parentSpanId"], "0102030405060708");
  EXPECT_EQ(span["kind"], 3);
  EXPECT_EQ(span["startTimeUnixNano"], "1700000000000000000");  // 64-bit integers as strings
  EXPECT_EQ(span["attributes"][0]["value"]["intValue"], "12");
  EXPECT_EQ(span["attributes"][1]["value"]["arrayValue"]["values"][0]["stringValue"], "stop");
  EXPECT_EQ(span["attributes"][2]["value"]["boolValue"], true);
  EXPECT_EQ(span["status"]["code"], 2);
  EXPECT_EQ(span["status"]["message"], "boom");
  EXPECT_EQ(exporter.stats().spansExported, 1u);
}

TEST(OtlpExporterTest, AFullQueueDropsAndCountsWithoutBlocking) {
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false, released = false;
  TelemetryOptions options;
  options.maxQueueSize = 2;
  options.maxExportBatchSize = 1;
  options.send = [&](const std::string&, const std::string&, const std::string&) {
    std::unique_lock lock(mutex);
    entered = true;
    changed.notify_all();
    changed.wait(lock, [&] { return released; });  // a receiver that does not answer
    return 200;
  };
  OtlpExporter exporter(options);
  exporter.exportSpan(sampleSpan("first"));
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return entered; });  // the thread is stuck in the first post
  }
  for (int i = 0; i < 9; ++i)
    exporter.exportSpan(sampleSpan("more"));     // returns at once although the post hangs
  EXPECT_EQ(exporter.stats().spansDropped, 7u);  // two fit in the queue
  {
    std::lock_guard lock(mutex);
    released = true;
  }
  changed.notify_all();
  ASSERT_TRUE(exporter.flush(std::chrono::seconds(30)));
  EXPECT_EQ(exporter.stats().spansExported, 3u);
}

TEST(OtlpExporterTest, AReceiverThatIsDownCostsRetriesAndADroppedBatch) {
  // A port nobody listens on: bound, then closed.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  TelemetryOptions options;
  options.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  options.maxRetries = 2;
  options.retryDelay = std::chrono::milliseconds(1);
  OtlpExporter exporter(options);
  exporter.exportSpan(sampleSpan("lost"));
  ASSERT_TRUE(exporter.flush(std::chrono::seconds(60)));
  const TelemetryStats stats = exporter.stats();
  EXPECT_EQ(stats.spansExported, 0u);
  EXPECT_EQ(stats.spansDropped, 1u);
  EXPECT_EQ(stats.retries, 2u);
  EXPECT_GE(stats.exportFailures, 1u);
}

TEST(OtlpExporterTest, AggregatesHistogramsAndCountersIntoCumulativeMetrics) {
  Posts posts;
  OtlpExporter exporter(posts.options(TelemetryOptions::Encoding::Json));
  const std::vector<Attribute> attributes = {{"gen_ai.token.type", std::string("input")}};
  exporter.recordHistogram("gen_ai.client.token.usage", 3, attributes);
  exporter.recordHistogram("gen_ai.client.token.usage", 100, attributes);
  exporter.addCounter("parley.run.claims", 2, {});
  ASSERT_TRUE(exporter.flush(std::chrono::seconds(30)));
  std::lock_guard lock(posts.mutex);
  json metrics;
  for (const auto& [url, type, body] : posts.posts)
    if (url == "/v1/metrics") metrics = json::parse(body);
  ASSERT_FALSE(metrics.is_null());
  json byName;
  for (const json& m : metrics["resourceMetrics"][0]["scopeMetrics"][0]["metrics"])
    byName[m["name"].get<std::string>()] = m;
  const json& usage = byName["gen_ai.client.token.usage"];
  EXPECT_EQ(usage["unit"], "{token}");
  const json& point = usage["histogram"]["dataPoints"][0];
  EXPECT_EQ(point["count"], "2");
  EXPECT_EQ(point["sum"], 103.0);
  EXPECT_EQ(point["explicitBounds"][0], 1.0);
  EXPECT_EQ(point["bucketCounts"][1], "1");  // 3 is in (1, 4]
  EXPECT_EQ(point["bucketCounts"][4], "1");  // 100 is in (64, 256]
  EXPECT_EQ(usage["histogram"]["aggregationTemporality"], 2);
  EXPECT_EQ(byName["parley.run.claims"]["sum"]["dataPoints"][0]["asInt"], "2");
  EXPECT_EQ(byName["parley.run.claims"]["sum"]["isMonotonic"], true);
}

// --- the environment ---------------------------------------------------------------------------

struct Environment {
  std::vector<std::string> names;
  void set(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    names.push_back(name);
  }
  ~Environment() {
    for (const std::string& name : names)
      ::unsetenv(name.c_str());
  }
};

TEST(TelemetryOptionsTest, ReadsTheStandardVariables) {
  Environment env;
  EXPECT_FALSE(TelemetryOptions::fromEnvironment().active());
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%20def, x-tenant = 7");
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
  env.set("OTEL_SERVICE_NAME", "checkout");
  env.set("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment=prod");
  env.set("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "TRUE");
  env.set("OTEL_BSP_MAX_QUEUE_SIZE", "16");
  const TelemetryOptions o = TelemetryOptions::fromEnvironment();
  EXPECT_TRUE(o.active());
  EXPECT_EQ(o.endpoint, "http://collector:4318");
  EXPECT_EQ(o.headers, (std::vector<std::string>{"api-key: abc def", "x-tenant: 7"}));
  EXPECT_EQ(o.encoding, TelemetryOptions::Encoding::Json);
  EXPECT_EQ(o.serviceName, "checkout");
  EXPECT_EQ(o.resourceAttributes.size(), 2u);
  EXPECT_TRUE(o.captureContent);
  EXPECT_EQ(o.maxQueueSize, 16u);
  env.set("OTEL_SDK_DISABLED", "true");
  EXPECT_FALSE(TelemetryOptions::fromEnvironment().active());
  EXPECT_FALSE(installTelemetryFromEnvironment());
  EXPECT_FALSE(telemetryEnabled());
}

TEST(TelemetryOptionsTest, RefusesMalformedOrOversizedValues) {
  {
    Environment env;
    env.set("OTEL_BSP_MAX_QUEUE_SIZE", "lots");
    EXPECT_THROW(TelemetryOptions::fromEnvironment(), ValidationError);
  }
  {
    Environment env;
    env.set("OTEL_BSP_MAX_QUEUE_SIZE", std::to_string((1 << 20) + 1));  // past the cap
    EXPECT_THROW(TelemetryOptions::fromEnvironment(), ValidationError);
  }
  {
    Environment env;
    env.set("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign");
    EXPECT_THROW(TelemetryOptions::fromEnvironment(), ValidationError);
  }
  {
    Environment env;
    std::string many;
    for (int i = 0; i < 65; ++i)
      many += "h" + std::to_string(i) + "=v,";
    env.set("OTEL_EXPORTER_OTLP_HEADERS", many);  // 65 headers: one past the cap
    EXPECT_THROW(TelemetryOptions::fromEnvironment(), ValidationError);
  }
  {
    Environment env;
    env.set("OTEL_RESOURCE_ATTRIBUTES", "k=" + std::string(8193, 'v'));  // past 8 KiB
    EXPECT_THROW(TelemetryOptions::fromEnvironment(), ValidationError);
  }
  {
    Environment env;
    env.set("OTEL_EXPORTER_OTLP_HEADERS", "x=a%0d%0aInjected: 1");  // a decoded line break
    EXPECT_THROW(TelemetryOptions::fromEnvironment(), ValidationError);
  }
}

}  // namespace
}  // namespace parley
