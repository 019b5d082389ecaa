// `parley eval` and `parley runs replay` as real processes against the mock: two columns side by
// side (--compare-model, --compare-system), the closing line and the exit code, the JUnit XML
// and JSON reports, a case forking a thread of a database (--db); a durable run recorded by
// `parley worker --record` replayed into a new database with the mock stopped, its tool not run,
// and a journal edited afterwards giving a miss that exits 1 naming the call.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "child_process.hpp"
#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"
#include "parley/store.hpp"

namespace parley::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const char* kScript = R"(
{"match": {"model": "model-b", "user_contains": "Eve"}, "reply": {"content": "Bye, Eve"}}
{"match": {"user_contains": "count", "last_role": "user"}, "reply": {"tool_calls": [{"name": "count", "arguments": {"n": "1"}}, {"name": "count", "arguments": {"n": "2"}}]}}
{"match": {"last_role": "tool", "turn": 1}, "times": 1, "reply": {"tool_calls": [{"name": "count", "arguments": {"n": "3"}}]}}
{"match": {"last_role": "tool"}, "reply": {"content": "counted: {{tool_results}}"}}
{"reply": {"content": "Hello, {{last_user}}"}}
)";

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class CliEval : public ::testing::Test {
 protected:
  fs::path dir = [] {
    std::string pattern = (fs::temp_directory_path() / "parley-cli-eval-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    return fs::path(pattern);
  }();
  std::unique_ptr<mock::MockServer> server;

  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kScript);
    server = std::make_unique<mock::MockServer>(options);
    server->start();
    std::ofstream(dir / "cases.jsonl")
        << R"({"id": "bob", "input": "Bob", "system": "Be kind.", "expect": {"equals": "Hello, Bob"}})"
        << "\n"
        << R"({"id": "eve", "input": "Eve", "system": "Be kind.", "expect": {"equals": "Hello, Eve"}})"
        << "\n";
  }
  void TearDown() override {
    server->stop();
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  CliRun eval(std::vector<std::string> extra) {
    std::vector<std::string> args = {"eval",          (dir / "cases.jsonl").string(),
                                     "--base-url",    server->baseUrl(),
                                     "--model",       "model-a",
                                     "--api-key",     "test",
                                     "--concurrency", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return runCli(args, dir / "cli");
  }
};

TEST_F(CliEval, CompareModelPrintsTwoColumnsTheClosingLineAndFailsOnAFailure) {
  const CliRun r = eval({"--compare-model", "model-b", "--junit", (dir / "j.xml").string(),
                         "--report", (dir / "r.json").string()});
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string header, bob, eve, closing;
  std::getline(lines, header);
  std::getline(lines, bob);
  std::getline(lines, eve);
  std::getline(lines, closing);
  EXPECT_NE(header.find("model-a"), std::string::npos) << r.out;
  EXPECT_NE(header.find("model-b"), std::string::npos) << r.out;
  EXPECT_LT(header.find("model-a"), header.find("model-b")) << r.out;
  EXPECT_EQ(bob.rfind("bob", 0), 0u) << r.out;
  EXPECT_NE(bob.find("PASS          PASS"), std::string::npos) << r.out;
  EXPECT_NE(eve.find("PASS          FAIL"), std::string::npos) << r.out;
  EXPECT_NE(eve.find("model-b: equals: answer is \"Bye, Eve\""), std::string::npos) << r.out;
  EXPECT_EQ(closing, "3 passed, 1 failed") << r.out;
  // Both runs in the reports, the failure in the second.
  const std::string xml = slurp(dir / "j.xml");
  EXPECT_NE(xml.find(R"(<testsuite name="model-a" tests="2" failures="0")"), std::string::npos)
      << xml;
  EXPECT_NE(xml.find(R"(<testsuite name="model-b" tests="2" failures="1")"), std::string::npos)
      << xml;
  EXPECT_NE(xml.find(R"(<failure type="equals" message="answer is &quot;Bye, Eve&quot;"/>)"),
            std::string::npos)
      << xml;
  const json report = json::parse(slurp(dir / "r.json"));
  ASSERT_TRUE(report.is_array());
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[1]["label"], "model-b");
  EXPECT_EQ(report[1]["failed"], 1);
  // The second column asked model-b.
  size_t asked = 0;
  for (const auto& request : server->requests())
    if (request["body"]["model"] == "model-b") ++asked;
  EXPECT_EQ(asked, 2u);

  // All passing: exit 0.
  const CliRun same = eval({"--compare-model", "model-a"});
  EXPECT_EQ(same.exitCode, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("\n4 passed, 0 failed\n"), std::string::npos) << same.out;
}

