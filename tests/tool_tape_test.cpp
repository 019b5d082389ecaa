// Whole-run replay outside durable runs (tool_tape.hpp, docs/cassettes.md "Whole runs"): a
// tool-heavy multi-turn executor run recorded against the mock (cassettes for the model, a tool
// tape for the tools: lookups, an approved call, a failing tool) replays with the mock stopped and
// tools that fail the test if called to a stored thread with the same hash; a tape whose call has
// other arguments, another tool, no result or no entry is a miss naming the call and the message.
// The facade, which runs no tools, replays whole from its cassettes. A tape past its cap is
// refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "model/sha256.hpp"
#include "parley/ai.hpp"
#include "parley/cassette.hpp"
#include "parley/errors.hpp"
#include "parley/executor.hpp"
#include "parley/openai_client.hpp"
#include "parley/store.hpp"
#include "parley/tool_tape.hpp"

namespace parley {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kTurns = 6;  // execute() calls on the thread, each four model calls

// Each turn: two replies of two lookups, a third reply (turn 2: a guarded call that is approved;
// turn 4: a tool that fails; else a lookup), then the answer.
const char* kScript = R"(
{"match": {"request": [4, 8, 12, 16, 20, 24]}, "reply": {"content": "Answer {{request}}: {{tool_results}}"}}
{"match": {"request": [7]}, "reply": {"tool_calls": [{"name": "guarded", "arguments": {"what": "deploy {{request}}"}}]}}
{"match": {"request": [15]}, "reply": {"tool_calls": [{"name": "flaky", "arguments": {}}]}}
{"match": {"request": [3, 11, 19, 23]}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {"n": "{{request}}"}}]}}
{"reply": {"tool_calls": [{"name": "lookup", "arguments": {"n": "{{request}}"}}, {"name": "lookup", "arguments": {"n": "{{request}}b"}}]}}
)";

fs::path freshTapeDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("parley-tape-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string storedHash(ConversationStore& store, const std::string& thread) {
  return detail::sha256Hex(toJson(store.loadThread(thread).messages).dump());
}

std::vector<json> readLines(const fs::path& file) {
  std::vector<json> lines;
  std::ifstream in(file);
  std::string text;
  while (std::getline(in, text))
    lines.push_back(json::parse(text));
  return lines;
}

void writeLines(const fs::path& file, const std::vector<json>& lines) {
  std::ofstream out(file, std::ios::trunc);
  for (const json& line : lines)
    out << line.dump() << "\n";
}

class ExecutorReplay : public ::testing::Test {
 protected:
  static inline fs::path dir_;
  static inline std::string baseUrl_;
  static inline std::string recordedHash_;
  static inline std::atomic<int> toolRuns_{0};
  static inline std::string recordError_;

  static fs::path cassettes() { return dir_ / "cassettes"; }
  static fs::path tape() { return dir_ / "tools.jsonl"; }

  static std::shared_ptr<ToolRegistry> tools(bool run) {
    auto registry = std::make_shared<ToolRegistry>();
    auto handler = [run](std::function<json(const json&)> body) {
      return [run, body](const json& args, ToolContext&) -> json {
        if (!run) {
          ADD_FAILURE() << "a tool ran during the replay: " << args.dump();
          throw std::runtime_error("a replay runs no tool");
        }
        ++toolRuns_;
        return body(args);
      };
    };
    const json object = {{"type", "object"}};
    registry->add("lookup", "Looks a number up", object,
                  handler([](const json& a) { return "value of " + a.value("n", ""); }));
    ToolOptions guarded;
    guarded.requiresApproval = true;
    registry->add("guarded", "Does what needs approval", object,
                  handler([](const json& a) { return "did " + a.value("what", ""); }), guarded);
    registry->add("flaky", "Always fails", object, handler([](const json&) -> json {
                    throw std::runtime_error("the flaky service is down");
                  }));
    return registry;
  }

