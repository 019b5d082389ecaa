// http::Server: the HTTP/1.1 front of the service (`parley serve`) and of the mock server: an
// httplib::Server (its routing, handlers and response writing) behind a hardened front of our
// own that reads requests before any handler runs.
//
// One thread runs an epoll loop over every connection: it accepts, reads each request's head and
// body without blocking, under a deadline and caps (head bytes, header lines, body bytes counted
// as read, chunked or sized), and answers what breaks them itself (408, 413, 431, 400, 503). A
// complete request goes to a bounded pool of worker threads (`workers`, queue `maxQueue`); one a
// caller marks long-lived (an event stream) gets a thread of its own for its handler, up to
// `maxLongLived`, so that open streams never take the pool from short requests. Its response,
// when it is streamed (a chunked provider), is then served in turns by `streamThreads` threads:
// a stream waiting for its next event is parked (StreamControl) and holds a socket and a few
// hundred bytes, no thread. A keep-alive connection returns to the loop between requests (unless
// its next request comes within `keepAliveLinger`, served by the same worker) and is closed after
// `idleTimeout`. A slow or idle client therefore holds a socket, never a thread;
// past `maxConnections` the loop closes the longest idle connection or the oldest one still
// sending its head, or refuses the new one (503).
// docs/service.md ("The HTTP front") says why this design and lists the caps.
//
// Ownership: the caller owns the server; handlers are registered (Get, Post, ...) before start().
// Thread-safety: start() once; shutdown() from any thread, idempotent; handlers run concurrently
// on the worker and long-lived threads, stream providers on the stream threads (one turn of a
// stream at a time). The server reserves httplib's post-routing handler (it hands streamed
// responses over to the turns).
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
#include <vector>

namespace parley::http {

// The long-lived request (an event stream) a thread is serving, as a wait inside its handler or
// inside its response's provider sees it.
//
// Its client: the loop watches the socket of every long-lived request it handed off (EPOLLRDHUP:
// the peer closed or reset it), so a departed client's stream ends within moments instead of at
// its next write.
//
// Parking: a long-lived response with a chunked provider is streamed in turns. Once the handler
// has returned, the server calls the provider on one of its few stream threads when there is
// reason to (the stream's start, a wake(), the client's going, the deadline of a park), and a
// wait inside the provider that would block calls park() instead: the provider returns having
// written nothing, and the stream holds no thread until it is called again. What the provider
// writes is sent without blocking; what the socket does not take waits in a bounded buffer.
//
// Ownership: the server makes one per long-lived request; waits may keep it (wake lists hold it
// weakly). Thread-safety: every member may be called from any thread; park() and takeTimedOut()
// only from within a turn (parkable()).
class StreamControl {
 public:
  virtual ~StreamControl() = default;

  virtual bool gone() const noexcept = 0;
  // Calls `wake` (from the server's loop) when the client goes, until onGone() is called again;
  // an empty function stops the calls. Called at once when the client has gone already. For a
  // wait that blocks (not in a turn).
  virtual void onGone(std::function<void()> wake) = 0;

  // Whether this thread is running a turn of this stream: a wait may park instead of blocking.
  virtual bool parkable() const noexcept = 0;
  // Within a turn: the provider will return without writing; the server calls it again after
  // wake(), when the client goes, or at `deadline`, whichever comes first.
  virtual void park(std::chrono::steady_clock::time_point deadline) = 0;
  // Within a turn: whether it began because the last park's deadline passed (the wait timed
  // out). True once per such turn: the first caller consumes it.
  virtual bool takeTimedOut() noexcept = 0;
  // A parked stream's provider is called again soon (a turn running now runs once more).
  virtual void wake() = 0;

 private:
  friend class ParkedStreams;
  std::atomic<const void*> parkedOn_{nullptr};  // the ParkedStreams listing it
};

// The stream this thread serves (its handler, or a turn of its provider), or null.
std::shared_ptr<StreamControl> currentStream();

// Streams parked until something happens to what they wait on (a thread's events): each is
// listed once until wakeAll(), held weakly (a stream that ended is dropped).
// Thread-safety: none of its own; the owner guards it (with the lock of what the streams wait on).
class ParkedStreams {
 public:
  ParkedStreams() = default;
  ParkedStreams(const ParkedStreams&) = delete;
  ParkedStreams& operator=(const ParkedStreams&) = delete;
  ~ParkedStreams();
  void add(const std::shared_ptr<StreamControl>& stream);
  void wakeAll();

 private:
  std::vector<std::weak_ptr<StreamControl>> streams_;
  size_t pruneAt_ = 16;  // drop the ended ones when the list reaches this size
};

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
  // After a response on a keep-alive connection, a worker waits this long for the client's next
  // request itself, while another worker is idle for each one waiting (so no request waits for
  // it): a sequential client is then served without a hop through the loop. 0: never.
  std::chrono::microseconds keepAliveLinger{2'000};
  size_t maxQueue = 1'024;      // complete requests waiting; past it: 503
  size_t maxLongLived = 1'000;  // long-lived requests on a thread at once; past it: 503
  // Threads running the turns of parked streams (StreamControl). 0: none; a long-lived response
  // then keeps its thread for its whole length.
  size_t streamThreads = 4;
  // The bytes a parked stream may hold unsent (its socket full); a write past it cuts the stream.
  // A stream's provider is called again only once less than a quarter of it is held, and one
  // whose reader takes nothing for writeTimeout is cut.
  size_t maxStreamBuffer = 1 << 20;
  // Whether a request (method, target with its query) holds its connection for long (an event
  // stream): its handler gets a thread of its own instead of a pool worker, and its streamed
  // response goes to the turns. Null: none does.
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

  // Reserved: the server's own post-routing handler hands streamed responses over to the turns.
  httplib::Server& set_post_routing_handler(Handler handler) = delete;

  const ServerLimits& limits() const noexcept;
  size_t connections() const;    // open now
  size_t parkedStreams() const;  // streams served in turns now (parked, or in a turn)

 private:
  struct Front;
  std::unique_ptr<Front> front_;
};

}  // namespace parley::http
