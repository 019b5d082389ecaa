// The mock server over real loopback HTTP (httplib's client): replies, faults, recording,
// determinism and the demo agent.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"

namespace parley::mock {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct HttpReply {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  httplib::Error error = httplib::Error::Success;
};

// POSTs `body` to the server, collecting the body through a receiver so that a connection
// dropped mid-body still returns what arrived. `onData` sees each piece as it arrives.
HttpReply post(const MockServer& server, const std::string& path, const std::string& body,
               httplib::Headers headers = {},
               std::function<void(const std::string&)> onData = nullptr) {
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(30, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = std::move(headers);
  req.set_header("Content-Type", "application/json");
  req.body = body;
  HttpReply reply;
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    reply.body.append(data, len);
    if (onData) onData(reply.body);
    return true;
  };
  auto res = client.send(req);
  reply.error = res.error();
  if (res) {
    reply.status = res->status;
    reply.headers = res->headers;
  }
  return reply;
}

HttpReply chat(const MockServer& server, const json& body, httplib::Headers headers = {},
               std::function<void(const std::string&)> onData = nullptr) {
  return post(server, "/v1/chat/completions", body.dump(), std::move(headers), std::move(onData));
}

json userTurn(const std::string& text, bool stream = false) {
  json body = {{"model", "test-model"}, {"messages", {{{"role", "user"}, {"content", text}}}}};
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  }
  return body;
}

// The SSE body split into events; each is its text without the blank-line terminator.
std::vector<std::string> sseEvents(const std::string& body) {
  std::vector<std::string> events;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      events.push_back(body.substr(pos));
      break;
    }
    events.push_back(body.substr(pos, end - pos));
    pos = end + 2;
  }
  return events;
}

// The data payloads of the events (comment lines dropped).
std::vector<std::string> sseData(const std::string& body) {
  std::vector<std::string> data;
  for (const auto& e : sseEvents(body)) {
    if (e.rfind("data: ", 0) == 0) data.push_back(e.substr(6));
  }
  return data;
}

std::unique_ptr<MockServer> startServer(const std::string& scriptText) {
  MockOptions options;
  options.script = readScript(scriptText);
  auto server = std::make_unique<MockServer>(std::move(options));
  server->start();
  return server;
}

TEST(MockServer, NonStreamingReplyIsRecordedWithHeadersBodyAndRule) {
  auto server = startServer(R"({"name":"hello","reply":{"content":"Hello, {{last_user}}"}})");
  EXPECT_EQ(server->baseUrl(), "http://127.0.0.1:" + std::to_string(server->port()) + "/v1");
  json body = userTurn("Ann");
  HttpReply r = chat(*server, body, {{"Authorization", "Bearer sk-test"}, {"X-Extra", "1"}});
  ASSERT_EQ(r.error, httplib::Error::Success);
  ASSERT_EQ(r.status, 200);
  json reply = json::parse(r.body);
  EXPECT_EQ(reply["object"], "chat.completion");
  EXPECT_EQ(reply["model"], "test-model");
  EXPECT_EQ(reply["choices"][0]["message"]["content"], "Hello, Ann");
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
  EXPECT_GT(reply["usage"]["total_tokens"].get<int>(), 0);

  auto seen = server->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["method"], "POST");
  EXPECT_EQ(seen[0]["path"], "/v1/chat/completions");
  EXPECT_EQ(seen[0]["headers"]["authorization"], "Bearer sk-test");
  EXPECT_EQ(seen[0]["headers"]["x-extra"], "1");
  EXPECT_FALSE(seen[0]["headers"].contains("remote_addr"));  // only what the client sent
  EXPECT_EQ(seen[0]["body"], body);
  EXPECT_EQ(seen[0]["rule"], 0);
  EXPECT_EQ(seen[0]["rule_name"], "hello");
  server->clearRequests();
  EXPECT_TRUE(server->requests().empty());
}

