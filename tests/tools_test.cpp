#include "parley/tools.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <latch>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "parley/errors.hpp"
#include "tools/tool_output.hpp"

namespace parley {
namespace {

using namespace std::chrono_literals;

const json kCitySchema = json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string"},
    "days": {"type": "integer", "minimum": 1},
    "units": {"type": "string", "enum": ["C", "F"]}
  },
  "required": ["city"],
  "additionalProperties": false
})");

json echo(const json& args, ToolContext&) {
  return args;
}

std::string fieldOfAdd(ToolRegistry& registry, const std::string& name, const json& schema,
                       ToolHandler handler = echo, ToolOptions options = {}) {
  try {
    registry.add(name, "d", schema, std::move(handler), options);
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "<added>";
}

// Blocks until the call's stop token is requested, as a well-behaved slow tool does.
void waitForStop(ToolContext& context) {
  std::mutex mutex;
  std::condition_variable_any never;
  std::unique_lock lock(mutex);
  never.wait(lock, context.stopToken, [] { return false; });
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// --- registry -------------------------------------------------------------------------------

TEST(ToolRegistry, RejectsInvalidAndDuplicateNames) {
  ToolRegistry registry;
  EXPECT_EQ(fieldOfAdd(registry, "", kCitySchema), "tool.name");
  EXPECT_EQ(fieldOfAdd(registry, "has space", kCitySchema), "tool.name");
  EXPECT_EQ(fieldOfAdd(registry, "dotted.name", kCitySchema), "tool.name");
  EXPECT_EQ(fieldOfAdd(registry, std::string(65, 'a'), kCitySchema), "tool.name");
  EXPECT_EQ(fieldOfAdd(registry, std::string(64, 'a'), kCitySchema), "<added>");
  EXPECT_EQ(fieldOfAdd(registry, "get-weather_2", kCitySchema), "<added>");
  std::uint64_t revision = registry.revision();
  EXPECT_EQ(fieldOfAdd(registry, "get-weather_2", kCitySchema), "tool.name");
  EXPECT_EQ(registry.revision(), revision);
  EXPECT_EQ(registry.size(), 2u);
}

TEST(ToolRegistry, RejectsSchemasThatCannotBeCompiled) {
  ToolRegistry registry;
  const char* bad[] = {
      R"({"type":"object","properties":{"a":{"type":"strin"}}})",
      R"({"type":"object","properties":{"a":{"$ref":"http://example.com/s.json"}}})",
      R"({"type":"object","properties":{"a":{"$ref":"#/definitions/missing"}}})",
      R"({"type":"object","properties":{"a":{"minimum":"one"}}})",
      R"({"type":"object","properties":{"a":{"type":"string","pattern":"[("}}})",
      R"({"type":"object","properties":5})",
      R"({"type":"array"})",
      R"({"properties":{}})",
      R"([1,2])",
  };
  for (const char* schema : bad)
    EXPECT_EQ(fieldOfAdd(registry, "t", json::parse(schema)), "tool.schema") << schema;
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_EQ(registry.revision(), 0u);
}

TEST(ToolRegistry, RejectsEmptyHandlerAndBadOptions) {
  ToolRegistry registry;
  EXPECT_EQ(fieldOfAdd(registry, "t", kCitySchema, ToolHandler{}), "tool.handler");
  EXPECT_EQ(fieldOfAdd(registry, "t", kCitySchema, echo, {.timeout = 0ms}), "tool.options.timeout");
  EXPECT_EQ(fieldOfAdd(registry, "t", kCitySchema, echo, {.retries = -1}), "tool.options.retries");
  EXPECT_EQ(fieldOfAdd(registry, "t", kCitySchema, echo, {.retryDelay = -1ms}),
            "tool.options.retryDelay");
  EXPECT_EQ(fieldOfAdd(registry, "t", kCitySchema, echo, {.maxResultBytes = 1023}),
            "tool.options.maxResultBytes");
  EXPECT_FALSE(registry.has("t"));
}

TEST(ToolRegistry, NamesHasFindRemove) {
  ToolRegistry registry;
  registry.add("b", "second letter", kCitySchema, echo, {.retries = 2, .parallel = false});
  registry.add("a", "first letter", json(), echo);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(registry.has("a"));
  auto info = registry.find("b");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->description, "second letter");
  EXPECT_EQ(info->schema, kCitySchema);
  EXPECT_EQ(info->options.retries, 2);
  EXPECT_FALSE(info->options.parallel);
  EXPECT_FALSE(registry.find("c"));
  std::uint64_t revision = registry.revision();
  EXPECT_FALSE(registry.remove("c"));
  EXPECT_EQ(registry.revision(), revision);
  EXPECT_TRUE(registry.remove("b"));
  EXPECT_EQ(registry.revision(), revision + 1);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"a"}));
  EXPECT_FALSE(registry.has("b"));
}

