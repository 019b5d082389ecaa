// The mock's prompt cache: what a provider's prefix cache would have kept of a request, by a rule
// of the mock's own (docs/mock.md, "Prompt cache"), so that clients predicting cache hits
// (ConversationManager::diagnoseCache) can be checked against a server that reports them.
//
// The rule: the mock remembers the last answered request per conversation key (the body's
// `prompt_cache_key`, else `user`, else Anthropic's `metadata.user_id`, else one shared slot).
// The next request with that key reuses the longest run of leading WHOLE messages equal to the
// remembered one's (same tool definitions first; a message is equal when its chat-shape JSON
// is). Those messages' text bytes (content and tool-call arguments, the prompt_tokens estimate's
// measure) in the mock's token estimate, ceil(bytes / 4), rounded down to a multiple of `block`,
// and 0 below `minimum`, are the cached tokens (OpenAI's rule: 1024 tokens at least, in steps of
// 128).
//
// Thread-safety: none; the server calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "mock/script.hpp"

namespace parley::mock {

struct PromptCacheOptions {
  bool enabled = true;
  std::int64_t block = 128;     // cached tokens are a multiple of this (at least 1)
  std::int64_t minimum = 1024;  // fewer reusable tokens than this cache nothing
  // Conversation keys remembered; the least recently used goes first.
  std::size_t maxKeys = 1024;
};

// The mock's token estimate of `bytes` bytes of prompt text: ceil(bytes / 4).
std::int64_t mockTokens(std::size_t bytes);

// The rule's figure for a reusable prefix of `prefixBytes` text bytes.
std::int64_t cachedTokensForPrefix(std::size_t prefixBytes, const PromptCacheOptions& options);

// The conversation key of a request body as it came in (any protocol): see above.
std::string promptCacheKey(const nlohmann::json& body);

class PromptCache {
 public:
  explicit PromptCache(PromptCacheOptions options = {}) : options_(options) {}

  // The cached tokens of `chatBody` (the request in the chat shape, `ctx` read from it) against
  // the request last remembered under `key`, which it then replaces. 0 when disabled.
  std::int64_t exchange(const std::string& key, const nlohmann::json& chatBody,
                        const ChatContext& ctx);
  void clear();

 private:
  struct Prompt {
    std::size_t tools = 0;              // hash of the tool definitions
    std::vector<std::size_t> messages;  // hash of each message's JSON
    std::list<std::string>::iterator lru;
  };
  PromptCacheOptions options_;
  std::unordered_map<std::string, Prompt> prompts_;
  std::list<std::string> recent_;  // keys, most recent first
};

}  // namespace parley::mock
