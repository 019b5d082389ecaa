// A structured llm node of the LlmExecutor (requestData.parameters.structured) against
// `parley mock`: the answer on the first rung, the repair loop, a refused rung stepping down,
// giving up, bad parameters refused before anything is sent, streaming with partial answers,
// the cap on the errors an attempt event carries, the request deadline, the response cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "parley/errors.hpp"
#include "parley/event_log.hpp"
#include "parley/executor.hpp"
#include "parley/store.hpp"
#include "parley/structured_output.hpp"
#include "store/sqlite_store.hpp"

namespace parley {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const json kPersonSchema = json::parse(R"({"type": "object",
  "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
  "required": ["name", "age"], "additionalProperties": false})");

// The events a structured node publishes, in order, under a lock.
struct Recorder {
  explicit Recorder(EventBus& bus) {
    subs.push_back(bus.subscribe<StructuredOutputAttempt>([this](const StructuredOutputAttempt& e) {
      std::lock_guard lock(mutex);
      attempts.push_back(e);
      order.push_back(e.type);
    }));
    subs.push_back(bus.subscribe<MessageAdded>([this](const MessageAdded& e) {
      std::lock_guard lock(mutex);
      added.push_back(e);
      order.push_back(e.type);
    }));
    subs.push_back(bus.subscribe<LlmStreamChunk>([this](const LlmStreamChunk& e) {
      std::lock_guard lock(mutex);
      chunks.push_back(e);
    }));
    subs.push_back(bus.subscribe<LlmExecutionFailed>([this](const LlmExecutionFailed& e) {
      std::lock_guard lock(mutex);
      failed.push_back(e);
    }));
  }
  std::mutex mutex;
  std::vector<StructuredOutputAttempt> attempts;
  std::vector<MessageAdded> added;
  std::vector<LlmStreamChunk> chunks;
  std::vector<LlmExecutionFailed> failed;
  std::vector<std::string> order;
  std::vector<Subscription> subs;
};

class ExecutorStructured : public ::testing::Test {
 protected:
  void startMock(const std::string& script,
                 StructuredOutputMode mode = StructuredOutputMode::Auto) {
    server_ = testing::startMockServer(script);
    ClientOptions client = testing::mockClientOptions(*server_, "gpt-4o-mini");
    client.structuredOutput = mode;
    profiles_->add("default", client);
  }

  ExecutorOptions options() {
    ExecutorOptions o;
    o.profiles = profiles_;
    o.logErrors = false;
    return o;
  }

  static LlmExecutionRequest request(const std::string& thread, const std::string& prompt,
                                     json structured) {
    LlmExecutionRequest r;
    r.workflowId = "wf-1";
    r.threadId = thread;
    r.nodeId = "extract";
    r.requestData.prompt = prompt;
    r.requestData.profileId = "default";
    r.requestData.parameters = {{"structured", std::move(structured)}, {"temperature", 0}};
    return r;
  }

  // Runs the request; the failure's errorDetails, or null when it completed.
  json failureOf(LlmExecutor& executor, const LlmExecutionRequest& r) {
    std::mutex mutex;
    json details;
    Subscription sub = bus_.subscribe<LlmExecutionFailed>([&](const LlmExecutionFailed& e) {
      std::lock_guard lock(mutex);
      if (e.traceId == r.traceId) details = e.errorDetails;
    });
    bus_.publish(r);
    executor.waitIdle();
    std::lock_guard lock(mutex);
    return details;
  }

  json body(size_t i) const { return server_->requests().at(i)["body"]; }

  // The thread's visible messages.
  static std::vector<Message> history(const ContextSnapshot& snapshot) {
    return snapshot.messages();
  }

  std::unique_ptr<mock::MockServer> server_;
  std::shared_ptr<ProfileRegistry> profiles_ = std::make_shared<ProfileRegistry>();
  EventBus bus_;
};

