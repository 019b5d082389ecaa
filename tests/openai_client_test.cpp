// OpenAiClient against `parley mock` over real loopback HTTP: replies, streams, errors, retries
// (with a recording sleeper, so nothing waits), timeouts, cancellation and broken streams.
#include "parley/openai_client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"

namespace parley {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

class ClientTest : public ::testing::Test {
 protected:
  // Starts the mock with a JSON Lines script.
  void serve(const std::string& script) {
    mock::MockOptions options;
    options.script = mock::readScript(script);
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }

  ClientOptions options() {
    ClientOptions o;
    o.baseUrl = server_->baseUrl();
    o.apiKey = "sk-test";
    o.model = "parley-mock";
    o.sleep = [this](milliseconds delay, std::stop_token) {
      std::lock_guard lock(mutex_);
      sleeps_.push_back(delay);
    };
    return o;
  }

  static ChatRequest ask(const std::string& prompt) {
    ChatRequest r;
    r.messages = {Message::user(prompt)};
    return r;
  }

  std::vector<milliseconds> sleeps() {
    std::lock_guard lock(mutex_);
    return sleeps_;
  }

  size_t chatRequests() const { return server_->requests().size(); }

  std::unique_ptr<mock::MockServer> server_;
  std::mutex mutex_;
  std::vector<milliseconds> sleeps_;
};

TEST_F(ClientTest, GenerateReturnsTheReplyAndUsage) {
  serve(
      R"({"reply": {"content": "Hello, {{last_user}}!", "usage": {"prompt_tokens": 5, "completion_tokens": 3}}})");
  OpenAiClient client(options());
  ChatResult r = client.generate(ask("Ann"));
  EXPECT_EQ(r.message.role, Role::Assistant);
  EXPECT_EQ(r.message.content, "Hello, Ann!");
  EXPECT_EQ(r.finishReason, "stop");
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->promptTokens, 5);
  EXPECT_EQ(r.usage->totalTokens, 8);
  EXPECT_EQ(r.id, "chatcmpl-mock-1");
  EXPECT_EQ(r.raw["object"], "chat.completion");

  auto seen = server_->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["headers"]["authorization"], "Bearer sk-test");
  EXPECT_EQ(seen[0]["body"]["model"], "parley-mock");
  EXPECT_EQ(seen[0]["body"]["messages"], json::parse(R"([{"role":"user","content":"Ann"}])"));
  EXPECT_FALSE(seen[0]["body"].contains("stream"));
}