TEST(ToolRegistry, DefinitionsHaveTheOpenAiShape) {
  ToolRegistry registry;
  registry.add("get_weather", "Current weather for a city", kCitySchema, echo);
  registry.add("now", "", json::object(), echo);
  auto definitions = registry.definitions();
  json expected = json::array({
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"description", "Current weather for a city"},
         {"parameters", kCitySchema}}}},
      {{"type", "function"},
       {"function",
        {{"name", "now"}, {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}},
  });
  EXPECT_EQ(definitions->tools, expected);
  EXPECT_EQ(definitions->revision, registry.revision());
}

TEST(ToolRegistry, DefinitionsAreBuiltOncePerChange) {
  ToolRegistry registry;
  EXPECT_EQ(registry.definitions()->tools, json::array());
  registry.add("a", "A", kCitySchema, echo);
  auto first = registry.definitions();
  EXPECT_EQ(registry.definitions().get(), first.get());  // cached, not rebuilt
  registry.add("b", "B", kCitySchema, echo);
  auto second = registry.definitions();
  EXPECT_NE(second.get(), first.get());
  EXPECT_EQ(second->tools.size(), 2u);
  EXPECT_EQ(second->revision, first->revision + 1);
  EXPECT_EQ(first->tools.size(), 1u);  // a snapshot held by a caller does not change
  registry.remove("a");
  auto third = registry.definitions();
  ASSERT_EQ(third->tools.size(), 1u);
  EXPECT_EQ(third->tools[0]["function"]["name"], "b");
  EXPECT_EQ(third->revision, second->revision + 1);
}

// --- results --------------------------------------------------------------------------------

TEST(ToolResult, ContentRendersStringsAsIsOtherJsonCompactErrorsAsObjects) {
  ToolResult result;
  result.toolCallId = "c1";
  result.success = true;
  result.result = "plain text";
  EXPECT_EQ(result.content(), "plain text");
  result.result = json::parse(R"({"a": [1, 2], "b": "x"})");
  EXPECT_EQ(result.content(), R"({"a":[1,2],"b":"x"})");
  result.result = 42;
  EXPECT_EQ(result.content(), "42");
  result.success = false;
  result.result = nullptr;
  result.error = "tool \"x\" said \"no\"";
  EXPECT_EQ(result.content(), R"({"error":"tool \"x\" said \"no\""})");
  Message message = result.toMessage();
  EXPECT_EQ(message.role, Role::Tool);
  EXPECT_EQ(message.toolCallId, "c1");
  EXPECT_EQ(message.content, result.content());
}

// --- executor: every failure becomes a result ---------------------------------------------------

class ToolExecutorTest : public ::testing::Test {
 protected:
  std::shared_ptr<ToolRegistry> registry = std::make_shared<ToolRegistry>();
  std::atomic<int> calls{0};

  void addCounting(const std::string& name, const json& schema = kCitySchema) {
    registry->add(name, "d", schema, [this](const json& args, ToolContext&) {
      calls.fetch_add(1);
      return args;
    });
  }
};

TEST_F(ToolExecutorTest, UnknownToolBecomesErrorNamingTheAvailableTools) {
  addCounting("get_weather");
  addCounting("get_time");
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "get_wether", "{}"});
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.errorKind, ToolErrorKind::UnknownTool);
  EXPECT_EQ(result.toolCallId, "c1");
  EXPECT_EQ(result.name, "get_wether");
  EXPECT_TRUE(contains(result.error, "get_wether")) << result.error;
  EXPECT_TRUE(contains(result.error, "get_weather, get_time")) << result.error;
  EXPECT_EQ(json::parse(result.content()), json({{"error", result.error}}));
  EXPECT_EQ(calls.load(), 0);
}

// A handler's checkpoint reaches the executor's, with its call; the handle the executor looks up
// for a call is the handler's resumeFrom on every attempt, and a fresh call gets null.
TEST_F(ToolExecutorTest, CheckpointsReachTheCallerAndResumeFromReachesTheHandler) {
  std::vector<json> seen;
  registry->add("remote_task", "d", kCitySchema, [&](const json&, ToolContext& context) {
    seen.push_back(context.resumeFrom);
    if (context.checkpoint) context.checkpoint(context, {{"task", "t-" + context.toolCallId}});
    return json("done");
  });
  std::vector<std::pair<std::string, json>> noted;
  ToolExecutorOptions options;
  options.checkpoint = [&](const ToolContext& call, const json& handle) {
    noted.emplace_back(call.toolCallId, handle);
  };
  options.resumeFrom = [](const std::string& callId) {
    return callId == "c2" ? json{{"task", "t-old"}} : json();
  };
  ToolExecutor executor(registry, options);
  EXPECT_TRUE(executor.execute({"c1", "remote_task", R"({"city":"Oslo"})"}).success);
  EXPECT_TRUE(executor.execute({"c2", "remote_task", R"({"city":"Oslo"})"}).success);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[0].is_null());
  EXPECT_EQ(seen[1], json({{"task", "t-old"}}));
  ASSERT_EQ(noted.size(), 2u);
  EXPECT_EQ(noted[0].first, "c1");
  EXPECT_EQ(noted[1].second, json({{"task", "t-c2"}}));
}

