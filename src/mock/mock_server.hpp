// An OpenAI-compatible HTTP server for tests, benchmarks and offline use (`parley mock`).
//
// It answers POST /v1/chat/completions (streaming and not) from a script (see script.hpp and
// docs/mock.md), GET /v1/models, and POST /v1/embeddings with deterministic vectors. It records
// the requests it receives (the last MockOptions::maxRecorded) so tests can assert on them. Given
// the same requests in the same order, it sends the same bytes.
//
// Ownership: a MockServer owns its listening socket and worker threads; the destructor stops it.
// Thread-safety: every public method may be called from any thread while the server runs.
// Delays and slow streams run on the server's own worker pool and never hold up other
// connections (up to MockOptions::threads at once); stop() interrupts them and returns promptly.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mock/gemini_caches.hpp"
#include "mock/prompt_cache.hpp"

namespace parley::mock {

struct MockOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port; read it back with port()
  // A JSON array of rules (see docs/mock.md); null = the built-in demo agent (demoScript()).
  nlohmann::json script;
  std::vector<std::string> models = {"parley-mock"};  // listed by GET /v1/models
  int threads = 32;                                   // requests served at once
  // Requests requests() keeps, the oldest dropped first (their indexes stay taken); 0 keeps
  // none (`parley serve`'s demo agent: it forgets what it has answered).
  std::size_t maxRecorded = 10'000;
  int embeddingDimensions = 256;      // default vector size for /v1/embeddings
  std::int64_t created = 1700000000;  // the "created" timestamp of every response
  // The prompt-cache rule behind prompt_tokens_details.cached_tokens (prompt_cache.hpp).
  PromptCacheOptions promptCache;
  // Gemini's explicit context caches (gemini_caches.hpp): the minimum size, how many at once.
  GeminiCacheOptions geminiCaches;
  // The clock that expires Gemini caches; empty = the system clock. A test moves it on.
  std::function<std::chrono::system_clock::time_point()> now;
  // Multiplies the prompt_tokens the mock estimates (not those a script gives): a server whose
  // tokenizer counts differently from the client's. Must be positive.
  double promptTokensScale = 1.0;
  // Called with each request as requests() records it (the rule included) before the response
  // is sent; runs on a server thread, concurrently for concurrent requests. Empty = not called.
  std::function<void(const nlohmann::json& request)> onRequest;
};

class MockServer {
 public:
  // Validates the script; throws parley::ValidationError naming the bad rule and field.
  explicit MockServer(MockOptions options);
  ~MockServer();  // stops the server
  MockServer(const MockServer&) = delete;
  MockServer& operator=(const MockServer&) = delete;

  // Binds and starts serving; returns once connections are accepted.
  // Throws parley::Error when the address cannot be bound. Calling it twice is an error.
  void start();
  // Stops accepting, interrupts delays and streams in progress, joins the workers. Idempotent.
  void stop();

  int port() const;             // the bound port (after start())
  std::string baseUrl() const;  // "http://HOST:PORT/v1"

  // The requests received so far (the last maxRecorded), in arrival order, each
  // {"index": n, "method": "POST", "path": "/v1/chat/completions",
  //  "headers": {"lower-case-name": "value", ...}, "body": <JSON, or the raw string if not JSON>,
  //  "rule": <index of the rule that answered, or null>, "rule_name": <its name, or null>}.
  std::vector<nlohmann::json> requests() const;
  void clearRequests();
  // Blocks until at least `count` requests have been received since start (clearRequests()
  // does not lower the count) or `timeout` passes; returns whether they were. For tests that
  // must act while a request is in progress (a delay, a slow stream).
  bool waitForRequests(std::size_t count, std::chrono::milliseconds timeout) const;

  // Replaces the script (validated first) and resets the request counter and rule counts.
  void setScript(const nlohmann::json& script);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley::mock