TEST_F(ExecutorStructured, TheFirstRungAnswersAndOneAttemptIsPublished) {
  startMock(
      R"({"match": {"response_format": "json_schema"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}", "usage": {"prompt_tokens": 12, "completion_tokens": 7}}})");
  Recorder rec(bus_);
  std::ostringstream logged;
  EventLog eventLog(bus_, logged);
  LlmExecutor executor(bus_, options());
  LlmExecutionCompleted done;
  Subscription sub =
      bus_.subscribe<LlmExecutionCompleted>([&](const LlmExecutionCompleted& e) { done = e; });
  auto r = request("t1", "Who wrote the first program?",
                   {{"schema", kPersonSchema}, {"name", "person"}});
  r.traceId = "trace-s1";
  bus_.publish(r);
  executor.waitIdle();

  ASSERT_EQ(done.traceId, "trace-s1");
  EXPECT_EQ(json::parse(done.result.content), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(done.result.finishReason, "structured");
  EXPECT_EQ(done.result.iterations, 1);
  EXPECT_EQ(done.result.usage.promptTokens, 12);
  EXPECT_EQ(done.result.usage.completionTokens, 7);
  EXPECT_TRUE(done.result.toolCalls.empty());
  // The request: the strict schema under the node's name, the other parameters merged, the
  // executor's own key not sent.
  ASSERT_EQ(server_->requests().size(), 1u);
  const json sent = body(0);
  EXPECT_EQ(sent["response_format"]["type"], "json_schema");
  EXPECT_EQ(sent["response_format"]["json_schema"]["name"], "person");
  EXPECT_EQ(sent["response_format"]["json_schema"]["schema"], kPersonSchema);
  EXPECT_EQ(sent["temperature"], 0);
  EXPECT_FALSE(sent.contains("structured"));
  EXPECT_FALSE(sent.contains("tools"));

  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.attempts.size(), 1u);
  const StructuredOutputAttempt& a = rec.attempts[0];
  EXPECT_EQ(a.nodeId, "extract");
  EXPECT_EQ(a.traceId, "trace-s1");
  EXPECT_EQ(a.attempt, 1);
  EXPECT_EQ(a.rungAttempt, 1);
  EXPECT_EQ(a.rung, "json_schema");
  EXPECT_TRUE(a.valid);
  EXPECT_FALSE(a.refused);
  EXPECT_TRUE(a.errors.empty());
  ASSERT_TRUE(a.usage.has_value());
  EXPECT_EQ(a.usage->promptTokens, 12);
  EXPECT_FALSE(a.spanId.empty());
  // The prompt and the answer join the thread, in the span of the call that answered.
  EXPECT_EQ(rec.order, (std::vector<std::string>{"structured_output_attempt", "message_added",
                                                 "message_added"}));
  ASSERT_EQ(rec.added.size(), 2u);
  EXPECT_EQ(rec.added[0].message, Message::user("Who wrote the first program?"));
  EXPECT_EQ(rec.added[0].spanId, a.spanId);
  EXPECT_EQ(json::parse(rec.added[1].message.content)["name"], "Ada");
  EXPECT_EQ(rec.added[1].spanId, a.spanId);
  const auto messages = history(done.updatedContext);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(json::parse(messages[1].content), json::parse(done.result.content));

  // The event log writes the attempt.
  bool found = false;
  std::istringstream lines(logged.str());
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    if (j["type"] != "structured_output_attempt") continue;
    found = true;
    EXPECT_EQ(j["rung"], "json_schema");
    EXPECT_EQ(j["valid"], true);
    EXPECT_EQ(j["span_id"], a.spanId);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 12);
  }
  EXPECT_TRUE(found) << logged.str();
}

