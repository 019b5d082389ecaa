// The Service in this process, on a scratch SQLite database, through libcurl: every route and
// its errors, authentication, the caps (body, event, streams, rate, ids), CORS, and event streams
// resumed with Last-Event-ID and ?after=N. Events are written by this test through the
// RunStore (a claimed run's appendEvents), as a worker would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "http_client.hpp"
#include "parley/errors.hpp"
#include "parley/run_store.hpp"
#include "parley/telemetry.hpp"
#include "run_databases.hpp"
#include "service/rate_limiter.hpp"
#include "service/service.hpp"

namespace parley::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kTokenA = "token-a-0123456789abcdef";
constexpr const char* kTokenB = "token-b-0123456789abcdef";

class ServiceTest : public ::testing::Test {
 protected:
  SqliteRunDb db;
  std::shared_ptr<RunStore> runs = std::make_shared<RunStore>(db.open());
  std::unique_ptr<Service> service;
  std::string base;
  std::vector<std::string> auth;

  void start(ServiceOptions options = {}) {
    options.log = [](const std::string&) {};
    if (options.threads == 0) options.threads = 32;  // enough here; cheap under the sanitizers
    service = std::make_unique<Service>(runs, options);
    service->start();
    base = service->baseUrl();
    if (!options.authTokens.empty()) auth = {"Authorization: Bearer " + options.authTokens[0]};
  }
  HttpReply get(const std::string& path) { return http("GET", base + path, "", auth); }
  HttpReply post(const std::string& path, const json& body = json::object()) {
    return http("POST", base + path, body.dump(), auth);
  }
  HttpReply del(const std::string& path) { return http("DELETE", base + path, "", auth); }
  // Until the service counts `n` open streams (its /metrics), at most 30 s.
  bool waitForStreams(int n) {
    const std::string line = "parley_stream_clients " + std::to_string(n) + "\n";
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (get("/metrics").body.find(line) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // A run claimed as a worker would, to write events under its lease.
  Lease claimRun(const std::string& thread) {
    runs->submit(thread, "hello");
    auto claim = runs->claim("test-worker", 60s);
    if (!claim) throw std::runtime_error("nothing to claim");
    return claim->lease;
  }
  int64_t appendEvents(const Lease& lease, int n, const std::string& type = "test_event") {
    std::vector<EventInput> events;
    for (int i = 0; i < n; ++i)
      events.push_back({type, {{"i", i}}});
    return runs->appendEvents(lease, events);
  }
};

void expectError(const HttpReply& reply, long status, const std::string& code) {
  EXPECT_EQ(reply.status, status) << reply.body;
  json body = json::parse(reply.body);
  ASSERT_TRUE(body.contains("error")) << reply.body;
  EXPECT_EQ(body["error"]["code"], code) << reply.body;
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_TRUE(body["error"]["type"].is_string());
}

// Sums the counters it is given: the queue depth's samples.
class CounterTelemetry : public Telemetry {
 public:
  void exportSpan(SpanData&&) noexcept override {}
  void addCounter(std::string_view name, int64_t delta,
                  const std::vector<Attribute>&) noexcept override {
    std::lock_guard lock(mutex_);
    sums_[std::string(name)] += delta;
    changed_.notify_all();
  }
  bool reaches(const std::string& name, int64_t value) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 30s, [&] { return sums_[name] == value; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, int64_t> sums_;
};

TEST_F(ServiceTest, TheQueueDepthIsRecordedForOtlp) {
  auto counters = std::make_shared<CounterTelemetry>();
  setTelemetry(counters);
  struct Reset {
    ~Reset() { setTelemetry(nullptr); }
  } reset;
  ServiceOptions options;
  options.queueDepthEvery = 5ms;
  start(options);
  for (const char* id : {"q1", "q2"}) {
    runs->threads().createThread({.id = id}, {});
    runs->submit(id, "hello");
  }
  EXPECT_TRUE(counters->reaches("parley.run.queue.depth", 2));
  ASSERT_TRUE(runs->claim("test-worker", 60s));
  EXPECT_TRUE(counters->reaches("parley.run.queue.depth", 1));
}

TEST_F(ServiceTest, ThreadsCreateListReadForkDelete) {
  start();
  auto created = post("/v1/threads", {{"id", "t1"}, {"system", "Be terse."}, {"title", "One"}});
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.json()["id"], "t1");
  EXPECT_EQ(created.json()["messages"].size(), 1u);
  EXPECT_EQ(created.json()["messages"][0]["role"], "system");
  expectError(post("/v1/threads", {{"id", "t1"}}), 409, "thread_exists");
  auto generated = post("/v1/threads");
  ASSERT_EQ(generated.status, 201);
  EXPECT_FALSE(generated.json()["id"].get<std::string>().empty());
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(post("/v1/threads", {{"id", "p" + std::to_string(i)}}).status, 201);

  auto page = get("/v1/threads?limit=2");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.json()["data"].size(), 2u);
  EXPECT_TRUE(page.json()["has_more"]);
  auto last = get("/v1/threads?limit=2&offset=4");
  EXPECT_EQ(last.json()["data"].size(), 1u);
  EXPECT_FALSE(last.json()["has_more"]);
  expectError(get("/v1/threads?limit=0"), 400, "invalid_limit");
  expectError(get("/v1/threads?limit=abc"), 400, "invalid_limit");
  expectError(get("/v1/threads?offset=-1"), 400, "invalid_offset");
  // Order and search read by the database (the chat page's list).
  auto found = get("/v1/threads?q=one&order=newest");
  ASSERT_EQ(found.status, 200) << found.body;
  ASSERT_EQ(found.json()["data"].size(), 1u);
  EXPECT_EQ(found.json()["data"][0]["id"], "t1");
  auto newest = get("/v1/threads?order=newest&limit=5");
  ASSERT_EQ(newest.json()["data"].size(), 5u);
  EXPECT_TRUE(newest.json()["has_more"].get<bool>() == false);
  EXPECT_GE(newest.json()["data"][0]["updated_at"], newest.json()["data"][4]["updated_at"]);
  EXPECT_EQ(get("/v1/threads?q=p&limit=5").json()["data"].size(), 3u);
  expectError(get("/v1/threads?order=sideways"), 400, "invalid_order");
  expectError(get("/v1/threads?q=" + std::string(300, 'x')), 400, "invalid_q");

  auto thread = get("/v1/threads/t1");
  ASSERT_EQ(thread.status, 200);
  EXPECT_EQ(thread.json()["title"], "One");
  expectError(get("/v1/threads/nope"), 404, "not_found");

  auto fork = post("/v1/threads/t1/fork", {{"id", "t1-fork"}, {"position", 0}});
  ASSERT_EQ(fork.status, 201) << fork.body;
  EXPECT_EQ(fork.json()["parent_id"], "t1");
  EXPECT_EQ(fork.json()["messages"].size(), 0u);
  expectError(post("/v1/threads/t1/fork", {{"position", 5}}), 400, "invalid_position");
  expectError(post("/v1/threads/t1/fork", {{"position", "x"}}), 400, "invalid_position");
  expectError(post("/v1/threads/nope/fork"), 404, "not_found");

  auto deleted = del("/v1/threads/t1-fork");
  ASSERT_EQ(deleted.status, 200);
  EXPECT_TRUE(deleted.json()["deleted"]);
  expectError(del("/v1/threads/t1-fork"), 404, "not_found");
  expectError(get("/v1/threads/t1-fork"), 404, "not_found");
}

TEST_F(ServiceTest, OperationsApplyAsBatchesAndUndo) {
  start();
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}, {"system", "S"}}).status, 201);
  auto inserted = post("/v1/threads/t/operations", json::parse(R"({"operations": [
      {"operation": "insert", "insert": {"position": -1, "messages": [
          {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}}]})"));
  ASSERT_EQ(inserted.status, 200) << inserted.body;
  EXPECT_EQ(inserted.json()["messages"].size(), 3u);
  const auto batch = inserted.json()["batch"].get<int>();
  auto truncated = post("/v1/threads/t/operations",
                        {{"operation", "truncate"}, {"truncate", {{"keepLast", 1}}}});
  ASSERT_EQ(truncated.status, 200) << truncated.body;
  EXPECT_EQ(truncated.json()["messages"].size(), 1u);
  EXPECT_EQ(truncated.json()["batch"], batch + 1);
  // Stored: a new client sees the same view.
  EXPECT_EQ(get("/v1/threads/t").json()["messages"].size(), 1u);
  auto undone = post("/v1/threads/t/operations", {{"operation", "undo"}});
  ASSERT_EQ(undone.status, 200) << undone.body;
  EXPECT_EQ(undone.json()["messages"].size(), 3u);
  EXPECT_EQ(get("/v1/threads/t").json()["messages"].size(), 3u);

  auto bad = post("/v1/threads/t/operations",
                  {{"operation", "truncate"}, {"truncate", {{"keepLast", -1}}}});
  expectError(bad, 400, "invalid_operation");
  EXPECT_NE(bad.json()["error"]["message"].get<std::string>().find("keepLast"), std::string::npos);
  expectError(post("/v1/threads/t/operations", {{"operation", "explode"}}), 400,
              "invalid_operation");
  // Nothing of a refused operation was stored.
  EXPECT_EQ(get("/v1/threads/t").json()["messages"].size(), 3u);

  // A thread with an unfinished run refuses operations: its worker owns the thread.
  runs->submit("t", "busy");
  expectError(post("/v1/threads/t/operations", {{"operation", "clear"}}), 409, "thread_busy");
}