// A long-running mock (the demo agent behind `parley serve`) must not keep every conversation it
// was sent: requests() keeps the last maxRecorded, and 0 keeps none.
TEST(MockServer, RecordedRequestsAreBounded) {
  for (std::size_t keep : {std::size_t{0}, std::size_t{2}}) {
    MockOptions options;
    options.script = json::array({{{"reply", {{"content", "ok"}}}}});
    options.maxRecorded = keep;
    MockServer server(options);
    server.start();
    for (int i = 0; i < 5; ++i)
      ASSERT_EQ(chat(server, userTurn("turn " + std::to_string(i))).status, 200);
    const auto seen = server.requests();
    ASSERT_EQ(seen.size(), keep);
    if (keep == 2) {
      EXPECT_EQ(seen[0]["index"], 3);
      EXPECT_EQ(seen[1]["index"], 4);
      EXPECT_EQ(seen[1]["rule"], 0);
    }
    EXPECT_TRUE(server.waitForRequests(5, std::chrono::milliseconds(0)));
  }
}

TEST(MockServer, OnRequestSeesEachRequestWithItsRuleBeforeTheReply) {
  std::mutex mutex;
  std::vector<json> seen;
  MockOptions options;
  options.script = readScript(R"({"name":"only","reply":{"content":"x"}})");
  options.onRequest = [&](const json& r) {
    std::lock_guard lock(mutex);
    seen.push_back(r);
  };
  MockServer server(options);
  server.start();
  ASSERT_EQ(chat(server, userTurn("a", true)).status, 200);
  httplib::Client client("127.0.0.1", server.port());
  ASSERT_TRUE(client.Get("/v1/models"));
  std::lock_guard lock(mutex);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["rule_name"], "only");
  EXPECT_EQ(seen[0]["body"]["stream"], true);
  EXPECT_EQ(seen[1]["path"], "/v1/models");
  EXPECT_EQ(seen, server.requests());
}

TEST(MockServer, ModelsUnknownPathsAndBadBodies) {
  MockOptions options;
  options.models = {"a", "b"};
  options.script = readScript(R"({"match":{"user_contains":"only this"},"reply":{"content":"x"}})");
  MockServer server(options);
  server.start();
  httplib::Client client("127.0.0.1", server.port());
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  json list = json::parse(models->body);
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][1]["id"], "b");
  auto one = client.Get("/v1/models/a");
  ASSERT_TRUE(one);
  EXPECT_EQ(json::parse(one->body)["id"], "a");
  EXPECT_EQ(client.Get("/v1/models/zzz")->status, 404);
  auto missing = client.Post("/v1/nothing", "{}", "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(json::parse(missing->body)["error"]["message"].get<std::string>().find("/v1/nothing"),
            std::string::npos);

  HttpReply notJson = post(server, "/v1/chat/completions", "{not json");
  EXPECT_EQ(notJson.status, 400);
  HttpReply noMessages = chat(server, json{{"model", "m"}});
  EXPECT_EQ(noMessages.status, 400);
  EXPECT_NE(noMessages.body.find("messages"), std::string::npos);
  HttpReply unmatched = chat(server, userTurn("something else"));
  EXPECT_EQ(unmatched.status, 400);
  EXPECT_NE(unmatched.body.find("no script rule matches chat request"), std::string::npos);

  auto seen = server.requests();
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[3]["path"], "/v1/nothing");
  EXPECT_EQ(seen[4]["body"], "{not json");
  EXPECT_TRUE(seen[6]["rule"].is_null());
}