// A caller's limits replace the tool's own for one call: the retries, and a deadline for the
// whole call that no attempt outlives; limits out of range are the call's error result.
TEST_F(ToolExecutorTest, ACallersLimitsReplaceTheToolsOwn) {
  std::atomic<int> attempts{0};
  ToolOptions own;
  own.retries = 0;
  registry->add(
      "flaky", "d", nullptr,
      [&](const json&, ToolContext&) -> json {
        attempts.fetch_add(1);
        throw std::runtime_error("down");
      },
      own);
  ToolExecutor executor(registry,
                        {.sleep = [](std::chrono::milliseconds, std::stop_token) { return true; }});
  ToolCallLimits three;
  three.retries = 2;
  ToolResult flaky = executor.execute({"c1", "flaky", "{}"}, {}, three);
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(flaky.retryCount, 2);

  ToolOptions patient;
  patient.timeout = std::chrono::minutes(1);
  registry->add(
      "waits", "d", nullptr,
      [](const json&, ToolContext& context) -> json {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        cv.wait(lock, context.stopToken, [] { return false; });
        return "stopped";
      },
      patient);
  ToolCallLimits soon;
  soon.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  ToolResult waited = executor.execute({"c2", "waits", "{}"}, {}, soon);
  EXPECT_EQ(waited.errorKind, ToolErrorKind::Timeout) << waited.error;

  ToolCallLimits bad;
  bad.retries = -1;
  EXPECT_EQ(executor.execute({"c3", "waits", "{}"}, {}, bad).errorKind,
            ToolErrorKind::InvalidArguments);
}

TEST_F(ToolExecutorTest, ArgumentsThatAreNotJsonBecomeError) {
  addCounting("get_weather");
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "get_weather", R"({"city": "Oslo")"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidJson);
  EXPECT_TRUE(contains(result.error, "not valid JSON")) << result.error;
  EXPECT_FALSE(contains(result.error, "[json.exception")) << result.error;
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(ToolExecutorTest, ArgumentsNestedTooDeepBecomeErrorNotACrash) {
  addCounting("get_weather", json::object());
  ToolExecutor executor(registry);
  const std::string deep =
      R"({"city": )" + std::string(100'000, '[') + std::string(100'000, ']') + "}";
  ToolResult result = executor.execute({"c1", "get_weather", deep});
  EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidJson);
  EXPECT_TRUE(contains(result.error, "nested deeper than 128 levels")) << result.error;
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(ToolExecutorTest, ArgumentsThatAreNotAnObjectBecomeError) {
  addCounting("get_weather");
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "get_weather", "[1]"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidArguments);
  EXPECT_TRUE(contains(result.error, "must be a JSON object, got array")) << result.error;
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(ToolExecutorTest, EmptyArgumentsMeanAnEmptyObject) {
  addCounting("now", json::object());
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "now", ""});
  ASSERT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.result, json::object());
  EXPECT_EQ(result.content(), "{}");
  // ... and an empty object still has to satisfy a schema that requires something.
  addCounting("get_weather");
  result = executor.execute({"c2", "get_weather", ""});
  EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidArguments);
  EXPECT_TRUE(contains(result.error, "missing required property 'city'")) << result.error;
}

TEST_F(ToolExecutorTest, ArgumentsFailingSchemaBecomeErrorNamingPropertyAndReason) {
  addCounting("get_weather");
  ToolExecutor executor(registry);
  struct Case {
    const char* arguments;
    const char* expected;
  } cases[] = {
      {R"({"city": 5})", "city: expected type string, got integer"},
      {R"({"city": "Oslo", "days": 0})", "days: expected number greater than or equal to 1"},
      {R"({"city": "Oslo", "units": "K"})", "units: failed to match against any enum values"},
      {R"({"city": "Oslo", "wind": true})", "'wind'"},
      {R"({})", "arguments: missing required property 'city'"},
  };
  for (const Case& c : cases) {
    ToolResult result = executor.execute({"c1", "get_weather", c.arguments});
    EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidArguments) << c.arguments;
    EXPECT_TRUE(contains(result.error, "invalid arguments for \"get_weather\"")) << result.error;
    EXPECT_TRUE(contains(result.error, c.expected)) << result.error;
    // Wrappers that only repeat a deeper failure are left out.
    EXPECT_FALSE(contains(result.error, "associated with property name")) << result.error;
  }
  EXPECT_EQ(calls.load(), 0);
  ToolResult valid = executor.execute({"c2", "get_weather", R"({"city":"Oslo","days":2})"});
  EXPECT_TRUE(valid.success) << valid.error;
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(ToolExecutorTest, NestedSchemaFailuresGiveThePath) {
  addCounting("plan", json::parse(R"({"type":"object","properties":{
      "stops":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"}}}}}})"));
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "plan", R"({"stops":[{"name":"a"},{"name":null}]})"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidArguments);
  EXPECT_TRUE(contains(result.error, "stops[1].name: expected type string, got null"))
      << result.error;
}

