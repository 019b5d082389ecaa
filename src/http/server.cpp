// Over 600 lines: one connection state machine (head, sized or chunked body, hand-off, keep-alive)
// with its caps and deadlines, read best in one piece. The turns of streamed responses are
// stream_turns.cpp's.
#include "http/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "http/stream_turns.hpp"
#include "model/blanks.hpp"
#include "parley/errors.hpp"

namespace parley::http {

namespace {

using Clock = std::chrono::steady_clock;

// Read this much at a time from a socket.
constexpr size_t kReadChunk = 16 << 10;
// A chunk-size line (hex digits and extensions) longer than this is refused.
constexpr size_t kMaxChunkLine = 1'024;
// After an error answer the loop reads (and drops) what the client still sends for this long,
// so that closing does not reset the connection before the client reads the answer.
constexpr std::chrono::milliseconds kLinger{1'000};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void addressOf(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// A complete request, read by the loop, as httplib parses it; writes go to the socket (non-
// blocking: each waits up to `writeTimeout` for room).
class RequestStream : public httplib::Stream {
 public:
  RequestStream(int sock, std::string request, std::chrono::milliseconds writeTimeout)
      : sock_(sock), request_(std::move(request)), writeTimeout_(writeTimeout) {}

  bool is_readable() const override { return at_ < request_.size(); }
  bool is_writable() const override {
    pollfd p{sock_, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, static_cast<int>(writeTimeout_.count()));
    } while (n < 0 && errno == EINTR);
    return n > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - at_);
    std::memcpy(ptr, request_.data() + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    // httplib writes a response's head and its body apart. A head that announces a sized body is
    // held and sent with the body's first bytes: one segment, and one wake-up of the client
    // instead of two. A streamed response's head (no Content-Length) leaves at once.
    if (!headSent_) {
      headSent_ = true;
      const std::string_view text(ptr, size);
      if (text.size() >= 4 && text.substr(text.size() - 4) == "\r\n\r\n" &&
          hasContentLength(text)) {
        held_.assign(text);
        return static_cast<ssize_t>(size);
      }
    }
    if (!held_.empty()) {
      held_.append(ptr, size);
      const bool sent = sendAll(held_.data(), held_.size());
      held_.clear();
      return sent ? static_cast<ssize_t>(size) : -1;
    }
    return sendSome(ptr, size);
  }
  // Sends a held head (a response whose body was empty or never written).
  bool flush() {
    if (held_.empty()) return !failed_;
    const bool sent = sendAll(held_.data(), held_.size());
    held_.clear();
    return sent;
  }
  // A write failed (httplib ignores the result of a head's write).
  bool failed() const { return failed_; }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    addressOf(sock_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    addressOf(sock_, false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  static bool hasContentLength(std::string_view head) {
    static constexpr std::string_view kName = "\r\ncontent-length:";
    for (size_t i = 0; i + kName.size() <= head.size(); ++i) {
      size_t k = 0;
      while (k < kName.size() && std::tolower(static_cast<unsigned char>(head[i + k])) == kName[k])
        ++k;
      if (k == kName.size()) return true;
    }
    return false;
  }
  ssize_t sendSome(const char* ptr, size_t size) {
    for (;;) {
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !is_writable()) {
        failed_ = true;
        return -1;
      }
    }
  }
  bool sendAll(const char* ptr, size_t size) {
    while (size > 0) {
      const ssize_t n = sendSome(ptr, size);
      if (n <= 0) return false;
      ptr += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  int sock_;
  std::string request_;
  size_t at_ = 0;
  std::chrono::milliseconds writeTimeout_;
  bool headSent_ = false;
  bool failed_ = false;
  std::string held_;  // a response's head, until its body's first write
};

std::string errorAnswer(int status, const char* reason, const char* code,
                        const std::string& message) {
  std::string escaped;
  for (char c : message)
    escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
  const std::string body = R"({"error":{"message":")" + escaped +
                           R"(","type":"invalid_request_error","code":")" + code + "\"}}";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// The front's loop checks deadlines (a scan of every connection) at most this often.
constexpr std::chrono::milliseconds kSweepEvery{20};

}  // namespace

struct Server::Front {
  enum class State { Head, Body, Busy, Idle, Closing };

  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    // A worker's from dispatch() until it hands the connection back (serve(), giveBack()): the
    // loop reads nothing else of a busy connection, so that a worker may read the client's next
    // request into it (linger()).
    std::atomic<bool> busy{false};
    State state = State::Head;     // whose connection it is reads and writes it
    Clock::time_point since{};     // when this state began (eviction order)
    Clock::time_point deadline{};  // of the state
    std::string in;                // read and not yet consumed
    // The head being read.
    size_t scanned = 0;  // bytes of `in` searched for the head's end
    // The head read, its body being read.
    std::string head;  // as handed to httplib (Transfer-Encoding and Expect removed)
    std::string method;
    std::string target;
    bool chunked = false;
    size_t length = 0;  // Content-Length
    std::string body;
    enum class Chunk { Size, Data, DataEnd, Trailers } chunk = Chunk::Size;
    size_t chunkLeft = 0;
    size_t trailerBytes = 0;
    // A long-lived request's, while it is served; in turns (`inTurns`, the loop's) once its
    // handler has handed its streamed response over, and `flushing` once that response has
    // ended and its last bytes wait for room before the connection is kept.
    std::shared_ptr<detail::LongLivedStream> stream;
    bool inTurns = false;
    bool flushing = false;
  };

  Server& server;
  ServerLimits limits;
  int listenFd = -1;
  int epollFd = -1;
  int wakeFd = -1;
  std::thread loop;
  std::atomic<bool> stopping{false};
  uint64_t nextId = 1;
  std::unordered_map<int, std::shared_ptr<Conn>> conns;  // the loop's; by fd
  std::atomic<size_t> open{0};

  // Hand-offs between the loop and the workers.
  std::mutex mutex;
  std::condition_variable work;
  std::condition_variable threadsDone;
  std::deque<std::pair<std::shared_ptr<Conn>, std::string>> queue;  // connection, request
  std::vector<std::pair<std::shared_ptr<Conn>, bool>> returned;     // connection, keep it
  std::vector<std::shared_ptr<Conn>> handedOver;  // streamed in turns now: watch the client
  std::vector<std::shared_ptr<Conn>> wantRoom;    // a stream's socket is full: watch for room
  std::vector<std::thread> workers;
  // Long-lived requests against maxLongLived: until their handler ends or hands its stream to
  // the turns (its client may ask again as soon as the stream's first turn writes). And their
  // threads, until they end (shutdown waits for them).
  size_t longLived = 0;
  size_t longLivedThreads = 0;
  size_t idleWorkers = 0;                      // workers waiting for a request
  size_t lingering = 0;                        // workers waiting for their client's next one
  std::shared_ptr<detail::StreamTurns> turns;  // null without streamThreads
  // The loop's: streams whose output waits for room (watched for a stall), the last scan.
  std::unordered_set<std::shared_ptr<Conn>> writers;
  Clock::time_point lastSweep{};
  // The next scan at the latest: any thread that sets a deadline brings it forward.
  std::atomic<Clock::rep> sweepAt{0};

  Front(Server& s, ServerLimits l) : server(s), limits(std::move(l)) {}

  void scanBy(Clock::time_point deadline) {
    const Clock::rep at = deadline.time_since_epoch().count();
    Clock::rep now = sweepAt.load();
    while (at < now && !sweepAt.compare_exchange_weak(now, at)) {
    }
  }

  void wake() const {
    const uint64_t one = 1;
    (void)!::write(wakeFd, &one, sizeof one);
  }

  // --- the loop ---------------------------------------------------------------------------------

  void run() {
    std::vector<epoll_event> events(256);
    while (!stopping) {
      const int timeout = sweep();
      const int n = ::epoll_wait(epollFd, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listenFd) {
          acceptAll();
        } else if (fd == wakeFd) {
          uint64_t count;
          (void)!::read(wakeFd, &count, sizeof count);
          takeReturned();
        } else {
          auto found = conns.find(fd);
          if (found == conns.end()) continue;
          if (found->second->busy) {
            busyEvent(found->second, events[i].events);
          } else {
            readable(found->second);
          }
        }
      }
    }
    // Stopping: every connection goes; a worker writing to one sees its write fail.
    for (auto& [fd, conn] : conns) {
      if (conn->busy) {
        ::shutdown(fd, SHUT_RDWR);
      } else {
        ::close(fd);
      }
    }
  }

  void watch(const std::shared_ptr<Conn>& conn) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = conn->fd;
    ::epoll_ctl(epollFd, EPOLL_CTL_ADD, conn->fd, &ev);
  }