TEST_F(ServiceTest, RunsSubmitReadCancelRespond) {
  start();
  auto submitted = post("/v1/threads/t/runs", {{"input", "Hi"}, {"id", "r-1"}});
  ASSERT_EQ(submitted.status, 202) << submitted.body;
  EXPECT_EQ(submitted.json()["run"], "r-1");
  EXPECT_EQ(submitted.json()["status"], "queued");
  EXPECT_EQ(submitted.json()["thread"], "t");
  auto run = get("/v1/runs/r-1");
  ASSERT_EQ(run.status, 200);
  EXPECT_EQ(run.json()["input"][0]["content"], "Hi");
  auto listed = get("/v1/threads/t/runs");
  ASSERT_EQ(listed.status, 200);
  EXPECT_EQ(listed.json()["data"].size(), 1u);

  // reject: the thread has an unfinished run.
  auto rejected = post("/v1/threads/t/runs", {{"input", "again"}, {"policy", "reject"}});
  expectError(rejected, 409, "run_rejected");
  EXPECT_EQ(rejected.json()["run"]["status"], "rejected");

  expectError(post("/v1/threads/t/runs", {{"input", "x"}, {"policy", "sometimes"}}), 400,
              "invalid_policy");
  expectError(post("/v1/threads/t/runs", json::object()), 400, "invalid_input");
  expectError(post("/v1/threads/t/runs", {{"input", ""}}), 400, "invalid_input");
  expectError(post("/v1/threads/t/runs", {{"input", {{{"role", "user"}}}}}), 400, "invalid_input");
  expectError(post("/v1/threads/t/runs", {{"input", "x"}, {"id", "r-1"}}), 409, "run_exists");
  expectError(post("/v1/threads/t/runs", {{"input", "x"}, {"stream", "yes"}}), 400,
              "invalid_stream");
  // 2^32 + 1 used to wrap to 1 (one model call); 0 and negatives are no count either.
  for (const json& count : {json(4294967297ULL), json(0), json(-1), json("3")})
    expectError(post("/v1/threads/t/runs", {{"input", "x"}, {"max_iterations", count}}), 400,
                "invalid_max_iterations");
  expectError(get("/v1/runs/r-none"), 404, "not_found");
  expectError(post("/v1/runs/r-none/cancel"), 404, "not_found");

  expectError(post("/v1/runs/r-1/respond", {{"response", "x"}}), 409, "run_not_waiting");
  // A waiting run takes an answer once.
  auto claim = runs->claim("w", 60s);
  ASSERT_TRUE(claim);
  runs->wait(claim->lease, {{"question", "Which city?"}});
  expectError(post("/v1/runs/r-1/respond", json::object()), 400, "invalid_response");
  auto answered = post("/v1/runs/r-1/respond", {{"response", "Oslo"}});
  ASSERT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(answered.json()["response"], "Oslo");
  expectError(post("/v1/runs/r-1/respond", {{"response", "Bergen"}}), 409, "run_not_waiting");

  auto cancelled = post("/v1/runs/r-1/cancel");
  ASSERT_EQ(cancelled.status, 200);
  EXPECT_EQ(cancelled.json()["status"], "cancelled");
}