TEST(MockServer, StreamsParallelToolCallsAndUsageAsOpenAiDoes) {
  auto server = startServer(
      R"({"reply":{"content":"Checking.","tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}},{"name":"get_time","arguments":{}}],"usage":{"prompt_tokens":20,"completion_tokens":9}}})");
  HttpReply r = chat(*server, userTurn("weather and time?", true));
  ASSERT_EQ(r.error, httplib::Error::Success);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(httplib::detail::get_header_value(r.headers, "Content-Type", 0, ""),
            std::string("text/event-stream"));
  std::vector<std::string> data = sseData(r.body);
  ASSERT_GE(data.size(), 5u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string content;
  std::vector<std::string> names, args(2);
  std::string finish;
  for (std::size_t i = 0; i + 2 < data.size(); ++i) {
    json chunk = json::parse(data[i]);
    EXPECT_TRUE(chunk["usage"].is_null());
    const json& delta = chunk["choices"][0]["delta"];
    if (i == 0) {
      EXPECT_EQ(delta["role"], "assistant");
    }
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
    for (const auto& tc : delta.value("tool_calls", json::array())) {
      if (tc.contains("id")) names.push_back(tc["function"]["name"]);
      args.at(tc["index"].get<std::size_t>()) += tc["function"]["arguments"].get<std::string>();
    }
    if (!chunk["choices"][0]["finish_reason"].is_null())
      finish = chunk["choices"][0]["finish_reason"];
  }
  json usageChunk = json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usageChunk["choices"].empty());
  EXPECT_EQ(usageChunk["usage"],
            json({{"prompt_tokens", 20}, {"completion_tokens", 9}, {"total_tokens", 29}}));
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_EQ(json::parse(args[0]), json({{"city", "Paris"}}));
  EXPECT_EQ(args[1], "{}");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(MockServer, ErrorStatusWithRetryHeadersThenSuccess) {
  auto server = startServer(
      "{\"times\":2,\"error\":{\"status\":429,\"message\":\"slow down\",\"retry_after\":2,"
      "\"retry_after_ms\":1500,\"headers\":{\"x-should-retry\":\"true\"}}}\n"
      "{\"reply\":{\"content\":\"finally\"}}");
  for (int attempt = 1; attempt <= 2; ++attempt) {
    HttpReply r = chat(*server, userTurn("hi"));
    ASSERT_EQ(r.status, 429) << "attempt " << attempt;
    EXPECT_EQ(httplib::detail::get_header_value(r.headers, "Retry-After", 0, ""), std::string("2"));
    EXPECT_EQ(httplib::detail::get_header_value(r.headers, "retry-after-ms", 0, ""),
              std::string("1500"));
    EXPECT_EQ(httplib::detail::get_header_value(r.headers, "x-should-retry", 0, ""),
              std::string("true"));
    EXPECT_EQ(httplib::detail::get_header_value(r.headers, "x-request-id", 0, ""),
              "req_mock_" + std::to_string(attempt));
    json err = json::parse(r.body)["error"];
    EXPECT_EQ(err["message"], "slow down");
    EXPECT_EQ(err["type"], "rate_limit_error");
  }
  HttpReply ok = chat(*server, userTurn("hi"));
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(json::parse(ok.body)["choices"][0]["message"]["content"], "finally");
  auto seen = server->requests();
  EXPECT_EQ(seen[0]["rule"], 0);
  EXPECT_EQ(seen[2]["rule"], 1);
}