  // `conn` may be the map's own element: nothing of it is used after it is erased.
  void close(const std::shared_ptr<Conn>& conn) {
    ::epoll_ctl(epollFd, EPOLL_CTL_DEL, conn->fd, nullptr);
    ::close(conn->fd);
    writers.erase(conn);
    conn->stream.reset();  // it points back at the connection
    conns.erase(conn->fd);
    --open;
  }

  // A long-lived request's socket: watched for its client's going (one shot while its handler
  // runs), and, streamed in turns, for room for the output that waits.
  void busyEvent(const std::shared_ptr<Conn>& conn, uint32_t events) {
    if (!conn->stream) return;
    if (!conn->inTurns) {
      conn->stream->markGone();
      return;
    }
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      conn->stream->markGone();  // its turn ends it (and hands the connection back)
      if (conn->flushing) {
        close(conn);
      } else {
        ::epoll_ctl(epollFd, EPOLL_CTL_DEL, conn->fd, nullptr);
        writers.erase(conn);
      }
      return;
    }
    if ((events & EPOLLOUT) && conn->stream->flush()) roomFound(conn);
  }

  // Interest in a streamed response's socket: its client's going, and room when output waits.
  void watchStream(const std::shared_ptr<Conn>& conn, bool room) {
    epoll_event ev{};
    ev.events = EPOLLRDHUP | (room ? EPOLLOUT : 0u);
    ev.data.fd = conn->fd;
    if (::epoll_ctl(epollFd, EPOLL_CTL_MOD, conn->fd, &ev) != 0)
      ::epoll_ctl(epollFd, EPOLL_CTL_ADD, conn->fd, &ev);
    if (room) {
      writers.insert(conn);
    } else {
      writers.erase(conn);
    }
  }