  // Runs the six turns on thread "t" into `db`: recording (the mock up, tools run, the approval
  // answered yes) or replaying `tapeFile` (nothing may run or be asked).
  static void runTurns(const fs::path& db, CassetteMode mode, std::shared_ptr<ToolTape> tape) {
    const bool recording = mode == CassetteMode::Record;
    ClientOptions client;
    client.baseUrl = baseUrl_;
    client.model = "parley-mock";
    client.maxRetries = 0;
    client.cassettes = CassetteOptions{};
    client.cassettes->directory = cassettes().string();
    client.cassettes->mode = mode;
    ExecutorOptions o;
    o.profiles = std::make_shared<ProfileRegistry>();
    o.profiles->add("mock", client);
    o.tools = tools(recording);
    o.turn.systemPrompt = "Look things up.";
    o.store = std::shared_ptr<ConversationStore>(openSqliteStore(db.string()));
    o.toolTape = std::move(tape);
    o.logErrors = false;
    EventBus bus;
    auto approve = bus.subscribe<UserInteractionRequested>([&](const UserInteractionRequested& e) {
      if (!recording) ADD_FAILURE() << "the replay asked for an approval: " << e.prompt;
      UserInteractionResponded answer;
      answer.threadId = e.threadId;
      answer.interactionId = e.interactionId;
      answer.response = "yes";
      bus.publish(answer);
    });
    LlmExecutor executor(bus, o);
    for (int turn = 1; turn <= kTurns; ++turn) {
      LlmExecutionRequest r;
      r.workflowId = "wf";
      r.threadId = "t";
      r.nodeId = "n" + std::to_string(turn);
      r.requestData.prompt = "Look up batch " + std::to_string(turn);
      r.requestData.profileId = "mock";
      executor.execute(r);
    }
  }

  static void SetUpTestSuite() {
    dir_ = freshTapeDir("executor");
    try {
      mock::MockOptions options;
      options.script = mock::readScript(kScript);
      mock::MockServer server(options);
      server.start();
      baseUrl_ = server.baseUrl();
      runTurns(dir_ / "recorded.db", CassetteMode::Record, ToolTape::record(tape()));
      if (server.requests().size() != static_cast<size_t>(4 * kTurns)) {
        throw std::runtime_error("the mock saw " + std::to_string(server.requests().size()));
      }
      recordedHash_ = storedHash(*openSqliteStore((dir_ / "recorded.db").string()), "t");
    } catch (const std::exception& e) {
      recordError_ = e.what();
    }
  }  // the mock stops here

  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override { ASSERT_EQ(recordError_, "") << "the recording failed"; }

  // Replays a tape (the recorded one, or an edited copy) into a new database.
  void replay(const fs::path& tapeFile, const std::string& name) {
    ToolTapeOptions o;
    o.byThread = true;
    runTurns(dir_ / (name + ".db"), CassetteMode::ReplayOnly, ToolTape::replay(tapeFile, o));
  }

  // A copy of the tape with `edit` applied to its lines.
  fs::path editedTape(const std::string& name,
                      const std::function<void(std::vector<json>&)>& edit) {
    std::vector<json> lines = readLines(tape());
    edit(lines);
    const fs::path file = dir_ / (name + ".jsonl");
    writeLines(file, lines);
    return file;
  }

  // The stored index of the reply that made call `id`.
  static size_t replyIndexOf(const std::string& id) {
    const auto messages =
        openSqliteStore((dir_ / "recorded.db").string())->loadThread("t").messages;
    for (size_t i = 0; i < messages.size(); ++i) {
      for (const ToolCall& c : messages[i].toolCalls)
        if (c.id == id) return i;
    }
    throw std::runtime_error("no reply made call " + id);
  }

  // Replays `file` and returns the error it failed with.
  std::string missOf(const fs::path& file, const std::string& name) {
    try {
      replay(file, name);
    } catch (const ValidationError& e) {
      return e.what();
    }
    ADD_FAILURE() << "the edited tape " << name << " replayed";
    return "";
  }
};