TEST_F(ToolExecutorTest, ThrownExceptionBecomesError) {
  registry->add("fail", "", json(),
                [](const json&, ToolContext&) -> json { throw std::runtime_error("disk full"); });
  registry->add("fail_oddly", "", json(), [](const json&, ToolContext&) -> json { throw 7; });
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "fail", "{}"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::HandlerFailed);
  EXPECT_EQ(result.error, "tool \"fail\" failed: disk full");
  EXPECT_EQ(result.content(), R"({"error":"tool \"fail\" failed: disk full"})");
  result = executor.execute({"c2", "fail_oddly", "{}"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::HandlerFailed);
  EXPECT_TRUE(contains(result.error, "unknown error")) << result.error;
}

TEST_F(ToolExecutorTest, HandlerValidationErrorIsInvalidArgumentsAndNotRetried) {
  std::atomic<int> attempts{0};
  registry->add("divide", "", json(),
                [&](const json&, ToolContext&) -> json {
                  attempts.fetch_add(1);
                  throw ValidationError("divisor", "must not be zero");
                },
                {.retries = 3});
  std::atomic<int> sleeps{0};
  ToolExecutor executor(registry, {.sleep = [&](std::chrono::milliseconds, std::stop_token) {
                          sleeps.fetch_add(1);
                          return true;
                        }});
  ToolResult result = executor.execute({"c1", "divide", "{}"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::InvalidArguments);
  EXPECT_TRUE(contains(result.error, "divisor: must not be zero")) << result.error;
  EXPECT_EQ(attempts.load(), 1);
  EXPECT_EQ(sleeps.load(), 0);
  EXPECT_EQ(result.retryCount, 0);
}

TEST_F(ToolExecutorTest, SlowToolHitsItsTimeoutAndIsAskedToStop) {
  std::latch sawStop(1);
  registry->add("slow", "", json(),
                [&](const json&, ToolContext& context) -> json {
                  waitForStop(context);
                  sawStop.count_down();
                  return "finished anyway";
                },
                {.timeout = 20ms});
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "slow", "{}"});
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.errorKind, ToolErrorKind::Timeout);
  EXPECT_EQ(result.error, "tool \"slow\" did not finish within 20 ms");
  EXPECT_TRUE(result.result.is_null());
  sawStop.wait();  // the handler's stop token was requested
}

TEST_F(ToolExecutorTest, HandlerIgnoringItsStopTokenDoesNotHangTheCaller) {
  auto release = std::make_shared<std::latch>(1);
  auto finished = std::make_shared<std::latch>(1);
  registry->add("stuck", "", json(),
                [release, finished](const json&, ToolContext&) -> json {
                  release->wait();  // ignores the stop token: only the test lets it go
                  finished->count_down();
                  return "late";
                },
                {.timeout = 20ms});
  {
    ToolExecutor executor(registry, {.maxConcurrent = 1});
    ToolResult result = executor.execute({"c1", "stuck", "{}"});
    EXPECT_EQ(result.errorKind, ToolErrorKind::Timeout);
    // The abandoned handler holds no slot: the executor's only slot is free again.
    addCounting("quick");
    ToolResult next = executor.execute({"c2", "quick", R"({"city":"Oslo"})"});
    EXPECT_TRUE(next.success) << next.error;
  }  // the executor is gone while the handler still runs
  release->count_down();
  finished->wait();  // the late result went nowhere; nothing dangled
}

TEST_F(ToolExecutorTest, ALongestTimeoutDoesNotOverflowIntoAnExpiredDeadline) {
  // 9223372036854775807 ms: converted to the clock's nanoseconds it used to wrap around to a
  // deadline in the past, and every call timed out at once.
  registry->add("t", "d", json::object(), echo,
                {.timeout = std::chrono::milliseconds(std::numeric_limits<int64_t>::max())});
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "t", "{}"});
  EXPECT_TRUE(result.success) << result.error;
}

