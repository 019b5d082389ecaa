// The Agent Protocol / LangGraph routes of the Service (docs/service.md, "Agent Protocol and the
// LangGraph API"): the encoding of parley's events as LangGraph stream events (pure), then the
// routes in this process on a scratch SQLite database, through libcurl, with the events of a run
// written by this test through the RunStore as a worker would. The official SDK end to end is
// tests/node/langgraph (ctest -R langgraph_sdk).
#include <gtest/gtest.h>

#include "http_client.hpp"
#include "parley/errors.hpp"
#include "parley/event_types.hpp"
#include "parley/run_store.hpp"
#include "run_databases.hpp"
#include "service/agent_protocol_stream.hpp"
#include "service/service.hpp"

namespace parley::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using service::RunStreamEncoder;
using service::StreamModes;

// --- the encoding -------------------------------------------------------------------------------

StoredEvent stored(int64_t seq, const std::string& run, const std::string& type, json payload) {
  StoredEvent e;
  e.threadId = "t";
  e.seq = seq;
  e.runId = run;
  e.type = type;
  e.payload = std::move(payload);
  return e;
}

json added(const Message& m, int64_t index) {
  MessageAdded e;
  e.message = m;
  e.index = index;
  return eventToJson(e);
}

// A run of two model calls, with a tool between, streamed; another run's event in the middle.
std::vector<StoredEvent> aRun() {
  Message call = Message::assistant("", {ToolCall{"c1", "get_time", "{}"}});
  return {stored(1, "r1", "run_queued", json::object()),
          stored(2, "r1", "run_started", json::object()),
          stored(3, "r1", "message_added", added(Message::user("time?"), 1)),
          stored(4, "r1", "message_added", added(call, 2)),
          stored(5, "r1", "tool_execution_request",
                 {{"tool_call_id", "c1"}, {"tool_name", "get_time"}, {"arguments", "{}"}}),
          stored(6, "r2", "run_queued", json::object()),
          stored(7, "r1", "tool_execution_completed",
                 {{"tool_call_id", "c1"},
                  {"tool_name", "get_time"},
                  {"success", true},
                  {"result", "noon"}}),
          stored(8, "r1", "message_added", added(Message::tool("c1", "noon"), 3)),
          stored(9, "r1", "llm_stream_chunk", {{"content", "It is "}}),
          stored(10, "r1", "llm_stream_chunk", {{"content", "noon."}}),
          stored(11, "r1", "message_added", added(Message::assistant("It is noon."), 4)),
          stored(12, "r1", "run_completed", json::object()),
          stored(13, "r1", "llm_execution_completed", {{"run_id", "r1"}, {"result", {}}}),
          stored(14, "r1", "message_added", added(Message::user("after the end"), 5))};
}

struct Sent {
  std::string id;
  std::string event;
  json data;
};

std::vector<Sent> parse(const std::string& text) {
  std::vector<Sent> out;
  Sent current;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) {
      out.push_back(current);
      current = {};
    } else if (line.starts_with("id: ")) {
      current.id = line.substr(4);
    } else if (line.starts_with("event: ")) {
      current.event = line.substr(7);
    } else if (line.starts_with("data: ")) {
      current.data = json::parse(line.substr(6));
    }
  }
  return out;
}

std::string encodeAll(StreamModes modes, std::optional<service::StreamPosition> resume = {},
                      std::map<int64_t, Message> view = {{0, Message::system("Be brief.")}}) {
  RunStreamEncoder encoder("t", "r1", modes, std::move(view), resume, !resume);
  std::string out = encoder.start();
  for (const auto& e : aRun()) {
    out += encoder.feed(e);
    if (encoder.done()) break;
  }
  EXPECT_TRUE(encoder.done());
  return out + RunStreamEncoder::end();
}

TEST(AgentProtocolEncodingTest, ValuesAndUpdatesFollowTheRunsMessages) {
  StreamModes modes;
  modes.values = modes.updates = true;
  auto sent = parse(encodeAll(modes));
  ASSERT_GE(sent.size(), 3u);
  EXPECT_EQ(sent.front().event, "metadata");
  EXPECT_EQ(sent.front().data, (json{{"run_id", "r1"}, {"thread_id", "t"}}));
  EXPECT_EQ(sent.back().event, "end");
  std::vector<std::string> names;
  for (const auto& s : sent)
    names.push_back(s.event);
  EXPECT_EQ(names, (std::vector<std::string>{"metadata", "values", "updates", "values", "updates",
                                             "values", "updates", "values", "end"}));
  // The state: the view before the run, then its messages as they came; the user's first.
  const json first = sent[1].data["messages"];
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]["type"], "system");
  EXPECT_EQ(first[1]["type"], "human");
  EXPECT_EQ(first[1]["id"], service::langGraphMessageId("t", 1));
  EXPECT_EQ(sent[2].data["agent"]["messages"][0]["tool_calls"][0]["name"], "get_time");
  EXPECT_EQ(sent[4].data["tools"]["messages"][0]["tool_call_id"], "c1");
  const json last = sent[7].data["messages"];
  ASSERT_EQ(last.size(), 5u);
  EXPECT_EQ(last[4]["content"], "It is noon.");
  // Nothing of the other run, nothing after the end.
  EXPECT_EQ(encodeAll(modes).find("after the end"), std::string::npos);
}

