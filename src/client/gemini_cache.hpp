// Explicit Gemini context caches (cachedContents) for a client whose options ask for them
// (PromptCachePolicy::Mode::Explicit on protocol gemini; docs/protocols.md, "Gemini context
// caches").
//
// The stable prefix is the one ConversationManager::diagnoseCache() measures: the leading whole
// units a request shares with the previous request of the same conversation, behind the same
// system instruction and tools. Here the units are the request's wire contents (a cache holds
// whole contents) and a conversation is known by its model, system instruction, tools and first
// content. When that prefix is estimated (bytes / 4) at kGeminiCacheMinTokens or more, a cache
// is made of it (the system instruction, tools and tool config go with it, as Google requires)
// with the policy's TTL, and the request names it in `cachedContent` and sends only the contents
// after it. The cache is reused while it is valid (its expireTime, less a minute, by
// ClientOptions::now) and still a prefix of the request; one no longer a prefix (an edited
// thread) is replaced by a new one and left to its TTL. A cache that cannot be made (smaller than
// the model's minimum, a quota) is no error: the request goes whole.
//
// Thread-safety: every member may be called from any thread (one mutex; the HTTP calls to
// create and delete caches are made outside it).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "parley/openai_client.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

// Conversations remembered at once; the least recently used goes first.
inline constexpr std::size_t kMaxGeminiCacheSlots = 256;
// The smallest stable prefix (estimated tokens) a cache is asked for: Google's minimum for the
// Flash models (Pro: 4096; the server refuses a smaller cache, and the request then goes whole).
inline constexpr int64_t kGeminiCacheMinTokens = 1024;

// "" (the API's default, one hour) or the TTL as a protobuf Duration ("300s") from a policy's
// "90s", "5m", "1h" or a number of seconds; ValidationError naming `field` for anything else.
std::string geminiCacheTtl(const std::string& ttl, const std::string& field);

class GeminiCaches {
 public:
  // `headers` (the key and the options' headers) must outlive this object.
  GeminiCaches(const ClientOptions& options, HttpTransport& transport,
               std::span<const std::string> headers);
  ~GeminiCaches();

  // Rewrites `body` (a generateContent body, as buildGeminiBody() wrote it, for `model`) to use
  // a cache when one covers its stable prefix; returns the cache's name, or "" when the body is
  // left whole. A body that names its own cachedContent is left alone.
  std::string apply(nlohmann::ordered_json& body, const std::string& model,
                    std::optional<std::chrono::milliseconds> timeout, std::stop_token stop);
  // The server no longer knows `name` (expired or deleted elsewhere): it is not used again.
  void forget(const std::string& name);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace parley::detail
