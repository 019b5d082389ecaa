// The caps of the OpenAI-compatible endpoints and the UI streams (docs/service.md) that the npm
// clients' tests cannot reach: a run that no worker takes (504 past openAiRunTimeout, the run
// cancelled), the stream cap shared with the event streams (503), and the run store's cap on a
// run's client tools; and every kind of stream waiting without a thread of its own. The Service
// in this process, on a scratch SQLite database, no worker.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <thread>

#include "http_client.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/run_store.hpp"
#include "raw_client.hpp"
#include "run_databases.hpp"
#include "service/service.hpp"

namespace parley::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class ServiceProtocolsTest : public ::testing::Test {
 protected:
  SqliteRunDb db;
  std::shared_ptr<RunStore> runs = std::make_shared<RunStore>(db.open());
  std::unique_ptr<Service> service;
  std::string base;

  void start(ServiceOptions options) {
    options.log = [](const std::string&) {};
    options.threads = 8;
    service = std::make_unique<Service>(runs, options);
    service->start();
    base = service->baseUrl();
  }
  HttpReply post(const std::string& path, const json& body) {
    return http("POST", base + path, body.dump(), {});
  }
  // Until the service counts `n` open streams (its /metrics), at most 30 s.
  bool waitForStreams(int n) {
    const std::string line = "parley_stream_clients " + std::to_string(n) + "\n";
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (http("GET", base + "/metrics", "", {}).body.find(line) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }
};

const json kChat = {{"model", "default"},
                    {"store", true},
                    {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})}};

TEST_F(ServiceProtocolsTest, ARunNoWorkerTakesIs504AndCancelled) {
  ServiceOptions options;
  options.openAiRunTimeout = 200ms;
  start(options);
  const HttpReply reply = post("/v1/chat/completions", kChat);
  EXPECT_EQ(reply.status, 504) << reply.body;
  EXPECT_EQ(reply.json()["error"]["code"], "timeout");
  ASSERT_TRUE(reply.headers.count("x-parley-run")) << reply.body;
  const auto run = runs->run(reply.headers.at("x-parley-run"));
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, RunStatus::Cancelled);
  // The same for a response.
  const HttpReply response =
      post("/v1/responses", {{"model", "default"}, {"input", "hello"}, {"stream", false}});
  EXPECT_EQ(response.status, 504) << response.body;
}

TEST_F(ServiceProtocolsTest, StreamsPastTheCapAre503) {
  ServiceOptions options;
  options.maxStreams = 1;
  options.heartbeat = 50ms;
  start(options);
  json streamed = kChat;
  streamed["stream"] = true;
  // No worker: the run stays queued and its stream open until the service stops.
  auto holder =
      std::async(std::launch::async, [&] { return post("/v1/chat/completions", streamed); });
  ASSERT_TRUE(waitForStreams(1));
  const HttpReply refused = post("/v1/chat/completions", streamed);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.json()["error"]["code"], "too_many_streams");
  const HttpReply ui = post(
      "/v1/ui/chat",
      {{"id", "ui-1"},
       {"messages",
        json::array(
            {{{"role", "user"}, {"parts", json::array({{{"type", "text"}, {"text", "hi"}}})}}})}});
  EXPECT_EQ(ui.status, 503) << ui.body;
  service->stop();  // ends the open stream
  EXPECT_EQ(holder.get().status, 200);
}

