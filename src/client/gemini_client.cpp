#include "parley/gemini_client.hpp"

#include "client/endpoint.hpp"
#include "client/gemini_cache.hpp"
#include "client/gemini_reply.hpp"
#include "client/gemini_request.hpp"
#include "client/http_transport.hpp"
#include "client/model_list.hpp"
#include "client/request_body.hpp"

namespace parley {

struct GeminiClient::Impl {
  ClientOptions options;
  std::shared_ptr<HttpTransport> transport;
  std::vector<std::string> headers;
  std::unique_ptr<detail::GeminiCaches> caches;  // PromptCachePolicy::Mode::Explicit only

  ChatResult call(const ChatRequest& request, bool stream, const ChunkHandler* onChunk) {
    const std::string whole = detail::buildGeminiBody(request, options);
    const std::string url = detail::geminiUrl(
        request, options, stream ? detail::GeminiMethod::Stream : detail::GeminiMethod::Generate);
    std::string cached;  // the cache the body names, "" when it goes whole
    std::string body;
    if (caches) {
      nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(whole);
      std::string model = detail::requestModel(request, options);
      if (model.rfind("models/", 0) == 0) model.erase(0, 7);
      cached = caches->apply(parsed, model, request.timeout, request.stopToken);
      if (!cached.empty()) body = parsed.dump();
    }
    auto send = [&](const std::string& text) {
      detail::GeminiReader reader(onChunk, stream);
      transport->send(HttpRequest{url, text, headers, stream, request.timeout, request.stopToken},
                      reader);
      return detail::withReplayedTime(std::move(reader.result()));
    };
    if (cached.empty()) return send(whole);
    try {
      return send(body);
    } catch (const HttpError& e) {
      // The cache is gone (its TTL ended early by the server's clock, or deleted elsewhere):
      // Google answers 403 (or 404) before any reply; the request goes again whole, once.
      if (e.status() != 403 && e.status() != 404) throw;
      caches->forget(cached);
      return send(whole);
    }
  }
};

GeminiClient::GeminiClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  options.protocol = Protocol::Gemini;
  impl_->options = detail::checkedClientOptions(std::move(options));
  const ClientOptions& o = impl_->options;
  impl_->transport = detail::transportFor(o);
  std::vector<std::string> own;
  if (!o.apiKey.empty()) own.push_back("x-goog-api-key: " + o.apiKey);
  impl_->headers = detail::headerLines(std::move(own), o);
  if (o.promptCache.mode == PromptCachePolicy::Mode::Explicit) {
    impl_->caches = std::make_unique<detail::GeminiCaches>(o, *impl_->transport, impl_->headers);
  }
}

GeminiClient::~GeminiClient() = default;

const ClientOptions& GeminiClient::options() const noexcept {
  return impl_->options;
}

LlmEndpoint GeminiClient::endpoint() const {
  return detail::endpointOf(options());
}

StructuredOutputMode GeminiClient::structuredOutputMode() const noexcept {
  return options().structuredOutput;
}

std::string GeminiClient::requestBody(const ChatRequest& request) const {
  return detail::buildGeminiBody(request, impl_->options);
}

ChatResult GeminiClient::generate(const ChatRequest& request) {
  return impl_->call(request, request.stream, nullptr);
}

ChatResult GeminiClient::generateStream(const ChatRequest& request, const ChunkHandler& onChunk) {
  return impl_->call(request, true, &onChunk);
}

std::vector<ModelInfo> GeminiClient::listModels(std::optional<std::chrono::milliseconds> timeout,
                                                std::stop_token stopToken) {
  return detail::listGeminiModels(*impl_->transport, impl_->options.baseUrl, impl_->headers,
                                  timeout, std::move(stopToken));
}

}  // namespace parley