TEST_F(ExecutorStructured, ARepairIsASecondAttemptAndTheThreadKeepsOnlyTheValidAnswer) {
  startMock(R"(
{"match": {"request": 1}, "reply": {"content": "{\"name\": \"Ada\", \"age\": \"thirty-six\"}", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}}
{"match": {"request": 2}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}", "usage": {"prompt_tokens": 30, "completion_tokens": 6}}}
)");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  LlmExecutionCompleted done;
  Subscription sub =
      bus_.subscribe<LlmExecutionCompleted>([&](const LlmExecutionCompleted& e) { done = e; });
  bus_.publish(request("t1", "Who?", {{"schema", kPersonSchema}}));
  executor.waitIdle();

  EXPECT_EQ(json::parse(done.result.content), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(done.result.iterations, 2);
  EXPECT_EQ(done.result.usage.promptTokens, 40);
  EXPECT_EQ(done.result.usage.completionTokens, 11);
  const auto messages = history(done.updatedContext);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], Message::user("Who?"));
  EXPECT_EQ(json::parse(messages[1].content)["age"], 36);

  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.attempts.size(), 2u);
  EXPECT_FALSE(rec.attempts[0].valid);
  EXPECT_EQ(rec.attempts[0].errors,
            std::vector<std::string>{"age: expected type integer, got string"});
  EXPECT_EQ(rec.attempts[0].errorCount, 1u);
  EXPECT_EQ(rec.attempts[0].usage->promptTokens, 10);
  EXPECT_TRUE(rec.attempts[1].valid);
  EXPECT_EQ(rec.attempts[1].attempt, 2);
  EXPECT_EQ(rec.attempts[1].rungAttempt, 2);
  EXPECT_EQ(rec.attempts[1].usage->promptTokens, 30);
  EXPECT_NE(rec.attempts[0].spanId, rec.attempts[1].spanId);  // a span per model call
  ASSERT_EQ(rec.added.size(), 2u);
  EXPECT_EQ(rec.added[0].spanId, rec.attempts[0].spanId);  // the call that sent the prompt
  EXPECT_EQ(rec.added[1].spanId, rec.attempts[1].spanId);  // the call that answered
}

TEST_F(ExecutorStructured, ARefusedRungIsAnAttemptAndTheNextRungFollows) {
  startMock(R"(
{"match": {"response_format": "json_schema"}, "error": {"status": 400, "body": "{\"error\": {\"message\": \"Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.\", \"type\": \"invalid_request_error\"}}"}}
{"match": {"response_format": "json_object"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
)");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  const LlmExecutionResult result =
      executor.execute(request("t1", "Who?", {{"schema", kPersonSchema}, {"mode", "auto"}}));
  EXPECT_EQ(json::parse(result.content)["name"], "Ada");
  EXPECT_EQ(result.iterations, 2);
  ASSERT_EQ(server_->requests().size(), 2u);
  EXPECT_EQ(body(1)["response_format"]["type"], "json_object");

  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.attempts.size(), 2u);
  EXPECT_TRUE(rec.attempts[0].refused);
  EXPECT_FALSE(rec.attempts[0].valid);
  EXPECT_EQ(rec.attempts[0].rung, "json_schema");
  ASSERT_EQ(rec.attempts[0].errors.size(), 1u);
  EXPECT_NE(rec.attempts[0].errors[0].find("400"), std::string::npos) << rec.attempts[0].errors[0];
  EXPECT_FALSE(rec.attempts[0].usage.has_value());
  EXPECT_EQ(rec.attempts[1].rung, "json_object");
  EXPECT_EQ(rec.attempts[1].attempt, 2);
  EXPECT_EQ(rec.attempts[1].rungAttempt, 1);
  EXPECT_TRUE(rec.attempts[1].valid);
  ASSERT_EQ(rec.added.size(), 2u);
  EXPECT_EQ(rec.added[0].spanId, rec.attempts[1].spanId);  // the prompt the answering rung sent
}

TEST_F(ExecutorStructured, GivingUpFailsAsStructuredOutputAndLeavesTheThreadAsItWas) {
  startMock(R"(
{"match": {"request": 1}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
{"match": {"request": 2}, "reply": {"content": "{\"name\": \"Grace\"}"}}
{"match": {"request": 3}, "reply": {"content": "{\"name\": \"Grace\"}"}}
{"reply": {"content": "{\"name\": \"Alan\", \"age\": 41}"}}
)");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  executor.execute(request("t1", "Who first?", {{"schema", kPersonSchema}}));

  auto failing = request("t1", "Who next?", {{"schema", kPersonSchema}, {"maxRepairs", 1}});
  failing.traceId = "trace-fail";
  const json details = failureOf(executor, failing);
  ASSERT_TRUE(details.is_object()) << details.dump();
  EXPECT_EQ(details["kind"], "structured_output");
  EXPECT_EQ(details["path"], "age");
  EXPECT_EQ(details["attempts"], 2);
  EXPECT_EQ(details["rung"], "json_schema");
  EXPECT_EQ(details["messages"], json::array({"answer: missing required property 'age'"}));
  EXPECT_EQ(server_->requests().size(), 3u);
  {
    std::lock_guard lock(rec.mutex);
    size_t failedAttempts = 0;
    for (const auto& a : rec.attempts)
      if (a.traceId == "trace-fail") {
        EXPECT_FALSE(a.valid);
        ++failedAttempts;
      }
    EXPECT_EQ(failedAttempts, 2u);
    for (const auto& m : rec.added)
      EXPECT_NE(m.traceId, "trace-fail");  // nothing of it joined the thread
  }
  // The next request finds the thread as the first one left it.
  LlmExecutionCompleted done;
  Subscription sub =
      bus_.subscribe<LlmExecutionCompleted>([&](const LlmExecutionCompleted& e) { done = e; });
  bus_.publish(request("t1", "Who then?", {{"schema", kPersonSchema}}));
  executor.waitIdle();
  const auto messages = history(done.updatedContext);
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0], Message::user("Who first?"));
  EXPECT_EQ(messages[2], Message::user("Who then?"));
  EXPECT_EQ(json::parse(messages[3].content)["name"], "Alan");
  // Nor did the failed attempts reach the model again.
  const json last = body(3)["messages"];
  for (const auto& m : last)
    EXPECT_EQ(m.dump().find("Grace"), std::string::npos) << last.dump();
}

