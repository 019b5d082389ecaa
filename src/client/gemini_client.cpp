#include "parley/gemini_client.hpp"

#include "client/endpoint.hpp"
#include "client/gemini_reply.hpp"
#include "client/gemini_request.hpp"
#include "client/http_transport.hpp"
#include "client/model_list.hpp"

namespace parley {

struct GeminiClient::Impl {
  ClientOptions options;
  std::shared_ptr<HttpTransport> transport;
  std::vector<std::string> headers;

  ChatResult call(const ChatRequest& request, bool stream, const ChunkHandler* onChunk) {
    const std::string body = detail::buildGeminiBody(request, options);
    const std::string url = detail::geminiUrl(
        request, options, stream ? detail::GeminiMethod::Stream : detail::GeminiMethod::Generate);
    detail::GeminiReader reader(onChunk, stream);
    transport->send(HttpRequest{url, body, headers, stream, request.timeout, request.stopToken},
                    reader);
    return detail::withReplayedTime(std::move(reader.result()));
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
