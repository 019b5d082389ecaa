// The HTTP front (src/http/server.hpp) on a loopback port, through raw sockets and libcurl:
// slow and idle clients hold no thread, the head's deadline and caps, bodies (sized or chunked)
// capped as read, the connection cap, pipelining, long-lived requests beside a small pool, and
// streamed responses in turns: parked without a thread, woken, released when their client goes,
// cut when their reader stops or a write passes the stream's buffer.
#include "http/server.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "http_client.hpp"
#include "raw_client.hpp"

namespace parley::testing {
namespace {

using namespace std::chrono_literals;

class HttpServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<http::Server> server;
  int port = 0;
  std::atomic<int> handled{0};
  std::string lastBody;
  std::mutex mutex;

  void start(http::ServerLimits limits) {
    server = std::make_unique<http::Server>(std::move(limits));
    server->Get("/", [this](const httplib::Request&, httplib::Response& res) {
      ++handled;
      res.set_content("hello", "text/plain");
    });
    server->Get("/empty", [this](const httplib::Request&, httplib::Response& res) {
      ++handled;
      res.set_content("", "text/plain");
    });
    server->Get("/long", [this](const httplib::Request&, httplib::Response& res) {
      ++handled;
      res.set_content("long;", "text/plain");
    });
    server->Get("/thread", [this](const httplib::Request&, httplib::Response& res) {
      ++handled;
      const size_t id = std::hash<std::thread::id>{}(std::this_thread::get_id());
      res.set_content("thread " + std::to_string(id) + ";", "text/plain");
    });
    server->Post("/echo", [this](const httplib::Request& req, httplib::Response& res) {
      ++handled;
      {
        std::lock_guard lock(mutex);
        lastBody = req.body;
      }
      res.set_content(std::to_string(req.body.size()), "text/plain");
    });
    port = server->start("127.0.0.1", 0, "test");
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port) + path;
  }
};

TEST_F(HttpServerTest, SlowHeadsPastTheConnectionCapDoNotStarveARequest) {
  http::ServerLimits limits;
  limits.workers = 2;
  limits.maxConnections = 50;
  limits.headTimeout = 60s;  // the deadline does not rescue anyone here: eviction and epoll do
  start(limits);
  // 200 clients that send half a head and then nothing: four times the cap, a hundred times the
  // workers. With a thread per connection they would hold every thread.
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<RawClient>(port));
    ASSERT_TRUE(slow.back()->send("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  }
  auto reply = http("GET", url("/"), "", {}, 10'000);
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "hello");
  EXPECT_LE(server->connections(), limits.maxConnections);
  EXPECT_EQ(handled, 1);
}

TEST_F(HttpServerTest, AHeadNotSentInTimeIs408) {
  http::ServerLimits limits;
  limits.headTimeout = 200ms;
  start(limits);
  RawClient client(port);
  ASSERT_TRUE(client.send("GET / HTTP/1.1\r\nHost: x\r\n"));
  const std::string answer = client.readUntilClosed();
  EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  EXPECT_TRUE(client.closed());
  EXPECT_EQ(handled, 0);
}

TEST_F(HttpServerTest, HeadPastItsCapsIs431BeforeAnyHandler) {
  http::ServerLimits limits;
  limits.maxHeaders = 100;
  limits.maxHeadBytes = 16 << 10;
  start(limits);
  {
    // 200 000 headers were read whole before: here the 101st line ends it.
    RawClient client(port);
    std::string head = "GET / HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 200; ++i)
      head += "X-H" + std::to_string(i) + ": v\r\n";
    client.send(head + "\r\n");
    const std::string answer = client.readUntilClosed();
    EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer;
  }
  {
    RawClient client(port);
    client.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'a'));
    const std::string answer = client.readUntilClosed();
    EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 200);
  }
  EXPECT_EQ(handled, 0);
  EXPECT_EQ(http("GET", url("/")).status, 200);
}