TEST_F(ToolExecutorTest, RetriesWithTheConfiguredDelay) {
  std::vector<int> attemptsSeen;
  std::mutex mutex;
  registry->add("flaky", "", json(),
                [&](const json&, ToolContext& context) -> json {
                  std::lock_guard lock(mutex);
                  attemptsSeen.push_back(context.attempt);
                  if (context.attempt < 3) throw std::runtime_error("try again");
                  return "ok";
                },
                {.retries = 3, .retryDelay = 8s});
  std::vector<std::chrono::milliseconds> delays;
  ToolExecutor executor(registry, {.sleep = [&](std::chrono::milliseconds delay, std::stop_token) {
                          delays.push_back(delay);
                          return true;
                        }});
  ToolResult result = executor.execute({"c1", "flaky", "{}"});
  ASSERT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.result, "ok");
  EXPECT_EQ(result.retryCount, 2);
  EXPECT_EQ(attemptsSeen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(delays, (std::vector<std::chrono::milliseconds>{8s, 8s}));
}

TEST_F(ToolExecutorTest, RetriesRunOutWithTheLastError) {
  std::atomic<int> attempts{0};
  registry->add("broken", "", json(),
                [&](const json&, ToolContext&) -> json {
                  throw std::runtime_error("attempt " + std::to_string(attempts.fetch_add(1) + 1));
                },
                {.retries = 2, .retryDelay = 1s});
  std::atomic<int> sleeps{0};
  ToolExecutor executor(registry, {.sleep = [&](std::chrono::milliseconds, std::stop_token) {
                          sleeps.fetch_add(1);
                          return true;
                        }});
  ToolResult result = executor.execute({"c1", "broken", "{}"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::HandlerFailed);
  EXPECT_EQ(result.error, "tool \"broken\" failed: attempt 3 (3 attempts)");
  EXPECT_EQ(result.retryCount, 2);
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(sleeps.load(), 2);
}

TEST_F(ToolExecutorTest, TimeoutsAreRetried) {
  std::atomic<int> attempts{0};
  registry->add("slow", "", json(),
                [&](const json&, ToolContext& context) -> json {
                  attempts.fetch_add(1);
                  if (context.attempt == 1) waitForStop(context);
                  return context.attempt;
                },
                {.timeout = 20ms, .retries = 1});
  ToolExecutor executor(registry,
                        {.sleep = [](std::chrono::milliseconds, std::stop_token) { return true; }});
  ToolResult result = executor.execute({"c1", "slow", "{}"});
  ASSERT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.result, 2);
  EXPECT_EQ(result.retryCount, 1);
}

TEST_F(ToolExecutorTest, HandlerSeesItsCallInTheContext) {
  ToolContext seen;
  bool stopPossible = false;
  auto before = std::chrono::steady_clock::now();
  registry->add("look", "", json(),
                [&](const json&, ToolContext& context) -> json {
                  seen = context;
                  stopPossible = context.stopToken.stop_possible();
                  return nullptr;
                },
                {.timeout = 90s});
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"call_7", "look", "{}"});
  ASSERT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.content(), "null");
  EXPECT_EQ(seen.toolCallId, "call_7");
  EXPECT_EQ(seen.name, "look");
  EXPECT_EQ(seen.attempt, 1);
  EXPECT_TRUE(stopPossible);
  EXPECT_FALSE(seen.stopRequested());
  EXPECT_GE(seen.deadline, before + 90s);
  EXPECT_LE(seen.deadline, std::chrono::steady_clock::now() + 90s);
}