TEST(MockServer, MatchesByRequestNumberTurnAndLastRole) {
  auto server = startServer(
      "{\"match\":{\"request\":2},\"reply\":{\"content\":\"second request\"}}\n"
      "{\"match\":{\"last_role\":\"tool\"},\"reply\":{\"content\":\"tool said {{last_tool}}\"}}\n"
      "{\"match\":{\"turn\":2},\"reply\":{\"content\":\"turn two\"}}\n"
      "{\"reply\":{\"content\":\"default\"}}");
  auto text = [&](const json& body) {
    return json::parse(chat(*server, body).body)["choices"][0]["message"]["content"];
  };
  EXPECT_EQ(text(userTurn("a")), "default");
  EXPECT_EQ(text(userTurn("a")), "second request");
  json twoTurns = userTurn("a");
  twoTurns["messages"].push_back({{"role", "assistant"}, {"content", "b"}});
  twoTurns["messages"].push_back({{"role", "user"}, {"content", "c"}});
  EXPECT_EQ(text(twoTurns), "turn two");
  twoTurns["messages"].push_back({{"role", "assistant"},
                                  {"content", nullptr},
                                  {"tool_calls",
                                   {{{"id", "x"},
                                     {"type", "function"},
                                     {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}});
  twoTurns["messages"].push_back({{"role", "tool"}, {"tool_call_id", "x"}, {"content", "42"}});
  EXPECT_EQ(text(twoTurns), "tool said 42");
}

TEST(MockServer, DisconnectMidStreamDeliversOnlyTheFirstEvents) {
  auto server = startServer(
      R"({"reply":{"content":"one two three four five"},"stream":{"disconnect_after":3}})");
  HttpReply r = chat(*server, userTurn("x", true));
  EXPECT_NE(r.error, httplib::Error::Success);
  std::vector<std::string> data = sseData(r.body);
  ASSERT_EQ(data.size(), 3u);
  for (const auto& d : data)
    EXPECT_NO_THROW(json::parse(d));
}

TEST(MockServer, DisconnectAfterBytesCutsANonStreamingBody) {
  auto server =
      startServer(R"({"reply":{"content":"a long enough reply"},"disconnect_after_bytes":20})");
  HttpReply r = chat(*server, userTurn("x"));
  EXPECT_NE(r.error, httplib::Error::Success);
  EXPECT_LE(r.body.size(), 20u);
}

TEST(MockServer, MalformedChunkReplacesTheNamedEvent) {
  auto server = startServer(
      R"({"reply":{"content":"a b c"},"stream":{"malformed_at":2,"malformed_data":"{\"choices\": [oops"}})");
  HttpReply r = chat(*server, userTurn("x", true));
  ASSERT_EQ(r.error, httplib::Error::Success);
  std::vector<std::string> data = sseData(r.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_NO_THROW(json::parse(data[0]));
  EXPECT_EQ(data[1], "{\"choices\": [oops");
  EXPECT_EQ(data.back(), "[DONE]");
}

TEST(MockServer, KeepAliveCommentsBeforeAndBetweenEvents) {
  auto server = startServer(
      R"({"reply":{"content":"a b"},"stream":{"keepalive_before":3,"keepalive_between":true,"chunk_delay_ms":1}})");
  HttpReply r = chat(*server, userTurn("x"));  // not streaming: stream faults do not apply
  EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "a b");
  r = chat(*server, userTurn("x", true));
  ASSERT_EQ(r.error, httplib::Error::Success);
  std::vector<std::string> events = sseEvents(r.body);
  std::size_t comments = 0, data = 0;
  for (const auto& e : events) {
    if (e == ": keep-alive") ++comments;
    if (e.rfind("data: ", 0) == 0) ++data;
  }
  // 3 before, then one in every gap between two events (the events plus [DONE]).
  EXPECT_EQ(comments, 3 + (data - 1));
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(events[i], ": keep-alive");
  EXPECT_EQ(events.back(), "data: [DONE]");
}

TEST(MockServer, ErrorObjectInsideTheStreamEndsIt) {
  auto server = startServer(
      R"({"reply":{"content":"a b c d"},"stream":{"error_after":2,"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}})");
  HttpReply r = chat(*server, userTurn("x", true));
  ASSERT_EQ(r.error, httplib::Error::Success);
  std::vector<std::string> data = sseData(r.body);
  ASSERT_EQ(data.size(), 3u);
  json err = json::parse(data[2]);
  EXPECT_EQ(err["error"]["message"], "overloaded");
  EXPECT_EQ(err["error"]["code"], "overloaded");
}

TEST(MockServer, StreamWithoutDoneOrFinish) {
  auto server = startServer(
      "{\"match\":{\"request\":1},\"reply\":{\"content\":\"a\"},\"stream\":{\"omit_done\":true}}\n"
      "{\"reply\":{\"content\":\"a\"},\"stream\":{\"omit_done\":true,\"omit_finish\":true}}");
  std::vector<std::string> noDone = sseData(chat(*server, userTurn("x", true)).body);
  ASSERT_FALSE(noDone.empty());
  EXPECT_NE(noDone.back(), "[DONE]");
  EXPECT_TRUE(json::parse(noDone.back())["choices"].empty());  // the usage chunk came last
  std::vector<std::string> cut = sseData(chat(*server, userTurn("x", true)).body);
  ASSERT_FALSE(cut.empty());
  for (const auto& d : cut) {
    json chunk = json::parse(d);
    ASSERT_FALSE(chunk["choices"].empty());
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  }
}

TEST(MockServer, RawBytesAreSentVerbatim) {
  auto server = startServer(
      R"({"raw":["\ufeffdata:{\"a\":1}\r\n\r\n",": c\r","data: x\ndata: y\nid: 7\nevent: e\nretry: 10\n\n","data: [DONE]\n\n"],"stream":{"chunk_delay_ms":1}})");
  HttpReply r = chat(*server, userTurn("x", true));
  ASSERT_EQ(r.error, httplib::Error::Success);
  EXPECT_EQ(r.body,
            "\xEF\xBB\xBF"
            "data:{\"a\":1}\r\n\r\n: c\rdata: x\ndata: y\nid: 7\nevent: e\nretry: 10\n\ndata: "
            "[DONE]\n\n");
}

