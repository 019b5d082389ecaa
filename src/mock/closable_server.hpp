// An httplib::Server whose open connections can be closed at once.
//
// httplib 0.11 waits out the whole keep-alive timeout (5 s) on an idle connection before a
// worker notices that the server stopped, so stop() would hang for seconds whenever a client
// keeps a connection open. This server runs the connection loop itself: it tracks the sockets
// it serves and closeConnections() shuts them down, which wakes every worker immediately.
//
// Thread-safety: closeConnections() and shutdown() may be called from any thread; start() once.
#pragma once

#include <httplib.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace parley::mock {

class ClosableServer : public httplib::Server {
 public:
  ~ClosableServer() override { shutdown(); }

  // Binds host:port (0: any free port), raises the backlog, serves on a thread of its own and
  // returns the bound port once the accept loop runs (so that a shutdown() right after cannot be
  // lost). Throws parley::Error, starting with `who`, if the address cannot be bound.
  int start(const std::string& host, int port, const std::string& who);
  // stop(), closeConnections(), and joins the serving thread. Idempotent.
  void shutdown();

  // Shuts down every connection being served and refuses new ones; call after stop().
  void closeConnections();

  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built
  // it): a burst of new connections beyond that (100 client threads at once) has its SYNs or
  // final ACKs dropped, which the client only retries after TCP's 1 s initial retransmission
  // timeout. Call after bind_to_port(): a second listen() on a listening socket sets its
  // backlog. Returns false if that fails (the server then works with the small backlog).
  bool raiseBacklog(int backlog);

 private:
  bool process_and_close_socket(socket_t sock) override;

  std::mutex mutex_;
  std::set<socket_t> open_;
  bool closing_ = false;
  std::thread thread_;
  std::atomic<bool> listenEnded_{false};
};

}  // namespace parley::mock