  // A stream's output has all gone (or it broke): a stream that ended goes back now.
  void roomFound(const std::shared_ptr<Conn>& conn) {
    if (conn->flushing) {
      giveBack(conn, true);
    } else {
      watchStream(conn, false);
    }
  }

  // The loop's checks of streams whose output waits: a reader that takes nothing for
  // writeTimeout is cut.
  void checkWriters(Clock::time_point now) {
    std::vector<std::shared_ptr<Conn>> stalled;
    for (const auto& conn : writers) {
      if (conn->stream && conn->stream->cutIfStalled(now, limits.writeTimeout))
        stalled.push_back(conn);
    }
    for (auto& conn : stalled) {
      if (conn->flushing) {
        close(conn);
      } else {
        watchStream(conn, false);  // its turn ends it
      }
    }
  }

  // Answers `text` (best effort: the socket is non-blocking) and closes after a short linger.
  void refuse(const std::shared_ptr<Conn>& conn, const std::string& text) {
    (void)!::send(conn->fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(conn->fd, SHUT_WR);
    conn->state = State::Closing;
    conn->in.clear();
    conn->since = Clock::now();
    conn->deadline = conn->since + kLinger;
    scanBy(conn->deadline);
  }

  // Closes what passed its deadline; returns how long epoll may wait (ms). Scans every
  // connection at most every kSweepEvery: with thousands of streams open, a scan per wake-up
  // would cost more than the wake-ups.
  int sweep() {
    const auto now = Clock::now();
    const auto due =
        std::max(Clock::time_point(Clock::duration(sweepAt.load())), lastSweep + kSweepEvery);
    if (now < due) {
      return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count() + 1);
    }
    lastSweep = now;
    checkWriters(now);
    auto next = now + std::chrono::seconds(1);
    std::vector<std::shared_ptr<Conn>> late;
    for (auto& [fd, conn] : conns) {
      if (conn->busy) continue;
      if (conn->deadline <= now) {
        late.push_back(conn);
      } else {
        next = std::min(next, conn->deadline);
      }
    }
    for (auto& conn : late) {
      if (conn->state == State::Head || conn->state == State::Body) {
        refuse(conn, errorAnswer(408, "Request Timeout", "request_timeout",
                                 "the request was not received in time"));
        next = std::min(next, conn->deadline);
      } else {
        close(conn);  // idle, or done lingering
      }
    }
    // Deadlines set from now on bring it forward (scanBy).
    sweepAt.store(next.time_since_epoch().count());
    return static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count() + 1);
  }

  void acceptAll() {
    for (;;) {
      const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors: the rest wait in the backlog
      }
      // Every write (headers, each flushed event) must leave at once: Nagle would hold small
      // writes until the client's delayed ACK.
      int yes = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      auto conn = std::make_shared<Conn>();
      conn->fd = fd;
      conn->id = nextId++;
      conn->since = Clock::now();
      conn->deadline = conn->since + limits.headTimeout;
      scanBy(conn->deadline);
      if (open >= limits.maxConnections && !evictOne()) {
        const std::string text =
            errorAnswer(503, "Service Unavailable", "too_many_connections",
                        "the server holds " + std::to_string(limits.maxConnections) +
                            " connections at most; try again later");
        (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        continue;
      }
      conns[fd] = conn;
      ++open;
      watch(conn);
    }
  }

  // Makes room for a new connection: closes the longest idle one, else the one that has been
  // sending its head longest (a slow client). False if every connection is busy.
  bool evictOne() {
    std::shared_ptr<Conn> victim;
    for (State wanted : {State::Closing, State::Idle, State::Head}) {
      for (auto& [fd, conn] : conns) {
        if (!conn->busy && conn->state == wanted && (!victim || conn->since < victim->since)) {
          victim = conn;
        }
      }
      if (victim) break;
    }
    if (!victim) return false;
    close(victim);
    return true;
  }

  void readable(const std::shared_ptr<Conn>& conn) {
    char buffer[kReadChunk];
    for (;;) {
      const ssize_t n = ::recv(conn->fd, buffer, sizeof buffer, 0);
      if (n == 0) {
        close(conn);
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        close(conn);
        return;
      }
      if (conn->state == State::Closing) continue;  // drop it
      if (conn->state == State::Idle) startHead(conn);
      conn->in.append(buffer, static_cast<size_t>(n));
      if (!advance(conn)) return;  // handed off or refused
    }
  }

  // The first bytes of a request came.
  void startHead(const std::shared_ptr<Conn>& conn) {
    conn->state = State::Head;
    conn->since = Clock::now();
    conn->deadline = conn->since + limits.headTimeout;
    scanBy(conn->deadline);
  }

  bool isLongLived(const Conn& conn) const {
    return limits.longLived && limits.longLived(conn.method, conn.target);
  }

  // Moves a connection on with what it has read; false once it left the loop's reading (handed
  // to a worker, refused or closed).
  bool advance(const std::shared_ptr<Conn>& conn) {
    if (conn->state == State::Head && !readHead(conn)) return conn->state == State::Head;
    if (conn->state == State::Body && !readBody(conn)) return conn->state == State::Body;
    if (conn->state != State::Body) return false;
    dispatch(conn);
    return false;
  }

  // True when the head is complete and valid (state Body); false while more is needed or when
  // it was refused.
  bool readHead(const std::shared_ptr<Conn>& conn) {
    // A leading empty line (after a previous request's body) is allowed.
    while (conn->in.starts_with("\r\n"))
      conn->in.erase(0, 2);
    const size_t from = conn->scanned >= 3 ? conn->scanned - 3 : 0;
    const size_t end = conn->in.find("\r\n\r\n", from);
    const size_t headBytes = end == std::string::npos ? conn->in.size() : end + 4;
    size_t lines = 0;
    for (size_t i = 0; i < std::min(headBytes, conn->in.size()); ++i)
      lines += conn->in[i] == '\n';
    if (headBytes > limits.maxHeadBytes || lines > limits.maxHeaders + 2) {
      refuse(conn,
             errorAnswer(431, "Request Header Fields Too Large", "headers_too_large",
                         "the request head is over " + std::to_string(limits.maxHeadBytes) +
                             " bytes or " + std::to_string(limits.maxHeaders) + " header lines"));
      return false;
    }
    if (end == std::string::npos) {
      conn->scanned = conn->in.size();
      return false;
    }
    const std::string raw = conn->in.substr(0, end + 2);  // through the last header's CRLF
    conn->in.erase(0, end + 4);
    conn->scanned = 0;
    return parseHead(conn, raw);
  }

  bool parseHead(const std::shared_ptr<Conn>& conn, const std::string& raw) {
    auto bad = [&](const std::string& why) {
      refuse(conn, errorAnswer(400, "Bad Request", "bad_request", why));
      return false;
    };
    const size_t lineEnd = raw.find("\r\n");
    const std::string_view requestLine(raw.data(), lineEnd);
    const size_t sp1 = requestLine.find(' ');
    const size_t sp2 = requestLine.rfind(' ');
    if (sp1 == std::string_view::npos || sp2 == sp1) return bad("a malformed request line");
    conn->method = std::string(requestLine.substr(0, sp1));
    conn->target = std::string(requestLine.substr(sp1 + 1, sp2 - sp1 - 1));
    conn->head = std::string(requestLine) + "\r\n";
    conn->chunked = false;
    conn->length = 0;
    bool sized = false;
    bool expectContinue = false;
    size_t at = lineEnd + 2;
    while (at < raw.size()) {
      const size_t next = raw.find("\r\n", at);
      const std::string_view line(raw.data() + at, next - at);
      at = next + 2;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0) return bad("a malformed header line");
      const std::string_view name = line.substr(0, colon);
      const std::string_view value = parley::detail::trimBlanks(line.substr(colon + 1));
      if (iequals(name, "Transfer-Encoding")) {
        if (!iequals(value, "chunked")) return bad("Transfer-Encoding must be chunked");
        conn->chunked = true;
        continue;  // httplib reads the body as sized: the loop decodes it
      }
      if (iequals(name, "Expect")) {
        expectContinue = iequals(value, "100-continue");
        continue;  // answered here, before the body is read
      }
      if (iequals(name, "Content-Length")) {
        if (sized) return bad("more than one Content-Length");
        size_t n = 0;
        if (value.empty() || value.size() > 18 ||
            !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return bad("Content-Length must be a number");
        for (char c : value)
          n = n * 10 + static_cast<size_t>(c - '0');
        sized = true;
        conn->length = n;
      }
      conn->head.append(line.data(), line.size());
      conn->head += "\r\n";
    }
    if (sized && conn->chunked) return bad("both Content-Length and Transfer-Encoding");
    if (conn->length > limits.maxBodyBytes) {
      refuse(conn, tooLarge());
      return false;
    }
    conn->state = State::Body;
    conn->deadline = Clock::now() + limits.bodyTimeout;
    scanBy(conn->deadline);
    conn->body.clear();
    conn->chunk = Conn::Chunk::Size;
    conn->chunkLeft = 0;
    conn->trailerBytes = 0;
    if (expectContinue && (conn->chunked || conn->length > 0)) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)!::send(conn->fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return true;
  }

  std::string tooLarge() const {
    return errorAnswer(
        413, "Payload Too Large", "body_too_large",
        "the request body is over " + std::to_string(limits.maxBodyBytes) + " bytes");
  }

  // True when the body is complete; false while more is needed or when it was refused.
  bool readBody(const std::shared_ptr<Conn>& conn) {
    if (!conn->chunked) {
      const size_t take = std::min(conn->length - conn->body.size(), conn->in.size());
      conn->body.append(conn->in, 0, take);
      conn->in.erase(0, take);
      return conn->body.size() == conn->length;
    }
    auto bad = [&](const std::string& why) {
      refuse(conn, errorAnswer(400, "Bad Request", "bad_request", why));
      return false;
    };
    size_t at = 0;
    bool done = false;
    while (!done) {
      if (conn->chunk == Conn::Chunk::Size) {
        const size_t end = conn->in.find("\r\n", at);
        if (end == std::string::npos) {
          if (conn->in.size() - at > kMaxChunkLine) return bad("a chunk-size line is too long");
          break;
        }
        std::string_view line(conn->in.data() + at, end - at);
        line = parley::detail::trimBlanks(line.substr(0, line.find(';')));
        size_t size = 0;
        if (line.empty() || line.size() > 15) return bad("a malformed chunk size");
        for (char c : line) {
          const int digit = std::isxdigit(static_cast<unsigned char>(c))
                                ? (std::isdigit(static_cast<unsigned char>(c))
                                       ? c - '0'
                                       : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10)
                                : -1;
          if (digit < 0) return bad("a malformed chunk size");
          size = size * 16 + static_cast<size_t>(digit);
        }
        at = end + 2;
        // Counted before the chunk is read: a body over the cap is refused at its first byte.
        if (size > limits.maxBodyBytes - conn->body.size()) {
          refuse(conn, tooLarge());
          return false;
        }
        conn->chunkLeft = size;
        conn->chunk = size == 0 ? Conn::Chunk::Trailers : Conn::Chunk::Data;
      } else if (conn->chunk == Conn::Chunk::Data) {
        const size_t take = std::min(conn->chunkLeft, conn->in.size() - at);
        conn->body.append(conn->in, at, take);
        at += take;
        conn->chunkLeft -= take;
        if (conn->chunkLeft > 0) break;
        conn->chunk = Conn::Chunk::DataEnd;
      } else if (conn->chunk == Conn::Chunk::DataEnd) {
        if (conn->in.size() - at < 2) break;
        if (conn->in.compare(at, 2, "\r\n") != 0) return bad("a chunk does not end with CRLF");
        at += 2;
        conn->chunk = Conn::Chunk::Size;
      } else {  // trailers: dropped, each line counted against the head's cap
        const size_t end = conn->in.find("\r\n", at);
        if (end == std::string::npos) {
          if (conn->trailerBytes + conn->in.size() - at > limits.maxHeadBytes)
            return bad("the trailers are too long");
          break;
        }
        conn->trailerBytes += end + 2 - at;
        if (conn->trailerBytes > limits.maxHeadBytes) return bad("the trailers are too long");
        done = end == at;
        at = end + 2;
      }
    }
    conn->in.erase(0, at);
    if (!done) return false;
    conn->head += "Content-Length: " + std::to_string(conn->body.size()) + "\r\n";
    return true;
  }

  // A complete request, as httplib reads it.
  static std::string takeRequest(Conn& conn) {
    std::string request = std::move(conn.head);
    request += "\r\n";
    request += conn.body;
    conn.body.clear();
    conn.body.shrink_to_fit();
    return request;
  }

  // Hands a complete request to a worker (or a thread of its own).
  void dispatch(const std::shared_ptr<Conn>& conn) {
    std::string request = takeRequest(*conn);
    const bool isLong = isLongLived(*conn);
    {
      std::lock_guard lock(mutex);
      const bool full = isLong ? longLived >= limits.maxLongLived : queue.size() >= limits.maxQueue;
      if (full) {
        refuse(conn, errorAnswer(503, "Service Unavailable", "server_busy",
                                 isLong ? "too many long-lived requests; try again later"
                                        : "too many requests waiting; try again later"));
        return;
      }
      conn->state = State::Busy;
      conn->busy = true;
      if (isLong) {
        // Watched while it is served: a hang-up (the peer closed or reset the socket) ends its
        // stream then, not at the next write (a heartbeat away). Data the client sends meanwhile
        // is not watched for: it is read once the response ends.
        conn->stream = std::make_shared<detail::LongLivedStream>(conn->fd, turns);
        conn->stream->connection = conn;
        epoll_event ev{};
        ev.events = EPOLLRDHUP | EPOLLONESHOT;
        ev.data.fd = conn->fd;
        ::epoll_ctl(epollFd, EPOLL_CTL_MOD, conn->fd, &ev);
        ++longLived;
        ++longLivedThreads;
        std::thread([this, conn, request = std::move(request)]() mutable {
          bool counted = true;
          serve(conn, std::move(request), &counted);
          std::lock_guard lock(mutex);
          if (counted) --longLived;
          --longLivedThreads;
          threadsDone.notify_all();
        }).detach();
        return;
      }
      ::epoll_ctl(epollFd, EPOLL_CTL_DEL, conn->fd, nullptr);
      queue.emplace_back(conn, std::move(request));
    }
    work.notify_one();
  }

  void workerLoop() {
    for (;;) {
      std::pair<std::shared_ptr<Conn>, std::string> job;
      {
        std::unique_lock lock(mutex);
        ++idleWorkers;
        work.wait(lock, [&] { return stopping || !queue.empty(); });
        --idleWorkers;
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      serve(job.first, std::move(job.second));
    }
  }

  // Runs one request through httplib, then gives the connection back to the loop, or, for a
  // streamed response taken by the post-routing handler, hands it over to the turns. A client
  // that sends its next request at once is served here again (linger()).
  // `counted`: a long-lived request's place among maxLongLived, given up at the hand-over.
  void serve(const std::shared_ptr<Conn>& conn, std::string request, bool* counted = nullptr) {
    for (;;) {
      bool keep = false;
      if (!stopping) {
        const auto& s = conn->stream;
        RequestStream stream(conn->fd, std::move(request), limits.writeTimeout);
        bool closed = false;
        {
          detail::ServingScope serving(s, false);
          try {
            keep = server.process_request(stream, false, closed, nullptr) && !closed;
          } catch (const std::exception&) {
            keep = false;  // a handler's error httplib did not catch: drop the connection
          }
        }
        if (!stream.flush()) keep = false;
        if (s && s->tookProvider()) {
          // Its head is written; its body is the turns' from here.
          if (s->headWritten() && !stream.failed() && !s->gone() && !stopping) {
            {
              std::lock_guard lock(mutex);
              handedOver.push_back(conn);  // before its first turn: the loop watches it first
              if (counted && *counted) {
                --longLived;
                *counted = false;
              }
            }
            wake();
            if (turns->serve(s, !closed)) return;
            keep = false;  // stopping: back to the loop, to be closed
          }
          s->dropProvider();
          keep = false;
        }
        if (s && s->gone()) keep = false;
      }
      if (keep && !conn->stream && conn->in.empty()) {
        std::optional<std::string> next = linger(conn, keep);
        if (next) {
          request = std::move(*next);
          continue;
        }
      }
      std::lock_guard lock(mutex);
      if (keep && !stopping && !conn->stream && conn->in.empty() && conn->state == State::Busy) {
        // The common case, without a hop through the loop: the connection waits for its next
        // request in the loop's epoll again. Its fields are set before it stops being busy (the
        // loop reads no field of a busy connection); under the mutex, so that a shutdown either
        // comes first (and the connection goes back by `returned`) or finds it idle and closes it.
        conn->since = Clock::now();
        conn->deadline = conn->since + limits.idleTimeout;
        scanBy(conn->deadline);
        watch(conn);
        conn->state = State::Idle;
        conn->busy = false;
        return;
      }
      returned.emplace_back(conn, keep);
      wake();
      return;
    }
  }

  // After a keep-alive response, while another worker is idle for every one lingering: waits up
  // to `keepAliveLinger` for the client's next request, on this worker. A sequential client
  // (an SDK, a tool loop) sends it at once, and is served without the hop through the loop and
  // another worker's wake-up. Returns that request when it came whole and is a short one;
  // nullopt otherwise, `keep` false when the client closed, and the connection left as the
  // loop's reading would have left it when only a part came, a long-lived request's head, or
  // something it refused (giveBack() goes on from there).
  std::optional<std::string> linger(const std::shared_ptr<Conn>& conn, bool& keep) {
    {
      std::lock_guard lock(mutex);
      if (limits.keepAliveLinger.count() <= 0 || stopping || idleWorkers <= lingering) {
        return std::nullopt;
      }
      ++lingering;
    }
    pollfd p{conn->fd, POLLIN | POLLRDHUP, 0};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(limits.keepAliveLinger).count();
    const int ready = ::poll(&p, 1, static_cast<int>(ms));
    {
      std::lock_guard lock(mutex);
      --lingering;
    }
    if (ready <= 0 || stopping) return std::nullopt;
    char buffer[kReadChunk];
    for (;;) {
      const ssize_t n = ::recv(conn->fd, buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        keep = false;  // closed or reset
        return std::nullopt;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (conn->state == State::Busy) startHead(conn);
      conn->in.append(buffer, static_cast<size_t>(n));
      if (conn->in.size() > limits.maxHeadBytes) break;  // readHead() refuses it
    }
    if (conn->state == State::Busy) return std::nullopt;  // nothing was there after all
    if (!readHead(conn) || isLongLived(*conn) || !readBody(conn)) return std::nullopt;
    conn->state = State::Busy;
    return takeRequest(*conn);
  }

  // Whether `conn` is still the loop's connection on its descriptor (not closed since).
  bool ours(const std::shared_ptr<Conn>& conn) const {
    auto found = conns.find(conn->fd);
    return found != conns.end() && found->second == conn;
  }

  void takeReturned() {
    std::vector<std::pair<std::shared_ptr<Conn>, bool>> back;
    std::vector<std::shared_ptr<Conn>> streams;
    std::vector<std::shared_ptr<Conn>> full;
    {
      std::lock_guard lock(mutex);
      back.swap(returned);
      streams.swap(handedOver);
      full.swap(wantRoom);
    }
    // In this order: a stream is handed over before its turns ask for room or end it.
    for (auto& conn : streams) {
      if (!ours(conn) || conn->inTurns) continue;
      conn->inTurns = true;
      conn->in.shrink_to_fit();  // what it holds for a stream's whole life
      watchStream(conn, false);
    }
    for (auto& conn : full) {
      if (ours(conn) && conn->inTurns && !conn->stream->gone()) watchStream(conn, true);
    }
    for (auto& [conn, keep] : back) {
      if (!ours(conn)) continue;
      if (conn->inTurns && keep && !stopping && !conn->stream->flush()) {
        // Its end is written but not all sent: kept once it is.
        conn->flushing = true;
        watchStream(conn, true);
        continue;
      }
      giveBack(conn, keep);
    }
  }

  // A long-lived request's end: its socket leaves the stream's watch (watch() adds it back for
  // the next request), or closes.
  void giveBack(const std::shared_ptr<Conn>& conn, bool keep) {
    if (conn->stream) {
      ::epoll_ctl(epollFd, EPOLL_CTL_DEL, conn->fd, nullptr);
      writers.erase(conn);
      conn->stream.reset();
      conn->inTurns = false;
      conn->flushing = false;
    }
    conn->busy = false;
    if (!keep || stopping) {
      close(conn);
      return;
    }
    if (conn->state != State::Busy) {
      // A worker read (part of) the next request while it lingered, as the loop would have.
      watch(conn);
      if (conn->state == State::Body) advance(conn);  // a long-lived request, or a part of one
      return;
    }
    conn->state = conn->in.empty() ? State::Idle : State::Head;
    conn->since = Clock::now();
    conn->deadline = conn->since + (conn->in.empty() ? limits.idleTimeout : limits.headTimeout);
    scanBy(conn->deadline);
    watch(conn);
    if (!conn->in.empty()) advance(conn);  // a pipelined request
  }

  // The turns' hooks (StreamTurns::Hooks), from their threads.
  void streamWantsRoom(const std::shared_ptr<detail::LongLivedStream>& stream) {
    {
      std::lock_guard lock(mutex);
      wantRoom.push_back(std::static_pointer_cast<Conn>(stream->connection));
    }
    wake();
  }
  void streamEnded(const std::shared_ptr<detail::LongLivedStream>& stream, bool keep) {
    {
      std::lock_guard lock(mutex);
      returned.emplace_back(std::static_pointer_cast<Conn>(stream->connection), keep);
    }
    wake();
  }

  // The post-routing handler: a long-lived request's streamed response goes to the turns.
  void takeStreamedResponse(const httplib::Request& req, httplib::Response& res) {
    auto stream = std::dynamic_pointer_cast<detail::LongLivedStream>(currentStream());
    if (stream && turns) stream->takeProvider(req, res);
  }
};

Server::Server(ServerLimits limits) : front_(std::make_unique<Front>(*this, std::move(limits))) {
  const ServerLimits& l = front_->limits;
  if (l.workers == 0 || l.maxConnections == 0 || l.maxHeadBytes < 256 || l.maxHeaders == 0 ||
      l.headTimeout.count() <= 0 || l.bodyTimeout.count() <= 0 || l.idleTimeout.count() <= 0 ||
      l.writeTimeout.count() <= 0) {
    throw ValidationError("limits", "every limit of an HTTP server must be positive");
  }
  if (l.streamThreads > 0 && l.maxStreamBuffer < 4'096) {
    throw ValidationError("limits", "maxStreamBuffer must be 4 096 bytes at least");
  }
  set_payload_max_length(l.maxBodyBytes);
  httplib::Server::set_post_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) {
        front_->takeStreamedResponse(req, res);
      });
}