TEST(AgentProtocolEncodingTest, MessagesModesStreamTheReplyUnderItsFinalId) {
  StreamModes modes;
  modes.messagesTuple = modes.messages = true;
  auto sent = parse(encodeAll(modes));
  const std::string replyId = service::langGraphMessageId("t", 4);
  std::string tupleText;
  std::string lastPartial;
  int completes = 0;
  for (const auto& s : sent) {
    if (s.event == "messages" && s.data[0]["id"] == replyId) {
      tupleText += s.data[0]["content"].get<std::string>();
      EXPECT_EQ(s.data[1]["langgraph_node"], "agent");
    }
    if (s.event == "messages/partial") lastPartial = s.data[0]["content"];
    if (s.event == "messages/complete") ++completes;
  }
  EXPECT_EQ(tupleText, "It is noon.");  // streamed once, not again when the message is added
  EXPECT_EQ(lastPartial, "It is noon.");
  EXPECT_EQ(completes, 3);  // the tool call, the tool's result, the answer
}

TEST(AgentProtocolEncodingTest, AResumedStreamSendsTheRestOnce) {
  StreamModes modes;
  modes.values = modes.messagesTuple = modes.custom = true;
  const auto whole = parse(encodeAll(modes));
  for (size_t cut = 2; cut + 1 < whole.size(); cut += 3) {
    ASSERT_FALSE(whole[cut].id.empty());
    auto resume = service::parseStreamPosition(whole[cut].id);
    ASSERT_TRUE(resume);
    auto rest = parse(encodeAll(modes, resume));
    ASSERT_EQ(rest.size(), whole.size() - cut - 1) << "cut after " << whole[cut].id;
    for (size_t i = 0; i < rest.size(); ++i) {
      EXPECT_EQ(rest[i].id, whole[cut + 1 + i].id);
      EXPECT_EQ(rest[i].data, whole[cut + 1 + i].data);
    }
  }
  EXPECT_FALSE(service::parseStreamPosition("x"));
  EXPECT_FALSE(service::parseStreamPosition("12-"));
}

TEST(AgentProtocolEncodingTest, AWaitIsAnInterruptAndAFailureAnError) {
  StreamModes modes;
  modes.values = modes.updates = true;
  RunStreamEncoder waiting("t", "r1", modes, {}, std::nullopt);
  const json wait = {{"kind", "approval"},
                     {"tool_call_id", "c9"},
                     {"tool", "rm"},
                     {"arguments", R"({"path":"a"})"},
                     {"prompt", "Run it?"}};
  auto sent = parse(waiting.feed(stored(1, "r1", "run_waiting", {{"wait", wait}})));
  EXPECT_TRUE(waiting.done());
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].data["__interrupt__"][0]["id"], "c9");
  // parley's wait, and beside it LangChain's human-in-the-loop request for the same call.
  const json value = sent[1].data["__interrupt__"][0]["value"];
  for (const auto& [key, field] : wait.items())
    EXPECT_EQ(value[key], field) << key;
  EXPECT_EQ(value["action_requests"],
            json::parse(R"([{"name": "rm", "args": {"path": "a"}, "description": "Run it?"}])"));
  EXPECT_EQ(value["review_configs"],
            json::parse(R"([{"action_name": "rm", "allowed_decisions": ["approve", "reject"]}])"));
  // A question to a person is not an approval: no decisions are offered.
  RunStreamEncoder asking("t", "r1", modes, {}, std::nullopt);
  const json question = {{"kind", "interaction"}, {"tool_call_id", "c1"}, {"prompt", "Which?"}};
  sent = parse(asking.feed(stored(1, "r1", "run_waiting", {{"wait", question}})));
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].data["__interrupt__"][0]["value"], question);

  RunStreamEncoder failing("t", "r1", modes, {}, std::nullopt);
  sent = parse(failing.feed(stored(2, "r1", "llm_execution_failed",
                                   {{"run_id", "r1"}, {"error", "boom"}, {"cancelled", false}})));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].event, "error");
  EXPECT_EQ(sent[0].data["message"], "boom");
  EXPECT_TRUE(failing.done());
}

TEST(AgentProtocolEncodingTest, MessagesConvertBothWays) {
  Message m = service::fromLangGraphMessage({{"type", "human"}, {"content", "hi"}}, "m");
  EXPECT_EQ(m.role, Role::User);
  EXPECT_EQ(m.content, "hi");
  m = service::fromLangGraphMessage({{"role", "user"}, {"content", "hey"}}, "m");
  EXPECT_EQ(m.content, "hey");
  m = service::fromLangGraphMessage(
      {{"type", "ai"},
       {"content", ""},
       {"tool_calls", {{{"name", "f"}, {"args", {{"x", 1}}}, {"id", "c1"}}}}},
      "m");
  ASSERT_EQ(m.toolCalls.size(), 1u);
  EXPECT_EQ(json::parse(m.toolCalls[0].arguments), (json{{"x", 1}}));
  const json back = service::toLangGraphMessage(m, "id-1");
  EXPECT_EQ(back["type"], "ai");
  EXPECT_EQ(back["tool_calls"][0]["args"], (json{{"x", 1}}));
  EXPECT_THROW(service::fromLangGraphMessage({{"type", "robot"}, {"content", "x"}}, "m"),
               ValidationError);
  EXPECT_THROW(service::fromLangGraphMessage(json::array(), "m"), ValidationError);
}

