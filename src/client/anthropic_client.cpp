#include "parley/anthropic_client.hpp"

#include "client/anthropic_reply.hpp"
#include "client/anthropic_request.hpp"
#include "client/endpoint.hpp"
#include "client/http_transport.hpp"
#include "client/model_list.hpp"
#include "parley/errors.hpp"

namespace parley {

struct AnthropicClient::Impl {
  ClientOptions options;
  std::shared_ptr<HttpTransport> transport;
  std::string url;
  std::vector<std::string> headers;

  ChatResult call(const ChatRequest& request, bool stream, const ChunkHandler* onChunk) {
    const std::string body = detail::buildAnthropicBody(request, options, stream);
    detail::AnthropicReader reader(onChunk, stream);
    transport->send(HttpRequest{url, body, headers, stream, request.timeout, request.stopToken},
                    reader);
    return detail::withReplayedTime(std::move(reader.result()));
  }
};

AnthropicClient::AnthropicClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  options.protocol = Protocol::Anthropic;
  impl_->options = detail::checkedClientOptions(std::move(options));
  const ClientOptions& o = impl_->options;
  if (o.defaultMaxTokens <= 0) {
    throw ValidationError("options.defaultMaxTokens", "must be > 0 (the API requires max_tokens)");
  }
  impl_->transport = detail::transportFor(o);
  impl_->url = detail::joinUrl(o.baseUrl, "/messages");
  std::vector<std::string> own;
  if (!o.apiKey.empty()) own.push_back("x-api-key: " + o.apiKey);
  own.push_back("anthropic-version: " + o.anthropicVersion);
  impl_->headers = detail::headerLines(std::move(own), o);
}

AnthropicClient::~AnthropicClient() = default;

const ClientOptions& AnthropicClient::options() const noexcept {
  return impl_->options;
}

LlmEndpoint AnthropicClient::endpoint() const {
  return detail::endpointOf(options());
}

StructuredOutputMode AnthropicClient::structuredOutputMode() const noexcept {
  return options().structuredOutput;
}

std::string AnthropicClient::requestBody(const ChatRequest& request, bool stream) const {
  return detail::buildAnthropicBody(request, impl_->options, stream);
}

ChatResult AnthropicClient::generate(const ChatRequest& request) {
  return impl_->call(request, request.stream, nullptr);
}

ChatResult AnthropicClient::generateStream(const ChatRequest& request,
                                           const ChunkHandler& onChunk) {
  return impl_->call(request, true, &onChunk);
}

std::vector<ModelInfo> AnthropicClient::listModels(std::optional<std::chrono::milliseconds> timeout,
                                                   std::stop_token stopToken) {
  return detail::listAnthropicModels(*impl_->transport, impl_->options.baseUrl, impl_->headers,
                                     timeout, std::move(stopToken));
}

}  // namespace parley
