#include "mock/closable_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "parley/errors.hpp"

namespace parley::mock {

int ClosableServer::start(const std::string& host, int port, const std::string& who) {
  if (port == 0) {
    port = bind_to_any_port(host);
    if (port <= 0) throw Error(who + ": cannot listen on " + host);
  } else if (!bind_to_port(host, port)) {
    throw Error(who + ": cannot listen on " + host + ":" + std::to_string(port));
  }
  raiseBacklog(SOMAXCONN);
  thread_ = std::thread([this] {
    listen_after_bind();
    listenEnded_ = true;
  });
  // The socket already accepts connections (they queue); wait until the accept loop runs.
  while (!is_running()) {
    if (listenEnded_) {
      thread_.join();
      throw Error(who + ": the server on port " + std::to_string(port) + " failed to start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return port;
}

void ClosableServer::shutdown() {
  if (!thread_.joinable()) return;
  stop();
  closeConnections();
  thread_.join();
}

bool ClosableServer::raiseBacklog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

namespace {

// Waits until `sock` is readable (or closed); false on timeout or error.
bool waitReadable(socket_t sock, std::chrono::milliseconds timeout) {
  pollfd p{sock, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

bool waitWritable(socket_t sock, std::chrono::milliseconds timeout) {
  pollfd p{sock, POLLOUT, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
}

void addressOf(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
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

// A buffered socket stream (httplib reads request lines a byte at a time).
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, std::chrono::milliseconds readTimeout,
                   std::chrono::milliseconds writeTimeout)
      : sock_(sock), readTimeout_(readTimeout), writeTimeout_(writeTimeout) {}

  bool is_readable() const override { return begin_ < end_ || waitReadable(sock_, readTimeout_); }
  bool is_writable() const override { return waitWritable(sock_, writeTimeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      if (!waitReadable(sock_, readTimeout_)) return -1;
      ssize_t n;
      do {
        n = ::recv(sock_, buffer_, sizeof buffer_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    addressOf(sock_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    addressOf(sock_, false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  socket_t sock_;
  std::chrono::milliseconds readTimeout_;
  std::chrono::milliseconds writeTimeout_;
  char buffer_[4096];
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace

void ClosableServer::closeConnections() {
  std::lock_guard lock(mutex_);
  closing_ = true;
  // A socket is removed from open_ before it is closed, so every one here is still ours.
  for (socket_t sock : open_)
    ::shutdown(sock, SHUT_RDWR);
}

bool ClosableServer::process_and_close_socket(socket_t sock) {
  // Every write (headers, each flushed SSE batch) must leave at once, whatever the listening
  // socket passed on: Nagle would hold small writes until the client's delayed ACK.
  int noDelay = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &noDelay, sizeof noDelay);
  {
    std::lock_guard lock(mutex_);
    if (!closing_) open_.insert(sock);
  }
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  ConnectionStream stream(
      sock,
      seconds(read_timeout_sec_) +
          std::chrono::duration_cast<milliseconds>(std::chrono::microseconds(read_timeout_usec_)),
      seconds(write_timeout_sec_) +
          std::chrono::duration_cast<milliseconds>(std::chrono::microseconds(write_timeout_usec_)));
  bool ok = false;
  size_t remaining = keep_alive_max_count_;
  while (remaining > 0 && svr_sock_ != INVALID_SOCKET &&
         waitReadable(sock, seconds(keep_alive_timeout_sec_))) {
    bool closeConnection = remaining == 1;
    bool connectionClosed = false;
    ok = process_request(stream, closeConnection, connectionClosed, nullptr);
    if (!ok || connectionClosed) break;
    --remaining;
  }
  {
    std::lock_guard lock(mutex_);
    open_.erase(sock);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace parley::mock