TEST_F(ExecutorStructured, BadParametersFailNamingTheFieldAndSendNothing) {
  startMock(R"({"reply": {"content": "{}"}})");
  ExecutorOptions o = options();
  o.tools = std::make_shared<ToolRegistry>();
  o.tools->add("lookup", "finds things", nullptr,
               [](const json&, ToolContext&) -> json { return "found"; });
  LlmExecutor executor(bus_, o);
  json deep = {{"type", "object"}};
  json* at = &deep;
  for (int i = 0; i < kMaxStructuredSchemaDepth + 1; ++i) {
    (*at)["properties"] = {{"x", {{"type", "object"}}}};
    at = &(*at)["properties"]["x"];
  }
  json big = kPersonSchema;
  big["description"] = std::string(kMaxStructuredSchemaBytes, 'd');

  const std::string field = "requestData.parameters.structured";
  const std::vector<std::pair<json, std::string>> cases = {
      {"just a string", field},
      {{{"name", "x"}}, field + ".schema"},
      {{{"schema", "not an object"}}, field + ".schema"},
      {{{"schema", {{"type", "array"}}}}, field + ".schema"},
      {{{"schema", deep}}, field + ".schema"},
      {{{"schema", big}}, field + ".schema"},
      {{{"schema", {{"type", "object"}, {"properties", {{"a", {{"pattern", "("}}}}}}}},
       field + ".schema"},
      {{{"schema", kPersonSchema}, {"mode", "xml"}}, field + ".mode"},
      {{{"schema", kPersonSchema}, {"mode", 3}}, field + ".mode"},
      {{{"schema", kPersonSchema}, {"maxRepairs", kMaxStructuredRepairs + 1}},
       field + ".maxRepairs"},
      {{{"schema", kPersonSchema}, {"maxRepairs", -1}}, field + ".maxRepairs"},
      {{{"schema", kPersonSchema}, {"name", "not a name!"}}, field + ".name"},
      {{{"schema", kPersonSchema}, {"strict", true}}, field + ".strict"},
  };
  int n = 0;
  for (const auto& [structured, expected] : cases) {
    auto r = request("t" + std::to_string(n), "Who?", structured);
    r.traceId = "trace-bad-" + std::to_string(n++);
    const json details = failureOf(executor, r);
    EXPECT_EQ(details.value("kind", ""), "validation") << structured.dump().substr(0, 200);
    EXPECT_EQ(details.value("field", ""), expected) << structured.dump().substr(0, 200);
  }
  // A long key, name or mode is not echoed whole.
  const std::string huge(100000, 'k');
  for (const json& structured :
       {json{{"schema", kPersonSchema}, {huge, 1}}, json{{"schema", kPersonSchema}, {"name", huge}},
        json{{"schema", kPersonSchema}, {"mode", huge}}}) {
    auto longOne = request("long", "Who?", structured);
    longOne.traceId = "trace-long-" + std::to_string(n++);
    const json details = failureOf(executor, longOne);
    EXPECT_EQ(details.value("kind", ""), "validation");
    EXPECT_LT(details.value("message", "").size(), 400u) << details.value("field", "");
  }
  // Past the caps, the reason says which cap.
  auto r = request("deep", "Who?", {{"schema", deep}});
  r.traceId = "trace-deep";
  EXPECT_NE(failureOf(executor, r).value("reason", "").find("cap"), std::string::npos);
  r = request("big", "Who?", {{"schema", big}});
  r.traceId = "trace-big";
  EXPECT_NE(failureOf(executor, r).value("reason", "").find("cap"), std::string::npos);

  // Tools are not offered to a structured node; other node types cannot ask for one.
  r = request("tools", "Who?", {{"schema", kPersonSchema}});
  r.requestData.tools = {"lookup"};
  r.traceId = "trace-tools";
  EXPECT_EQ(failureOf(executor, r).value("field", ""), "requestData.tools");
  r = request("ui", "Who?", {{"schema", kPersonSchema}});
  r.nodeType = "user_interaction";
  r.traceId = "trace-ui";
  EXPECT_EQ(failureOf(executor, r).value("field", ""), field);
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(ExecutorStructured, StreamingPublishesChunksWithThePartialAnswer) {
  startMock(
      R"({"reply": {"content": "{\"name\": \"Ada Lovelace\", \"age\": 36}", "chunk_size": 4}})");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  auto r = request("t1", "Who?", {{"schema", kPersonSchema}});
  r.requestData.stream = true;
  const LlmExecutionResult result = executor.execute(r);
  const json value = json::parse(result.content);
  EXPECT_EQ(value, json({{"name", "Ada Lovelace"}, {"age", 36}}));

  std::lock_guard lock(rec.mutex);
  std::string text;
  json lastPartial;
  size_t partials = 0;
  for (const auto& c : rec.chunks) {
    text += c.content;
    EXPECT_EQ(c.iteration, 1);
    EXPECT_EQ(c.nodeId, "extract");
    if (!c.partial.is_null()) {
      lastPartial = c.partial;
      ++partials;
    }
  }
  EXPECT_GE(rec.chunks.size(), 2u);
  EXPECT_EQ(json::parse(text), value);
  EXPECT_GE(partials, 2u);
  EXPECT_EQ(lastPartial, value);
  ASSERT_EQ(rec.attempts.size(), 1u);
  EXPECT_EQ(rec.chunks.front().spanId, rec.attempts[0].spanId);
}

