// The MCP list cache (src/tools/mcp_list_cache.hpp) past its caps: at most kMcpListCachePages
// pages and kMcpListCacheBytes bytes are held, the pages that expire first go, and a page larger
// than the whole cache is not kept.
#include "tools/mcp_list_cache.hpp"

#include <gtest/gtest.h>

#include <string>

namespace parley::detail {
namespace {

using Clock = McpListCache::Clock;

nlohmann::json page(std::size_t bytes) {
  return {{"tools", nlohmann::json::array()}, {"pad", std::string(bytes, 'x')}};
}

TEST(McpListCacheCaps, PastThePageCapThePagesThatExpireFirstGo) {
  McpListCache cache;
  const auto now = Clock::now();
  const std::size_t stored = kMcpListCachePages + 44;
  for (std::size_t i = 0; i < stored; ++i) {
    // Page i expires i seconds from now, so the first ones stored are the first to go.
    cache.store("server", "tools/list", "cursor-" + std::to_string(i), "", true, page(10),
                now + std::chrono::hours(1) + std::chrono::seconds(i));
  }
  EXPECT_EQ(cache.size(), kMcpListCachePages);
  EXPECT_FALSE(cache.find("server", "tools/list", "cursor-0", ""));
  EXPECT_FALSE(cache.find("server", "tools/list", "cursor-43", ""));
  EXPECT_TRUE(cache.find("server", "tools/list", "cursor-44", ""));
  EXPECT_TRUE(cache.find("server", "tools/list", "cursor-" + std::to_string(stored - 1), ""));
}

TEST(McpListCacheCaps, PastTheByteCapPagesGoAndAPageLargerThanTheCacheIsNotKept) {
  McpListCache cache;
  const auto later = Clock::now() + std::chrono::hours(1);
  const std::size_t pageBytes = kMcpListCacheBytes / 8;  // 9 of them do not fit
  for (int i = 0; i < 12; ++i) {
    cache.store("server", "tools/list", "c" + std::to_string(i), "", true, page(pageBytes),
                later + std::chrono::seconds(i));
  }
  EXPECT_LE(cache.size(), 7u);  // 8 pages and their keys' JSON overhead exceed the cap
  EXPECT_GE(cache.size(), 6u);
  EXPECT_FALSE(cache.find("server", "tools/list", "c0", ""));
  EXPECT_TRUE(cache.find("server", "tools/list", "c11", ""));

  McpListCache fresh;
  fresh.store("server", "tools/list", "", "", true, page(kMcpListCacheBytes + 1), later);
  EXPECT_EQ(fresh.size(), 0u);
  EXPECT_FALSE(fresh.find("server", "tools/list", "", ""));
}

}  // namespace
}  // namespace parley::detail
