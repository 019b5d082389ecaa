// An LlmClient for any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM,
// `parley mock`), over libcurl: POST {baseUrl}/chat/completions, streamed or not.
//
// Thread-safety: one OpenAiClient may be called from any number of threads at once. Each call
// borrows a connection (a libcurl handle with its connection cache) from a pool and returns it,
// so connections are reused across calls. The options are fixed at construction.
//
// The HTTP exchange itself is the transport's (parley/transport.hpp: a libcurl one unless
// ClientOptions::transport says otherwise). Retries follow the official SDKs: connection errors,
// timeouts, 408, 409, 429 and >= 500 are retried maxRetries times (an `x-should-retry:
// true|false` response header overrides), waiting `retry-after-ms`, `Retry-After` (seconds or an
// HTTP date) when the server says and that is at most 60 s, else min(0.5 s * 2^retry, 8 s) less
// up to 25 % jitter. A stream that has already delivered a chunk to onChunk is never retried.
//
// Timeouts: connectTimeout per connection attempt; requestTimeout for a whole non-streamed
// response; idleTimeout for the longest silence inside a stream; streamTimeout for a whole
// stream (so one that trickles a chunk a second still ends); ChatRequest::timeout for the
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

#include "parley/cassette.hpp"
#include "parley/llm.hpp"
#include "parley/message.hpp"
#include "parley/transport.hpp"

namespace parley {

// Which body field carries ChatRequest::maxTokens. OpenAI deprecated max_tokens (its reasoning
// models reject it); many other servers only know max_tokens.
enum class MaxTokensField { MaxCompletionTokens, MaxTokens };

// The wire protocol of an endpoint (protocol.hpp: names, makeClient()). The base URL ends in
// /v1 for the first three; requests go to {base}/chat/completions, {base}/responses,
// {base}/messages; Gemini's to {base}/models/{model}:generateContent (base .../v1beta).
enum class Protocol { OpenAiChat, OpenAiResponses, Anthropic, Gemini };

// How an endpoint's prompts are counted (prompt_counter.hpp, makePromptCounter(); the profile
// key `token_counting`): locally, by the server (a failure is an error), or by the server with
// the local count as the fallback (flagged as an estimate).
enum class TokenCounting { Local, Remote, RemoteOrLocal };
// "local", "remote", "remote-or-local".
const char* toString(TokenCounting counting) noexcept;
// The setting a name gives; ValidationError naming `field` for any other name.
TokenCounting tokenCountingFromString(const std::string& name, const std::string& field);

// Where Anthropic prompt-cache breakpoints (`cache_control`) go; the API takes at most 4.
struct PromptCachePolicy {
  enum class Mode {
    Off,        // none
    Automatic,  // the tools, the system prompt and the last `lastUserTurns` user messages
    Explicit,   // the messages whose extra holds "cache_control" (more than 4: ValidationError)
  };
  Mode mode = Mode::Automatic;
  int lastUserTurns = 2;  // Automatic; cut to what the limit of 4 leaves
  std::string ttl;        // "" = the API's default (5 minutes); "1h" asks for an hour
};

struct ClientOptions {
  Protocol protocol = Protocol::OpenAiChat;  // which client makeClient() builds
  // Taken as given; the protocol's path is appended. Shown in errors as redactUrl() shows it.
  std::string baseUrl = "https://api.openai.com/v1";
  // Sent as "Authorization: Bearer ..." (Anthropic: "x-api-key"); never logged; empty: no header.
  std::string apiKey;
  std::string apiKeyEnv;  // when apiKey is empty: read the key from this environment variable
  // Gemini: the key goes on the URL as `?key=...` instead of the x-goog-api-key header (for a
  // gateway that wants it there; the profile key `api_key_in_query`). Shown as `key=***`
  // wherever a URL is shown (redactUrl).
  bool apiKeyInQuery = false;
  std::string model;                           // used when ChatRequest::model is empty
  std::map<std::string, std::string> headers;  // extra request headers

  std::chrono::milliseconds connectTimeout{10'000};
  std::chrono::milliseconds requestTimeout{600'000};   // whole request, non-streaming calls
  std::chrono::milliseconds idleTimeout{120'000};      // longest silence inside a stream
  std::chrono::milliseconds streamTimeout{1'800'000};  // a whole stream, however lively
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

  // Anthropic Messages. max_tokens is required there: this is sent when ChatRequest::maxTokens
  // is unset.
  int64_t defaultMaxTokens = 4096;
  std::string anthropicVersion = "2023-06-01";  // the anthropic-version header
  PromptCachePolicy promptCache;
  // OpenAI (both protocols): `prompt_cache_key`, sent when not empty.
  std::string promptCacheKey;
  // OpenAI Responses: false (the default) sends `store: false` and asks for the reasoning's
  // encrypted content, so each request carries its whole history; true lets the server keep
  // responses (then ChatRequest::extra may name a "previous_response_id").
  bool responsesStore = false;
  // How runStructured() asks this endpoint for JSON (llm.hpp, docs/structured-output.md); the
  // profile key `structured_output`: "auto" (the default), "json_schema", "json_object", "tool".
  StructuredOutputMode structuredOutput = StructuredOutputMode::Auto;
  // How prompts for this endpoint are counted (the token-limit check, budgets, `parley tokens`).
  TokenCounting tokenCounting = TokenCounting::Local;

  // Seams for tests. `now` is the wall clock used to read Retry-After dates. `sleep` waits
  // between retries and must return early (without throwing) once the stop token is stopped.
  // Empty: the real clock; a sleep that wakes on cancellation.
  std::function<std::chrono::system_clock::time_point()> now;
  std::function<void(std::chrono::milliseconds, std::stop_token)> sleep;

  // The HTTP transport calls go through. Empty: a libcurl transport made from the timeouts,
  // retries, caps and seams above (which an injected transport does not read). Shared: clients
  // given the same transport share its connections.
  std::shared_ptr<HttpTransport> transport;
  // Record or replay the traffic (cassette.hpp, docs/cassettes.md): the transport above (or the
  // libcurl one) is wrapped by a cassette transport. nullopt: $PARLEY_CASSETTES when set.
  std::optional<CassetteOptions> cassettes;
};

// `url` as it may be shown (errors, logs, a terminal): its user-info, which can hold a key
// ("http://user:KEY@host/v1"), becomes "***" ("http://***@host/v1"), and so does the value of a
// query parameter that holds one (key, api_key, apikey, access_token, token: "?key=***").
// Anything else is kept.
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
  StructuredOutputMode structuredOutputMode() const noexcept override;
  LlmEndpoint endpoint() const override;  // from the options: provider, host, port, model
  // The options an encodeMessage() caller must use for ChatRequest::encodedMessages.
  MessageJsonOptions messageJsonOptions() const noexcept override;
  std::vector<ModelInfo> listModels(std::optional<std::chrono::milliseconds> timeout = {},
                                    std::stop_token stopToken = {}) override;

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
