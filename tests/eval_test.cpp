// parley::eval (docs/eval.md) from a GoogleTest suite: a dataset run against the mock, each
// scorer passing and failing, the reports; and the same dataset replayed from cassettes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"
#include "parley/eval.hpp"
#include "parley/protocol.hpp"
#include "parley/store.hpp"

namespace parley {
namespace {

namespace fs = std::filesystem;

const char* kScript = R"(
{"match": {"user_contains": "Rubric:\nIs polite"}, "reply": {"content": "PASS\nIt greets."}}
{"match": {"user_contains": "Rubric:\nIs rude"}, "reply": {"content": "FAIL\nIt is polite."}}
{"match": {"user_contains": "Rubric:\nIs passable"}, "reply": {"content": "PASSABLE, I suppose"}}
{"match": {"user_contains": "Rubric:"}, "reply": {"content": "The answer looks fine to me."}}
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

fs::path evalScratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("parley-eval-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A report's JSON without what depends on the clock.
nlohmann::json timeless(nlohmann::json report) {
  report.erase("wall_ms");
  for (auto& c : report["cases"])
    c.erase("latency_ms");
  return report;
}

// The JSONL dataset above as TOML [[cases]]: the same cases, the same report.
const char* kTomlDataset = R"toml(# the JSONL dataset, in TOML
[[cases]]
id = "greets"
input = "Bob"
expect = { equals = "Hello, Bob", contains = "Bob", regex = "^Hello", max_tokens = 1000 }

[[cases]]
id = "weather"
input = "weather in Oslo?"
tools = [
  { name = "get_weather", parameters = { type = "object" }, result = "-3C" },
  { name = "get_time", result = "noon" },
]
[cases.expect]
tools = ["get_time", "get_weather"]
tools_match = "any_order"
arguments = { get_weather = { city = "Oslo" } }
contains = "-3C"

[[cases]]
id = "json"
input = "json please"
[cases.expect.schema]
type = "object"
required = ["name", "age"]
properties = { age = { type = "integer" } }

[[cases]]
id = "wrong-order"
input = "weather again"
tools = [{ name = "get_weather", result = "-3C" }, { name = "get_time", result = "noon" }]
expect = { tools = ["get_time", "get_weather"], tools_match = "exact" }

[[cases]]
id = "wrong-text"
input = "Eve"
expect = { equals = "Goodbye" }
)toml";

TEST_F(EvalAgainstMock, ATomlDatasetGivesTheSameReportAsTheJsonlOne) {
  const fs::path dir = evalScratch("toml");
  std::ofstream(dir / "cases.jsonl") << kDataset;
  std::ofstream(dir / "cases.toml") << kTomlDataset;
  const auto jsonl = eval::loadDataset(dir / "cases.jsonl");
  const auto toml = eval::loadDataset(dir / "cases.toml");
  ASSERT_EQ(toml.size(), jsonl.size());
  eval::EvalOptions options;
  options.concurrency = 1;
  const auto fromJsonl = eval::toJson(eval::runEval(jsonl, makeClient(endpoint()), options, "m"));
  const auto fromToml = eval::toJson(eval::runEval(toml, makeClient(endpoint()), options, "m"));
  EXPECT_EQ(timeless(fromToml), timeless(fromJsonl));
  EXPECT_EQ(fromToml["passed"], 3);
  // A TOML case with a key no case has is refused, naming the case and the key.
  std::ofstream(dir / "bad.toml") << "[[cases]]\ninput = \"x\"\ncolour = \"red\"\n";
  try {
    eval::loadDataset(dir / "bad.toml");
    ADD_FAILURE() << "an unknown key was taken";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("cases[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("colour"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "none.toml") << "title = \"no cases\"\n";
  EXPECT_THROW(eval::loadDataset(dir / "none.toml"), ValidationError);
  fs::remove_all(dir);
}

TEST_F(EvalAgainstMock, TheJudgeGradesARubricAndAReplyOfAnotherShapeIsNoPass) {
  const auto cases = eval::parseJsonlDataset(
      R"({"id": "polite", "input": "Bob", "expect": {"rubric": "Is polite"}}
{"id": "rude", "input": "Bob", "expect": {"rubric": "Is rude"}}
{"id": "passable", "input": "Bob", "expect": {"rubric": "Is passable"}}
{"id": "chatty", "input": "Bob", "expect": {"rubric": "Is short"}}
)",
      "judged.jsonl");
  eval::EvalOptions options;
  options.judge = makeClient(endpoint());
  options.judgeModel = "judge-model";
  const eval::EvalReport report = eval::runEval(cases, makeClient(endpoint()), options, "m");
  ASSERT_EQ(report.cases.size(), 4u);
  auto judged = [&](size_t i) {
    const auto& scores = report.cases[i].scores;
    EXPECT_EQ(scores.size(), 1u) << report.cases[i].id;
    return scores.at(0);
  };
  EXPECT_TRUE(report.cases[0].passed) << eval::toJson(report).dump(2);
  EXPECT_EQ(judged(0).scorer, "judge");
  EXPECT_FALSE(report.cases[1].passed);
  EXPECT_EQ(judged(1).detail, "FAIL\nIt is polite.");
  for (size_t i : {2u, 3u}) {
    EXPECT_FALSE(report.cases[i].passed) << report.cases[i].id;
    EXPECT_EQ(judged(i).detail.rfind("the judge's reply is not PASS or FAIL on its first line", 0),
              0u)
        << judged(i).detail;
  }
  // The judge was asked with its model, the rubric and the answer.
  bool asked = false;
  for (const auto& request : server_->requests()) {
    const std::string body = request["body"].dump();
    if (body.find("Rubric:\\nIs polite\\n\\nAnswer:\\nHello, Bob") != std::string::npos) {
      asked = true;
      EXPECT_EQ(request["body"]["model"], "judge-model");
    }
  }
  EXPECT_TRUE(asked);
  // Without a judge a rubric fails, saying so.
  const auto alone = eval::runEval({cases[0]}, makeClient(endpoint()), {}, "m");
  EXPECT_FALSE(alone.cases[0].passed);
  EXPECT_NE(alone.cases[0].scores.at(0).detail.find("needs a judge"), std::string::npos);
}

TEST_F(EvalAgainstMock, ACaseForksAStoredThreadAndLeavesItUnchanged) {
  const fs::path dir = evalScratch("fork");
  auto store = std::shared_ptr<ConversationStore>(openSqliteStore((dir / "t.db").string()));
  const std::vector<Message> history = {
      Message::system("Be kind."), Message::user("My name is Bob"),
      Message::assistant("Hello, My name is Bob"), Message::user("And my city?")};
  store->createThread({.id = "support"}, history);
  const auto before = store->loadThread("support");
  const auto threadsBefore = store->listThreads().size();

  const auto cases = eval::parseJsonlDataset(
      R"({"id": "whole", "thread": "support", "expect": {"equals": "Hello, And my city?"}}
{"id": "at-2", "thread": "support", "at": 2, "input": "Carol", "expect": {"equals": "Hello, Carol"}}
)",
      "forks.jsonl");
  ASSERT_EQ(cases[1].at, 2);
  eval::EvalOptions options;
  options.concurrency = 1;
  options.store = store;
  const eval::EvalReport report = eval::runEval(cases, makeClient(endpoint()), options, "m");
  EXPECT_EQ(report.passed, 2u) << eval::toJson(report).dump(2);
  // The model saw the forked history: the whole thread, then its first two messages and the
  // case's input.
  const auto requests = server_->requests();
  ASSERT_EQ(requests.size(), 2u);
  const auto& whole = requests[0]["body"]["messages"];
  ASSERT_EQ(whole.size(), 4u) << whole.dump();
  EXPECT_EQ(whole[3]["content"], "And my city?");
  const auto& atTwo = requests[1]["body"]["messages"];
  ASSERT_EQ(atTwo.size(), 3u) << atTwo.dump();
  EXPECT_EQ(atTwo[1]["content"], "My name is Bob");
  EXPECT_EQ(atTwo[2]["content"], "Carol");
  // The thread is as it was, and the forks are gone.
  const auto after = store->loadThread("support");
  EXPECT_EQ(after.info.version, before.info.version);
  EXPECT_EQ(toJson(after.messages), toJson(before.messages));
  EXPECT_EQ(store->listThreads().size(), threadsBefore);

  // Kept, a fork holds the case's turn on top of the shared prefix.
  options.keepForks = true;
  const eval::EvalReport kept = eval::runEval({cases[1]}, makeClient(endpoint()), options, "m");
  ASSERT_FALSE(kept.cases[0].fork.empty());
  EXPECT_EQ(eval::toJson(kept)["cases"][0]["fork"], kept.cases[0].fork);
  const auto fork = store->loadThread(kept.cases[0].fork);
  EXPECT_EQ(fork.info.parentId, "support");
  EXPECT_EQ(fork.info.forkPosition, 2);
  ASSERT_EQ(fork.messages.size(), 4u);
  EXPECT_EQ(fork.messages[3].content, "Hello, Carol");
  EXPECT_EQ(toJson(store->loadThread("support").messages), toJson(before.messages));

  // No store, no such thread, a position past its end: the case fails, saying which.
  options.store = nullptr;
  auto failed = eval::runEval({cases[0]}, makeClient(endpoint()), options, "m");
  EXPECT_NE(failed.cases[0].error.find("needs a store"), std::string::npos)
      << failed.cases[0].error;
  options.store = store;
  auto missing = eval::parseJsonlDataset(
      R"({"id": "gone", "thread": "nope"}
{"id": "far", "thread": "support", "at": 9})",
      "bad.jsonl");
  failed = eval::runEval(missing, makeClient(endpoint()), options, "m");
  EXPECT_NE(failed.cases[0].error.find("no thread nope"), std::string::npos)
      << failed.cases[0].error;
  EXPECT_NE(failed.cases[1].error.find("holds 4 messages"), std::string::npos)
      << failed.cases[1].error;
  fs::remove_all(dir);
}

TEST(EvalDataset, ACaseNamesAThreadOrAnInput) {
  EXPECT_THROW(eval::parseJsonlDataset(R"({"id": "x", "at": 2, "input": "y"})", "d"),
               ValidationError);
  EXPECT_THROW(eval::parseJsonlDataset(R"({"thread": "t", "at": -1})", "d"), ValidationError);
  EXPECT_THROW(eval::parseJsonlDataset(R"({"thread": "t", "system": "s"})", "d"), ValidationError);
  EXPECT_THROW(eval::parseJsonlDataset(R"({"id": "nothing"})", "d"), ValidationError);
  const auto c = eval::parseJsonlDataset(R"({"thread": "t"})", "d");
  EXPECT_EQ(c.at(0).thread, "t");
  EXPECT_TRUE(c.at(0).input.empty());
}

// A small XML well-formedness check (what a JUnit reader needs): one root, balanced tags,
// quoted attributes, no raw '<' or stray '&' in text or values, no control characters.
bool wellFormedXml(const std::string& xml, std::string& problem) {
  size_t i = 0;
  std::vector<std::string> open;
  int roots = 0;
  auto isName = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':';
  };
  auto entityAt = [&](size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (xml.compare(at, std::strlen(e), e) == 0) return std::strlen(e);
    return size_t{0};
  };
  auto text = [&](char stop) {  // up to `stop` (not consumed); false on a bad character
    for (; i < xml.size() && xml[i] != stop; ++i) {
      const auto c = static_cast<unsigned char>(xml[i]);
      if (c == '<' || (c < 0x20 && c != '\n' && c != '\t' && c != '\r')) {
        problem = "a bad character at " + std::to_string(i);
        return false;
      }
      if (c == '&') {
        const size_t n = entityAt(i);
        if (n == 0) {
          problem = "a stray & at " + std::to_string(i);
          return false;
        }
        i += n - 1;
      }
    }
    return true;
  };
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      if (!text('<')) return false;
      continue;
    }
    ++i;
    const bool closing = i < xml.size() && xml[i] == '/';
    if (closing) ++i;
    const size_t start = i;
    while (i < xml.size() && isName(xml[i]))
      ++i;
    const std::string name = xml.substr(start, i - start);
    if (name.empty()) {
      problem = "a tag without a name at " + std::to_string(start);
      return false;
    }
    if (closing) {
      if (open.empty() || open.back() != name || i >= xml.size() || xml[i] != '>') {
        problem = "</" + name + "> does not close the open tag";
        return false;
      }
      open.pop_back();
      ++i;
      continue;
    }
    for (;;) {
      while (i < xml.size() && xml[i] == ' ')
        ++i;
      if (i >= xml.size()) {
        problem = "<" + name + " is not closed";
        return false;
      }
      if (xml[i] == '>' || xml.compare(i, 2, "/>") == 0) break;
      const size_t attr = i;
      while (i < xml.size() && isName(xml[i]))
        ++i;
      if (i == attr || xml.compare(i, 2, "=\"") != 0) {
        problem = "a bad attribute in <" + name + "> at " + std::to_string(attr);
        return false;
      }
      i += 2;
      if (!text('"')) return false;
      if (i >= xml.size()) {
        problem = "an unterminated value in <" + name + ">";
        return false;
      }
      ++i;
    }
    if (open.empty() && ++roots > 1) {
      problem = "more than one root element";
      return false;
    }
    if (xml[i] == '>') {
      open.push_back(name);
      ++i;
    } else {
      i += 2;
    }
  }
  if (!open.empty()) {
    problem = "<" + open.back() + "> is never closed";
    return false;
  }
  if (roots != 1) {
    problem = "no root element";
    return false;
  }
  return true;
}

