// The mock's Gemini context caches (POST/GET/DELETE {v1beta}/cachedContents, and a
// generateContent that names one in `cachedContent`), with the rules Google enforces
// (docs/mock.md, "Gemini context caches"): a cache holds at least `minTokens` tokens (the mock's
// estimate), lives for its `ttl` (default one hour) or until its `expireTime` and is then gone
// (403, as a deleted one), is used with the model it was made for only, and a request using it
// may not set systemInstruction, tools or toolConfig (they come from the cache). Knows nothing
// about HTTP; the clock is the caller's (MockOptions::now).
//
// Thread-safety: none; the server calls it under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace parley::mock {

struct GeminiCacheOptions {
  std::int64_t minTokens = 1024;  // Gemini 2.5 Flash's and 3 Flash's minimum
  std::size_t maxCaches = 1000;   // live caches at once; more: 429
};

// A refusal in Google's terms: the HTTP status and the message of its error body.
struct GeminiCacheError : std::runtime_error {
  GeminiCacheError(int status, const std::string& message)
      : std::runtime_error(message), status(status) {}
  int status;
};

class GeminiCacheStore {
 public:
  using Clock = std::chrono::system_clock;
  // Counts the tokens of a generateContent body (the mock's estimate).
  using TokenCount = std::function<std::int64_t(const nlohmann::json& body, const std::string&)>;

  explicit GeminiCacheStore(GeminiCacheOptions options = {}) : options_(options) {}

  // POST cachedContents: the new cache's resource ({name, model, createTime, updateTime,
  // expireTime, usageMetadata: {totalTokenCount}}). Throws GeminiCacheError.
  nlohmann::json create(const nlohmann::json& body, Clock::time_point now, const TokenCount& count);
  // GET / DELETE cachedContents/{id}; 403 when there is no such live cache.
  nlohmann::json get(const std::string& name, Clock::time_point now);
  void remove(const std::string& name, Clock::time_point now);
  // A generateContent body for `model` naming a cache: the body with the cache's contents before
  // its own and the cache's systemInstruction, tools and toolConfig; `tokens` set to the cache's
  // size. A body naming none is returned as it is, `tokens` 0. Throws GeminiCacheError.
  nlohmann::json expand(const nlohmann::json& body, const std::string& model, Clock::time_point now,
                        std::int64_t& tokens);
  std::size_t size() const { return caches_.size(); }

 private:
  struct Cache {
    nlohmann::json resource;  // what GET answers
    nlohmann::json content;   // contents, systemInstruction, tools, toolConfig
    std::int64_t tokens = 0;
    Clock::time_point expires;
  };
  void dropExpired(Clock::time_point now);
  Cache& live(const std::string& name, Clock::time_point now);

  GeminiCacheOptions options_;
  std::map<std::string, Cache> caches_;
  std::uint64_t next_ = 0;
};

}  // namespace parley::mock
