// McpListCache (mcp_list_cache.hpp): the pages of */list results a 2026-07-28 server said may be
// reused, keyed by server scope, method, cursor and (for "private" pages) credentials.
#include "tools/mcp_list_cache.hpp"

#include <algorithm>

namespace parley::detail {

namespace {

// The scope and method part of a key, so that forget() finds every cursor and credential.
std::string listCachePrefix(const std::string& scope, const std::string& method) {
  return scope + '\n' + method + '\n';
}

std::string listCacheKey(const std::string& scope, const std::string& method,
                         const std::string& cursor, const std::string& context, bool isPublic) {
  // "*" cannot be a context: contexts are hex digests.
  return listCachePrefix(scope, method) + cursor + '\n' + (isPublic ? std::string("*") : context);
}

}  // namespace

McpListCache& McpListCache::shared() {
  static McpListCache cache;
  return cache;
}

std::optional<McpCachedPage> McpListCache::find(const std::string& scope, const std::string& method,
                                                const std::string& cursor,
                                                const std::string& context) {
  std::lock_guard lock(mutex_);
  const Clock::time_point now = Clock::now();
  for (bool isPublic : {true, false}) {
    auto found = pages_.find(listCacheKey(scope, method, cursor, context, isPublic));
    if (found == pages_.end()) continue;
    if (now < found->second.expires)
      return McpCachedPage{found->second.result, found->second.expires};
    bytes_ -= found->second.bytes;
    pages_.erase(found);
  }
  return std::nullopt;
}

void McpListCache::store(const std::string& scope, const std::string& method,
                         const std::string& cursor, const std::string& context, bool isPublic,
                         const nlohmann::json& result, Clock::time_point expires) {
  const std::size_t bytes = result.dump().size();
  if (bytes > kMcpListCacheBytes) return;
  std::lock_guard lock(mutex_);
  std::string key = listCacheKey(scope, method, cursor, context, isPublic);
  if (auto old = pages_.find(key); old != pages_.end()) {
    bytes_ -= old->second.bytes;
    pages_.erase(old);
  }
  // Past a cap the pages that expire first go (expired ones are the first of them).
  while (!pages_.empty() &&
         (pages_.size() >= kMcpListCachePages || bytes_ + bytes > kMcpListCacheBytes)) {
    auto first = std::min_element(pages_.begin(), pages_.end(), [](const auto& a, const auto& b) {
      return a.second.expires < b.second.expires;
    });
    bytes_ -= first->second.bytes;
    pages_.erase(first);
  }
  pages_.emplace(std::move(key), Page{result, expires, bytes});
  bytes_ += bytes;
}

void McpListCache::forget(const std::string& scope, const std::string& method) {
  const std::string prefix = listCachePrefix(scope, method);
  std::lock_guard lock(mutex_);
  for (auto it = pages_.lower_bound(prefix);
       it != pages_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    bytes_ -= it->second.bytes;
    it = pages_.erase(it);
  }
}

std::size_t McpListCache::size() {
  std::lock_guard lock(mutex_);
  return pages_.size();
}

}  // namespace parley::detail