TEST_F(CliEval, CompareSystemSendsTheOtherPromptInTheSecondColumn) {
  const CliRun r = eval({"--compare-system", "Be terse."});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  const std::string header = r.out.substr(0, r.out.find('\n'));
  const size_t a = header.find("model-a (system A)");
  const size_t b = header.find("model-a (system B)");
  EXPECT_NE(a, std::string::npos) << r.out;
  EXPECT_NE(b, std::string::npos) << r.out;
  EXPECT_LT(a, b) << r.out;
  EXPECT_NE(r.out.find("\n4 passed, 0 failed\n"), std::string::npos) << r.out;
  std::vector<std::string> systems;
  for (const auto& request : server->requests())
    systems.push_back(request["body"]["messages"][0]["content"]);
  EXPECT_EQ(systems, (std::vector<std::string>{"Be kind.", "Be kind.", "Be terse.", "Be terse."}));
}

TEST_F(CliEval, ACaseForksAThreadOfTheDatabase) {
  const std::string db = (dir / "t.db").string();
  {
    auto store = openSqliteStore(db);
    store->createThread({.id = "support"}, std::vector<Message>{Message::user("My name is Bob"),
                                                                Message::assistant("Noted.")});
  }
  std::ofstream(dir / "forks.jsonl")
      << R"({"id": "fork", "thread": "support", "input": "Carol", "expect": {"equals": "Hello, Carol"}})"
      << "\n";
  const CliRun r = runCli({"eval", (dir / "forks.jsonl").string(), "--base-url", server->baseUrl(),
                           "--model", "model-a", "--api-key", "test", "--db", db, "--keep-forks",
                           "--report", (dir / "r.json").string()},
                          dir / "cli");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("1 passed, 0 failed"), std::string::npos) << r.out;
  const json report = json::parse(slurp(dir / "r.json"));
  const std::string fork = report["cases"][0].value("fork", "");
  ASSERT_FALSE(fork.empty()) << report.dump(2);
  auto store = openSqliteStore(db);
  EXPECT_EQ(store->loadThread("support").messages.size(), 2u);
  EXPECT_EQ(store->loadThread(fork).messages.back().content, "Hello, Carol");
  // Without --db the case fails, saying what it needs.
  const CliRun none = runCli({"eval", (dir / "forks.jsonl").string(), "--base-url",
                              server->baseUrl(), "--model", "model-a", "--api-key", "test"},
                             dir / "cli");
  EXPECT_EQ(none.exitCode, 1) << none.out << none.err;
  EXPECT_NE(none.out.find("needs a store"), std::string::npos) << none.out;
}

