// OAuth 2.1 sign-in for Streamable HTTP MCP servers (the MCP authorization specification of
// 2025-11-25, with the 2025-03-26 fallbacks): protected resource metadata (RFC 9728),
// authorization server metadata (RFC 8414 and OpenID Connect discovery), client ID metadata
// documents, dynamic client registration (RFC 7591) or a pre-registered client, PKCE S256, the
// `resource` parameter (RFC 8707), scope selection and step-up, refresh tokens, and a token
// file kept 0600. Internal to parley; McpOAuthOptions (mcp.hpp) configures it.
//
// Ownership: McpClient owns one per server and hands it to each HTTP connection. Thread-safety:
// every member may be called from any thread; sign-ins run one at a time.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "parley/mcp.hpp"

namespace parley::detail {

// The parameters of a `Bearer` challenge in a WWW-Authenticate header (RFC 6750).
struct BearerChallenge {
  std::string error;
  std::string scope;
  std::string resourceMetadata;
};
BearerChallenge parseBearerChallenge(std::string_view header);

class McpOAuth {
 public:
  McpOAuth(std::string serverName, std::string serverUrl, McpOAuthOptions options);
  ~McpOAuth();
  McpOAuth(const McpOAuth&) = delete;
  McpOAuth& operator=(const McpOAuth&) = delete;

  // The Authorization header value for the next request ("Bearer ..."), refreshing an expired
  // token first when a refresh token is held; "" when there is no token.
  std::string authorization(std::stop_token cancel = {});
  // The Authorization header value held now, without refreshing ("" when none): what tells one
  // authorization context from another (the 2026-07-28 cacheScope "private").
  std::string held() const;

  // The server refused a request that carried `sentAuthorization` with `status` (401, or 403
  // with error="insufficient_scope") and this WWW-Authenticate header. Refreshes or signs in so
  // that the request may be sent again; `attempts` counts the sign-ins for that one request.
  // Throws HttpError when it may not sign in again (maxAuthorizations, or no authorize handler),
  // ProtocolError for a bad document, ConnectionError/TimeoutError for the authorization server.
  void challenged(int status, const std::string& wwwAuthenticate,
                  const std::string& sentAuthorization, int& attempts, std::stop_token cancel);

  // True while the authorize handler runs (a person may be signing in).
  bool signingIn() const noexcept { return signingIn_.load(); }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::atomic<bool> signingIn_{false};
};

}  // namespace parley::detail