TEST_F(ClientTest, StreamDeliversEachDeltaAndAssemblesTheReply) {
  serve(
      R"({"reply": {"content": "one two three", "reasoning_content": "hmm", "tool_calls": [{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Paris"}}], "finish_reason": "stop"}})");
  OpenAiClient client(options());
  std::string content, reasoning;
  std::map<size_t, std::string> arguments;
  int chunks = 0;
  bool sawUsage = false;
  ChatResult r = client.generateStream(ask("go"), [&](const StreamDelta& d) {
    ++chunks;
    content += d.content;
    reasoning += d.reasoning;
    for (const auto& call : d.toolCalls)
      arguments[call.index] += call.arguments;
    sawUsage = sawUsage || d.usage.has_value();
    return true;
  });
  EXPECT_GT(chunks, 5);
  EXPECT_EQ(content, "one two three");
  EXPECT_EQ(r.message.content, content);
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(r.message.extra["reasoning_content"], "hmm");
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0].name, "get_time");
  EXPECT_EQ(r.message.toolCalls[0].arguments, "{}");
  EXPECT_EQ(json::parse(r.message.toolCalls[1].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(arguments[1], r.message.toolCalls[1].arguments);
  EXPECT_EQ(r.finishReason, "tool_calls");  // the server said "stop"; the calls decide
  EXPECT_EQ(r.reportedFinishReason, "stop");
  EXPECT_TRUE(sawUsage);
  ASSERT_TRUE(r.usage);
  EXPECT_GT(r.usage->totalTokens, 0);
  auto body = server_->requests().at(0)["body"];
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"], json({{"include_usage", true}}));
}

TEST_F(ClientTest, GenerateWithStreamFlagStreamsInternally) {
  serve(R"({"reply": {"content": "streamed", "chunk_size": 2}})");
  OpenAiClient client(options());
  ChatRequest request = ask("x");
  request.stream = true;
  EXPECT_EQ(client.generate(request).message.content, "streamed");
  EXPECT_EQ(server_->requests().at(0)["body"]["stream"], true);
}

TEST_F(ClientTest, IncludeUsageCanBeTurnedOff) {
  serve(R"({"reply": {"content": "x"}})");
  ClientOptions o = options();
  o.includeUsage = false;
  OpenAiClient client(o);
  ChatResult r = client.generateStream(ask("x"), [](const StreamDelta&) { return true; });
  EXPECT_FALSE(r.usage);
  EXPECT_FALSE(server_->requests().at(0)["body"].contains("stream_options"));
}

TEST_F(ClientTest, RawEventStreamEdgeCases) {
  // A BOM, CRLF and CR endings, "data:" without a space, comments, pieces split mid-line and
  // inside a UTF-8 character, and no blank line after [DONE].
  serve(
      R"({"raw": ["\ufeff: hi\r\ndata:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"caf", "\u00e9\"}}]}\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" ok\"},\"finish_reason\":\"stop\"}]}\r\r", "data: [DONE]\n"]})");
  OpenAiClient client(options());
  ChatResult r = client.generateStream(ask("x"), [](const StreamDelta&) { return true; });
  EXPECT_EQ(r.message.content, "caf\xC3\xA9 ok");
  EXPECT_EQ(r.finishReason, "stop");
}

TEST_F(ClientTest, HttpErrorCarriesTheApiErrorAndRequestId) {
  serve(
      R"({"error": {"status": 400, "message": "bad model", "type": "invalid_request_error", "code": "model_not_found"}})");
  OpenAiClient client(options());
  try {
    client.generate(ask("x"));
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.apiMessage(), "bad model");
    EXPECT_EQ(e.apiType(), "invalid_request_error");
    EXPECT_EQ(e.apiCode(), "model_not_found");
    EXPECT_EQ(e.requestId(), "req_mock_1");
    EXPECT_NE(e.body().find("bad model"), std::string::npos);
  }
  EXPECT_EQ(chatRequests(), 1u);  // 400 is not retried
  EXPECT_TRUE(sleeps().empty());
}

TEST_F(ClientTest, RetriesAfterZeroOneAndTwoFailures) {
  for (int failures : {0, 1, 2}) {
    SCOPED_TRACE(failures);
    sleeps_.clear();
    std::string script;
    if (failures > 0) {
      script +=
          R"({"times": )" + std::to_string(failures) + R"(, "error": {"status": 503}})" + "\n";
    }
    script += R"({"reply": {"content": "ok"}})";
    serve(script);
    {
      OpenAiClient client(options());
      EXPECT_EQ(client.generate(ask("x")).message.content, "ok");
    }  // closes its pooled connection, so stop() need not wait for it
    EXPECT_EQ(chatRequests(), static_cast<size_t>(failures + 1));
    auto waits = sleeps();
    ASSERT_EQ(waits.size(), static_cast<size_t>(failures));
    // min(0.5 s * 2^n, 8 s) less up to 25 % jitter.
    for (size_t n = 0; n < waits.size(); ++n) {
      const auto full = milliseconds(500 << n);
      EXPECT_LE(waits[n], full);
      EXPECT_GE(waits[n], full * 3 / 4);
    }
    server_->stop();
  }
}

TEST_F(ClientTest, RetriesExhaustedRaiseTheLastError) {
  serve(R"({"error": {"status": 429, "message": "slow down"}})");
  OpenAiClient client(options());
  try {
    client.generate(ask("x"));
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 429);
    EXPECT_EQ(e.requestId(), "req_mock_3");
  }
  EXPECT_EQ(chatRequests(), 3u);  // 1 + maxRetries
  EXPECT_EQ(sleeps().size(), 2u);
}