TEST(MockServer, DelaysDoNotHoldUpOtherConnectionsAndStopInterruptsThem) {
  auto server = startServer(R"js(
{"match":{"user_contains":"slow"},"delay_ms":600000,"reply":{"content":"late"}}
{"match":{"user_contains":"stream"},"reply":{"content":"a b c"},"stream":{"chunk_delay_ms":600000}}
{"match":{"user_contains":"idle"},"reply":{"content":"a"},"stream":{"first_delay_ms":600000}}
{"reply":{"content":"quick"}}
)js");
  auto slow = std::async(std::launch::async, [&] { return chat(*server, userTurn("slow")); });
  auto idle = std::async(std::launch::async, [&] { return chat(*server, userTurn("idle", true)); });
  std::promise<void> firstBytes;
  bool signalled = false;
  auto stalled = std::async(std::launch::async, [&] {
    return chat(*server, userTurn("stream", true), {}, [&](const std::string&) {
      if (!signalled) {
        signalled = true;
        firstBytes.set_value();
      }
    });
  });
  ASSERT_TRUE(server->waitForRequests(3, 10s));
  firstBytes.get_future().wait();  // the stream is now paused between events
  // A client that keeps its connection open after a reply.
  httplib::Client keepAlive("127.0.0.1", server->port());
  keepAlive.set_keep_alive(true);
  auto quick = keepAlive.Post("/v1/chat/completions", userTurn("fast").dump(), "application/json");
  ASSERT_TRUE(quick);
  EXPECT_EQ(json::parse(quick->body)["choices"][0]["message"]["content"], "quick");

  server->stop();  // must interrupt the 10-minute waits, or this test times out
  HttpReply slowReply = slow.get();
  EXPECT_NE(slowReply.status, 200);
  HttpReply idleReply = idle.get();
  EXPECT_NE(idleReply.error, httplib::Error::Success);
  EXPECT_TRUE(sseData(idleReply.body).empty());
  HttpReply stalledReply = stalled.get();
  EXPECT_NE(stalledReply.error, httplib::Error::Success);  // dropped mid-stream
  EXPECT_EQ(sseData(stalledReply.body).size(), 1u);
}

TEST(MockServer, SameRequestsGiveTheSameBytes) {
  const char* script =
      "{\"match\":{\"request\":1},\"error\":{\"status\":503}}\n"
      "{\"match\":{\"user_contains\":\"tool\"},\"reply\":{\"tool_calls\":[{\"name\":\"f\","
      "\"arguments\":{\"q\":\"{{last_user}}\"}}]}}\n"
      "{\"reply\":{\"content\":\"Answer {{request}}: {{last_user}}\",\"chunk_size\":2}}";
  auto run = [&] {
    auto server = startServer(script);
    std::vector<std::string> bodies;
    for (const json& body : {userTurn("a"), userTurn("use a tool", true), userTurn("plain", true),
                             userTurn("plain")}) {
      bodies.push_back(chat(*server, body).body);
    }
    return bodies;
  };
  std::vector<std::string> first = run();
  std::vector<std::string> second = run();
  EXPECT_EQ(first, second);
  EXPECT_NE(first[2], first[3]);
}

TEST(MockServer, SetScriptReplacesRulesAndResetsCounters) {
  auto server = startServer(R"({"match":{"request":1},"reply":{"content":"first"}})");
  EXPECT_EQ(chat(*server, userTurn("x")).status, 200);
  EXPECT_EQ(chat(*server, userTurn("x")).status, 400);
  server->setScript(readScript(R"({"match":{"request":1},"reply":{"content":"again"}})"));
  EXPECT_EQ(json::parse(chat(*server, userTurn("x")).body)["choices"][0]["message"]["content"],
            "again");
  EXPECT_THROW(server->setScript(json::array({{{"reply", 1}}})), ValidationError);
}

TEST(MockServer, BusyPortIsAnError) {
  auto first = startServer(R"({"reply":{"content":"x"}})");
  MockOptions options;
  options.port = first->port();
  MockServer second(options);
  EXPECT_THROW(second.start(), Error);
}