TEST_F(ExecutorStructured, AnAttemptCarriesAtMostItsCapOfErrorsEachCut) {
  startMock(R"({"reply": {"content": "{}"}})");
  Recorder rec(bus_);
  LlmExecutor executor(bus_, options());
  const size_t fields = StructuredOutputAttempt::kMaxErrors + 4;
  json schema = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
  for (size_t i = 0; i < fields; ++i) {
    // The first field's name alone is past the cap on an error's length (and sorts first).
    const std::string name = i == 0 ? std::string(StructuredOutputAttempt::kMaxErrorBytes, 'a')
                                    : "f" + std::to_string(i);
    schema["properties"][name] = {{"type", "string"}};
    schema["required"].push_back(name);
  }
  auto r = request("t1", "Who?", {{"schema", schema}, {"maxRepairs", 0}});
  r.traceId = "trace-cap";
  EXPECT_EQ(failureOf(executor, r).value("kind", ""), "structured_output");
  std::lock_guard lock(rec.mutex);
  ASSERT_EQ(rec.attempts.size(), 1u);
  const StructuredOutputAttempt& a = rec.attempts[0];
  EXPECT_EQ(a.errorCount, fields);
  EXPECT_EQ(a.errors.size(), StructuredOutputAttempt::kMaxErrors);
  size_t cut = 0;
  for (const auto& e : a.errors) {
    EXPECT_LE(e.size(), StructuredOutputAttempt::kMaxErrorBytes);
    if (e.size() == StructuredOutputAttempt::kMaxErrorBytes) ++cut;
  }
  EXPECT_EQ(cut, 1u);
}