TEST_F(ServiceTest, BadRequestsGetErrorObjects) {
  start();
  expectError(http("POST", base + "/v1/threads", "{not json", {}), 400, "invalid_json");
  expectError(http("POST", base + "/v1/threads", "[1]", {}), 400, "invalid_json");
  expectError(get("/v1/nothing"), 404, "not_found");
  expectError(get("/v1/threads/bad%20id"), 400, "invalid_id");
  expectError(get("/v1/threads/" + std::string(129, 'a')), 400, "invalid_id");
  expectError(post("/v1/threads", {{"id", "a/b"}}), 400, "invalid_id");
  expectError(get("/v1/runs/x%27%3B"), 400, "invalid_id");
  // Deeply nested JSON is refused before it is built.
  std::string deep(1000, '[');
  expectError(http("POST", base + "/v1/threads", "{\"metadata\":" + deep, {}), 400, "invalid_json");
}

TEST_F(ServiceTest, WithoutATokenOnlyLoopback) {
  ServiceOptions options;
  options.host = "0.0.0.0";
  EXPECT_THROW(Service service(runs, options), ValidationError);
  options.authTokens = {kTokenA};
  EXPECT_NO_THROW(Service service(runs, options));
  options.authTokens = {"short"};
  EXPECT_THROW(Service service(runs, options), ValidationError);
}

