// An LlmClient for any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM,
// `parley mock`), over libcurl: POST {baseUrl}/chat/completions, streamed or not.
//
// Thread-safety: one OpenAiClient may be called from any number of threads at once. Each call
// borrows a connection (a libcurl handle with its connection cache) from a pool and returns it,
// so connections are reused across calls. The options are fixed at construction.
//
// Retries follow the official SDKs: connection errors, timeouts, 408, 409, 429 and >= 500 are
// retried maxRetries times (an `x-should-retry: true|false` response header overrides), waiting
// `retry-after-ms`, `Retry-After` (seconds or an HTTP date) when the server says and that is at
// most 60 s, else min(0.5 s * 2^retry, 8 s) less up to 25 % jitter. A stream that has already
// delivered a chunk to onChunk is never retried.
//
// Timeouts: connectTimeout per connection attempt; requestTimeout for a whole non-streamed
// response; idleTimeout for the longest silence inside a stream; ChatRequest::timeout for the
// whole call with its retries. Cancelling ChatRequest::stopToken ends the call within 100 ms.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/llm.hpp"
#include "parley/message.hpp"

namespace parley {

// Which body field carries ChatRequest::maxTokens. OpenAI deprecated max_tokens (its reasoning
// models reject it); many other servers only know max_tokens.
enum class MaxTokensField { MaxCompletionTokens, MaxTokens };

struct ClientOptions {
  // Taken as given; "/chat/completions" is appended. Shown in errors as redactUrl() shows it.
  std::string baseUrl = "https://api.openai.com/v1";
  std::string apiKey;     // sent as "Authorization: Bearer ..."; never logged; empty: no header
  std::string apiKeyEnv;  // when apiKey is empty: read the key from this environment variable
  std::string model;      // used when ChatRequest::model is empty
  std::map<std::string, std::string> headers;  // extra request headers

  std::chrono::milliseconds connectTimeout{10'000};
  std::chrono::milliseconds requestTimeout{600'000};  // whole request, non-streaming calls
  std::chrono::milliseconds idleTimeout{120'000};     // longest silence inside a stream
  int maxRetries = 2;  // connection errors, timeouts, 408, 409, 429, >= 500

  size_t maxEventBytes = size_t{8} << 20;      // one stream event; larger: ProtocolError
  size_t maxResponseBytes = size_t{64} << 20;  // a whole body or stream; larger: ProtocolError

  // Endpoint quirks.
  MaxTokensField maxTokensField = MaxTokensField::MaxCompletionTokens;
  bool includeUsage = true;  // streaming sends stream_options: {include_usage: true}
  EmptyContent emptyToolCallContent = EmptyContent::Null;  // see message.hpp
  // Request fields the endpoint always gets (e.g. {"temperature": 0.2}); a request's own
  // values and ChatRequest::extra override them.
  nlohmann::json defaultParameters = nlohmann::json::object();

  // Seams for tests. `now` is the wall clock used to read Retry-After dates. `sleep` waits
  // between retries and must return early (without throwing) once the stop token is stopped.
  // Empty: the real clock; a sleep that wakes on cancellation.
  std::function<std::chrono::system_clock::time_point()> now;
  std::function<void(std::chrono::milliseconds, std::stop_token)> sleep;
};

// `url` as it may be shown (errors, logs, a terminal): its user-info, which can hold a key
// ("http://user:KEY@host/v1"), becomes "***" ("http://***@host/v1"). Anything else is kept.
std::string redactUrl(std::string_view url);

struct EmbeddingResult {
  std::vector<std::vector<float>> embeddings;  // one per input, in input order
  std::optional<TokenUsage> usage;
  nlohmann::json raw;  // the reply as the server sent it
};

class OpenAiClient : public LlmClient {
 public:
  // Throws ValidationError for an unusable option (empty baseUrl, negative maxRetries, ...).
  explicit OpenAiClient(ClientOptions options);
  ~OpenAiClient() override;
  OpenAiClient(const OpenAiClient&) = delete;
  OpenAiClient& operator=(const OpenAiClient&) = delete;

  ChatResult generate(const ChatRequest& request) override;
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) override;

  const ClientOptions& options() const noexcept;
  // The options an encodeMessage() caller must use for ChatRequest::encodedMessages.
  MessageJsonOptions messageJsonOptions() const noexcept override;

  // POST {baseUrl}/embeddings for `inputs`, with the same retries, timeouts and errors as a
  // chat call. Vectors come back in the order of the inputs.
  EmbeddingResult createEmbeddings(const std::vector<std::string>& inputs, const std::string& model,
                                   std::optional<std::chrono::milliseconds> timeout = {},
                                   std::stop_token stopToken = {});

  // The JSON body a call with `request` would send (for logs and tests; it carries no key).
  std::string requestBody(const ChatRequest& request, bool stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