// A run recorded by `parley worker --record` replays with `parley runs replay`: the mock
// stopped, the command tool not run again (it appends to a file), the same stored thread.
TEST_F(CliEval, RunsReplayWorksARecordedRunAgainWithoutTheModelOrTheTools) {
  const fs::path ran = dir / "ran";
  std::ofstream(dir / "tools.toml")
      << "[[tool]]\nname = \"count\"\ndescription = \"counts\"\n"
      << "command = [\"sh\", \"-c\", \"echo x >> '" << ran.string() << "'; echo counted\"]\n";
  const std::string recorded = (dir / "recorded.db").string();
  const std::string cassettes = (dir / "cassettes").string();
  std::vector<std::string> common = {"--base-url",   server->baseUrl(),
                                     "--model",      "parley-mock",
                                     "--api-key",    "test",
                                     "--tools-file", (dir / "tools.toml").string(),
                                     "--system",     "Count."};
  {
    std::vector<std::string> argv = {PARLEY_CLI_PATH, "worker", "--db",     recorded,
                                     "--worker-id",   "rec",    "--record", cassettes};
    argv.insert(argv.end(), common.begin(), common.end());
    ChildProcess worker(argv);
    ASSERT_EQ(worker.readLine().value_or(""), "rec");
    CliRun submitted =
        runCli({"submit", "--db", recorded, "--thread", "t", "count please"}, dir / "cli");
    ASSERT_EQ(submitted.exitCode, 0) << submitted.err;
    std::string run = submitted.out.substr(0, submitted.out.find('\n'));
    CliRun waited =
        runCli({"runs", "wait", "--db", recorded, "--timeout", "60000", run}, dir / "cli");
    ASSERT_EQ(waited.exitCode, 0) << waited.out << waited.err;
    worker.kill(SIGTERM);
    EXPECT_EQ(worker.wait(), 0);
  }
  server->stop();  // nothing answers any more
  const std::string ranWhenRecorded = slurp(ran);
  EXPECT_EQ(ranWhenRecorded, "x\nx\nx\n");
  RunStore runs(std::shared_ptr<ConversationStore>(openSqliteStore(recorded)));
  const std::string run = runs.listRuns().at(0).id;

  auto replay = [&](const std::string& from, const std::string& into) {
    std::vector<std::string> args = {"runs",   "replay", "--db",     from,     run,
                                     "--into", into,     "--replay", cassettes};
    args.insert(args.end(), common.begin(), common.end());
    return runCli(args, dir / "cli");
  };
  const std::string into = (dir / "replayed.db").string();
  // Without the cassettes a replay would ask a model: refused.
  std::vector<std::string> live = {"runs", "replay", "--db", recorded, run, "--into", into};
  live.insert(live.end(), common.begin(), common.end());
  const CliRun refused = runCli(live, dir / "cli");
  EXPECT_EQ(refused.exitCode, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("--replay"), std::string::npos) << refused.err;
  const CliRun r = replay(recorded, into);
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  const json line = json::parse(r.out);
  EXPECT_EQ(line["run"], run);
  EXPECT_EQ(line["thread"], "t");
  EXPECT_EQ(line["identical"], true);
  const auto messages = runs.threads().loadThread("t").messages;
  EXPECT_EQ(line["messages"], messages.size());
  EXPECT_EQ(slurp(ran), ranWhenRecorded) << "the tool ran in the replay";
  auto replayed = openSqliteStore(into);
  EXPECT_EQ(toJson(replayed->loadThread("t").messages).dump(), toJson(messages).dump());

  // A result edited in the journal afterwards: the next request is not in the cassettes.
  fs::copy_file(recorded, dir / "edited.db");
  for (const char* side : {"-wal", "-shm"})
    if (fs::exists(recorded + side))
      fs::copy_file(recorded + side, (dir / "edited.db").string() + side);
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "edited.db").string().c_str(), &handle), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(handle,
                         "UPDATE parley_tool_calls SET result = 'edited' WHERE call_id = "
                         "(SELECT MIN(call_id) FROM parley_tool_calls)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(handle);
  const CliRun miss = replay((dir / "edited.db").string(), (dir / "missed.db").string());
  EXPECT_EQ(miss.exitCode, 1) << miss.out << miss.err;
  EXPECT_NE(miss.err.find("cassette: no recording"), std::string::npos) << miss.err;
  EXPECT_NE(miss.err.find("field \"content\""), std::string::npos) << miss.err;
  EXPECT_EQ(slurp(ran), ranWhenRecorded) << "the tool ran in the replay";
}

