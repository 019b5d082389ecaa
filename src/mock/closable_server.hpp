// An httplib::Server whose open connections can be closed at once.
//
// httplib 0.11 waits out the whole keep-alive timeout (5 s) on an idle connection before a
// worker notices that the server stopped, so stop() would hang for seconds whenever a client
// keeps a connection open. This server runs the connection loop itself: it tracks the sockets
// it serves and closeConnections() shuts them down, which wakes every worker immediately.
//
// Thread-safety: closeConnections() may be called from any thread.
#pragma once

#include <httplib.h>

#include <mutex>
#include <set>

namespace parley::mock {

class ClosableServer : public httplib::Server {
 public:
  // Shuts down every connection being served and refuses new ones; call after stop().
  void closeConnections();

 private:
  bool process_and_close_socket(socket_t sock) override;

  std::mutex mutex_;
  std::set<socket_t> open_;
  bool closing_ = false;
};

}  // namespace parley::mock
