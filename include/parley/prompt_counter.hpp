// Counting a whole request's prompt: locally (countChatTokens() over the request's messages and
// tools), or by asking the server that will answer it, where parley's tokenizer is not the
// model's (docs/cost.md, "Remote counting"):
//
//   anthropic    POST {base}/messages/count_tokens   the request's body without max_tokens
//                                                    (model, system, messages, tools,
//                                                    tool_choice, thinking) -> input_tokens
//   openai-chat  POST {root}/apply-template {"messages", "tools"} -> prompt, then
//   (llama.cpp)  POST {root}/tokenize {"content": prompt, "add_special": true, ...} -> tokens;
//                {root} is the base URL without its trailing /v1
//
// A remote count costs one request (two for llama.cpp) per distinct prompt: a small LRU cache
// keyed by the exact bytes sent (their SHA-256) answers a prompt counted before without a request.
// Every count is bounded: RemotePromptCounterOptions::timeout for the whole count, maxResponseBytes
// for each reply, maxTokens for the count itself. A count that fails throws (HttpError with the
// status and body, TimeoutError, ConnectionError, ProtocolError naming the missing field) or,
// with fallback = Local, returns the local count flagged as an estimate with the reason.
//
// Ownership: a counter is held by shared_ptr (ConversationOptions::promptCounter); it owns its
// HTTP transport (or shares ClientOptions::transport) and its cache.
// Thread-safety: count() may be called from any number of threads at once (the cache is locked;
// two threads counting the same new prompt at once may both ask the server).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"
#include "parley/tokens.hpp"

namespace parley {

// One request's prompt tokens and where the figure comes from.
struct PromptCount {
  int64_t tokens = 0;
  // Not exact: the local count without a vocabulary, or a remote counter's fallback.
  bool estimate = false;
  bool remote = false;  // the server counted it (or its cached answer did)
  bool cached = false;  // taken from the counter's cache: no request was made
  // Why a remote counter fell back to the local count (the error's message); "" otherwise.
  std::string fallbackReason;
};

class PromptCounter {
 public:
  virtual ~PromptCounter() = default;
  // The prompt tokens of `request` as it would be sent: ChatRequest::encodedMessages, then
  // messages, its tools, and (remote) its model and parameters. Throws ValidationError for a
  // request that cannot be sent, and a remote counter's errors (see above).
  virtual PromptCount count(const ChatRequest& request) const = 0;
  // "local", "anthropic count_tokens", "llama.cpp tokenize".
  virtual std::string_view name() const noexcept = 0;
};

// countChatTokens() over the request's messages and tools.
class LocalPromptCounter final : public PromptCounter {
 public:
  // null: TokenCounter() (o200k_base, or the estimate without its vocabulary).
  explicit LocalPromptCounter(std::shared_ptr<const TokenCounter> counter = nullptr);
  PromptCount count(const ChatRequest& request) const override;
  std::string_view name() const noexcept override { return "local"; }

 private:
  std::shared_ptr<const TokenCounter> counter_;
};

// What a remote count does when the server cannot answer.
enum class RemoteCountFallback {
  Throw,  // the error reaches the caller (the default)
  Local,  // the local count, PromptCount::estimate set and fallbackReason saying why
};

// Which server API counts.
enum class RemoteCountApi {
  AnthropicCountTokens,  // POST {base}/messages/count_tokens
  LlamaCppTokenize,      // POST {root}/apply-template, then {root}/tokenize
  GeminiCountTokens,     // POST {base}/models/{model}:countTokens
};

struct RemotePromptCounterOptions {
  // The endpoint: baseUrl, apiKey / apiKeyEnv, model (when a request names none), headers,
  // anthropicVersion, emptyToolCallContent, defaultParameters (thinking, chat_template_kwargs)
  // and the request writer's settings; its transport when set. Its timeouts, retries and caps
  // are not used: the ones below are.
  ClientOptions client;
  RemoteCountApi api = RemoteCountApi::AnthropicCountTokens;
  std::chrono::milliseconds timeout{5'000};   // a whole count (both requests), retries included
  int maxRetries = 1;                         // as the transport retries (429, >= 500, ...)
  size_t maxResponseBytes = size_t{8} << 20;  // each reply; a /tokenize list of 1M ids fits
  int64_t maxTokens = 4'000'000;              // a larger count (or token list) is a ProtocolError
  size_t cacheEntries = 64;                   // prompts remembered (LRU); 0: no cache
  RemoteCountFallback fallback = RemoteCountFallback::Throw;
  // The fallback's counter; null: TokenCounter().
  std::shared_ptr<const TokenCounter> localCounter;
  // llama.cpp /tokenize: add the model's BOS/EOS as a chat completion's prompt gets them.
  bool addSpecial = true;
};

class RemotePromptCounter final : public PromptCounter {
 public:
  // Throws ValidationError for unusable options (a timeout <= 0, a negative maxRetries, a cap of
  // 0, a base URL without http(s)://).
  explicit RemotePromptCounter(RemotePromptCounterOptions options);
  ~RemotePromptCounter() override;
  RemotePromptCounter(const RemotePromptCounter&) = delete;
  RemotePromptCounter& operator=(const RemotePromptCounter&) = delete;

  PromptCount count(const ChatRequest& request) const override;
  std::string_view name() const noexcept override;
  const RemotePromptCounterOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The counting API of a protocol: anthropic -> AnthropicCountTokens, openai-chat ->
// LlamaCppTokenize (llama.cpp's server; OpenAI's own API has no tokenizer route). ValidationError
// naming `field` for openai-responses, which has none parley speaks.
RemoteCountApi remoteCountApiFor(Protocol protocol, const std::string& field = "protocol");

// The counter an endpoint's settings ask for (ClientOptions::tokenCounting, the profile key
// `token_counting`): local, remote (errors thrown) or remote-or-local (falling back). `local`
// counts locally and is the remote one's fallback.
std::shared_ptr<const PromptCounter> makePromptCounter(
    const ClientOptions& options, std::shared_ptr<const TokenCounter> local = nullptr);

}  // namespace parley
