// The caps of the OpenAI-compatible endpoints and the UI streams (docs/service.md) that the npm
// clients' tests cannot reach: a run that no worker takes (504 past openAiRunTimeout, the run
// cancelled), the stream cap shared with the event streams (503), and the run store's cap on a
// run's client tools. The Service in this process, on a scratch SQLite database, no worker.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "http_client.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/run_store.hpp"
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

}  // namespace
}  // namespace parley::testing
