#include "parley/prompt_counter.hpp"

#include <algorithm>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/anthropic_request.hpp"
#include "client/gemini_request.hpp"
#include "client/http_transport.hpp"
#include "client/model_list.hpp"
#include "client/request_body.hpp"
#include "model/deadline.hpp"
#include "model/sha256.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"

namespace parley {

namespace {

using Clock = std::chrono::steady_clock;

// The fields of a Messages body that count_tokens takes (it refuses max_tokens, stream,
// temperature and the other generation settings).
constexpr std::string_view kCountTokensFields[] = {"model",       "system",   "messages",   "tools",
                                                   "tool_choice", "thinking", "mcp_servers"};

// The server's root for llama.cpp's own routes: the base URL without a trailing "/v1".
std::string serverRoot(std::string_view base) {
  while (!base.empty() && base.back() == '/')
    base.remove_suffix(1);
  if (base.size() >= 3 && base.substr(base.size() - 3) == "/v1") base.remove_suffix(3);
  return std::string(base);
}

TokenCount localCount(const ChatRequest& request, const TokenCounter& counter) {
  return countChatTokens(detail::requestMessages(request), request.tools, counter);
}

}  // namespace

// --- local --------------------------------------------------------------------------------------

LocalPromptCounter::LocalPromptCounter(std::shared_ptr<const TokenCounter> counter)
    : counter_(counter ? std::move(counter) : std::make_shared<const TokenCounter>()) {}

PromptCount LocalPromptCounter::count(const ChatRequest& request) const {
  const TokenCount local = localCount(request, *counter_);
  PromptCount out;
  out.tokens = local.tokens;
  out.estimate = local.estimate;
  return out;
}

// --- remote -------------------------------------------------------------------------------------

struct RemotePromptCounter::Impl {
  RemotePromptCounterOptions options;
  std::shared_ptr<HttpTransport> transport;
  std::shared_ptr<const TokenCounter> local;
  std::vector<std::string> headers;
  std::string countUrl;     // anthropic: {base}/messages/count_tokens (gemini: per model)
  std::string templateUrl;  // llama.cpp: {root}/apply-template
  std::string tokenizeUrl;  // llama.cpp: {root}/tokenize

  // The cache: digest of (url, body) -> tokens, most recently used first.
  mutable std::mutex mutex;
  mutable std::list<std::pair<std::string, int64_t>> recent;
  mutable std::unordered_map<std::string, std::list<std::pair<std::string, int64_t>>::iterator>
      cached;

  std::optional<int64_t> lookup(const std::string& key) const {
    if (options.cacheEntries == 0) return std::nullopt;
    std::lock_guard lock(mutex);
    auto it = cached.find(key);
    if (it == cached.end()) return std::nullopt;
    recent.splice(recent.begin(), recent, it->second);
    return it->second->second;
  }
  void remember(const std::string& key, int64_t tokens) const {
    if (options.cacheEntries == 0) return;
    std::lock_guard lock(mutex);
    if (auto it = cached.find(key); it != cached.end()) {
      it->second->second = tokens;
      recent.splice(recent.begin(), recent, it->second);
      return;
    }
    while (cached.size() >= options.cacheEntries) {
      cached.erase(recent.back().first);
      recent.pop_back();
    }
    recent.emplace_front(key, tokens);
    cached.emplace(key, recent.begin());
  }

  // POSTs `body` to `url` within what is left until `deadline`; the reply as JSON.
  nlohmann::json post(const std::string& url, const std::string& body, Clock::time_point deadline,
                      const std::stop_token& stop) const {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw TimeoutError("counting the prompt at " + redactUrl(url) + " took longer than " +
                         std::to_string(options.timeout.count()) + " ms");
    }
    detail::JsonReplyReader reader(redactUrl(url));
    transport->send(HttpRequest{url, body, headers, false, left, stop}, reader);
    return std::move(reader.value());
  }

  int64_t checkedCount(int64_t tokens, const std::string& url) const {
    if (tokens < 0) throw ProtocolError("the count from " + redactUrl(url) + " is negative");
    if (tokens > options.maxTokens) {
      throw ProtocolError("the count from " + redactUrl(url) + " (" + std::to_string(tokens) +
                          " tokens) is over the cap of " + std::to_string(options.maxTokens) +
                          " (RemotePromptCounterOptions::maxTokens)");
    }
    return tokens;
  }