TEST_F(ServiceProtocolsTest, RepliesArePricedByTheTableUpToTheCap) {
  auto prices = std::make_shared<PriceTable>();
  ModelPrice price;
  price.input = 1.0;
  price.output = 2.0;
  prices->set("m", price);
  ServiceOptions options;
  options.prices = prices;
  start(options);
  const json usage = {{"prompt_tokens", 1'000'000}, {"completion_tokens", 500'000}};
  const HttpReply reply =
      post("/v1/costs", {{"replies", json::array({{{"model", "m"}, {"usage", usage}},
                                                  {{"model", "other"}, {"usage", usage}},
                                                  {{"model", "m"}}})}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json costs = reply.json()["costs"];
  ASSERT_EQ(costs.size(), 3u);
  EXPECT_DOUBLE_EQ(costs[0]["usd"].get<double>(), 2.0);
  EXPECT_TRUE(costs[1]["usd"].is_null());  // unpriced
  EXPECT_TRUE(costs[2]["usd"].is_null());  // no usage
  json many = json::array();
  for (int i = 0; i < 1001; ++i)
    many.push_back({{"model", "m"}, {"usage", usage}});
  const HttpReply refused = post("/v1/costs", {{"replies", many}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.json()["error"]["code"], "invalid_replies");
}

TEST_F(ServiceProtocolsTest, ARunsClientToolsAreCappedAndKept) {
  SubmitOptions options;
  options.clientTools = json::array();
  for (int i = 0; i < 129; ++i)
    options.clientTools.push_back({{"name", "t" + std::to_string(i)}});
  EXPECT_THROW(runs->submit("t", "hi", options), ValidationError);
  options.clientTools = json::array({{{"name", "bad name"}}});
  EXPECT_THROW(runs->submit("t", "hi", options), ValidationError);
  options.clientTools = json::array({{{"name", "ok"}, {"parameters", "not a schema"}}});
  EXPECT_THROW(runs->submit("t", "hi", options), ValidationError);
  options.clientTools = json::array(
      {{{"name", "lookup_order"}, {"description", "d"}, {"parameters", {{"type", "object"}}}}});
  const RunInfo run = runs->submit("t", "hi", options);
  EXPECT_EQ(runs->run(run.id)->options.clientTools, options.clientTools);
}

// This process's threads now (/proc/self/status).
int threadsNow() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// One stream of each kind the service speaks (docs/service.md): the request that opens it, what
// its first bytes hold, and what it sends once its run ends (cancelled).
struct StreamKind {
  std::string name;
  std::string method;
  std::string path;
  json body;  // null for a GET
  std::string greeting;
  std::string ending;
};

std::vector<StreamKind> streamKinds(const std::string& id) {
  const json userText = json::array({{{"type", "text"}, {"text", "hi"}}});
  return {
      {"native", "GET", "/v1/threads/" + id + "/events", nullptr, "retry: 1000",
       "event: llm_execution_failed"},
      {"langgraph",
       "POST",
       "/threads/" + id + "/runs/stream",
       {{"assistant_id", "agent"},
        {"if_not_exists", "create"},
        {"input", {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}}},
       "event: metadata",
       "event: end"},
      {"chat.completions",
       "POST",
       "/v1/chat/completions",
       {{"model", "default"},
        {"stream", true},
        {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}},
       "\"role\":\"assistant\"",
       "run_cancelled"},
      {"responses",
       "POST",
       "/v1/responses",
       {{"model", "default"}, {"stream", true}, {"input", "hi"}},
       "response.created",
       "response.failed"},
      {"ui",
       "POST",
       "/v1/ui/chat",
       {{"id", id}, {"messages", json::array({{{"role", "user"}, {"parts", userText}}})}},
       "retry: 1000",
       "[DONE]"},
      {"ag-ui",
       "POST",
       "/v1/ag-ui",
       {{"threadId", id},
        {"runId", "run-" + id},
        {"messages", json::array({{{"id", "m1"}, {"role", "user"}, {"content", "hi"}}})}},
       "retry: 1000",
       "RUN_FINISHED"},
      {"a2a",
       "POST",
       "/a2a/jsonrpc",
       {{"jsonrpc", "2.0"},
        {"id", 1},
        {"method", "SendStreamingMessage"},
        {"params",
         {{"message",
           {{"messageId", "m-" + id},
            {"contextId", id},
            {"role", "ROLE_USER"},
            {"parts", json::array({{{"text", "hi"}}})}}}}}},
       "TASK_STATE_SUBMITTED",
       "TASK_STATE_CANCELED"},
  };
}

// Five streams of every kind, their runs queued (no worker): they wait without a thread each,
// /metrics counts the live ones only once some clients leave, and each stream still left gets
// its run's end when the runs are cancelled.
TEST_F(ServiceProtocolsTest, EveryKindOfStreamWaitsWithoutAThread) {
  ServiceOptions options;
  options.heartbeat = 600s;
  options.streamThreads = 2;
  start(options);
  ASSERT_EQ(http("GET", base + "/healthz", "", {}).status, 200);
  const int before = threadsNow();
  const std::string hostPort = base.substr(base.find("//") + 2);
  const int port = std::stoi(hostPort.substr(hostPort.rfind(':') + 1));
  struct Open {
    StreamKind kind;
    std::unique_ptr<RawClient> client;
  };
  std::vector<Open> open;
  for (int i = 0; i < 5; ++i) {
    for (auto& kind : streamKinds("t" + std::to_string(i))) {
      if (kind.name == "native") {  // its thread must exist; the others make theirs
        ASSERT_EQ(post("/v1/threads", {{"id", "t" + std::to_string(i)}}).status, 201);
      }
      auto client = std::make_unique<RawClient>(port);
      std::string request =
          kind.method + " " + kind.path + " HTTP/1.1\r\nHost: " + hostPort + "\r\n";
      if (!kind.body.is_null()) {
        const std::string body = kind.body.dump();
        request +=
            "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n\r\n" + body;
      } else {
        request += "\r\n";
      }
      client->send(request);
      const std::string first = client->readUntil(kind.greeting);
      ASSERT_NE(first.find(kind.greeting), std::string::npos) << kind.name << ": " << first;
      open.push_back({kind, std::move(client)});
    }
  }
  const int streams = static_cast<int>(open.size());
  ASSERT_TRUE(waitForStreams(streams));
  // A thread per stream would be 35 more; the threads that served their requests end.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (threadsNow() > before + 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_LE(threadsNow(), before + 4) << "threads before the streams: " << before;
  // One client of each kind leaves: only the live streams are counted.
  for (size_t i = 0; i < open.size(); i += 5)
    open[i].client.reset();
  ASSERT_TRUE(waitForStreams(streams - 7));
  // Every run ends: each stream left is woken with its end.
  RunListOptions queued;
  queued.status = RunStatus::Queued;
  for (const auto& run : runs->listRuns(queued))
    runs->cancel(run.id);
  for (auto& [kind, client] : open) {
    if (!client) continue;
    const std::string rest = client->readUntil(kind.ending);
    EXPECT_NE(rest.find(kind.ending), std::string::npos) << kind.name << ": " << rest;
  }
}

}  // namespace
}  // namespace parley::testing
