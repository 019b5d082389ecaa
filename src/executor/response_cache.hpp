// The executor's opt-in LLM response cache (ExecutorOptions::responseCacheSize).
//
// ResponseCache is a bounded LRU of model replies. Its key is the text of the whole request
// the model would receive; it is indexed by a fast hash of the key (not a cryptographic one: no
// one gains by forcing a collision), and a hit compares the full key too, so two requests can
// only share a reply when they are byte for byte the same.
// CachedLlmClient puts it in front of a profile's client.
//
// Thread-safety: both classes may be used from many threads at once; one mutex guards the
// LRU and is never held while hashing, copying a key in, or calling the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

class ResponseCache {
 public:
  // Throws ValidationError("capacity") for 0.
  explicit ResponseCache(size_t capacity);

  // The reply stored under `key`, which becomes the most recently used; nullopt on a miss.
  std::optional<ChatResult> find(std::string_view key);
  // Stores `value` under `key` as the most recently used (replacing what the key held),
  // evicting the least recently used reply when the cache is full.
  void insert(std::string key, ChatResult value);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    size_t size = 0;
  };
  Stats stats() const;
  size_t capacity() const noexcept { return capacity_; }

 private:
  struct Entry {
    size_t hash;
    std::string key;  // never changed while the entry is indexed: KeyRef points into it
    std::shared_ptr<const ChatResult> value;
  };
  // A key and its hash, computed before the lock is taken.
  struct KeyRef {
    size_t hash;
    std::string_view text;
    bool operator==(const KeyRef& other) const noexcept {
      return hash == other.hash && text == other.text;
    }
  };
  struct KeyRefHash {
    size_t operator()(const KeyRef& key) const noexcept { return key.hash; }
  };

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<KeyRef, std::list<Entry>::iterator, KeyRefHash> index_;
  Stats stats_;
};

// An LlmClient that answers from `cache` when it holds the request, and otherwise asks `inner`
// and stores the reply. The key is `profileId`, the profile's base URL and the request body
// built as the client would send it (model, messages, tools, every parameter, the profile's
// default parameters), without the stream flag: a streamed and a plain request of the same
// body share a reply. Failed calls and empty replies are not stored.
//
// A replayed reply is the stored one with fresh tool call ids (a model never repeats an id,
// and the executor matches tool answers by id); a streamed request sees it as one delta
// holding the whole content, reasoning, tool calls, usage and finish reason.
class CachedLlmClient : public LlmClient {
 public:
  CachedLlmClient(std::shared_ptr<LlmClient> inner, std::shared_ptr<ResponseCache> cache,
                  std::string profileId, ClientOptions profile);

  ChatResult generate(const ChatRequest& request) override;
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) override;
  MessageJsonOptions messageJsonOptions() const noexcept override;
  // The inner client's: a structured node asks on the endpoint's own rungs.
  StructuredOutputMode structuredOutputMode() const noexcept override;
  bool acceptsResponseFormat() const noexcept override;

 private:
  // nullopt when the request cannot be written (the inner client then reports why).
  std::optional<std::string> key(const ChatRequest& request) const;
  std::optional<ChatResult> replay(const std::optional<std::string>& key,
                                   const ChatRequest& request);
  void store(const std::optional<std::string>& key, const ChatResult& result);

  std::shared_ptr<LlmClient> inner_;
  std::shared_ptr<ResponseCache> cache_;
  std::string profileId_;
  ClientOptions profile_;
};

}  // namespace parley::detail