TEST(AgentProtocolEncodingTest, StreamModesAreCheckedAndCapped) {
  auto modes = service::parseStreamModes(json::array({"values", "messages-tuple", "custom"}));
  EXPECT_TRUE(modes.values && modes.messagesTuple && modes.custom && !modes.updates);
  EXPECT_TRUE(service::parseStreamModes(nullptr).values);
  EXPECT_THROW(service::parseStreamModes("debug"), ValidationError);
  EXPECT_THROW(service::parseStreamModes(json::array({"values", 3})), ValidationError);
  json many = json::array();
  for (int i = 0; i < 17; ++i)
    many.push_back("values");
  EXPECT_THROW(service::parseStreamModes(many), ValidationError);  // the cap: 16
}

// --- the routes ---------------------------------------------------------------------------------

class AgentProtocolTest : public ::testing::Test {
 protected:
  SqliteRunDb db;
  std::shared_ptr<RunStore> runs = std::make_shared<RunStore>(db.open());
  std::unique_ptr<Service> service;
  std::string base;

  void SetUp() override {
    ServiceOptions options;
    options.log = [](const std::string&) {};
    options.threads = 8;
    options.heartbeat = 200ms;
    service = std::make_unique<Service>(runs, options);
    service->start();
    base = service->baseUrl();
  }
  HttpReply get(const std::string& path) { return http("GET", base + path); }
  HttpReply post(const std::string& path, const json& body = json::object()) {
    return http("POST", base + path, body.dump());
  }
  HttpReply patch(const std::string& path, const json& body) {
    return http("PATCH", base + path, body.dump());
  }
  HttpReply del(const std::string& path) { return http("DELETE", base + path); }
  static json messages(const std::string& text) {
    return {{"messages", {{{"role", "user"}, {"content", text}}}}};
  }
};

void expectStatus(const HttpReply& reply, long status, const std::string& code = "") {
  EXPECT_EQ(reply.status, status) << reply.body;
  if (code.empty()) return;
  json body = json::parse(reply.body, nullptr, false);
  EXPECT_EQ(body["error"]["code"], code) << reply.body;
  EXPECT_TRUE(body["detail"].is_string()) << reply.body;
}

TEST_F(AgentProtocolTest, ThreadsCreatePatchSearchCopyDelete) {
  auto made = post("/threads", {{"thread_id", "a1"}, {"metadata", {{"user", "ada"}}}});
  ASSERT_EQ(made.status, 200) << made.body;
  EXPECT_EQ(made.json()["thread_id"], "a1");
  EXPECT_EQ(made.json()["status"], "idle");
  EXPECT_EQ(made.json()["values"]["messages"], json::array());
  expectStatus(post("/threads", {{"thread_id", "a1"}}), 409, "thread_exists");
  EXPECT_EQ(post("/threads", {{"thread_id", "a1"}, {"if_exists", "do_nothing"}}).status, 200);
  ASSERT_EQ(post("/threads", {{"metadata", {{"user", "bob"}}}}).status, 200);

  auto patched = patch("/threads/a1", {{"metadata", {{"topic", "x"}}}});
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json()["metadata"], (json{{"user", "ada"}, {"topic", "x"}}));
  EXPECT_EQ(get("/threads/a1").json()["metadata"]["topic"], "x");

  auto found = post("/threads/search", {{"metadata", {{"user", "ada"}}}});
  ASSERT_EQ(found.status, 200) << found.body;
  ASSERT_EQ(found.json().size(), 1u);
  EXPECT_EQ(found.json()[0]["thread_id"], "a1");
  EXPECT_EQ(post("/threads/search", {{"limit", 1}}).json().size(), 1u);
  EXPECT_EQ(post("/threads/count", json::object()).json(), 2);
  auto byId = post("/threads/search", {{"sort_by", "thread_id"}, {"sort_order", "asc"}});
  EXPECT_EQ(byId.json()[0]["thread_id"], "a1");

  auto copy = post("/threads/a1/copy");
  ASSERT_EQ(copy.status, 200) << copy.body;
  EXPECT_NE(copy.json()["thread_id"], "a1");
  EXPECT_EQ(copy.json()["metadata"]["topic"], "x");

  // A copy and cancel of the SDK send no body and no type: allowed, a typed form still is not.
  EXPECT_EQ(http("POST", base + "/threads/a1/copy", "", {"Content-Type: text/plain"}).status, 415);

  EXPECT_EQ(del("/threads/a1").status, 204);
  expectStatus(get("/threads/a1"), 404, "not_found");
}

