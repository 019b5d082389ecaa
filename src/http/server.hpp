// http::Server: the HTTP/1.1 front of the service (`parley serve`) and of the mock server: an
// httplib::Server (its routing, handlers and response writing) behind a hardened front of our
// own that reads requests before any handler runs.
//
// One thread runs an epoll loop over every connection: it accepts, reads each request's head and
// body without blocking, under a deadline and caps (head bytes, header lines, body bytes counted
// as read, chunked or sized), and answers what breaks them itself (408, 413, 431, 400, 503). A
// complete request goes to a bounded pool of worker threads (`workers`, queue `maxQueue`); one a
// caller marks long-lived (an event stream) gets a thread of its own, up to `maxLongLived`, so
// that open streams never take the pool from short requests. A keep-alive connection returns to
// the loop between requests and is closed after `idleTimeout`. A slow or idle client therefore
// holds a socket, never a thread; past `maxConnections` the loop closes the longest idle
// connection or the oldest one still sending its head, or refuses the new one (503).
// docs/service.md ("The HTTP front") says why this design and lists the caps.
//
// Ownership: the caller owns the server; handlers are registered (Get, Post, ...) before start().
// Thread-safety: start() once; shutdown() from any thread, idempotent; handlers run concurrently
// on the worker and stream threads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace parley::http {

// Whether the client of a long-lived request has gone. The loop watches the socket of every
// long-lived request it handed off (EPOLLRDHUP: the peer closed or reset it) while the handler
// waits for something to write, so a departed client's stream ends within moments instead of at
// its next write. Thread-safety: every member may be called from any thread.
class ClientWatch {
 public:
  bool gone() const noexcept { return gone_.load(); }
  // Calls `wake` (from the server's loop) when the client goes, until onGone() is called again;
  // an empty function stops the calls. Called at once when the client has gone already.
  void onGone(std::function<void()> wake);
  // The loop's: the client went.
  void markGone();

 private:
  std::atomic<bool> gone_{false};
  std::mutex mutex_;
  std::function<void()> wake_;
};

// The watch of the long-lived request this thread is serving, or null (a short request, or a
// thread that serves none).
std::shared_ptr<ClientWatch> currentClientWatch();

struct ServerLimits {
  std::chrono::milliseconds headTimeout{10'000};  // the request line and headers; past it: 408
  std::chrono::milliseconds bodyTimeout{30'000};  // the body, once the head is in; past it: 408
  std::chrono::milliseconds idleTimeout{5'000};   // a keep-alive connection between requests
  std::chrono::milliseconds writeTimeout{5'000};  // a response write that makes no progress
  size_t maxHeadBytes = 16 << 10;                 // request line + headers; past it: 431
  size_t maxHeaders = 100;                        // header lines; past it: 431
  size_t maxBodyBytes = 1 << 20;                  // sized or chunked, counted as read: 413
  size_t maxConnections = 4'096;                  // open at once (see above)
  size_t workers = 16;                            // threads serving short requests
  size_t maxQueue = 1'024;                        // complete requests waiting; past it: 503
  size_t maxLongLived = 1'000;                    // long-lived requests at once; past it: 503
  // Whether a request (method, target with its query) holds its connection for long (an event
  // stream): it gets a thread of its own instead of a pool worker. Null: none does.
  std::function<bool(std::string_view method, std::string_view target)> longLived{};
};

class Server : public httplib::Server {
 public:
  explicit Server(ServerLimits limits = {});
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (0: any free port), starts the loop and the workers, and returns the bound
  // port; connections are accepted from then on. Throws parley::Error, starting with `who`, if
  // the address cannot be bound. Once only.
  int start(const std::string& host, int port, const std::string& who);
  // Stops accepting, closes every connection (which ends the responses being written, streams
  // included) and joins every thread. Idempotent.
  void shutdown();

  const ServerLimits& limits() const noexcept;
  size_t connections() const;  // open now

 private:
  struct Front;
  std::unique_ptr<Front> front_;
};

}  // namespace parley::http