TEST_F(ClientTest, RetryAfterInEachFormAndBadValues) {
  struct Case {
    std::string headers;
    std::optional<milliseconds> expected;  // nullopt: the default backoff
  };
  const std::vector<Case> cases = {
      {R"("retry_after": 2)", milliseconds(2000)},
      {R"("retry_after": "0.5")", milliseconds(500)},
      {R"("retry_after_ms": 1500)", milliseconds(1500)},
      {R"("retry_after_ms": 250, "retry_after": 9)", milliseconds(250)},
      {R"("retry_after": "Sun, 06 Nov 1994 08:49:40 GMT")", milliseconds(3000)},
      {R"("retry_after": "soon")", std::nullopt},
      {R"("retry_after": 120)", std::nullopt},
      {R"("retry_after": "-3")", std::nullopt},
      {R"("retry_after": "Sun, 06 Nov 1994 08:40:00 GMT")", std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.headers);
    sleeps_.clear();
    serve(R"({"times": 1, "error": {"status": 429, )" + c.headers + "}}\n" +
          R"({"reply": {"content": "ok"}})");
    ClientOptions o = options();
    o.now = [] { return std::chrono::system_clock::from_time_t(784111777); };  // 08:49:37 GMT
    {
      OpenAiClient client(o);
      EXPECT_EQ(client.generate(ask("x")).message.content, "ok");
    }  // closes its pooled connection, so stop() need not wait for it
    auto waits = sleeps();
    ASSERT_EQ(waits.size(), 1u);
    if (c.expected) {
      EXPECT_EQ(waits[0], *c.expected);
    } else {
      EXPECT_LE(waits[0], milliseconds(500));
      EXPECT_GE(waits[0], milliseconds(375));
    }
    server_->stop();
  }
}

TEST_F(ClientTest, ShouldRetryHeaderOverridesTheStatus) {
  serve(
      R"({"match": {"request": 1}, "error": {"status": 503, "headers": {"x-should-retry": "false"}}}
{"match": {"request": 2}, "error": {"status": 400, "headers": {"x-should-retry": "true"}}}
{"reply": {"content": "ok"}})");
  OpenAiClient client(options());
  EXPECT_THROW(client.generate(ask("x")), HttpError);  // 503, but the server said no
  EXPECT_EQ(chatRequests(), 1u);
  EXPECT_EQ(client.generate(ask("x")).message.content, "ok");  // 400, but the server said yes
  EXPECT_EQ(chatRequests(), 3u);
}

TEST_F(ClientTest, ConnectionRefusedIsAConnectionErrorAfterRetries) {
  serve(R"({"reply": {"content": "x"}})");
  ClientOptions o = options();
  server_->stop();  // nothing listens on that port any more
  OpenAiClient client(o);
  EXPECT_THROW(client.generate(ask("x")), ConnectionError);
  EXPECT_EQ(sleeps().size(), 2u);
}

TEST_F(ClientTest, IdleTimeoutInsideAStream) {
  serve(R"({"reply": {"content": "a b c"}, "stream": {"chunk_delay_ms": 5000}})");
  ClientOptions o = options();
  o.idleTimeout = milliseconds(200);
  o.maxRetries = 0;
  OpenAiClient client(o);
  EXPECT_THROW(client.generateStream(ask("x"), [](const StreamDelta&) { return true; }),
               TimeoutError);
}