TEST_F(HttpServerTest, ChunkedBodiesAreCappedAsRead) {
  http::ServerLimits limits;
  limits.maxBodyBytes = 1'000;
  start(limits);
  {
    // Three chunks of 600: refused at the second chunk's size line, before its bytes.
    RawClient client(port);
    std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 3; ++i)
      request += "258\r\n" + std::string(600, 'a') + "\r\n";
    request += "0\r\n\r\n";
    client.send(request);
    const std::string answer = client.readUntilClosed();
    EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  }
  {
    // A chunk size past the cap on its own (64 MiB announced): refused at once.
    RawClient client(port);
    client.send(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4000000\r\nabc");
    const std::string answer = client.readUntilClosed();
    EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  }
  {
    // A sized body past the cap: refused from its Content-Length.
    RawClient client(port);
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\nabc");
    const std::string answer = client.readUntilClosed();
    EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  }
  EXPECT_EQ(handled, 0);
  // Under the cap, chunked with an extension and a trailer: decoded whole.
  RawClient client(port);
  client.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n");
  const std::string answer = client.readUntil("\r\n\r\n7");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  std::lock_guard lock(mutex);
  EXPECT_EQ(lastBody, "abcdefg");
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  start({});
  RawClient client(port);
  client.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
      "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string answer = client.readUntilClosed();
  const size_t first = answer.find("\r\n\r\n2");
  const size_t second = answer.find("hello");
  EXPECT_NE(first, std::string::npos) << answer;
  EXPECT_NE(second, std::string::npos) << answer;
  EXPECT_LT(first, second);
  EXPECT_EQ(handled, 2);
}

// A sized answer's head is held until its body's first bytes (one segment): a head whose body is
// empty or never written (HEAD) must still leave, and the connection goes on serving.
TEST_F(HttpServerTest, HeadsOfEmptyAndHeadAnswersLeaveAndTheConnectionGoesOn) {
  start({});
  RawClient client(port);
  for (int round = 0; round < 3; ++round) {
    client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(client.readUntil("hello").find("Content-Length: 5"), std::string::npos);
    client.send("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string head = client.readUntil("\r\n\r\n");
    EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
    EXPECT_EQ(head.find("hello"), std::string::npos) << head;
    client.send("GET /empty HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string empty = client.readUntil("\r\n\r\n");
    EXPECT_NE(empty.find("Content-Length: 0"), std::string::npos) << empty;
    ASSERT_FALSE(client.closed());
  }
  EXPECT_EQ(handled, 9);
}

TEST_F(HttpServerTest, AnIdleKeepAliveConnectionIsClosed) {
  http::ServerLimits limits;
  limits.idleTimeout = 100ms;
  start(limits);
  RawClient client(port);
  client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string answer = client.readUntilClosed();
  EXPECT_NE(answer.find("hello"), std::string::npos) << answer;
  EXPECT_TRUE(client.closed());
}

// The worker that answered a keep-alive request waits (keepAliveLinger) for the client's next
// one and serves it itself; what it cannot serve whole goes on in the loop as if the loop had
// read it.
TEST_F(HttpServerTest, AKeepAliveClientsNextRequestIsServedByTheWorkerThatLingers) {
  http::ServerLimits limits;
  limits.workers = 4;
  limits.keepAliveLinger = 10s;  // long: the client's next request always comes within it
  limits.maxHeadBytes = 1024;
  limits.maxBodyBytes = 64;
  limits.longLived = [](std::string_view, std::string_view target) { return target == "/long"; };
  start(limits);
  RawClient client(port);
  auto thread = [&] {
    client.send("GET /thread HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string answer = client.readUntil(";");
    const size_t at = answer.find("thread ");
    return at == std::string::npos ? answer : answer.substr(at);
  };
  const std::string first = thread();
  ASSERT_EQ(first.rfind("thread ", 0), 0u) << first;
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(thread(), first);

  // In two parts: the head is read by the lingering worker, the rest of the body by the loop.
  client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\nabc");
  client.send("defg");
  EXPECT_NE(client.readUntil("\r\n\r\n7").find("\r\n\r\n7"), std::string::npos);
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(lastBody, "abcdefg");
  }
  // Two at once: the second is served after the first.
  client.send(
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nxy");
  EXPECT_NE(client.readUntil("\r\n\r\n2").find("hello"), std::string::npos);
  // (The second went through the loop, to any worker; that worker lingers in its turn.)
  const std::string next = thread();
  EXPECT_EQ(thread(), next);
  // A long-lived request is the loop's to hand to a thread of its own.
  client.send("GET /long HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(client.readUntil("long;").find("long;"), std::string::npos);
  EXPECT_EQ(thread().rfind("thread ", 0), 0u);

  // A head past its cap is refused by the worker as the loop would (431), and the connection
  // closes.
  client.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  EXPECT_EQ(client.readUntilClosed().rfind("HTTP/1.1 431", 0), 0u);
  EXPECT_TRUE(client.closed());

  // A body past its cap, announced while a worker waits: 413 from the worker, as from the loop.
  {
    RawClient sending(port);
    sending.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(sending.readUntil("hello").find("hello"), std::string::npos);
    sending.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    EXPECT_EQ(sending.readUntilClosed().rfind("HTTP/1.1 413", 0), 0u);
    EXPECT_TRUE(sending.closed());
  }

  // A client that goes while a worker waits for it: its connection is closed.
  {
    RawClient leaving(port);
    leaving.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(leaving.readUntil("hello").find("hello"), std::string::npos);
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server->connections() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(server->connections(), 0u);
}

// A worker waits for its client only while another worker is idle for it: with one worker, a
// second client is served at once, not after the first client's linger.
TEST_F(HttpServerTest, ALingeringWorkerLeavesNoRequestWaiting) {
  http::ServerLimits limits;
  limits.workers = 1;
  limits.keepAliveLinger = 60s;
  start(limits);
  RawClient first(port);
  first.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(first.readUntil("hello").find("hello"), std::string::npos);
  // Were the worker waiting for `first`, this would wait the 60 s of its linger (timeout 20 s).
  EXPECT_EQ(http("GET", url("/"), "", {}, 20'000).status, 200);
  EXPECT_FALSE(first.closed());
}

TEST_F(HttpServerTest, LongLivedRequestsDoNotTakeThePool) {
  http::ServerLimits limits;
  limits.workers = 1;
  limits.maxLongLived = 8;
  limits.longLived = [](std::string_view, std::string_view target) { return target == "/stream"; };
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  int streaming = 0;
  server = std::make_unique<http::Server>(limits);
  server->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hello", "text/plain");
  });
  server->Get("/stream", [&](const httplib::Request&, httplib::Response& res) {
    {
      std::lock_guard lock(m);
      ++streaming;
    }
    cv.notify_all();
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return release; });
    res.set_content("done", "text/plain");
  });
  port = server->start("127.0.0.1", 0, "test");
  std::vector<std::unique_ptr<RawClient>> streams;
  for (int i = 0; i < 8; ++i) {
    streams.push_back(std::make_unique<RawClient>(port));
    streams.back()->send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return streaming == 8; }));
  }
  // Every long-lived slot taken; the one pool worker still serves.
  EXPECT_EQ(http("GET", url("/"), "", {}, 10'000).status, 200);
  RawClient ninth(port);
  ninth.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ninth.readUntilClosed().rfind("HTTP/1.1 503", 0), 0u);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  for (auto& s : streams)
    EXPECT_NE(s->readUntil("done").find("done"), std::string::npos);
}

// What the streams below wait for: a counter that moves, the streams parked on it, and the ends
// of the streams (their providers' releasers).
struct Topic {
  std::mutex mutex;
  std::condition_variable changed;
  int value = 0;
  int endAt = -1;        // the news that ends the streams (-1: none does)
  size_t newsBytes = 0;  // filler after each news line
  http::ParkedStreams parked;
  int released = 0;
  int failed = 0;  // released without having ended their body

  void publish() {
    std::lock_guard lock(mutex);
    ++value;
    parked.wakeAll();
  }
  bool waitReleased(int n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return released >= n; });
  }
  int releasedNow() {
    std::lock_guard lock(mutex);
    return released;
  }
  int failedNow() {
    std::lock_guard lock(mutex);
    return failed;
  }
};