TEST(MockServer, EmbeddingsOverHttp) {
  MockServer server(MockOptions{});
  server.start();
  HttpReply r = post(
      server, "/v1/embeddings",
      json{{"model", "e"}, {"input", {"red apples and green apples", "green apples", "tax law"}}}
          .dump());
  ASSERT_EQ(r.status, 200);
  json data = json::parse(r.body)["data"];
  ASSERT_EQ(data.size(), 3u);
  auto dot = [&](int a, int b) {
    double s = 0;
    for (std::size_t i = 0; i < data[a]["embedding"].size(); ++i) {
      s += data[a]["embedding"][i].get<double>() * data[b]["embedding"][i].get<double>();
    }
    return s;
  };
  EXPECT_EQ(data[0]["embedding"].size(), 256u);
  EXPECT_GT(dot(0, 1), dot(0, 2));
  EXPECT_EQ(post(server, "/v1/embeddings", R"({"input": 5})").status, 400);
}

// The built-in demo agent, driven through a tool-calling conversation.
TEST(MockServer, DemoAgentCallsToolsAndAnswersFromResults) {
  MockServer server(MockOptions{});  // no script: the demo agent
  server.start();
  json tools = json::array();
  for (const char* name : {"get_weather", "get_time", "calculate"}) {
    tools.push_back({{"type", "function"},
                     {"function", {{"name", name}, {"parameters", {{"type", "object"}}}}}});
  }
  auto ask = [&](json messages, bool stream = false) {
    json body = {{"model", "demo"}, {"messages", messages}, {"tools", tools}};
    if (stream) body["stream"] = true;
    HttpReply r = chat(server, body);
    EXPECT_EQ(r.status, 200);
    if (!stream) return json::parse(r.body)["choices"][0]["message"];
    // Rebuild the message from the stream (one tool call at most here).
    json message = {{"role", "assistant"}, {"content", ""}};
    for (const auto& d : sseData(r.body)) {
      if (d == "[DONE]") break;
      json delta = json::parse(d)["choices"][0]["delta"];
      if (delta.contains("content") && delta["content"].is_string()) {
        message["content"] =
            message["content"].get<std::string>() + delta["content"].get<std::string>();
      }
      for (const auto& tc : delta.value("tool_calls", json::array())) {
        if (tc.contains("id")) {
          json function = {{"name", tc["function"]["name"]}, {"arguments", ""}};
          json first = {{"id", tc["id"]}, {"type", "function"}, {"function", function}};
          message["tool_calls"] = json::array({first});
        }
        auto& args = message["tool_calls"][0]["function"]["arguments"];
        args = args.get<std::string>() + tc["function"]["arguments"].get<std::string>();
      }
    }
    return message;
  };

  json history = {{{"role", "user"}, {"content", "What's the weather in Paris?"}}};
  json call = ask(history, true);
  ASSERT_TRUE(call.contains("tool_calls"));
  EXPECT_EQ(call["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  history.push_back(call);
  history.push_back({{"role", "tool"},
                     {"tool_call_id", call["tool_calls"][0]["id"]},
                     {"content", "18 C, sunny"}});
  json answer = ask(history);
  EXPECT_EQ(answer["content"], "get_weather says: 18 C, sunny");
  EXPECT_FALSE(answer.contains("tool_calls"));

  json calc = ask({{{"role", "user"}, {"content", "what is 2 + 3 * (4 - 1)?"}}});
  EXPECT_EQ(calc["tool_calls"][0]["function"]["name"], "calculate");
  EXPECT_EQ(
      json::parse(calc["tool_calls"][0]["function"]["arguments"].get<std::string>())["expression"],
      "2 + 3 * (4 - 1)");
  json time = ask({{{"role", "user"}, {"content", "What time is it?"}}}, true);
  EXPECT_EQ(time["tool_calls"][0]["function"]["name"], "get_time");
  json echo = ask({{{"role", "user"}, {"content", "Tell me a story"}}});
  EXPECT_EQ(echo["content"], "You said: Tell me a story");

  // Without tools offered, the demo agent only echoes.
  HttpReply noTools = chat(server, userTurn("weather in Rome"));
  EXPECT_EQ(json::parse(noTools.body)["choices"][0]["message"]["content"],
            "You said: weather in Rome");
}

}  // namespace
}  // namespace parley::mock