TEST_F(ToolExecutorTest, SleeperThatThrowsBecomesError) {
  registry->add("broken", "", json(),
                [](const json&, ToolContext&) -> json { throw std::runtime_error("no"); },
                {.retries = 1});
  ToolExecutor executor(registry, {.maxConcurrent = 1,
                                   .sleep = [](std::chrono::milliseconds, std::stop_token) -> bool {
                                     throw std::runtime_error("sleeper broke");
                                   }});
  ToolResult result = executor.execute({"1", "broken", "{}"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::HandlerFailed);
  EXPECT_TRUE(contains(result.error, "sleeper broke")) << result.error;
  // The slot was given back: the next call runs.
  result = executor.execute({"2", "broken", "{}"});
  EXPECT_EQ(result.errorKind, ToolErrorKind::HandlerFailed);
}

// --- executor: batches ------------------------------------------------------------------------

TEST_F(ToolExecutorTest, ThreeToolsFinishingOutOfOrderComeBackInCallOrder) {
  // c finishes first, then b, then a; each waits for the one meant to finish before it.
  std::mutex mutex;
  std::condition_variable_any changed;
  std::vector<std::string> finishOrder;
  auto finishAfter = [&](std::string self, std::string before) {
    return [&, self, before](const json&, ToolContext& context) -> json {
      std::unique_lock lock(mutex);
      changed.wait(lock, context.stopToken, [&] {
        return before.empty() ||
               std::find(finishOrder.begin(), finishOrder.end(), before) != finishOrder.end();
      });
      finishOrder.push_back(self);
      changed.notify_all();
      return "result of " + self;
    };
  };
  registry->add("a", "", json(), finishAfter("a", "b"), {.timeout = 30s});
  registry->add("b", "", json(), finishAfter("b", "c"), {.timeout = 30s});
  registry->add("c", "", json(), finishAfter("c", ""), {.timeout = 30s});
  ToolExecutor executor(registry);
  std::vector<ToolCall> batch = {{"id-a", "a", "{}"}, {"id-b", "b", "{}"}, {"id-c", "c", "{}"}};
  std::vector<ToolResult> results = executor.executeAll(batch);
  EXPECT_EQ(finishOrder, (std::vector<std::string>{"c", "b", "a"}));
  ASSERT_EQ(results.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(results[i].success) << results[i].error;
    EXPECT_EQ(results[i].toolCallId, batch[i].id);
    EXPECT_EQ(results[i].result, "result of " + batch[i].name);
  }
}

TEST_F(ToolExecutorTest, BatchMixesFailuresAndSuccessesInCallOrder) {
  addCounting("get_weather");
  ToolExecutor executor(registry);
  std::vector<ToolCall> batch = {{"1", "get_weather", R"({"city":"Oslo"})"},
                                 {"2", "nope", "{}"},
                                 {"3", "get_weather", "{"},
                                 {"4", "get_weather", R"({"city":1})"},
                                 {"5", "get_weather", R"({"city":"Rome"})"}};
  std::vector<ToolResult> results = executor.executeAll(batch);
  ASSERT_EQ(results.size(), 5u);
  std::vector<ToolErrorKind> kinds;
  for (const ToolResult& r : results)
    kinds.push_back(r.errorKind);
  EXPECT_EQ(kinds, (std::vector<ToolErrorKind>{
                       ToolErrorKind::None, ToolErrorKind::UnknownTool, ToolErrorKind::InvalidJson,
                       ToolErrorKind::InvalidArguments, ToolErrorKind::None}));
  for (std::size_t i = 0; i < batch.size(); ++i)
    EXPECT_EQ(results[i].toolCallId, batch[i].id);
  EXPECT_EQ(results[4].result["city"], "Rome");
  EXPECT_TRUE(executor.executeAll({}).empty());
}

TEST_F(ToolExecutorTest, ConcurrencyCapIsHonoured) {
  constexpr int kCap = 2;
  constexpr int kCalls = 7;
  std::mutex mutex;
  std::condition_variable_any changed;
  int running = 0;
  int entered = 0;
  int maxRunning = 0;
  // A handler leaves only once `kCap` handlers run together (or every call has started), so a
  // correct executor reaches the cap exactly.
  registry->add("work", "", json(),
                [&](const json&, ToolContext& context) -> json {
                  std::unique_lock lock(mutex);
                  ++running;
                  ++entered;
                  maxRunning = std::max(maxRunning, running);
                  changed.notify_all();
                  changed.wait(lock, context.stopToken,
                               [&] { return running >= kCap || entered == kCalls; });
                  // Give an executor without a cap the chance to start one call too many. A
                  // correct one never does, so this bounded wait costs time, synchronises nothing.
                  changed.wait_for(lock, 2ms, [&] { return running > kCap; });
                  --running;
                  changed.notify_all();
                  return entered;
                },
                {.timeout = 30s});
  ToolExecutor executor(registry, {.maxConcurrent = kCap});
  std::vector<ToolCall> batch;
  for (int i = 0; i < kCalls; ++i)
    batch.push_back({"c" + std::to_string(i), "work", "{}"});
  std::vector<ToolResult> results = executor.executeAll(batch);
  for (const ToolResult& r : results)
    EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(entered, kCalls);
  EXPECT_EQ(maxRunning, kCap);
}

TEST_F(ToolExecutorTest, NonParallelToolRunsAlone) {
  std::mutex mutex;
  std::vector<std::string> log;
  auto logged = [&](std::string what) {
    std::lock_guard lock(mutex);
    log.push_back(std::move(what));
  };
  registry->add("p", "", json::parse(R"({"type":"object","properties":{"i":{"type":"integer"}}})"),
                [&](const json& args, ToolContext&) -> json {
                  std::string i = std::to_string(args["i"].get<int>());
                  logged("start " + i);
                  logged("end " + i);
                  return nullptr;
                });
  registry->add("s", "", json(),
                [&](const json&, ToolContext&) -> json {
                  logged("start s");
                  logged("end s");
                  return nullptr;
                },
                {.parallel = false});
  ToolExecutor executor(registry);
  std::vector<ToolCall> batch = {{"0", "p", R"({"i":0})"},
                                 {"1", "p", R"({"i":1})"},
                                 {"2", "s", "{}"},
                                 {"3", "p", R"({"i":3})"},
                                 {"4", "p", R"({"i":4})"}};
  std::vector<ToolResult> results = executor.executeAll(batch);
  for (const ToolResult& r : results)
    EXPECT_TRUE(r.success) << r.error;
  auto at = [&](const std::string& entry) {
    return std::find(log.begin(), log.end(), entry) - log.begin();
  };
  ASSERT_EQ(log.size(), 10u);
  EXPECT_LT(at("end 0"), at("start s"));
  EXPECT_LT(at("end 1"), at("start s"));
  EXPECT_LT(at("end s"), at("start 3"));
  EXPECT_LT(at("end s"), at("start 4"));
}

TEST_F(ToolExecutorTest, CancellingTheBatchEndsRunningCallsAndSkipsTheRest) {
  std::latch started(1);
  std::atomic<int> attempts{0};
  registry->add("wait", "", json(),
                [&](const json&, ToolContext& context) -> json {
                  attempts.fetch_add(1);
                  started.count_down();
                  waitForStop(context);
                  return "stopped";
                },
                {.timeout = 30s});
  ToolExecutor executor(registry, {.maxConcurrent = 1});
  std::stop_source cancel;
  std::vector<ToolCall> batch = {{"1", "wait", "{}"}, {"2", "wait", "{}"}, {"3", "wait", "{}"}};
  std::vector<ToolResult> results;
  std::jthread caller([&] { results = executor.executeAll(batch, cancel.get_token()); });
  started.wait();
  cancel.request_stop();
  caller.join();
  ASSERT_EQ(results.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i].errorKind, ToolErrorKind::Cancelled);
    EXPECT_EQ(results[i].toolCallId, batch[i].id);
  }
  EXPECT_TRUE(contains(results[1].error, "before it started")) << results[1].error;
  EXPECT_EQ(attempts.load(), 1);
}