// A streamed response that waits for the topic's news without blocking: "hello" first, then
// "news N" at each change (and the end at `endAt`). It only runs in turns.
void streamTopic(httplib::Response& res, const std::shared_ptr<Topic>& topic) {
  auto seen = std::make_shared<int>(-1);
  res.set_chunked_content_provider(
      "text/plain",
      [topic, seen](size_t, httplib::DataSink& sink) {
        std::unique_lock lock(topic->mutex);
        if (*seen < 0) {
          *seen = topic->value;
          lock.unlock();
          return sink.write("hello\n", 6);
        }
        if (topic->value != *seen) {
          *seen = topic->value;
          const bool end = *seen == topic->endAt;
          const std::string text =
              "news " + std::to_string(*seen) + "\n" + std::string(topic->newsBytes, 'x');
          lock.unlock();
          if (!sink.write(text.data(), text.size())) return false;
          if (end) sink.done();
          return true;
        }
        auto stream = http::currentStream();
        if (!stream || !stream->parkable()) return false;
        topic->parked.add(stream);
        stream->park(std::chrono::steady_clock::now() + 1h);
        return true;
      },
      [topic](bool success) {
        std::lock_guard lock(topic->mutex);
        ++topic->released;
        if (!success) ++topic->failed;
        topic->changed.notify_all();
      });
}

class StreamTurnsTest : public HttpServerTest {
 protected:
  std::shared_ptr<Topic> topic = std::make_shared<Topic>();