// The history: the current batch's state after each of its messages, then each earlier batch's
// last view; each state's parent is the one before it.
TEST_F(AgentProtocolTest, StateAndHistoryAreTheMessagesAndTheBatches) {
  ThreadOptions named;
  named.id = "h";
  runs->threads().createThread(
      named, std::vector<Message>{Message::system("Be brief."), Message::user("hello"),
                                  Message::assistant("hi")});
  auto state = get("/threads/h/state");
  ASSERT_EQ(state.status, 200) << state.body;
  EXPECT_EQ(state.json()["values"]["messages"].size(), 3u);
  const std::string before = state.json()["checkpoint"]["checkpoint_id"];
  // A context operation starts a batch: a second state in the history.
  auto op = post("/v1/threads/h/operations",
                 {{"operation", "truncate"}, {"truncate", {{"keepLast", 1}}}});
  ASSERT_EQ(op.status, 200) << op.body;
  auto history = post("/threads/h/history", {{"limit", 10}});
  ASSERT_EQ(history.status, 200) << history.body;
  // Batch 1 holds "hi" (stored third): its state with it and the one before; then batch 0.
  std::vector<std::string> ids;
  std::vector<size_t> sizes;
  for (const json& state : history.json()) {
    ids.push_back(state["checkpoint"]["checkpoint_id"]);
    sizes.push_back(state["values"]["messages"].size());
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"b1-n3", "b1-n2", "b0-n3"}));
  EXPECT_EQ(sizes, (std::vector<size_t>{1, 0, 3}));
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    EXPECT_EQ(history.json()[i]["parent_checkpoint"]["checkpoint_id"], ids[i + 1]);
  EXPECT_TRUE(history.json().back()["parent_checkpoint"].is_null());
  EXPECT_EQ(get("/threads/h/state").json()["parent_checkpoint"]["checkpoint_id"], "b1-n2");
  EXPECT_EQ(get("/threads/h/state/b1-n2").json()["parent_checkpoint"]["checkpoint_id"], "b0-n3");
  // Paging by `before`.
  auto page = post("/threads/h/history", {{"limit", 1}, {"before", {{"checkpoint_id", "b1-n3"}}}});
  ASSERT_EQ(page.json().size(), 1u) << page.body;
  EXPECT_EQ(page.json()[0]["checkpoint"]["checkpoint_id"], "b1-n2");
  expectStatus(post("/threads/h/history", {{"before", {{"checkpoint_id", "b7-n1"}}}}), 404,
               "not_found");
  auto old = get("/threads/h/state/" + ids.back());
  ASSERT_EQ(old.status, 200) << old.body;
  EXPECT_EQ(old.json()["values"]["messages"].size(), 3u);
  EXPECT_EQ(get("/threads/h/state/" + before).json()["values"]["messages"].size(), 3u);
  expectStatus(get("/threads/h/state/nonsense"), 400, "invalid_checkpoint");
  expectStatus(post("/threads/h/state", {{"values", json::object()}}), 400, "unsupported");
}

TEST_F(AgentProtocolTest, RunsCreateListCancelAndDoubleTexting) {
  ASSERT_EQ(post("/threads", {{"thread_id", "r"}}).status, 200);
  auto run = post("/threads/r/runs",
                  {{"assistant_id", "agent"}, {"input", messages("hi")}, {"metadata", {{"k", 1}}}});
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(run.json()["status"], "pending");
  EXPECT_EQ(run.json()["metadata"]["k"], 1);
  const std::string id = run.json()["run_id"];
  EXPECT_EQ(run.headers["content-location"], "/threads/r/runs/" + id);
  EXPECT_EQ(get("/threads/r").json()["status"], "busy");
  // No worker: the thread stays busy, a second run with reject is refused.
  expectStatus(post("/threads/r/runs", {{"assistant_id", "agent"},
                                        {"input", messages("again")},
                                        {"multitask_strategy", "reject"}}),
               409, "run_rejected");
  auto queued = post("/threads/r/runs", {{"assistant_id", "agent"},
                                         {"input", messages("queued")},
                                         {"multitask_strategy", "enqueue"}});
  ASSERT_EQ(queued.status, 200);
  auto listed = get("/threads/r/runs?limit=10");
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json().size(), 3u);                             // the rejected one is listed too
  EXPECT_EQ(listed.json()[0]["run_id"], queued.json()["run_id"]);  // newest first
  EXPECT_EQ(get("/threads/r/runs?status=error").json().size(), 1u);
  auto cancelled = post("/threads/r/runs/" + id + "/cancel");
  ASSERT_EQ(cancelled.status, 200) << cancelled.body;
  EXPECT_EQ(cancelled.json()["status"], "interrupted");
  expectStatus(post("/threads/r/runs/" + id + "/cancel?action=rollback"), 400, "unsupported");
  expectStatus(get("/threads/other/runs/" + id), 404, "not_found");
  expectStatus(del("/threads/r/runs/" + id), 400, "unsupported");
  expectStatus(post("/threads/nope/runs", {{"assistant_id", "agent"}, {"input", messages("x")}}),
               404, "not_found");
  expectStatus(post("/threads/r/runs", {{"assistant_id", "agent"}, {"command", {{"resume", 1}}}}),
               409, "run_not_waiting");
}

