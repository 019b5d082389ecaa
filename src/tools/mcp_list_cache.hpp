// The 2026-07-28 caching hints (`ttlMs`, `cacheScope`) on */list results: pages kept while their
// ttl lasts, process-wide, so that a "public" page of an HTTP server is shared by every client of
// it and a "private" page only by clients that send the same credentials (docs/mcp.md,
// "Caching"). Internal to the MCP client. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace parley::detail {

// At most this many pages, and this many bytes of them (as JSON), are kept; past either the
// pages that expire first are dropped.
inline constexpr std::size_t kMcpListCachePages = 256;
inline constexpr std::size_t kMcpListCacheBytes = std::size_t{16} << 20;

struct McpCachedPage {
  nlohmann::json result;
  std::chrono::steady_clock::time_point expires;
};

class McpListCache {
 public:
  using Clock = std::chrono::steady_clock;
  static McpListCache& shared();

  // A fresh page of `method` at `cursor` for servers of `scope` (the server and what the client
  // sends besides credentials): a public one, else a private one of `context` (the credentials).
  std::optional<McpCachedPage> find(const std::string& scope, const std::string& method,
                                    const std::string& cursor, const std::string& context);
  // Keeps `result` (a page with a positive ttlMs) until `expires`; `isPublic` per its cacheScope.
  void store(const std::string& scope, const std::string& method, const std::string& cursor,
             const std::string& context, bool isPublic, const nlohmann::json& result,
             Clock::time_point expires);
  // Drops every page of `method` for `scope` (the server said the list changed, or a page failed).
  void forget(const std::string& scope, const std::string& method);
  std::size_t size();  // pages held, expired ones included

 private:
  struct Page {
    nlohmann::json result;
    Clock::time_point expires;
    std::size_t bytes = 0;
  };
  std::mutex mutex_;
  std::map<std::string, Page> pages_;
  std::size_t bytes_ = 0;
};

}  // namespace parley::detail