TEST_F(ExecutorReplay, AToolHeavyMultiTurnRunReplaysToTheSameThreadWithoutRunningTools) {
  auto recorded = openSqliteStore((dir_ / "recorded.db").string());
  const auto messages = recorded->loadThread("t").messages;
  // System prompt; per turn the prompt, four replies, 2 + 2 + 1 results.
  ASSERT_EQ(messages.size(), static_cast<size_t>(1 + kTurns * (1 + 4 + 5)));
  const std::string all = toJson(messages).dump();
  for (const char* seen : {"did deploy 7", "the flaky service is down", "value of 22b"})
    EXPECT_NE(all.find(seen), std::string::npos) << seen;
  const auto lines = readLines(tape());
  ASSERT_EQ(lines.size(), static_cast<size_t>(2 * kTurns * 5));
  EXPECT_EQ(lines[0]["type"], "tool_execution_request");
  EXPECT_EQ(lines[1]["type"], "tool_execution_completed");
  EXPECT_EQ(lines[1]["thread_id"], "t");
  const int ranWhenRecorded = toolRuns_;

  replay(tape(), "replayed");
  EXPECT_EQ(toolRuns_, ranWhenRecorded) << "a tool ran during the replay";
  auto replayed = openSqliteStore((dir_ / "replayed.db").string());
  EXPECT_EQ(storedHash(*replayed, "t"), recordedHash_);
  EXPECT_EQ(toJson(replayed->loadThread("t").messages), toJson(messages));
}

TEST_F(ExecutorReplay, ACallWithOtherArgumentsIsAMissNamingTheCallAndMessage) {
  std::string id;
  const fs::path file = editedTape("arguments", [&](std::vector<json>& lines) {
    json& call = lines.at(20)["payload"];
    id = call["tool_call_id"];
    call["arguments"] = R"({"n":"edited"})";
  });
  const std::string what = missOf(file, "arguments");
  EXPECT_NE(what.find("call " + id + " (lookup) of the reply at message " +
                      std::to_string(replyIndexOf(id)) + " of thread t"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("other arguments than when recorded"), std::string::npos) << what;
  EXPECT_NE(what.find(R"({"n":"edited"})"), std::string::npos) << what;
}

TEST_F(ExecutorReplay, ACallOfAnotherToolIsAMissNamingTheCall) {
  std::string id;
  const fs::path file = editedTape("tool", [&](std::vector<json>& lines) {
    json& call = lines.at(30)["payload"];
    id = call["tool_call_id"];
    call["tool_name"] = "other_tool";
  });
  const std::string what = missOf(file, "tool");
  EXPECT_NE(what.find("call " + id + " ("), std::string::npos) << what;
  EXPECT_NE(what.find("at message " + std::to_string(replyIndexOf(id))), std::string::npos) << what;
  EXPECT_NE(what.find("was a call of other_tool when recorded"), std::string::npos) << what;
}

TEST_F(ExecutorReplay, ACallWithoutAResultIsAMissNamingTheCall) {
  std::string id;
  const fs::path file = editedTape("no-result", [&](std::vector<json>& lines) {
    id = lines.at(41)["payload"]["tool_call_id"];
    lines.erase(lines.begin() + 41);  // its tool_execution_completed
  });
  const std::string what = missOf(file, "no-result");
  EXPECT_NE(what.find("call " + id + " ("), std::string::npos) << what;
  EXPECT_NE(what.find("at message " + std::to_string(replyIndexOf(id))), std::string::npos) << what;
  EXPECT_NE(what.find("has no result in the recording"), std::string::npos) << what;
}

TEST_F(ExecutorReplay, ACallMissingFromTheTapeIsAMissNamingTheCall) {
  std::string id;
  const fs::path file = editedTape("missing", [&](std::vector<json>& lines) {
    id = lines.at(50)["payload"]["tool_call_id"];
    lines.erase(lines.begin() + 50, lines.begin() + 52);
  });
  const std::string what = missOf(file, "missing");
  EXPECT_NE(what.find("call " + id + " ("), std::string::npos) << what;
  EXPECT_NE(what.find("at message " + std::to_string(replyIndexOf(id))), std::string::npos) << what;
  EXPECT_NE(what.find("is not in the recording"), std::string::npos) << what;
}

// A result edited on the tape replays into the history, so the next model request is not the
// recorded one: the cassette's miss names that message.
TEST_F(ExecutorReplay, AnEditedResultIsACassetteMissNamingTheMessage) {
  std::string id;
  const fs::path file = editedTape("result", [&](std::vector<json>& lines) {
    json& done = lines.at(3)["payload"];
    id = done["tool_call_id"];
    done["result"] = "value of something else";
  });
  const std::string what = missOf(file, "result");
  // The second call of the first reply: its result follows the reply and the first result.
  EXPECT_NE(what.find("cassette"), std::string::npos) << what;
  EXPECT_NE(what.find("message " + std::to_string(replyIndexOf(id) + 2) + " field \"content\""),
            std::string::npos)
      << what;
}

TEST(ToolTape, ATapePastItsCapOrNotOfTheVocabularyIsRefused) {
  const fs::path dir = freshTapeDir("caps");
  auto tape = ToolTape::record(dir / "tools.jsonl");
  ToolCall call{"c1", "lookup", R"({"n":"1"})"};
  ToolResult result;
  result.toolCallId = "c1";
  result.name = "lookup";
  result.success = true;
  result.result = "value";
  tape->write("", {call}, {result});
  EXPECT_EQ(tape->calls(), 1u);
  const auto size = fs::file_size(dir / "tools.jsonl");
  ToolTapeOptions small;
  small.maxBytes = size - 1;
  try {
    ToolTape::replay(dir / "tools.jsonl", small);
    ADD_FAILURE() << "a tape past its cap was read";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the " + std::to_string(size - 1)),
              std::string::npos)
        << e.what();
  }
  small.maxBytes = size;
  auto replayed = ToolTape::replay(dir / "tools.jsonl", small);
  EXPECT_EQ(replayed->calls(), 1u);
  EXPECT_EQ(replayed->take("", 3, {call}).at(0).content(), "value");
  // Taken once: the same call again is not on the tape.
  EXPECT_THROW(replayed->take("", 5, {call}), ReplayMiss);
  std::ofstream(dir / "bad.jsonl") << "{\"type\": \"tool_execution_request\"}\nnot json\n";
  try {
    ToolTape::replay(dir / "bad.jsonl");
    ADD_FAILURE() << "a tape that is not JSON Lines was read";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ToolTape::replay(dir / "none.jsonl"), ValidationError);
  fs::remove_all(dir);
}