TEST_F(ExecutorStructured, TheRequestTimeoutBoundsEveryAttempt) {
  startMock(R"(
{"match": {"request": 1}, "reply": {"content": "{\"name\": \"Ada\"}"}}
{"delay_ms": 60000, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
)");
  Recorder rec(bus_);
  ExecutorOptions o = options();
  o.turn.turnTimeout = 300ms;
  LlmExecutor executor(bus_, o);
  auto r = request("t1", "Who?", {{"schema", kPersonSchema}});
  r.traceId = "trace-slow";
  const json details = failureOf(executor, r);
  EXPECT_EQ(details.value("kind", ""), "timeout") << details.dump();
  EXPECT_NE(details.value("message", "").find("turn"), std::string::npos) << details.dump();
  std::lock_guard lock(rec.mutex);
  EXPECT_EQ(rec.attempts.size(), 1u);  // the repair never ended
  EXPECT_TRUE(rec.added.empty());
}

// With a store: the completed node is saved (the hidden repair too, as runStructured keeps it),
// a new executor sees the prompt and the answer alone, and a node cancelled between its
// attempts fails as cancelled and writes nothing.
TEST_F(ExecutorStructured, AStoredThreadKeepsTheAnswerAndACancelledNodeWritesNothing) {
  startMock(R"(
{"match": {"request": [1, 3]}, "reply": {"content": "{\"name\": \"Ada\"}"}}
{"reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
)");
  std::string dir = (std::filesystem::temp_directory_path() / "parley-exec-st-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  {
    auto store = std::make_shared<SqliteStore>(dir + "/threads.db");
    ExecutorOptions o = options();
    o.store = store;
    {
      LlmExecutor first(bus_, o);
      EXPECT_EQ(first.execute(request("kept", "Who?", {{"schema", kPersonSchema}})).iterations, 2);
    }
    ASSERT_EQ(store->loadThread("kept").messages.size(), 4u);  // storage: the repair, hidden

    LlmExecutor second(bus_, o);
    LlmExecutionRequest read;
    read.workflowId = "wf-1";
    read.threadId = "kept";
    read.nodeId = "read";
    read.nodeType = "context_processor";
    read.requestData.parameters = {{"operation", "read"}};
    const json seen = json::parse(second.execute(read).content);
    ASSERT_EQ(seen["messageCount"], 2);
    EXPECT_EQ(json::parse(seen["messages"][1]["content"].get<std::string>())["age"], 36);

    // Cancelled once its first answer proved invalid: the repair is not waited for.
    Subscription cancel =
        bus_.subscribe<StructuredOutputAttempt>([&](const StructuredOutputAttempt& e) {
          if (e.traceId == "trace-cancel" && !e.valid) second.cleanupThread("kept");
        });
    auto r = request("kept", "Who again?", {{"schema", kPersonSchema}});
    r.traceId = "trace-cancel";
    EXPECT_EQ(failureOf(second, r).value("kind", ""), "cancelled");
    EXPECT_EQ(store->loadThread("kept").messages.size(), 4u);
  }
  std::filesystem::remove_all(dir);
}

TEST_F(ExecutorStructured, ThroughTheResponseCacheTheProfilesRungIsKept) {
  startMock(
      R"({"match": {"response_format": "json_object"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}})",
      StructuredOutputMode::JsonObject);
  ExecutorOptions o = options();
  o.responseCacheSize = 8;
  LlmExecutor executor(bus_, o);
  const auto first = executor.execute(request("t1", "Who?", {{"schema", kPersonSchema}}));
  EXPECT_EQ(json::parse(first.content)["age"], 36);
  ASSERT_EQ(server_->requests().size(), 1u);
  EXPECT_EQ(body(0)["response_format"]["type"], "json_object");
  // The same request on a new thread is answered from the cache.
  const auto second = executor.execute(request("t2", "Who?", {{"schema", kPersonSchema}}));
  EXPECT_EQ(second.content, first.content);
  EXPECT_EQ(server_->requests().size(), 1u);
  EXPECT_EQ(executor.responseCacheStats().hits, 1u);
}

}  // namespace
}  // namespace parley