// A stream that is never silent for long still ends: streamTimeout bounds the whole of it.
TEST_F(ClientTest, StreamTimeoutEndsATricklingStream) {
  serve(
      R"({"reply": {"content": "a b c d e f g h i j k l m n o p"}, "stream": {"chunk_delay_ms": 100}})");
  ClientOptions o = options();
  o.idleTimeout = milliseconds(5000);
  o.streamTimeout = milliseconds(400);
  o.maxRetries = 0;
  OpenAiClient client(o);
  int chunks = 0;
  try {
    client.generateStream(ask("x"), [&](const StreamDelta&) { return ++chunks > 0; });
    FAIL() << "the stream ran to its end";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("stream timeout"), std::string::npos) << e.what();
  }
  EXPECT_GT(chunks, 0);  // it was lively: the idle timeout alone would never have ended it
}

TEST_F(ClientTest, RequestTimeoutIsRetriedThenRaised) {
  serve(R"({"delay_ms": 5000, "reply": {"content": "late"}})");
  ClientOptions o = options();
  o.requestTimeout = milliseconds(150);
  o.maxRetries = 1;
  OpenAiClient client(o);
  EXPECT_THROW(client.generate(ask("x")), TimeoutError);
  EXPECT_TRUE(server_->waitForRequests(2, milliseconds(5000)));
  EXPECT_EQ(sleeps().size(), 1u);
}

TEST_F(ClientTest, PerCallTimeoutBoundsTheWholeCall) {
  serve(R"({"delay_ms": 5000, "reply": {"content": "late"}})");
  OpenAiClient client(options());
  ChatRequest request = ask("x");
  request.timeout = milliseconds(200);
  try {
    client.generate(request);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("200 ms"), std::string::npos);
  }
  EXPECT_TRUE(sleeps().empty());  // the call's own deadline is never retried
}

TEST_F(ClientTest, CancelFromAnotherThreadStopsTheCall) {
  serve(R"({"reply": {"content": "a b c d"}, "stream": {"chunk_delay_ms": 10000}})");
  OpenAiClient client(options());
  std::stop_source stop;
  ChatRequest request = ask("x");
  request.stopToken = stop.get_token();
  std::atomic<int> chunks{0};
  std::thread canceller([&] {
    ASSERT_TRUE(server_->waitForRequests(1, milliseconds(5000)));
    stop.request_stop();
  });
  EXPECT_THROW(client.generateStream(request,
                                     [&](const StreamDelta&) {
                                       ++chunks;
                                       return true;
                                     }),
               CancelledError);
  canceller.join();
  EXPECT_LE(chunks.load(), 1);
  // A token already stopped sends nothing.
  server_->clearRequests();
  EXPECT_THROW(client.generate(request), CancelledError);
  EXPECT_EQ(chatRequests(), 0u);
}

TEST_F(ClientTest, ChunkHandlerReturningFalseCancels) {
  serve(R"({"reply": {"content": "one two three four"}})");
  OpenAiClient client(options());
  int chunks = 0;
  EXPECT_THROW(client.generateStream(ask("x"),
                                     [&](const StreamDelta& d) {
                                       if (!d.content.empty()) ++chunks;
                                       return chunks < 2;
                                     }),
               CancelledError);
  EXPECT_EQ(chunks, 2);
  EXPECT_EQ(chatRequests(), 1u);
}

TEST_F(ClientTest, MidStreamDisconnectAfterAChunkIsNotRetried) {
  serve(R"({"reply": {"content": "one two three four five"}, "stream": {"disconnect_after": 3}})");
  OpenAiClient client(options());
  int chunks = 0;
  EXPECT_THROW(client.generateStream(ask("x"),
                                     [&](const StreamDelta&) {
                                       ++chunks;
                                       return true;
                                     }),
               ConnectionError);
  EXPECT_GT(chunks, 0);
  EXPECT_EQ(chatRequests(), 1u);
  EXPECT_TRUE(sleeps().empty());
}

TEST_F(ClientTest, DisconnectBeforeAnyChunkIsRetried) {
  serve(R"({"times": 1, "reply": {"content": "lost"}, "stream": {"disconnect_after": 0}}
{"reply": {"content": "second try"}})");
  OpenAiClient client(options());
  ChatResult r = client.generateStream(ask("x"), [](const StreamDelta&) { return true; });
  EXPECT_EQ(r.message.content, "second try");
  EXPECT_EQ(chatRequests(), 2u);
}