Server::~Server() {
  shutdown();
}

const ServerLimits& Server::limits() const noexcept {
  return front_->limits;
}

size_t Server::connections() const {
  return front_->open;
}

size_t Server::parkedStreams() const {
  return front_->turns ? front_->turns->streams() : 0;
}

int Server::start(const std::string& host, int port, const std::string& who) {
  Front& f = *front_;
  if (f.listenFd >= 0) throw Error(who + ": start() called twice");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    throw Error(who + ": cannot resolve " + host);
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR allows a quick restart on the same port; not SO_REUSEPORT, which would let a
    // second server share a busy port silently.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw Error(who + ": cannot listen on " + where);
  std::string ip;
  int bound = 0;
  addressOf(fd, false, ip, bound);
  f.listenFd = fd;
  f.epollFd = ::epoll_create1(EPOLL_CLOEXEC);
  f.wakeFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (int watched : {f.listenFd, f.wakeFd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = watched;
    ::epoll_ctl(f.epollFd, EPOLL_CTL_ADD, watched, &ev);
  }
  // httplib ends a chunked response (an event stream) once svr_sock_ is invalid: it is valid
  // from here until shutdown().
  svr_sock_ = fd;
  if (f.limits.streamThreads > 0) {
    f.turns = std::make_shared<detail::StreamTurns>(
        f.limits.streamThreads, f.limits.maxStreamBuffer,
        detail::StreamTurns::Hooks{
            [&f](const auto& stream) { f.streamWantsRoom(stream); },
            [&f](const auto& stream, bool keep) { f.streamEnded(stream, keep); }});
  }
  for (size_t i = 0; i < f.limits.workers; ++i)
    f.workers.emplace_back([&f] { f.workerLoop(); });
  f.loop = std::thread([&f] { f.run(); });
  return bound;
}

void Server::shutdown() {
  Front& f = *front_;
  if (!f.loop.joinable()) return;
  {
    std::lock_guard lock(f.mutex);
    f.stopping = true;
  }
  svr_sock_ = INVALID_SOCKET;
  f.wake();
  f.loop.join();  // closes the idle connections, shuts the busy ones down
  f.work.notify_all();
  for (auto& worker : f.workers)
    worker.join();
  {
    std::unique_lock lock(f.mutex);
    f.threadsDone.wait(lock, [&] { return f.longLivedThreads == 0; });
  }
  if (f.turns) f.turns->stop();  // every stream's turn ends (its socket is shut down)
  // What the workers and the turns gave back after the loop ended: the busy connections.
  for (auto& [fd, conn] : f.conns) {
    if (conn->busy) ::close(fd);
    conn->stream.reset();
  }
  f.conns.clear();
  f.writers.clear();
  f.returned.clear();
  f.handedOver.clear();
  f.wantRoom.clear();
  ::close(f.listenFd);
  ::close(f.epollFd);
  ::close(f.wakeFd);
}

}  // namespace parley::http