TEST_F(ToolExecutorTest, CancellationInterruptsTheRetryDelay) {
  registry->add("broken", "", json(),
                [](const json&, ToolContext&) -> json { throw std::runtime_error("no"); },
                {.retries = 5, .retryDelay = 1h});
  ToolExecutor executor(registry);  // the real sleeper
  std::stop_source cancel;
  ToolResult result;
  std::jthread caller([&] {
    result = executor.execute({"1", "broken", "{}"}, cancel.get_token());
  });
  cancel.request_stop();  // before, during or after the first attempt: the wait never lasts 1 h
  caller.join();
  EXPECT_EQ(result.errorKind, ToolErrorKind::Cancelled);
}

// --- thread-safety ----------------------------------------------------------------------------

TEST_F(ToolExecutorTest, RegistryAndExecutorAreSafeToShareAcrossThreads) {
  addCounting("stable");
  ToolExecutor executor(registry);
  constexpr int kRounds = 200;
  std::atomic<bool> inconsistent{false};
  std::vector<std::jthread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        std::string name = "t" + std::to_string(t) + "_" + std::to_string(i % 5);
        if (!registry->remove(name)) registry->add(name, "churn", kCitySchema, echo);
      }
    });
  threads.emplace_back([&] {
    for (int i = 0; i < kRounds; ++i) {
      auto definitions = registry->definitions();
      bool hasStable = false;
      for (const json& tool : definitions->tools)
        hasStable = hasStable || tool["function"]["name"] == "stable";
      if (!hasStable) inconsistent = true;
    }
  });
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds / 4; ++i) {
        std::vector<ToolCall> batch = {{"a", "stable", R"({"city":"Oslo"})"},
                                       {"b", "stable", R"({"city":"Rome"})"}};
        for (const ToolResult& r : executor.executeAll(batch))
          if (!r.success) inconsistent = true;
      }
    });
  threads.clear();  // joins
  EXPECT_FALSE(inconsistent.load());
  EXPECT_EQ(calls.load(), 2 * (kRounds / 4) * 2);
  EXPECT_TRUE(registry->has("stable"));
}

}  // namespace
}  // namespace parley

// --- what a result may be ---------------------------------------------------------------------