// Created assistants, versioned; a run on one starts from the version set as latest, and its
// own config goes over it. The profiles' assistant ("agent") is read-only.
TEST_F(AgentProtocolTest, AssistantsAreCreatedVersionedAndRunWith) {
  const json v1 = {{"configurable", {{"system_prompt", "be brief"}, {"tools", {"get_time"}}}}};
  auto made = post("/assistants", {{"assistant_id", "a1"},
                                   {"graph_id", "agent"},
                                   {"name", "Brief"},
                                   {"description", "short answers"},
                                   {"config", v1},
                                   {"metadata", {{"team", "x"}}}});
  ASSERT_EQ(made.status, 200) << made.body;
  EXPECT_EQ(made.json()["version"], 1);
  EXPECT_EQ(made.json()["config"], v1);
  expectStatus(post("/assistants", {{"assistant_id", "a1"}, {"graph_id", "agent"}}), 409,
               "assistant_exists");
  auto kept = post("/assistants",
                   {{"assistant_id", "a1"}, {"graph_id", "agent"}, {"if_exists", "do_nothing"}});
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(kept.json()["name"], "Brief");
  auto generated = post("/assistants", {{"graph_id", "agent"}, {"name", "Other"}});
  ASSERT_EQ(generated.status, 200) << generated.body;
  EXPECT_EQ(generated.json()["assistant_id"].get<std::string>().rfind("asst-", 0), 0u);

  auto updated = patch(
      "/assistants/a1",
      {{"config", {{"configurable", {{"tools", json::array()}}}}}, {"metadata", {{"stage", 2}}}});
  ASSERT_EQ(updated.status, 200) << updated.body;
  EXPECT_EQ(updated.json()["version"], 2);
  EXPECT_EQ(updated.json()["metadata"], (json{{"team", "x"}, {"stage", 2}}));
  EXPECT_EQ(get("/assistants/a1").json()["version"], 2);
  auto versions = post("/assistants/a1/versions");
  ASSERT_EQ(versions.status, 200) << versions.body;
  ASSERT_EQ(versions.json().size(), 2u);
  EXPECT_EQ(versions.json()[0]["version"], 2);

  ASSERT_EQ(post("/threads", {{"thread_id", "as"}}).status, 200);
  auto runWith = [&](json extra = json::object()) {
    json body = {{"assistant_id", "a1"}, {"input", messages("hi")}};
    body.update(extra);
    auto run = post("/threads/as/runs", body);
    EXPECT_EQ(run.status, 200) << run.body;
    EXPECT_EQ(run.json()["assistant_id"], "a1");
    return runs->run(run.json()["run_id"].get<std::string>())->options;
  };
  auto latest = runWith();
  EXPECT_FALSE(latest.systemPrompt);  // version 2 has no system prompt
  ASSERT_TRUE(latest.tools);
  EXPECT_TRUE(latest.tools->empty());
  auto set = post("/assistants/a1/latest", {{"version", 1}});
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_EQ(set.json()["version"], 1);
  auto first = runWith();
  EXPECT_EQ(first.systemPrompt, "be brief");
  EXPECT_EQ(first.tools, (std::vector<std::string>{"get_time"}));
  EXPECT_EQ(first.profile, "");
  auto own = runWith({{"config", {{"configurable", {{"system_prompt", "own"}}}}}});
  EXPECT_EQ(own.systemPrompt, "own");
  expectStatus(post("/assistants/a1/latest", {{"version", 7}}), 404, "not_found");

  auto search = [&](json body) {
    auto found = post("/assistants/search", body);
    EXPECT_EQ(found.status, 200) << found.body;
    return found;
  };
  auto byTeam = search({{"metadata", {{"team", "x"}}}});
  ASSERT_EQ(byTeam.json().size(), 1u);
  EXPECT_EQ(byTeam.json()[0]["assistant_id"], "a1");
  EXPECT_EQ(search({{"name", "bri"}}).json().size(), 1u);        // part of the name, case ignored
  EXPECT_EQ(search({{"graph_id", "agent"}}).json().size(), 3u);  // "agent" itself and two made
  auto page = search({{"sort_by", "name"}, {"sort_order", "asc"}, {"limit", 1}});
  ASSERT_EQ(page.json().size(), 1u);
  EXPECT_EQ(page.json()[0]["name"], "Brief");
  EXPECT_EQ(page.headers["x-pagination-next"], "1");
  auto picked = search({{"sort_by", "name"},
                        {"sort_order", "asc"},
                        {"offset", 1},
                        {"select", {"assistant_id", "name"}}});
  ASSERT_EQ(picked.json().size(), 2u);
  EXPECT_EQ(picked.json()[0],
            (json{{"assistant_id", picked.json()[0]["assistant_id"]}, {"name", "Other"}}));
  EXPECT_EQ(post("/assistants/count", {{"graph_id", "agent"}}).json(), 3);
  EXPECT_EQ(post("/assistants/count", {{"metadata", {{"team", "y"}}}}).json(), 0);

  // The OpenAI models list the made ones too.
  auto models = get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json modelList = models.json();
  bool listed = false;
  for (const auto& m : modelList["data"])
    listed = listed || m["id"] == "a1";
  EXPECT_TRUE(listed) << models.body;

  expectStatus(patch("/assistants/agent", {{"name", "x"}}), 409, "read_only_assistant");
  expectStatus(del("/assistants/agent"), 409, "read_only_assistant");
  expectStatus(patch("/assistants/nope", {{"name", "x"}}), 404, "not_found");
  expectStatus(del("/assistants/a1?delete_threads=true"), 400, "unsupported");
  EXPECT_EQ(del("/assistants/a1").status, 204);
  expectStatus(get("/assistants/a1"), 404, "not_found");
  expectStatus(del("/assistants/a1"), 404, "not_found");
}