// The facade runs no tools: its cassettes are its whole recording. A persisted multi-turn
// conversation replays, the mock stopped, to the same stored thread; a changed prompt is a miss
// naming the message.
TEST(FacadeReplay, APersistedConversationReplaysFromItsCassettes) {
  const fs::path dir = freshTapeDir("facade");
  std::string base;
  auto client = [&](CassetteMode mode) {
    ClientOptions o;
    o.baseUrl = base;
    o.model = "parley-mock";
    o.maxRetries = 0;
    o.cassettes = CassetteOptions{};
    o.cassettes->directory = (dir / "cassettes").string();
    o.cassettes->mode = mode;
    return std::make_shared<OpenAiClient>(o);
  };
  const std::vector<std::string> prompts = {"Hello", "What did I say?", "And then?", "Bye"};
  auto converse = [&](CassetteMode mode, const fs::path& db, const std::string& last) {
    AI ai(client(mode), base, "sk-facade", "parley-mock");
    ai.setSystemPrompt("Be brief.");
    std::shared_ptr<ConversationStore> store(openSqliteStore(db.string()));
    Conversation c = ai.createConversation(store, "f");
    std::vector<std::string> replies;
    for (size_t i = 0; i < prompts.size(); ++i) {
      replies.push_back(c.ask(i + 1 == prompts.size() ? last : prompts[i]));
      if (replies.back().empty()) return std::make_pair(replies, c.lastError());
    }
    return std::make_pair(replies, std::string());
  };
  std::pair<std::vector<std::string>, std::string> recorded;
  {
    mock::MockServer server(mock::MockOptions{});
    server.start();
    base = server.baseUrl();
    recorded = converse(CassetteMode::Record, dir / "recorded.db", prompts.back());
    ASSERT_EQ(recorded.second, "");
    ASSERT_EQ(server.requests().size(), prompts.size());
  }  // the mock stops here
  const auto replayed = converse(CassetteMode::ReplayOnly, dir / "replayed.db", prompts.back());
  EXPECT_EQ(replayed.second, "");
  EXPECT_EQ(replayed.first, recorded.first);
  EXPECT_EQ(storedHash(*openSqliteStore((dir / "replayed.db").string()), "f"),
            storedHash(*openSqliteStore((dir / "recorded.db").string()), "f"));
  // System prompt, then a prompt and a reply per turn: the last prompt is message 7.
  const auto changed = converse(CassetteMode::ReplayOnly, dir / "changed.db", "Farewell");
  EXPECT_NE(changed.second.find("message 7 field \"content\""), std::string::npos)
      << changed.second;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace parley