// `parley ask --record DIR` writes the turn's tool results beside its cassettes (DIR/tools.jsonl);
// `--replay DIR` replays both: two turns of a thread, the mock stopped, the command tool not run,
// the same output and the same stored thread. A tape whose call has other arguments is a miss
// naming the call.
TEST_F(CliEval, AskReplaysItsToolsFromTheRecording) {
  const fs::path ran = dir / "ran";
  std::ofstream(dir / "tools.toml")
      << "[[tool]]\nname = \"count\"\ndescription = \"counts\"\n"
      << "command = [\"sh\", \"-c\", \"echo x >> '" << ran.string() << "'; echo counted $$\"]\n";
  const std::string cassettes = (dir / "cassettes").string();
  auto ask = [&](const std::string& mode, const std::string& from, const std::string& db,
                 const std::string& prompt) {
    return runCli({"ask", "--base-url", server->baseUrl(), "--model", "parley-mock", "--api-key",
                   "test", "--tools-file", (dir / "tools.toml").string(), "--system", "Count.",
                   "--db", db, "--thread", "t", "--no-stream", mode, from, prompt},
                  dir / "cli");
  };
  const std::string recorded = (dir / "recorded.db").string();
  std::vector<CliRun> asked;
  for (const char* prompt : {"count please", "count again"}) {
    asked.push_back(ask("--record", cassettes, recorded, prompt));
    ASSERT_EQ(asked.back().exitCode, 0) << asked.back().err;
  }
  server->stop();  // nothing answers any more
  const std::string ranWhenRecorded = slurp(ran);
  EXPECT_EQ(ranWhenRecorded, "x\nx\nx\nx\nx\n");
  // The tool's output differs at each run ($$): a result that was not replayed would show.
  const std::string into = (dir / "replayed.db").string();
  for (size_t i = 0; i < asked.size(); ++i) {
    const CliRun r = ask("--replay", cassettes, into, i == 0 ? "count please" : "count again");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(r.out, asked[i].out);
  }
  EXPECT_EQ(slurp(ran), ranWhenRecorded) << "the tool ran in the replay";
  EXPECT_EQ(toJson(openSqliteStore(into)->loadThread("t").messages).dump(),
            toJson(openSqliteStore(recorded)->loadThread("t").messages).dump());

  // The first call's arguments edited on the tape.
  std::ifstream in(dir / "cassettes" / "tools.jsonl");
  std::string first;
  std::getline(in, first);
  std::stringstream rest;
  rest << in.rdbuf();
  json line = json::parse(first);
  const std::string id = line["payload"]["tool_call_id"];
  line["payload"]["arguments"] = R"({"n":"9"})";
  in.close();
  std::ofstream(dir / "cassettes" / "tools.jsonl") << line.dump() << "\n" << rest.str();
  const CliRun miss = ask("--replay", cassettes, (dir / "missed.db").string(), "count please");
  EXPECT_EQ(miss.exitCode, 2) << miss.out << miss.err;
  EXPECT_NE(miss.err.find("call " + id + " (count) of the reply at message 2"), std::string::npos)
      << miss.err;
  EXPECT_NE(miss.err.find("other arguments than when recorded"), std::string::npos) << miss.err;
  EXPECT_EQ(slurp(ran), ranWhenRecorded) << "the tool ran in the replay";
}

// `parley chat` the same way: a session of two turns recorded, then replayed from its input with
// the mock stopped, to the same stored thread; the tool does not run.
TEST_F(CliEval, ChatReplaysItsToolsFromTheRecording) {
  const fs::path ran = dir / "ran";
  std::ofstream(dir / "tools.toml")
      << "[[tool]]\nname = \"count\"\ndescription = \"counts\"\n"
      << "command = [\"sh\", \"-c\", \"echo x >> '" << ran.string() << "'; echo counted $$\"]\n";
  const std::string cassettes = (dir / "cassettes").string();
  auto chat = [&](const std::string& mode, const std::string& db) {
    return runCli({"chat", "--base-url", server->baseUrl(), "--model", "parley-mock", "--api-key",
                   "test", "--tools-file", (dir / "tools.toml").string(), "--system", "Count.",
                   "--db", db, "--thread", "t", mode, cassettes},
                  dir / "cli", "", "count please\ncount again\n");
  };
  const std::string recorded = (dir / "recorded.db").string();
  const CliRun first = chat("--record", recorded);
  ASSERT_EQ(first.exitCode, 0) << first.err;
  server->stop();
  const std::string ranWhenRecorded = slurp(ran);
  EXPECT_EQ(ranWhenRecorded, "x\nx\nx\nx\nx\n");
  const std::string into = (dir / "replayed.db").string();
  const CliRun again = chat("--replay", into);
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_EQ(slurp(ran), ranWhenRecorded) << "the tool ran in the replay";
  const auto messages = openSqliteStore(recorded)->loadThread("t").messages;
  // The system prompt; turn 1: the prompt, 3 replies, 3 results; turn 2: the prompt, 2 replies,
  // 2 results (the script asks for a second round once).
  EXPECT_EQ(messages.size(), 13u);
  EXPECT_EQ(toJson(openSqliteStore(into)->loadThread("t").messages).dump(),
            toJson(messages).dump());
}

}  // namespace
}  // namespace parley::testing