  // The body of the first request; the cache key is made from it.
  std::string firstBody(const ChatRequest& request) const {
    if (options.api == RemoteCountApi::GeminiCountTokens) {
      // The whole generateContent request, so that the system instruction and the tools count.
      nlohmann::ordered_json inner =
          nlohmann::ordered_json::parse(detail::buildGeminiBody(request, options.client));
      std::string model = detail::requestModel(request, options.client);
      if (model.rfind("models/", 0) != 0) model = "models/" + model;
      nlohmann::ordered_json whole;
      whole["model"] = model;
      for (auto& [key, value] : inner.items())
        whole[key] = std::move(value);
      return nlohmann::ordered_json{{"generateContentRequest", std::move(whole)}}.dump();
    }
    if (options.api == RemoteCountApi::AnthropicCountTokens) {
      const nlohmann::ordered_json whole =
          nlohmann::ordered_json::parse(detail::buildAnthropicBody(request, options.client, false));
      nlohmann::ordered_json body = nlohmann::ordered_json::object();
      for (const auto& [key, value] : whole.items()) {
        for (std::string_view field : kCountTokensFields) {
          if (key == field) body[key] = value;
        }
      }
      return body.dump();
    }
    // llama.cpp renders the chat request with the model's template: the messages as a chat
    // completion carries them, the tools, and the template's own arguments if any are set.
    const MessageJsonOptions jsonOptions{options.client.emptyToolCallContent};
    std::string body = "{\"messages\":[";
    bool first = true;
    for (const auto& encoded : request.encodedMessages) {
      if (!encoded) throw ValidationError("request.encodedMessages", "holds a null message");
      if (!first) body += ',';
      body += *encoded;
      first = false;
    }
    for (const Message& m : request.messages) {
      if (!first) body += ',';
      body += encodeMessage(m, jsonOptions);
      first = false;
    }
    body += ']';
    if (request.tools.is_array() && !request.tools.empty()) {
      body += ",\"tools\":" + request.tools.dump();
    }
    for (const nlohmann::json* more : {&request.extra, &options.client.defaultParameters}) {
      if (auto it = more->find("chat_template_kwargs"); more->is_object() && it != more->end()) {
        body += ",\"chat_template_kwargs\":" + it->dump();
        break;
      }
    }
    body += '}';
    return body;
  }

  // The URL the first request goes to.
  std::string firstUrl(const ChatRequest& request) const {
    if (options.api == RemoteCountApi::GeminiCountTokens) {
      return detail::geminiUrl(request, options.client, detail::GeminiMethod::CountTokens);
    }
    return options.api == RemoteCountApi::AnthropicCountTokens ? countUrl : templateUrl;
  }

  int64_t askServer(const std::string& body, const ChatRequest& request) const {
    const Clock::time_point deadline = detail::deadlineAfter(Clock::now(), options.timeout);
    if (options.api == RemoteCountApi::GeminiCountTokens) {
      const std::string url = firstUrl(request);
      const nlohmann::json reply = post(url, body, deadline, request.stopToken);
      auto it = reply.find("totalTokens");
      if (!reply.is_object() || it == reply.end() || !it->is_number_integer()) {
        throw ProtocolError("the countTokens reply from " + redactUrl(url) +
                            " has no integer \"totalTokens\"");
      }
      return checkedCount(it->get<int64_t>(), url);
    }
    if (options.api == RemoteCountApi::AnthropicCountTokens) {
      const nlohmann::json reply = post(countUrl, body, deadline, request.stopToken);
      auto it = reply.find("input_tokens");
      if (!reply.is_object() || it == reply.end() || !it->is_number_integer()) {
        throw ProtocolError("the count_tokens reply from " + redactUrl(countUrl) +
                            " has no integer \"input_tokens\"");
      }
      return checkedCount(it->get<int64_t>(), countUrl);
    }
    const nlohmann::json rendered = post(templateUrl, body, deadline, request.stopToken);
    auto prompt = rendered.find("prompt");
    if (!rendered.is_object() || prompt == rendered.end() || !prompt->is_string()) {
      throw ProtocolError("the apply-template reply from " + redactUrl(templateUrl) +
                          " has no string \"prompt\"");
    }
    const std::string tokenizeBody = nlohmann::json{
        {"content", *prompt},
        {"add_special", options.addSpecial},
        {"parse_special", true},
        {"with_pieces", false}}.dump();
    const nlohmann::json reply = post(tokenizeUrl, tokenizeBody, deadline, request.stopToken);
    auto tokens = reply.find("tokens");
    if (!reply.is_object() || tokens == reply.end() || !tokens->is_array()) {
      throw ProtocolError("the tokenize reply from " + redactUrl(tokenizeUrl) +
                          " has no \"tokens\" array");
    }
    return checkedCount(static_cast<int64_t>(tokens->size()), tokenizeUrl);
  }
};