namespace parley {
namespace {

TEST(ToolResultCap, ALongResultKeepsItsHeadAndTailAndSaysWhatWasCut) {
  auto registry = std::make_shared<ToolRegistry>();
  const std::string big = "HEAD" + std::string(1'000'000, 'x') + "TAIL";
  registry->add("big", "d", json::object(), [&](const json&, ToolContext&) -> json { return big; },
                {.maxResultBytes = 4096});
  registry->add("bigjson", "d", json::object(),
                [&](const json&, ToolContext&) -> json {
                  return {{"data", big}};
                },
                {.maxResultBytes = 4096});
  registry->add("small", "d", json::object(),
                [](const json&, ToolContext&) -> json {
                  return {{"ok", true}};
                },
                {.maxResultBytes = 4096});
  ToolExecutor executor(registry);
  for (const char* name : {"big", "bigjson"}) {
    SCOPED_TRACE(name);
    ToolResult result = executor.execute({"c1", name, "{}"});
    ASSERT_TRUE(result.success) << result.error;
    const std::string content = result.content();
    EXPECT_LE(content.size(), 4096u);
    EXPECT_GT(content.size(), 3500u);  // the cap is used, not wasted
    EXPECT_TRUE(contains(content.substr(0, 20), "HEAD")) << content.substr(0, 20);
    EXPECT_TRUE(contains(content.substr(content.size() - 20), "TAIL"));
    EXPECT_TRUE(contains(content, "bytes cut here: the output was")) << content;
    EXPECT_TRUE(contains(content, "more than the limit of 4096")) << content;
  }
  // A result that fits stays the JSON value it was.
  ToolResult small = executor.execute({"c1", "small", "{}"});
  EXPECT_EQ(small.result, json({{"ok", true}}));
}

TEST(ToolResultCap, OutputThatIsNotUtf8IsRepairedAndSaysSo) {
  auto registry = std::make_shared<ToolRegistry>();
  registry->add("bytes", "d", json::object(),
                [](const json&, ToolContext&) -> json { return std::string("ok \xff\xfe end"); });
  registry->add("object", "d", json::object(), [](const json&, ToolContext&) -> json {
    return {{"name", std::string("caf\xe9")}};
  });
  ToolExecutor executor(registry);
  ToolResult text = executor.execute({"c1", "bytes", "{}"});
  ASSERT_TRUE(text.success);
  EXPECT_EQ(text.content().rfind("ok \xEF\xBF\xBD\xEF\xBF\xBD end", 0), 0u) << text.content();
  EXPECT_TRUE(contains(text.content(), "not valid UTF-8")) << text.content();
  ToolResult object = executor.execute({"c1", "object", "{}"});
  ASSERT_TRUE(object.success);
  EXPECT_TRUE(contains(object.content(), "{\"name\":\"caf\xEF\xBF\xBD\"}")) << object.content();
  EXPECT_TRUE(contains(object.content(), "not valid UTF-8")) << object.content();
  // Either is now text a request can carry.
  EXPECT_NO_THROW(json(text.content()).dump());
  EXPECT_NO_THROW(json(object.content()).dump());
}

TEST(ToolOutput, Utf8RepairReplacesEachMaximalIllFormedSubsequence) {
  struct Case {
    std::string in, out;
  };
  const std::string r = "\xEF\xBF\xBD";
  const Case cases[] = {
      {"plain", "plain"},
      {"\xC3\xA9t\xC3\xA9", "\xC3\xA9t\xC3\xA9"},
      {"a\x80"
       "b",
       "a" + r + "b"},
      {"\xC0\xAF", r + r},  // overlong: each byte
      {"\xE2\x82", r},      // truncated: one replacement
      {"\xE2\x82x", r + "x"},
      {"\xED\xA0\x80", r + r + r},          // a surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},  // past U+10FFFF
      {"\xF0\x9F\x98\x80!", "\xF0\x9F\x98\x80!"},
      {"\xF0\x9F\x98", r},
  };
  for (const Case& c : cases) {
    std::string text = c.in;
    const std::size_t replaced = detail::repairUtf8(text);
    EXPECT_EQ(text, c.out);
    EXPECT_EQ(replaced == 0, c.in == c.out);
  }
}

TEST(ToolOutput, CollectorKeepsHeadAndTailInBoundedMemory) {
  detail::OutputCollector collector(2048);
  collector.append("START");
  std::string block;
  for (int i = 0; i < 5000; ++i)
    block += "\xC3\xA9";  // two bytes a character, so the cuts land inside characters
  for (int i = 0; i < 1000; ++i)
    collector.append(block);
  collector.append("!END");
  EXPECT_TRUE(collector.truncated());
  EXPECT_EQ(collector.totalBytes(), 5u + 10'000'000u + 4u);
  const std::string text = collector.text();
  EXPECT_LE(text.size(), 2048u);
  EXPECT_GT(text.size(), 1800u);
  EXPECT_EQ(text.rfind("START", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 4), "!END");
  EXPECT_TRUE(contains(text, "bytes cut here: the output was 10000009 bytes")) << text;
  std::string repaired = text;
  EXPECT_EQ(detail::repairUtf8(repaired), 0u);  // no character was cut in two

  detail::OutputCollector small(2048);
  small.append("one ");
  small.append(std::string(1500, 't'));
  small.append(" two");
  EXPECT_FALSE(small.truncated());
  EXPECT_EQ(small.text(), "one " + std::string(1500, 't') + " two");
}

}  // namespace
}  // namespace parley