  void startTopic(http::ServerLimits limits) {
    limits.longLived = [](std::string_view, std::string_view target) { return target == "/topic"; };
    server = std::make_unique<http::Server>(std::move(limits));
    server->Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hello", "text/plain");
    });
    server->Get("/topic", [this](const httplib::Request&, httplib::Response& res) {
      streamTopic(res, topic);
    });
    port = server->start("127.0.0.1", 0, "test");
  }
  // A client whose stream has begun (its "hello" came).
  std::unique_ptr<RawClient> open(int receiveBuffer = 0) {
    auto client = std::make_unique<RawClient>(port, receiveBuffer);
    client->send("GET /topic HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string head = client->readUntil("hello\n");
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
    EXPECT_NE(head.find("hello\n"), std::string::npos) << head;
    return client;
  }
};

// Four threads at most for long-lived requests, one for the turns: 24 streams open at once,
// each waiting for news without a thread, and each gets the news.
TEST_F(StreamTurnsTest, AStreamWaitingForNewsHoldsNoThreadAndIsWoken) {
  http::ServerLimits limits;
  limits.workers = 1;
  limits.maxLongLived = 4;
  limits.streamThreads = 1;
  startTopic(limits);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 24; ++i)
    clients.push_back(open());
  EXPECT_EQ(server->parkedStreams(), 24u);
  EXPECT_EQ(http("GET", url("/"), "", {}, 10'000).status, 200);  // the pool is free
  topic->publish();
  for (auto& client : clients)
    EXPECT_NE(client->readUntil("news 1\n").find("news 1\n"), std::string::npos);
  topic->publish();
  for (auto& client : clients)
    EXPECT_NE(client->readUntil("news 2\n").find("news 2\n"), std::string::npos);
  EXPECT_EQ(topic->releasedNow(), 0);
}

// A stream that ends its body gives its connection back for the next request.
TEST_F(StreamTurnsTest, AStreamedResponseThatEndsKeepsItsConnection) {
  http::ServerLimits limits;
  startTopic(limits);
  topic->endAt = 1;
  auto client = open();
  topic->publish();
  const std::string rest = client->readUntil("0\r\n\r\n");
  EXPECT_NE(rest.find("news 1\n"), std::string::npos) << rest;
  ASSERT_TRUE(topic->waitReleased(1));
  EXPECT_EQ(topic->failedNow(), 0);
  client->send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(client->readUntil("hello").find("hello"), std::string::npos);
  EXPECT_FALSE(client->closed());
}

// The client of a parked stream goes: the loop sees the socket close and the stream is
// released (its provider's releaser), with no news and no write due.
TEST_F(StreamTurnsTest, ADepartedClientOfAParkedStreamIsReleased) {
  http::ServerLimits limits;
  startTopic(limits);
  auto client = open();
  auto stays = open();
  ASSERT_EQ(server->parkedStreams(), 2u);
  client.reset();
  ASSERT_TRUE(topic->waitReleased(1));
  EXPECT_EQ(topic->failedNow(), 1);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((server->parkedStreams() != 1 || server->connections() != 1) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(server->parkedStreams(), 1u);
  EXPECT_EQ(server->connections(), 1u);
  topic->publish();
  EXPECT_NE(stays->readUntil("news 1\n").find("news 1\n"), std::string::npos);
}

// A reader that takes nothing: its output waits in the stream's buffer, no more is made for it
// (the provider is not called while the buffer is over a quarter full), and it is cut once it
// has taken nothing for writeTimeout.
TEST_F(StreamTurnsTest, AReaderThatTakesNothingIsCut) {
  http::ServerLimits limits;
  limits.writeTimeout = 100ms;
  limits.maxStreamBuffer = 256 << 10;
  startTopic(limits);
  topic->newsBytes = 64 << 10;
  auto client = open(4'096);
  bool cut = false;
  for (int i = 0; i < 1'000 && !cut; ++i) {
    topic->publish();
    cut = topic->waitReleased(1, 50ms);
  }
  ASSERT_TRUE(cut);
  EXPECT_EQ(topic->failedNow(), 1);
  client->readUntilClosed();
  EXPECT_TRUE(client->closed());
}

// One write past the stream's buffer (the socket takes a little of it) cuts the stream at once,
// long before a stalled reader would be (writeTimeout).
TEST_F(StreamTurnsTest, AWritePastTheStreamBufferCutsTheStream) {
  http::ServerLimits limits;
  limits.writeTimeout = 600s;
  limits.maxStreamBuffer = 64 << 10;
  startTopic(limits);
  topic->newsBytes = 16 << 20;
  auto client = open(4'096);
  topic->publish();
  ASSERT_TRUE(topic->waitReleased(1));
  EXPECT_EQ(topic->failedNow(), 1);
  client->readUntilClosed();
  EXPECT_TRUE(client->closed());
}

}  // namespace
}  // namespace parley::testing