RemotePromptCounter::RemotePromptCounter(RemotePromptCounterOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (options.timeout.count() <= 0) {
    throw ValidationError("options.timeout", "must be > 0 ms");
  }
  if (options.maxRetries < 0) throw ValidationError("options.maxRetries", "must not be negative");
  if (options.maxResponseBytes == 0) {
    throw ValidationError("options.maxResponseBytes", "must be > 0");
  }
  if (options.maxTokens <= 0) throw ValidationError("options.maxTokens", "must be > 0");
  options.client = detail::checkedClientOptions(std::move(options.client));
  Impl& s = *impl_;
  s.options = std::move(options);
  const ClientOptions& c = s.options.client;
  s.local =
      s.options.localCounter ? s.options.localCounter : std::make_shared<const TokenCounter>();
  if (c.transport) {
    s.transport = c.transport;
  } else {
    HttpTransportOptions t;
    t.connectTimeout = std::min(c.connectTimeout, s.options.timeout);
    t.requestTimeout = s.options.timeout;
    t.maxRetries = s.options.maxRetries;
    t.maxResponseBytes = s.options.maxResponseBytes;
    t.maxEventBytes = s.options.maxResponseBytes;
    t.now = c.now;
    t.sleep = c.sleep;
    s.transport = makeCurlTransport(std::move(t));
  }
  if (c.apiKeyInQuery) s.transport = detail::keyInQueryTransport(std::move(s.transport));
  std::vector<std::string> own;
  if (s.options.api == RemoteCountApi::GeminiCountTokens) {
    if (!c.apiKey.empty()) own.push_back("x-goog-api-key: " + c.apiKey);
  } else if (s.options.api == RemoteCountApi::AnthropicCountTokens) {
    if (!c.apiKey.empty()) own.push_back("x-api-key: " + c.apiKey);
    own.push_back("anthropic-version: " + c.anthropicVersion);
    s.countUrl = detail::joinUrl(c.baseUrl, "/messages/count_tokens");
  } else {
    if (!c.apiKey.empty()) own.push_back("Authorization: Bearer " + c.apiKey);
    const std::string root = serverRoot(c.baseUrl);
    s.templateUrl = detail::joinUrl(root, "/apply-template");
    s.tokenizeUrl = detail::joinUrl(root, "/tokenize");
  }
  s.headers = detail::headerLines(std::move(own), c);
}

RemotePromptCounter::~RemotePromptCounter() = default;

const RemotePromptCounterOptions& RemotePromptCounter::options() const noexcept {
  return impl_->options;
}

std::string_view RemotePromptCounter::name() const noexcept {
  switch (impl_->options.api) {
    case RemoteCountApi::AnthropicCountTokens:
      return "anthropic count_tokens";
    case RemoteCountApi::GeminiCountTokens:
      return "gemini countTokens";
    case RemoteCountApi::LlamaCppTokenize:
      break;
  }
  return "llama.cpp tokenize";
}

PromptCount RemotePromptCounter::count(const ChatRequest& request) const {
  const Impl& s = *impl_;
  // A request that cannot be written is the caller's error, never a reason to fall back.
  const std::string body = s.firstBody(request);
  const std::string url = s.firstUrl(request);
  const std::string key = detail::sha256Hex(url + '\n' + body);
  PromptCount out;
  out.remote = true;
  if (auto hit = s.lookup(key)) {
    out.tokens = *hit;
    out.cached = true;
    return out;
  }
  try {
    out.tokens = s.askServer(body, request);
  } catch (const CancelledError&) {
    throw;  // the caller asked to stop: no count at all
  } catch (const Error& e) {
    if (s.options.fallback != RemoteCountFallback::Local) throw;
    const TokenCount local = localCount(request, *s.local);
    PromptCount fallback;
    fallback.tokens = local.tokens;
    fallback.estimate = true;
    fallback.fallbackReason = e.what();
    return fallback;
  }
  s.remember(key, out.tokens);
  return out;
}

RemoteCountApi remoteCountApiFor(Protocol protocol, const std::string& field) {
  switch (protocol) {
    case Protocol::Anthropic:
      return RemoteCountApi::AnthropicCountTokens;
    case Protocol::OpenAiChat:
      return RemoteCountApi::LlamaCppTokenize;
    case Protocol::Gemini:
      return RemoteCountApi::GeminiCountTokens;
    case Protocol::OpenAiResponses:
      break;
  }
  throw ValidationError(field,
                        "openai-responses has no counting route parley speaks; remote counting "
                        "is for anthropic (count_tokens), gemini (countTokens) and openai-chat "
                        "(llama.cpp /tokenize)");
}

std::shared_ptr<const PromptCounter> makePromptCounter(const ClientOptions& options,
                                                       std::shared_ptr<const TokenCounter> local) {
  if (options.tokenCounting == TokenCounting::Local) {
    return std::make_shared<const LocalPromptCounter>(std::move(local));
  }
  RemotePromptCounterOptions remote;
  remote.client = options;
  remote.client.transport = nullptr;  // the counter's own timeouts and caps
  remote.api = remoteCountApiFor(options.protocol, "token_counting");
  remote.fallback = options.tokenCounting == TokenCounting::RemoteOrLocal
                        ? RemoteCountFallback::Local
                        : RemoteCountFallback::Throw;
  remote.localCounter = std::move(local);
  return std::make_shared<const RemotePromptCounter>(std::move(remote));
}

}  // namespace parley