TEST_F(ClientTest, StreamEndingWithoutFinishOrDoneIsAProtocolError) {
  serve(
      R"({"reply": {"content": "cut short"}, "stream": {"omit_finish": true, "omit_done": true}})");
  OpenAiClient client(options());
  std::string seen;
  EXPECT_THROW(client.generateStream(ask("x"),
                                     [&](const StreamDelta& d) {
                                       seen += d.content;
                                       return true;
                                     }),
               ProtocolError);
  EXPECT_EQ(seen, "cut short");  // delivered as it came, but never returned as complete
}

TEST_F(ClientTest, MalformedChunkIsAProtocolError) {
  serve(R"({"reply": {"content": "a b c"}, "stream": {"malformed_at": 2}})");
  OpenAiClient client(options());
  EXPECT_THROW(client.generateStream(ask("x"), [](const StreamDelta&) { return true; }),
               ProtocolError);
  EXPECT_EQ(chatRequests(), 1u);
}

TEST_F(ClientTest, ErrorObjectInsideTheStream) {
  serve(
      R"({"reply": {"content": "a b c"}, "stream": {"error_after": 2, "error": {"message": "model crashed", "type": "server_error"}}})");
  OpenAiClient client(options());
  try {
    client.generateStream(ask("x"), [](const StreamDelta&) { return true; });
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.apiMessage(), "model crashed");
    EXPECT_EQ(e.requestId(), "req_mock_1");
    // Not "HTTP 200": the status was fine, the stream then carried an error.
    EXPECT_EQ(std::string(e.what()).rfind("the server sent an error inside its 200 reply: "
                                          "model crashed",
                                          0),
              0u)
        << e.what();
  }
}

// An upstream that repeats the key in its error (an error body, an error event, an error in a
// 200 body) never hands it on: not in what(), the body, nor the API's message.
TEST_F(ClientTest, AnErrorRepeatingTheKeyIsRedacted) {
  const std::string key = "sk-proj-0123456789abcdef";
  const std::string said = "Incorrect API key provided: " + key + " (Bearer " + key + ")";
  serve(json{{"match", {{"request", 1}}}, {"error", {{"status", 401}, {"message", said}}}}.dump() +
        "\n" +
        json{{"match", {{"request", 2}}},
             {"reply", {{"content", "a b c"}}},
             {"stream", {{"error_after", 1}, {"error", {{"message", said}}}}}}
            .dump() +
        "\n" +
        json{{"raw", json{{"error", {{"message", said}}}}.dump()},
             {"content_type", "application/json"}}
            .dump());
  ClientOptions o = options();
  o.apiKey = key;
  o.maxRetries = 0;
  OpenAiClient client(o);
  for (int call = 1; call <= 3; ++call) {
    try {
      if (call == 2)
        client.generateStream(ask("x"), [](const StreamDelta&) { return true; });
      else
        client.generate(ask("x"));
      FAIL() << "no error from call " << call;
    } catch (const HttpError& e) {
      const std::string all = std::string(e.what()) + e.body() + e.apiMessage();
      EXPECT_EQ(all.find(key), std::string::npos) << call << ": " << all;
      EXPECT_NE(all.find("Incorrect API key provided: [redacted]"), std::string::npos)
          << call << ": " << all;
      if (call == 1) {
        EXPECT_EQ(e.status(), 401);
      }
    }
  }
  EXPECT_EQ(chatRequests(), 3u);
}

// A third-party server that streams SSE as text/plain (or with no type): read as the stream
// it is, not refused as a body that is not JSON. JSON sent for a stream is still a whole reply.
TEST_F(ClientTest, AStreamSentWithoutItsContentTypeIsReadAsAStream) {
  const std::string sse =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}"
      "\n\ndata: [DONE]\n\n";
  serve(json{{"raw", sse}, {"content_type", "text/plain; charset=utf-8"}}.dump());
  OpenAiClient client(options());
  std::string seen;
  const ChatResult r = client.generateStream(ask("x"), [&](const StreamDelta& d) {
    seen += d.content;
    return true;
  });
  EXPECT_EQ(r.message.content, "Hello");
  EXPECT_EQ(seen, "Hello");
  EXPECT_EQ(r.finishReason, "stop");
}

