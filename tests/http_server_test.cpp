// The HTTP front (src/http/server.hpp) on a loopback port, through raw sockets and libcurl:
// slow and idle clients hold no thread, the head's deadline and caps, bodies (sized or chunked)
// capped as read, the connection cap, pipelining, and long-lived requests beside a small pool.
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

namespace parley::testing {
namespace {

using namespace std::chrono_literals;

// A client socket connected to 127.0.0.1:port (blocking).
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("connect failed");
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool send(const std::string& text) {
    size_t at = 0;
    while (at < text.size()) {
      const ssize_t n = ::send(fd_, text.data() + at, text.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  // What the server sends until it closes the connection, or `timeout` passes.
  std::string readUntilClosed(std::chrono::milliseconds timeout = 10s) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed_ = true;
        return out;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
  }
  // Reads until `text` has come (or the connection closed, or `timeout`).
  std::string readUntil(const std::string& text, std::chrono::milliseconds timeout = 10s) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[4096];
    while (out.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool closed_ = false;
};

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

}  // namespace
}  // namespace parley::testing