TEST_F(AgentProtocolTest, AssistantsPastTheirCapsAreRefused) {
  const json base = {{"graph_id", "agent"}};
  auto create = [&](json extra) {
    json body = base;
    body.update(extra);
    return post("/assistants", body);
  };
  expectStatus(post("/assistants", json::object()), 400, "invalid_graph_id");
  expectStatus(create({{"name", std::string(257, 'n')}}), 400, "invalid_name");
  expectStatus(create({{"description", std::string(4097, 'd')}}), 400, "invalid_description");
  expectStatus(
      create({{"config", {{"configurable", {{"system_prompt", std::string(70'000, 's')}}}}}}), 400,
      "invalid_config");
  expectStatus(create({{"context", {{"big", std::string(70'000, 'c')}}}}), 400, "invalid_context");
  expectStatus(create({{"config", {{"configurable", {{"model", "gpt-4o"}}}}}}), 400,
               "unsupported_config");
  expectStatus(create({{"metadata", {{"big", std::string(70'000, 'x')}}}}), 400,
               "invalid_metadata");
  expectStatus(create({{"assistant_id", std::string(200, 'a')}}), 400, "invalid_id");
  expectStatus(create({{"if_exists", "replace"}}), 400, "invalid_if_exists");
  expectStatus(post("/assistants/search", {{"limit", 1001}}), 400, "invalid_limit");
  expectStatus(post("/assistants/search", {{"sort_by", "version"}}), 400, "invalid_sort_by");
  // Just within: accepted.
  ASSERT_EQ(create({{"assistant_id", "cap"},
                    {"name", std::string(256, 'n')},
                    {"description", std::string(4096, 'd')}})
                .status,
            200);
  expectStatus(patch("/assistants/cap", {{"name", std::string(257, 'n')}}), 400, "invalid_name");
  // Versions kept: 100; the 101st update drops version 1 (and 2 after it).
  for (int i = 0; i < 101; ++i)
    ASSERT_EQ(patch("/assistants/cap", {{"metadata", {{"i", i}}}}).status, 200);
  auto versions = post("/assistants/cap/versions", {{"limit", 1000}});
  ASSERT_EQ(versions.status, 200) << versions.body;
  ASSERT_EQ(versions.json().size(), 100u);
  EXPECT_EQ(versions.json()[0]["version"], 102);
  EXPECT_EQ(versions.json()[99]["version"], 3);
  expectStatus(post("/assistants/cap/latest", {{"version", 1}}), 404, "not_found");
}

TEST_F(AgentProtocolTest, WhatCannotBeHonouredIsRefused) {
  ASSERT_EQ(post("/threads", {{"thread_id", "x"}}).status, 200);
  const json ok = {{"assistant_id", "agent"}, {"input", messages("hi")}};
  auto with = [&](const char* key, json value) {
    json body = ok;
    body[key] = std::move(value);
    return post("/threads/x/runs", body);
  };
  expectStatus(with("model", "gpt-4o"), 400, "unsupported");
  expectStatus(with("config", {{"configurable", {{"model", "gpt-4o"}}}}), 400,
               "unsupported_config");
  expectStatus(with("config", {{"tags", {"a"}}}), 400, "unsupported_config");
  expectStatus(with("interrupt_before", {"tools"}), 400, "unsupported");
  // Only https without --webhook-allow-loopback (webhooks_test has the rest).
  expectStatus(with("webhook", "http://127.0.0.1:9/x"), 400, "invalid_webhook");
  expectStatus(with("webhook", 5), 400, "invalid_webhook");
  expectStatus(with("checkpoint_id", "b0-n9"), 404, "not_found");
  expectStatus(with("stream_mode", "debug"), 400, "invalid_request");
  expectStatus(with("input", {{"question", "x"}}), 400, "invalid_input");
  expectStatus(with("on_completion", "delete"), 400, "invalid_on_completion");
  expectStatus(with("multitask_strategy", "later"), 400, "invalid_multitask_strategy");
  expectStatus(post("/threads/x/runs", {{"input", messages("hi")}}), 400, "invalid_assistant");
  // Accepted: what parley does anyway, or what maps onto its settings.
  EXPECT_EQ(with("config", {{"recursion_limit", 5}, {"configurable", {{"thread_id", "x"}}}}).status,
            200);
}

// What LangGraph's Agent Chat UI (on useStream) sends: /info first, the thread's latest checkpoint
// with every run, stream_subgraphs; it lists a graph's threads by their metadata. An earlier
// checkpoint runs from that state, as a new batch.
TEST_F(AgentProtocolTest, RunsStartFromACheckpointAndNoteTheirAssistant) {
  auto info = get("/info");
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_TRUE(info.json()["version"].is_string());
  EXPECT_EQ(info.json()["flags"]["assistants"], true);

  ThreadOptions named;
  named.id = "k";
  runs->threads().createThread(named,
                               std::vector<Message>{Message::user("one"), Message::assistant("1"),
                                                    Message::user("two"), Message::assistant("2")});
  const json head = get("/threads/k/state").json()["checkpoint"];
  ASSERT_EQ(head["checkpoint_id"], "b0-n4");
  auto run = [&](json checkpoint, json extra = json::object()) {
    json body = {{"assistant_id", "agent"}, {"input", messages("three")}};
    if (!checkpoint.is_null()) body["checkpoint"] = std::move(checkpoint);
    body.update(extra);
    return post("/threads/k/runs", body);
  };
  auto cancel = [&](const HttpReply& made) {
    const std::string id = made.json()["run_id"];
    ASSERT_EQ(post("/threads/k/runs/" + id + "/cancel").status, 200);
  };
  // The latest state: a run as any, the thread as it was; the thread now names its graph.
  auto first =
      run({{"checkpoint_id", "b0-n4"}, {"checkpoint_ns", ""}}, {{"stream_subgraphs", true}});
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(get("/threads/k/state").json()["values"]["messages"].size(), 4u);
  const json metadata = get("/threads/k").json()["metadata"];
  EXPECT_EQ(metadata["graph_id"], "agent");
  EXPECT_EQ(metadata["assistant_id"], "agent");
  auto found = post("/threads/search", {{"metadata", {{"graph_id", "agent"}}}, {"limit", 100}});
  ASSERT_EQ(found.json().size(), 1u) << found.body;  // before "fresh" below
  EXPECT_EQ(found.json()[0]["thread_id"], "k");
  // A thread the run makes (if_not_exists) is made with them.
  ASSERT_EQ(
      post("/threads/fresh/runs",
           {{"assistant_id", "agent"}, {"input", messages("hi")}, {"if_not_exists", "create"}})
          .status,
      200);
  EXPECT_EQ(get("/threads/fresh").json()["metadata"],
            (json{{"graph_id", "agent"}, {"assistant_id", "agent"}}));
  // An earlier state waits for the thread's runs to finish.
  expectStatus(run({{"checkpoint_id", "b0-n2"}}), 409, "thread_busy");
  // But the latest state a client saw before the run under way added its input goes after it.
  auto claimed = runs->claim("w", 30s);
  ASSERT_TRUE(claimed);
  ASSERT_EQ(claimed->run.id, first.json()["run_id"]);
  const std::vector<Message> input = {Message::user("three")};
  runs->appendTurn(claimed->lease, input, nullptr, runs->threads().threadInfo("k")->version);
  auto after = run({{"checkpoint_id", "b0-n4"}});
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(get("/threads/k/state").json()["values"]["messages"].size(), 5u);
  expectStatus(run({{"checkpoint_id", "b0-n3"}}), 409, "thread_busy");
  cancel(after);
  runs->finish(claimed->lease, RunStatus::Completed);  // the thread: one, 1, two, 2, three
  // Then it is the thread's view, a new batch; the history keeps the state it replaced.
  auto second = run({{"checkpoint_id", "b0-n2"}});
  ASSERT_EQ(second.status, 200) << second.body;
  auto state = get("/threads/k/state").json();
  ASSERT_EQ(state["values"]["messages"].size(), 2u);
  EXPECT_EQ(state["values"]["messages"][1]["content"], "1");
  EXPECT_EQ(state["checkpoint"]["checkpoint_id"], "b1-n5");
  auto history = post("/threads/k/history", {{"limit", 10}}).json();
  ASSERT_EQ(history.size(), 4u);  // b1-n5, b1-n1, b1-n0, then batch 0's b0-n5
  EXPECT_EQ(history[3]["values"]["messages"].size(), 5u);
  cancel(second);
  // A state of an earlier batch too: the four messages again, as batch 2.
  auto third = run({{"checkpoint_id", "b0-n4"}});
  ASSERT_EQ(third.status, 200);
  state = get("/threads/k/state").json();
  EXPECT_EQ(state["values"]["messages"].size(), 4u);
  EXPECT_EQ(state["checkpoint"]["checkpoint_id"], "b2-n5");
  cancel(third);
  // No input: the state's last message, the user's, is answered again (Agent Chat UI's
  // regenerate sends the state before a reply): the view without it, it the run's input.
  auto again = post("/threads/k/runs", {{"assistant_id", "agent"}, {"checkpoint_id", "b2-n3"}});
  ASSERT_EQ(again.status, 200) << again.body;
  state = get("/threads/k/state").json();
  ASSERT_EQ(state["values"]["messages"].size(), 2u);
  EXPECT_EQ(state["values"]["messages"][1]["content"], "1");
  const auto queued = runs->run(again.json()["run_id"]);
  ASSERT_TRUE(queued);
  ASSERT_EQ(queued->input.size(), 1u);
  EXPECT_EQ(queued->input[0].content, "two");
  cancel(again);
  // A state that ends with the model's reply has nothing to answer.
  expectStatus(post("/threads/k/runs", {{"assistant_id", "agent"}, {"checkpoint_id", "b0-n4"}}),
               400, "invalid_input");

  // A state that cuts a tool call from its result is not one to run from.
  named.id = "tools";
  Message call = Message::assistant("");
  call.toolCalls = {ToolCall{"c1", "f", "{}"}};
  runs->threads().createThread(
      named, std::vector<Message>{Message::user("go"), call, Message::tool("c1", "done"),
                                  Message::assistant("ok")});
  expectStatus(
      post("/threads/tools/runs",
           {{"assistant_id", "agent"}, {"input", messages("again")}, {"checkpoint_id", "b0-n2"}}),
      400, "invalid_checkpoint");
  EXPECT_EQ(get("/threads/tools/state").json()["values"]["messages"].size(), 4u);

  expectStatus(run({{"checkpoint_id", "b9-n0"}}), 404, "not_found");
  expectStatus(run({{"checkpoint_id", "nonsense"}}), 400, "invalid_checkpoint");
  expectStatus(run({{"checkpoint_id", "b0-n4"}, {"checkpoint_ns", "sub"}}), 400,
               "invalid_checkpoint");
  expectStatus(
      run(nullptr, {{"checkpoint_id", "b0-n1"}, {"checkpoint", {{"checkpoint_id", "b0-n2"}}}}), 400,
      "invalid_checkpoint");
  expectStatus(run(nullptr, {{"stream_subgraphs", "yes"}}), 400, "invalid_stream_subgraphs");
  expectStatus(
      post("/runs",
           {{"assistant_id", "agent"}, {"input", messages("x")}, {"checkpoint_id", "b0-n0"}}),
      400, "invalid_checkpoint");
}

TEST_F(AgentProtocolTest, InputsPastTheirCapsAreRefused) {
  json deep = json::object();
  for (int i = 0; i < 20; ++i)
    deep = {{"d", deep}};
  expectStatus(post("/threads", {{"metadata", deep}}), 400, "invalid_metadata");
  expectStatus(post("/threads", {{"metadata", {{"big", std::string(70'000, 'x')}}}}), 400,
               "invalid_metadata");
  ASSERT_EQ(post("/threads", {{"thread_id", "c"}}).status, 200);
  expectStatus(patch("/threads/c", {{"metadata", {{"big", std::string(70'000, 'x')}}}}), 400,
               "invalid_metadata");
  expectStatus(post("/threads/search", {{"limit", 1001}}), 400, "invalid_limit");
  expectStatus(post("/threads/search", {{"offset", 10'001}}), 400, "invalid_offset");
  json ids = json::array();
  for (int i = 0; i < 1001; ++i)
    ids.push_back("t" + std::to_string(i));
  expectStatus(post("/threads/search", {{"ids", ids}}), 400, "invalid_ids");
  expectStatus(post("/threads", {{"thread_id", std::string(200, 'a')}}), 400, "invalid_id");
  json modes = json::array();
  for (int i = 0; i < 17; ++i)
    modes.push_back("values");
  expectStatus(post("/threads/c/runs",
                    {{"assistant_id", "agent"}, {"input", messages("hi")}, {"stream_mode", modes}}),
               400, "invalid_request");
  expectStatus(post("/threads/c/history", {{"limit", 5000}}), 400, "invalid_limit");
  // A long thread's states each hold it all: a page ends at 50 000 messages, the rest by before.
  std::vector<Message> many;
  for (int i = 0; i < 200; ++i) {
    many.push_back(Message::user("q" + std::to_string(i)));
    many.push_back(Message::assistant("a" + std::to_string(i)));
  }
  ThreadOptions named;
  named.id = "long";
  runs->threads().createThread(named, many);
  auto page = post("/threads/long/history", {{"limit", 1000}});
  ASSERT_EQ(page.status, 200);
  size_t held = 0;
  for (const json& state : page.json())
    held += state["values"]["messages"].size();
  EXPECT_LE(held, 50'000u);
  EXPECT_GT(held, 49'000u);  // 400 + 399 + ...: full up to the cap
  EXPECT_LT(page.json().size(), 401u);
  const json last = page.json().back()["checkpoint"];
  auto rest = post("/threads/long/history", {{"limit", 1000}, {"before", last}});
  ASSERT_EQ(rest.status, 200);
  EXPECT_EQ(page.json().size() + rest.json().size(), 401u);  // after each message, and before all
}

TEST_F(AgentProtocolTest, AJoinedStreamResumesAfterItsLastEventId) {
  ASSERT_EQ(post("/threads", {{"thread_id", "s"}}).status, 200);
  auto run = post("/threads/s/runs", {{"assistant_id", "agent"}, {"input", messages("hi")}});
  ASSERT_EQ(run.status, 200);
  const std::string id = run.json()["run_id"];
  auto claim = runs->claim("test-worker", 60s);
  ASSERT_TRUE(claim);
  MessageAdded user;
  user.message = Message::user("hi");
  user.index = 0;
  runs->appendEvents(claim->lease,
                     std::vector<EventInput>{{"message_added", eventToJson(user)},
                                             {"llm_stream_chunk", {{"content", "Hel"}}},
                                             {"llm_stream_chunk", {{"content", "lo"}}}});
  const std::string url = base + "/threads/s/runs/" + id + "/stream?stream_mode=messages-tuple";
  // The first client reads two tuples and goes.
  std::vector<SseEvent> first;
  readSse(url, [&](const SseEvent& e) {
    first.push_back(e);
    return first.size() < 2;
  });
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].event, "metadata");
  EXPECT_EQ(first[1].event, "messages");
  // The run ends; the client comes back after what it had.
  std::vector<Message> turn = {Message::user("hi"), Message::assistant("Hello")};
  MessageAdded reply;
  reply.message = turn[1];
  reply.index = 1;
  runs->finishWithTurn(claim->lease, turn, nullptr, runs->threads().threadInfo("s")->version,
                       json::object(),
                       std::vector<EventInput>{{"message_added", eventToJson(reply)}});
  auto rest = readSse(url, [](const SseEvent&) { return true; }, {"Last-Event-ID: " + first[1].id});
  ASSERT_EQ(rest.status, 200);
  std::string text = json::parse(first[1].data)[0]["content"];
  std::vector<std::string> names;
  for (const auto& e : rest.events) {
    names.push_back(e.event);
    if (e.event == "messages") text += json::parse(e.data)[0]["content"].get<std::string>();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"messages", "end"}));
  EXPECT_EQ(text, "Hello");
  auto joined = get("/threads/s/runs/" + id + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(joined.json()["messages"][1]["content"], "Hello");
  expectStatus(http("GET", url, "", {"Last-Event-ID: nonsense"}), 400, "invalid_last_event_id");
}

}  // namespace
}  // namespace parley::testing