TEST_F(ClientTest, ErrorObjectInAnOkBodyIsNotCalledHttp0) {
  serve(
      R"({"raw": "{\"error\": {\"message\": \"quota exceeded\", \"type\": \"insufficient_quota\"}}", "content_type": "application/json"})");
  OpenAiClient client(options());
  try {
    client.generate(ask("x"));
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.apiMessage(), "quota exceeded");
    EXPECT_EQ(std::string(e.what()),
              "the server sent an error instead of a reply: quota exceeded (type "
              "insufficient_quota)");
  }
}

TEST_F(ClientTest, AReplyNestedTooDeepIsAProtocolErrorNotACrash) {
  // A 100 000-level extra field in a non-streamed completion: parsed, it overflowed the stack
  // when the message was copied out of the reply.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const std::string body =
      R"({"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","extra":)" +
      deep + R"(},"finish_reason":"stop"}]})";
  mock::MockOptions o;
  o.script = nlohmann::json::array(
      {{{"raw", body}, {"content_type", "application/json"}, {"match", {{"stream", false}}}},
       {{"raw",
         "data: " +
             std::string(
                 R"({"id":"x","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":)") +
             deep + "}}\n\n"}}});
  server_ = std::make_unique<mock::MockServer>(o);
  server_->start();
  OpenAiClient client(options());
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream);
    try {
      if (stream) {
        client.generateStream(ask("x"), [](const StreamDelta&) { return true; });
      } else {
        client.generate(ask("x"));
      }
      FAIL() << "no error";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("nested deeper than 128 levels"), std::string::npos)
          << e.what();
    }
  }
}

TEST_F(ClientTest, AKeyInTheUrlIsNeverShown) {
  serve(R"({"reply": {"content": "unused"}})");
  ClientOptions o = options();
  o.baseUrl = "http://user:sk-SECRET-42@127.0.0.1:1/v1";  // nothing listens on port 1
  o.maxRetries = 0;
  try {
    OpenAiClient(o).generate(ask("x"));
    FAIL() << "no error";
  } catch (const ConnectionError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("SECRET"), std::string::npos) << what;
    EXPECT_NE(what.find("http://***@127.0.0.1:1/v1"), std::string::npos) << what;
  }
  o.baseUrl = "htp://user:sk-SECRET-42@host/v1";
  try {
    OpenAiClient{o};
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(std::string(e.what()).find("SECRET"), std::string::npos) << e.what();
  }
}

TEST_F(ClientTest, ResponseAndEventLimits) {
  serve(R"({"reply": {"content": "0123456789", "repeat": 100, "chunk_size": 1000}})");
  ClientOptions o = options();
  o.maxResponseBytes = 500;
  EXPECT_THROW(OpenAiClient(o).generate(ask("x")), ProtocolError);
  o = options();
  o.maxEventBytes = 200;
  EXPECT_THROW(OpenAiClient(o).generateStream(ask("x"), [](const StreamDelta&) { return true; }),
               ProtocolError);
}

TEST_F(ClientTest, ServerIgnoringStreamStillDeliversOneDelta) {
  serve(
      R"({"raw": "{\"id\":\"x\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"whole\"},\"finish_reason\":\"stop\"}]}", "content_type": "application/json"})");
  OpenAiClient client(options());
  std::string seen;
  ChatResult r = client.generateStream(ask("x"), [&](const StreamDelta& d) {
    seen += d.content;
    return true;
  });
  EXPECT_EQ(seen, "whole");
  EXPECT_EQ(r.message.content, "whole");
}

