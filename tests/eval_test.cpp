// parley::eval (docs/eval.md) from a GoogleTest suite: a dataset run against the mock, each
// scorer passing and failing, the reports; and the same dataset replayed from cassettes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"
#include "parley/eval.hpp"
#include "parley/protocol.hpp"

namespace parley {
namespace {

namespace fs = std::filesystem;

const char* kScript = R"(
{"match": {"user_contains": "weather", "last_role": "user"}, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {}}]}}
{"match": {"last_role": "tool"}, "reply": {"content": "Oslo: {{tool_results}}"}}
{"match": {"user_contains": "json"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
{"reply": {"content": "Hello, {{last_user}}"}}
)";

const char* kDataset = R"(# a comment line
{"id": "greets", "input": "Bob", "expect": {"equals": "Hello, Bob", "contains": "Bob", "regex": "^Hello", "max_tokens": 1000}}
{"id": "weather", "input": "weather in Oslo?", "tools": [{"name": "get_weather", "parameters": {"type": "object"}, "result": "-3C"}, {"name": "get_time", "result": "noon"}], "expect": {"tools": ["get_time", "get_weather"], "tools_match": "any_order", "arguments": {"get_weather": {"city": "Oslo"}}, "contains": "-3C"}}
{"id": "json", "input": "json please", "expect": {"schema": {"type": "object", "required": ["name", "age"], "properties": {"age": {"type": "integer"}}}}}
{"id": "wrong-order", "input": "weather again", "tools": [{"name": "get_weather", "result": "-3C"}, {"name": "get_time", "result": "noon"}], "expect": {"tools": ["get_time", "get_weather"], "tools_match": "exact"}}
{"id": "wrong-text", "input": "Eve", "expect": {"equals": "Goodbye"}}
)";

class EvalAgainstMock : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }
  ClientOptions endpoint() const {
    ClientOptions o;
    o.baseUrl = server_->baseUrl();
    o.apiKey = "sk-test";
    o.model = "mock-model";
    o.maxRetries = 0;
    return o;
  }
  std::unique_ptr<mock::MockServer> server_;
};

TEST_F(EvalAgainstMock, ScoresEachCaseAndReports) {
  const std::vector<eval::EvalCase> cases = eval::parseJsonlDataset(kDataset, "dataset.jsonl");
  ASSERT_EQ(cases.size(), 5u);
  eval::EvalOptions options;
  options.concurrency = 3;
  const eval::EvalReport report = eval::runEval(cases, makeClient(endpoint()), options, "mock");
  ASSERT_EQ(report.cases.size(), 5u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(report.cases[i].passed)
        << report.cases[i].id << ": " << eval::toJson(report).dump(2);
  }
  EXPECT_FALSE(report.cases[3].passed);
  EXPECT_EQ(report.cases[3].scores[0].scorer, "tools");
  EXPECT_EQ(report.cases[3].scores[0].detail,
            "expected [get_time, get_weather], made [get_weather, get_time]");
  EXPECT_FALSE(report.cases[4].passed);
  EXPECT_EQ(report.passed, 3u);
  EXPECT_EQ(report.failed, 2u);

  const std::string junit = eval::toJUnitXml({report});
  EXPECT_NE(junit.find(R"(<testsuite name="mock" tests="5" failures="2")"), std::string::npos)
      << junit;
  EXPECT_NE(junit.find(R"(<failure type="equals" message="answer is &quot;Hello, Eve&quot;"/>)"),
            std::string::npos)
      << junit;
  const std::string table = eval::formatTable({report});
  EXPECT_NE(table.find("wrong-text"), std::string::npos);
  EXPECT_EQ(eval::toJson(report)["failed"], 2);
}

TEST_F(EvalAgainstMock, ReplaysFromCassettesWithTheMockStopped) {
  const fs::path dir = fs::temp_directory_path() / ("parley-eval-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::vector<eval::EvalCase> cases = eval::parseJsonlDataset(kDataset, "dataset.jsonl");
  ClientOptions record = endpoint();
  record.cassettes = CassetteOptions{};
  record.cassettes->directory = dir.string();
  record.cassettes->mode = CassetteMode::Record;
  const eval::EvalReport live = eval::runEval(cases, makeClient(record), {});
  server_.reset();
  ClientOptions replay = record;
  replay.cassettes->mode = CassetteMode::ReplayOnly;
  const eval::EvalReport replayed = eval::runEval(cases, makeClient(replay), {});
  ASSERT_EQ(replayed.cases.size(), live.cases.size());
  for (size_t i = 0; i < live.cases.size(); ++i) {
    EXPECT_EQ(replayed.cases[i].answer, live.cases[i].answer);
    EXPECT_EQ(replayed.cases[i].passed, live.cases[i].passed);
    EXPECT_EQ(replayed.cases[i].error, "");
  }
  fs::remove_all(dir);
}

TEST(EvalDataset, BadCasesAreRefusedNamingTheLine) {
  try {
    eval::parseJsonlDataset(
        "{\"input\": \"x\"}\n{\"input\": \"y\", \"expect\": {\"regex\": \"(\"}}\n", "d.jsonl");
    ADD_FAILURE() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "d.jsonl:2 (d.jsonl:2).expect.regex");
  }
  EXPECT_THROW(eval::parseJsonlDataset("{\"input\": \"x\", \"colour\": 1}", "d"), ValidationError);
  EXPECT_THROW(eval::parseJsonlDataset("{\"expect\": {}}", "d"), ValidationError);
  EXPECT_THROW(eval::parseJsonlDataset(std::string(eval::kMaxDatasetBytes + 1, ' '), "d"),
               ValidationError);
}

}  // namespace
}  // namespace parley