TEST(EvalReport, TheWellFormedCheckCatchesBrokenXml) {
  std::string problem;
  EXPECT_TRUE(wellFormedXml("<a x=\"1 &amp; 2\"><b/>text</a>\n", problem)) << problem;
  for (const char* bad : {"<a><b></a></b>", "<a x=\"1 & 2\"/>", "<a x=\"<\"/>", "<a>1 < 2</a>",
                          "<a/><b/>", "<a>", "<a x=1/>"}) {
    EXPECT_FALSE(wellFormedXml(bad, problem)) << bad;
  }
}

// JUnit XML as CI servers read it: well-formed whatever the details hold, one <failure> per
// failed scorer naming the scorer, in the case's <testcase>.
TEST(EvalReport, JUnitXmlIsWellFormedAndNamesTheFailures) {
  eval::EvalReport report;
  report.label = "model <a> & \"b\"";
  eval::CaseResult good;
  good.id = "good";
  good.passed = true;
  eval::CaseResult bad;
  bad.id = "bad & <worse>";
  bad.scores = {{"equals", false, "answer is \"x < y & z\"\n\x01second line"},
                {"contains", true, ""},
                {"regex", false, "/^a/ does not match the answer"}};
  report.cases = {good, bad};
  report.passed = 1;
  report.failed = 1;
  const std::string xml = eval::toJUnitXml({report});
  std::string problem;
  EXPECT_TRUE(wellFormedXml(xml, problem)) << problem << "\n" << xml;
  EXPECT_NE(
      xml.find(R"(<testsuite name="model &lt;a&gt; &amp; &quot;b&quot;" tests="2" failures="1")"),
      std::string::npos)
      << xml;
  EXPECT_NE(
      xml.find(
          R"(<testcase name="good" classname="model &lt;a&gt; &amp; &quot;b&quot;" time="0"/>)"),
      std::string::npos)
      << xml;
  const size_t at = xml.find(R"(<testcase name="bad &amp; &lt;worse&gt;")");
  ASSERT_NE(at, std::string::npos) << xml;
  const size_t end = xml.find("</testcase>", at);
  const std::string failures = xml.substr(at, end - at);
  EXPECT_NE(
      failures.find(
          R"(<failure type="equals" message="answer is &quot;x &lt; y &amp; z&quot;  second line"/>)"),
      std::string::npos)
      << failures;
  EXPECT_NE(failures.find(R"(<failure type="regex")"), std::string::npos) << failures;
  EXPECT_EQ(failures.find(R"(type="contains")"), std::string::npos) << failures;
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