TEST_F(ClientTest, ExtraHeadersAndEncodedMessagesAreSent) {
  serve(R"({"reply": {"content": "ok"}})");
  ClientOptions o = options();
  o.headers["X-Team"] = "agents";
  o.apiKey.clear();
  OpenAiClient client(o);
  ChatRequest request;
  request.encodedMessages = {
      std::make_shared<const std::string>(encodeMessage(Message::system("sys")))};
  request.messages = {Message::user("u")};
  client.generate(request);
  auto seen = server_->requests().at(0);
  EXPECT_EQ(seen["headers"]["x-team"], "agents");
  EXPECT_FALSE(seen["headers"].contains("authorization"));
  EXPECT_EQ(seen["body"]["messages"][0]["content"], "sys");
  EXPECT_EQ(seen["body"]["messages"][1]["content"], "u");
}

// Records what the clients ask of the transport and hands it on to a real libcurl transport.
class RecordingTransport : public HttpTransport {
 public:
  explicit RecordingTransport(HttpTransportOptions options)
      : inner_(makeCurlTransport(std::move(options))) {}
  void send(const HttpRequest& request, HttpReplySink& sink) override {
    {
      std::lock_guard lock(mutex);
      urls.emplace_back(request.url);
      headers.emplace_back(request.headers.begin(), request.headers.end());
      streams.push_back(request.stream);
    }
    inner_->send(request, sink);
  }
  std::mutex mutex;
  std::vector<std::string> urls;
  std::vector<std::vector<std::string>> headers;
  std::vector<bool> streams;

 private:
  std::shared_ptr<HttpTransport> inner_;
};

TEST_F(ClientTest, AnInjectedTransportCarriesEveryCallWithItsOwnRetries) {
  serve(R"({"times": 1, "error": {"status": 503}}
{"match": {"stream": true}, "reply": {"content": "streamed"}}
{"reply": {"content": "plain"}})");
  HttpTransportOptions http;
  http.maxRetries = 0;  // the client's own maxRetries (2) no longer applies
  auto transport = std::make_shared<RecordingTransport>(http);
  ClientOptions o = options();
  o.transport = transport;
  OpenAiClient first(o);
  OpenAiClient second(o);  // one transport may serve many clients
  try {
    first.generate(ask("x"));
    FAIL() << "expected HttpError";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 503);
  }
  EXPECT_EQ(chatRequests(), 1u);  // not retried
  EXPECT_TRUE(sleeps().empty());
  EXPECT_EQ(second.generate(ask("y")).message.content, "plain");
  EXPECT_EQ(first.generateStream(ask("z"), [](const StreamDelta&) { return true; }).message.content,
            "streamed");
  std::lock_guard lock(transport->mutex);
  ASSERT_EQ(transport->urls.size(), 3u);
  for (const std::string& url : transport->urls)
    EXPECT_EQ(url, server_->baseUrl() + "/chat/completions");
  EXPECT_EQ(transport->streams, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(transport->headers[0], std::vector<std::string>{"Authorization: Bearer sk-test"});
}

TEST_F(ClientTest, OneClientFromManyThreads) {
  serve(R"({"match": {"stream": true}, "reply": {"content": "s {{last_user}}", "chunk_size": 3}}
{"reply": {"content": "n {{last_user}}"}})");
  OpenAiClient client(options());
  constexpr int kThreads = 4;  // more would overflow the mock's listen backlog (5): 1 s SYN retries
  constexpr int kCalls = 10;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::string prompt = std::to_string(t) + "-" + std::to_string(i);
        ChatResult r =
            (i % 2) ? client.generateStream(ask(prompt), [](const StreamDelta&) { return true; })
                    : client.generate(ask(prompt));
        if (r.message.content == ((i % 2) ? "s " : "n ") + prompt) ++good;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(good.load(), kThreads * kCalls);
  EXPECT_EQ(chatRequests(), static_cast<size_t>(kThreads * kCalls));
}

}  // namespace
}  // namespace parley
