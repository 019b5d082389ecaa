// How McpClient's messages travel: a child process's stdin/stdout (mcp_stdio.cpp) or Streamable
// HTTP (mcp_http.cpp). A transport moves JSON-RPC texts and reports what happens to the
// connection; the JSON-RPC session on top (mcp_client.cpp) parses them and matches responses to
// requests. Internal to parley.
//
// Ownership: McpClient owns one transport per connection. Thread-safety: send() and abandon()
// may be called from any thread, also from inside an event callback; close() from any thread
// but a transport thread (it joins them). Events are delivered on transport threads, possibly
// several at once (HTTP: one thread per request in flight), never after close() returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "parley/mcp.hpp"

namespace parley::detail {

// What the session made of one received text.
struct McpReceived {
  bool valid = false;                 // a JSON-RPC message (else the transport counts it)
  std::optional<int64_t> responseTo;  // the request id it answers, for a response
  std::string problem;                // why it is not valid
  std::exception_ptr fatal;           // set: end the connection with this (ProtocolError)
};

struct McpTransportEvents {
  // One message as received. Returns what it was.
  std::function<McpReceived(std::string_view text)> onMessage;
  // A request failed on its way (HTTP: the POST or its stream broke, or an error status): the
  // request `id` will get no response.
  std::function<void(int64_t id, std::exception_ptr why)> onRequestFailed;
  // The connection is gone (the process exited, a limit was passed, the session ended); `why` is
  // a ConnectionError or a ProtocolError. Delivered at most once.
  std::function<void(std::exception_ptr why)> onClosed;
};

// 2026-07-28 over HTTP: what a request's Mcp-Method and Mcp-Name headers say (the body's
// method, and its params.name or params.uri), and for tools/call the Mcp-Param-NAME headers that
// mirror the arguments the tool's schema marks with `x-mcp-header` (NAME, the value as text).
struct McpRouting {
  std::string method;
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;
};

class McpTransport {
 public:
  virtual ~McpTransport() = default;

  // Starts the connection (stdio: spawns the child). Throws ConnectionError.
  virtual void start(McpTransportEvents events) = 0;
  // Sends one message; `requestId` is set for a request (HTTP answers it on the same POST).
  // Throws ConnectionError, or TimeoutError when it could not be written by `deadline`.
  // `routing`: the request's headers when the revision is stateless (HTTP only).
  virtual void send(const std::string& text, std::optional<int64_t> requestId,
                    std::chrono::steady_clock::time_point deadline,
                    const McpRouting& routing = {}) = 0;
  // Sends an answer to one of the server's requests from inside onMessage, without waiting long
  // (stdio: one attempt that does not block; HTTP: a POST bounded by kAnswerWait): a server that
  // sends requests but does not read the answers must not hold the reading thread. Throws
  // TimeoutError when the answer could not be sent at once, ConnectionError.
  virtual void sendAnswer(const std::string& text) = 0;
  // The caller stopped waiting for request `id` (HTTP: ends its POST).
  virtual void abandon(int64_t /*id*/) {}
  // The handshake succeeded with this protocol version (HTTP: sent as a header from now on, and
  // the server's GET stream is opened).
  virtual void handshakeDone(const std::string& /*protocolVersion*/) {}
  // The requests that follow speak this revision; `stateless` (2026-07-28): HTTP sends it as
  // MCP-Protocol-Version from now on, keeps no session and opens no GET stream. Called before
  // server/discover, and again to go back to the 2025 era's handshake ("", false).
  virtual void useProtocol(const std::string& /*protocolVersion*/, bool /*stateless*/) {}
  // Ends the connection and waits for the transport's threads (bounded: stdio kills the child
  // after McpServerOptions::shutdownGrace twice over). Idempotent.
  virtual void close() = 0;

  virtual long processId() const { return -1; }
  virtual std::string stderrTail() const { return {}; }
  virtual int nonJsonLines() const { return 0; }
};

// How long an answer to a server's request, or a notifications/cancelled, may take to send.
inline constexpr std::chrono::milliseconds kAnswerWait{500};

class McpOAuth;

std::unique_ptr<McpTransport> makeStdioTransport(const McpServerOptions& options);
// `oauth` (may be null) signs in when the server answers 401 or asks for more scopes.
std::unique_ptr<McpTransport> makeHttpTransport(const McpServerOptions& options,
                                                std::shared_ptr<McpOAuth> oauth);

// A short description of the first bytes of `text` for error messages: at most `limit` bytes,
// control characters escaped.
std::string mcpExcerpt(std::string_view text, std::size_t limit = 120);

}  // namespace parley::detail