TEST_F(ServiceTest, BearerTokensAnyOfSeveral) {
  ServiceOptions options;
  options.authTokens = {kTokenA, kTokenB};
  start(options);
  expectError(http("GET", base + "/v1/threads"), 401, "invalid_token");
  expectError(http("GET", base + "/v1/threads", "", {"Authorization: Bearer wrong-token-wrong"}),
              401, "invalid_token");
  expectError(http("GET", base + "/metrics"), 401, "invalid_token");
  EXPECT_EQ(http("GET", base + "/v1/threads", "", {std::string("Authorization: Bearer ") + kTokenA})
                .status,
            200);
  EXPECT_EQ(http("GET", base + "/v1/threads", "", {std::string("Authorization: Bearer ") + kTokenB})
                .status,
            200);
  // What a load balancer and a browser need stays open.
  EXPECT_EQ(http("GET", base + "/healthz").status, 200);
  EXPECT_EQ(http("GET", base + "/").status, 200);
  // EventSource cannot send headers: the stream takes the token as a parameter.
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
  auto refused = readSse(base + "/v1/threads/t/events", [](const SseEvent&) { return false; });
  EXPECT_EQ(refused.status, 401);
  auto stream = readSse(
      base + "/v1/threads/t/events?access_token=" + kTokenB, [](const SseEvent&) { return false; },
      {}, 1'500);
  EXPECT_EQ(stream.status, 200);
}

TEST_F(ServiceTest, BodyPastTheCapIs413) {
  ServiceOptions options;
  options.maxBodyBytes = 1'000;
  start(options);
  json big = {{"id", "t"}, {"title", std::string(2'000, 'x')}};
  expectError(post("/v1/threads", big), 413, "body_too_large");
  EXPECT_FALSE(runs->threads().threadInfo("t"));
  EXPECT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
}

TEST_F(ServiceTest, RateLimitPerToken) {
  ServiceOptions options;
  options.authTokens = {kTokenA, kTokenB};
  options.ratePerSecond = 0.001;  // one per 1000 s after the burst: the test cannot refill it
  options.rateBurst = 3;
  start(options);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(get("/v1/threads").status, 200);
  auto limited = get("/v1/threads");
  expectError(limited, 429, "rate_limited");
  EXPECT_FALSE(limited.headers["retry-after"].empty());
  // The other token has its own bucket.
  EXPECT_EQ(http("GET", base + "/v1/threads", "", {std::string("Authorization: Bearer ") + kTokenB})
                .status,
            200);
}

TEST_F(ServiceTest, CorsOnlyWithAnOrigin) {
  start();
  auto plain = get("/v1/threads");
  EXPECT_EQ(plain.headers.count("access-control-allow-origin"), 0u);
  EXPECT_EQ(http("OPTIONS", base + "/v1/threads").status, 404);
  service.reset();
  ServiceOptions options;
  options.corsOrigin = "https://app.example";
  start(options);
  auto allowed = get("/v1/threads");
  EXPECT_EQ(allowed.headers["access-control-allow-origin"], "https://app.example");
  auto preflight = http("OPTIONS", base + "/v1/threads", "",
                        {"Origin: https://app.example", "Access-Control-Request-Method: POST"});
  EXPECT_EQ(preflight.status, 204);
  EXPECT_NE(preflight.headers["access-control-allow-headers"].find("Authorization"),
            std::string::npos);
}

TEST_F(ServiceTest, StreamResumesWithLastEventIdNothingLostOrDoubled) {
  start();
  const Lease lease = claimRun("t");
  const int64_t last = appendEvents(lease, 5);
  std::vector<int64_t> seen;
  // First connection: stop after the third of our events.
  int ours = 0;
  auto first = readSse(base + "/v1/threads/t/events", [&](const SseEvent& e) {
    seen.push_back(std::stoll(e.id));
    json data = json::parse(e.data);
    EXPECT_EQ(data["seq"], std::stoll(e.id));
    EXPECT_EQ(data["type"], e.event);
    return !(e.event == "test_event" && ++ours == 3);
  });
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.headers["content-type"], "text/event-stream");
  // Reconnect from the last id seen, while more events are written.
  auto writer = std::async(std::launch::async, [&] { return appendEvents(lease, 3); });
  const int64_t end = writer.get();
  auto second = readSse(base + "/v1/threads/t/events",
                        [&](const SseEvent& e) {
                          seen.push_back(std::stoll(e.id));
                          return std::stoll(e.id) < end;
                        },
                        {"Last-Event-ID: " + std::to_string(seen.back())});
  ASSERT_EQ(second.status, 200);
  std::vector<int64_t> expected;
  for (int64_t s = 1; s <= end; ++s)
    expected.push_back(s);
  EXPECT_EQ(seen, expected);
  EXPECT_GT(end, last);

  // ?after=N is the same.
  std::vector<int64_t> tail;
  readSse(base + "/v1/threads/t/events?after=" + std::to_string(end - 2), [&](const SseEvent& e) {
    tail.push_back(std::stoll(e.id));
    return std::stoll(e.id) < end;
  });
  EXPECT_EQ(tail, (std::vector<int64_t>{end - 1, end}));
  // Without following: the events there are, then the end.
  auto page = get("/v1/threads/t/events?follow=false&after=" + std::to_string(end - 1));
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.body.find("id: " + std::to_string(end - 1) + "\n"), std::string::npos);
  EXPECT_EQ(page.body.rfind("id: " + std::to_string(end) + "\nevent: test_event\ndata: {", 0), 0u)
      << page.body;
  expectError(get("/v1/threads/t/events?after=x"), 400, "invalid_after");
  expectError(get("/v1/threads/none/events"), 404, "not_found");
}

TEST_F(ServiceTest, AConnectedStreamGetsEventsWrittenLater) {
  ServiceOptions options;
  options.heartbeat = 100ms;
  start(options);
  const Lease lease = claimRun("t");
  const int64_t before = appendEvents(lease, 1);
  std::vector<std::string> types;
  auto reader = std::async(std::launch::async, [&] {
    return readSse(base + "/v1/threads/t/events?after=" + std::to_string(before),
                   [&](const SseEvent& e) {
                     types.push_back(e.event);
                     return e.event != "later";
                   });
  });
  // The stream is open once the service counts it.
  ASSERT_TRUE(waitForStreams(1));
  appendEvents(lease, 2, "later");
  auto read = reader.get();
  EXPECT_FALSE(read.timedOut);
  EXPECT_EQ(types, (std::vector<std::string>{"later"}));
}

TEST_F(ServiceTest, HeartbeatsOnAnIdleStream) {
  ServiceOptions options;
  options.heartbeat = 50ms;
  start(options);
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
  // No events: the stream carries only comments until the client leaves.
  auto read = readSse(
      base + "/v1/threads/t/events", [](const SseEvent&) { return false; }, {}, 1'000);
  EXPECT_TRUE(read.timedOut);
  EXPECT_GE(read.comments, 2);
  EXPECT_TRUE(read.events.empty());
}

TEST_F(ServiceTest, AnEventPastTheCapIsSentTruncated) {
  ServiceOptions options;
  options.maxEventBytes = 1'000;
  start(options);
  const Lease lease = claimRun("t");
  std::vector<EventInput> events = {{"big", {{"text", std::string(5'000, 'x')}}},
                                    {"small", {{"text", "y"}}}};
  const int64_t last = runs->appendEvents(lease, events);
  std::map<std::string, json> got;
  readSse(base + "/v1/threads/t/events", [&](const SseEvent& e) {
    got[e.event] = json::parse(e.data);
    EXPECT_LE(e.data.size(), 1'000u);
    return std::stoll(e.id) < last;
  });
  ASSERT_TRUE(got.count("big"));
  EXPECT_EQ(got["big"]["payload"]["truncated"], true);
  EXPECT_GT(got["big"]["payload"]["bytes"].get<int>(), 5'000);
  EXPECT_EQ(got["small"]["payload"]["text"], "y");
}

TEST_F(ServiceTest, StreamsPastTheCapAre503) {
  ServiceOptions options;
  options.maxStreams = 1;
  options.heartbeat = 50ms;
  start(options);
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
  auto holder = std::async(std::launch::async, [&] {
    return readSse(
        base + "/v1/threads/t/events", [](const SseEvent&) { return true; }, {}, 3'000);
  });
  ASSERT_TRUE(waitForStreams(1));
  auto refused = readSse(base + "/v1/threads/t/events", [](const SseEvent&) { return false; });
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("too_many_streams"), std::string::npos);
  holder.get();
}

TEST_F(ServiceTest, StreamEndsWhenTheThreadIsDeleted) {
  start();
  const Lease lease = claimRun("t");
  appendEvents(lease, 1);
  // The thread is deleted once the stream has sent what the log held (else the stream may find
  // the thread gone before its first read, and end with nothing).
  std::promise<void> caughtUp;
  int seen = 0;
  auto reader = std::async(std::launch::async, [&] {
    return readSse(
        base + "/v1/threads/t/events",
        [&](const SseEvent&) {
          if (++seen == 3) caughtUp.set_value();
          return true;
        },
        {}, 20'000);
  });
  ASSERT_EQ(caughtUp.get_future().wait_for(20s), std::future_status::ready);
  ASSERT_EQ(del("/v1/threads/t").status, 200);
  auto read = reader.get();
  EXPECT_FALSE(read.timedOut);
  EXPECT_EQ(read.events.size(), 3u);  // run_queued, run_started, test_event
}

TEST_F(ServiceTest, HealthAndMetrics) {
  start();
  auto health = get("/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");
  runs->submit("t", "one");
  runs->submit("t", "two");
  get("/v1/threads");
  auto metrics = get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("parley_runs{state=\"queued\"} 2"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("parley_queue_depth 2"), std::string::npos);
  EXPECT_NE(metrics.body.find("parley_stream_clients 0"), std::string::npos);
  EXPECT_NE(metrics.body.find("parley_http_request_duration_seconds_bucket{le=\"+Inf\"}"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("parley_http_requests_total{code=\"200\"}"), std::string::npos);
}

// DNS rebinding: a page of attacker.example, re-pointed at 127.0.0.1, sends its own Host.
TEST_F(ServiceTest, OnlyItsOwnHostNamesAreServed) {
  start();
  const std::string port = std::to_string(service->port());
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
  for (const std::string& host :
       std::vector<std::string>{"attacker.example:" + port, "attacker.example", "127.0.0.2:" + port,
                                "localhost:1" + port}) {
    expectError(http("GET", base + "/v1/threads/t", "", {"Host: " + host}), 403,
                "host_not_allowed");
  }
  expectError(http("POST", base + "/v1/threads", "{}", {"Host: attacker.example:" + port}), 403,
              "host_not_allowed");
  for (const std::string& host : std::vector<std::string>{"localhost:" + port, "127.0.0.1:" + port,
                                                          "[::1]:" + port, "LOCALHOST:" + port}) {
    EXPECT_EQ(http("GET", base + "/v1/threads/t", "", {"Host: " + host}).status, 200) << host;
  }
  // Configured names replace the defaults; "*" allows any.
  service.reset();
  ServiceOptions options;
  options.allowedHosts = {"parley.internal", "proxy.example:443"};
  start(options);
  const std::string port2 = std::to_string(service->port());
  EXPECT_EQ(http("GET", base + "/v1/threads", "", {"Host: parley.internal:" + port2}).status, 200);
  EXPECT_EQ(http("GET", base + "/v1/threads", "", {"Host: proxy.example:443"}).status, 200);
  expectError(http("GET", base + "/v1/threads", "", {"Host: localhost:" + port2}), 403,
              "host_not_allowed");
  options.allowedHosts = {"bad host"};
  EXPECT_THROW(Service(runs, options), ValidationError);
}

// Cross-site requests: a page of another origin may send a POST without a preflight
// (text/plain, a form); nothing it sends changes anything.
TEST_F(ServiceTest, CrossSiteStateChangesAreRefused) {
  start();
  const std::string self = base;  // http://127.0.0.1:PORT
  const std::string foreign = "http://127.0.0.1:1";
  const std::string body = R"({"id":"x"})";
  expectError(http("POST", base + "/v1/threads", body, {"Origin: " + foreign}), 403,
              "origin_not_allowed");
  expectError(http("POST", base + "/v1/threads", body, {"Origin: null"}), 403,
              "origin_not_allowed");
  expectError(
      http("POST", base + "/v1/threads", body, {"Origin: " + foreign, "Content-Type: text/plain"}),
      403, "origin_not_allowed");
  // Without an Origin (a script), the media type still has to be JSON.
  expectError(http("POST", base + "/v1/threads", body, {"Content-Type: text/plain"}), 415,
              "unsupported_media_type");
  expectError(http("POST", base + "/v1/threads", "id=x",
                   {"Content-Type: application/x-www-form-urlencoded"}),
              415, "unsupported_media_type");
  expectError(http("POST", base + "/v1/threads", body, {"Content-Type: multipart/form-data"}), 415,
              "unsupported_media_type");
  EXPECT_FALSE(runs->threads().threadInfo("x"));
  // Its own origin, and JSON with a charset, are fine; reading needs no Origin check.
  EXPECT_EQ(http("POST", base + "/v1/threads", body,
                 {"Origin: " + self, "Content-Type: application/json; charset=utf-8"})
                .status,
            201);
  EXPECT_EQ(http("GET", base + "/v1/threads/x", "", {"Origin: " + foreign}).status, 200);
  // The CORS origin may change state too.
  service.reset();
  ServiceOptions options;
  options.corsOrigin = "https://app.example";
  start(options);
  EXPECT_EQ(
      http("POST", base + "/v1/threads", R"({"id":"y"})", {"Origin: https://app.example"}).status,
      201);
  expectError(http("DELETE", base + "/v1/threads/y", "", {"Origin: " + foreign}), 403,
              "origin_not_allowed");
  EXPECT_TRUE(runs->threads().threadInfo("y"));
}

TEST_F(ServiceTest, FailedAuthenticationIsRateLimitedPerAddress) {
  ServiceOptions options;
  options.authTokens = {kTokenA};
  options.authFailuresPerSecond = 0.001;  // no refill within the test
  options.authFailureBurst = 3;
  start(options);
  for (int i = 0; i < 3; ++i) {
    expectError(http("GET", base + "/v1/threads", "",
                     {"Authorization: Bearer wrong-" + std::to_string(i) + "-0123456789"}),
                401, "invalid_token");
  }
  auto limited =
      http("GET", base + "/v1/threads", "", {"Authorization: Bearer wrong-x-0123456789"});
  expectError(limited, 429, "too_many_failed_authentications");
  EXPECT_FALSE(limited.headers["retry-after"].empty());
  // A right guess is no different now, or the answer would tell it.
  expectError(get("/v1/threads"), 429, "too_many_failed_authentications");
  // What needs no token stays open.
  EXPECT_EQ(http("GET", base + "/healthz").status, 200);
}

// With a token, what comes before authentication is capped all the same: a head of 200 header
// lines, a chunked body past the cap (counted as read, never parsed past it).
TEST_F(ServiceTest, TheFrontCapsRequestsBeforeAuthentication) {
  ServiceOptions options;
  options.authTokens = {kTokenA};
  options.maxBodyBytes = 1'000;
  start(options);
  std::vector<std::string> many;
  for (int i = 0; i < 200; ++i)
    many.push_back("X-H" + std::to_string(i) + ": v");
  expectError(http("GET", base + "/v1/threads", "", many), 431, "headers_too_large");
  const std::string big = json{{"id", "t"}, {"title", std::string(5'000, 'x')}}.dump();
  expectError(http("POST", base + "/v1/threads", big, {"Transfer-Encoding: chunked"}), 413,
              "body_too_large");
  expectError(http("POST", base + "/v1/threads", big, {"Transfer-Encoding: chunked", auth.front()}),
              413, "body_too_large");
  EXPECT_FALSE(runs->threads().threadInfo("t"));
  // Under the cap, chunked is read whole.
  EXPECT_EQ(http("POST", base + "/v1/threads", R"({"id":"t"})",
                 {"Transfer-Encoding: chunked", auth.front()})
                .status,
            201);
}

TEST(RateLimiterTest, TheTableIsBounded) {
  service::RateLimiter limiter(0.001, 1, {}, 100);
  for (int i = 0; i < 1'000; ++i)
    limiter.take("addr:" + std::to_string(i));
  EXPECT_LE(limiter.keys(), 100u);
  EXPECT_GT(limiter.peek("addr:999").count(), 0);
}

TEST_F(ServiceTest, HealthReportsADamagedDatabase) {
  start();
  for (int i = 0; i < 300; ++i)
    runs->threads().createThread({.id = "t" + std::to_string(i), .title = std::string(500, 'x')},
                                 {});
  ASSERT_EQ(get("/healthz").status, 200);
  // Closed (the last connection checkpoints the log into the file), then garbage over the second
  // half of the file: the schema at its start still opens, the thread rows are damaged.
  service.reset();
  runs.reset();
  {
    const auto size = std::filesystem::file_size(db.url());
    ASSERT_GT(size, 64u << 10);
    std::fstream file(db.url(), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file);
    file.seekp(static_cast<std::streamoff>(size / 2));
    const std::string junk(size - size / 2, '\x5a');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  runs = std::make_shared<RunStore>(db.open());
  start();
  auto health = get("/healthz");
  EXPECT_EQ(health.status, 503) << health.body;
  EXPECT_EQ(health.json()["status"], "unavailable");
}

TEST_F(ServiceTest, AFollowFalseAnswerIsStreamedNotBuiltWhole) {
  start();
  const Lease lease = claimRun("t");
  appendEvents(lease, 40);
  auto reply = get("/v1/threads/t/events?follow=false");
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers["transfer-encoding"], "chunked");
  EXPECT_EQ(reply.headers.count("content-length"), 0u);
  size_t events = 0;
  for (size_t at = reply.body.find("\nevent: "); at != std::string::npos;
       at = reply.body.find("\nevent: ", at + 1))
    ++events;
  EXPECT_EQ(events, 42u);  // run_queued, run_started and 40
  auto after = get("/v1/threads/t/events?follow=false&after=41");
  EXPECT_EQ(after.body.find("id: 41\n"), std::string::npos);
  EXPECT_NE(after.body.find("id: 42\n"), std::string::npos);
}

// 100 idle streams on 100 threads: one query per poll for all of them, and no event read until
// an event comes (a reader per thread polled each thread before: thousands of reads a second).
TEST_F(ServiceTest, IdleStreamsCostOnePollForAll) {
  ServiceOptions options;
  options.heartbeat = 60s;
  options.threads = 4;
  start(options);
  constexpr int kThreads = 100;
  for (int i = 0; i < kThreads; ++i)
    runs->threads().createThread({.id = "t" + std::to_string(i)}, {});
  std::vector<std::future<SseRead>> readers;
  std::atomic<int> got{0};
  for (int i = 0; i < kThreads; ++i) {
    readers.push_back(std::async(std::launch::async, [&, i] {
      return readSse(
          base + "/v1/threads/t" + std::to_string(i) + "/events",
          [&](const SseEvent&) {
            ++got;
            return false;
          },
          {}, 30'000);
    }));
  }
  ASSERT_TRUE(waitForStreams(kThreads));
  auto counter = [&](const std::string& name) {
    const std::string body = get("/metrics").body;
    const size_t at = body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stoll(body.substr(at + name.size() + 2));
  };
  const auto reads = counter("parley_event_log_reads_total");
  const auto polls = counter("parley_event_log_polls_total");
  ASSERT_GE(reads, 0);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (counter("parley_event_log_polls_total") < polls + 5 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_GE(counter("parley_event_log_polls_total"), polls + 5);
  EXPECT_EQ(counter("parley_event_log_reads_total"), reads);
  // An event on one thread: one read, and its stream has it.
  const Lease lease = claimRun("t7");
  appendEvents(lease, 1);
  auto seven = readers[7].get();
  EXPECT_EQ(got, 1);
  EXPECT_EQ(seven.events.size(), 1u);
  service->stop();
  for (size_t i = 0; i < readers.size(); ++i)
    if (i != 7) readers[i].get();
}

// A client that leaves a stream waiting for events (no write due for a minute) is noticed by
// the socket's hang-up, not at the next heartbeat: /metrics stops counting it at once.
TEST_F(ServiceTest, AClientThatLeavesAWaitingStreamIsNoLongerCounted) {
  ServiceOptions options;
  options.heartbeat = 60s;
  start(options);
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
  const std::string hostPort = base.substr(base.find("//") + 2);
  const int port = std::stoi(hostPort.substr(hostPort.rfind(':') + 1));
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string request = "GET /v1/threads/t/events HTTP/1.1\r\nHost: " + hostPort + "\r\n\r\n";
  ASSERT_EQ(::send(sock, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  // The greeting: the stream is open and waits for events.
  std::string received;
  char buffer[512];
  while (received.find("retry:") == std::string::npos) {
    const ssize_t n = ::recv(sock, buffer, sizeof buffer, 0);
    ASSERT_GT(n, 0) << received;
    received.append(buffer, static_cast<size_t>(n));
  }
  ASSERT_TRUE(waitForStreams(1));
  ::close(sock);
  EXPECT_TRUE(waitForStreams(0));  // bounded at 30 s; the heartbeat would come after 60
}

TEST_F(ServiceTest, StopEndsOpenStreamsAtOnce) {
  ServiceOptions options;
  options.heartbeat = 60s;
  start(options);
  ASSERT_EQ(post("/v1/threads", {{"id", "t"}}).status, 201);
  auto reader = std::async(std::launch::async, [&] {
    return readSse(
        base + "/v1/threads/t/events", [](const SseEvent&) { return true; }, {}, 30'000);
  });
  ASSERT_TRUE(waitForStreams(1));
  service->stop();
  auto read = reader.get();
  EXPECT_FALSE(read.timedOut);
}

}  // namespace
}  // namespace parley::testing
