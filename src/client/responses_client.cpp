#include "parley/responses_client.hpp"

#include "client/endpoint.hpp"
#include "client/http_transport.hpp"
#include "client/model_list.hpp"
#include "client/responses_reply.hpp"
#include "client/responses_request.hpp"

namespace parley {

struct ResponsesClient::Impl {
  ClientOptions options;
  std::shared_ptr<HttpTransport> transport;
  std::string url;
  std::vector<std::string> headers;

  ChatResult call(const ChatRequest& request, bool stream, const ChunkHandler* onChunk) {
    const std::string body = detail::buildResponsesBody(request, options, stream);
    detail::ResponsesReader reader(onChunk, stream);
    transport->send(HttpRequest{url, body, headers, stream, request.timeout, request.stopToken},
                    reader);
    return detail::withReplayedTime(std::move(reader.result()));
  }
};

ResponsesClient::ResponsesClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  options.protocol = Protocol::OpenAiResponses;
  impl_->options = detail::checkedClientOptions(std::move(options));
  const ClientOptions& o = impl_->options;
  impl_->transport = detail::transportFor(o);
  impl_->url = detail::joinUrl(o.baseUrl, "/responses");
  std::vector<std::string> own;
  if (!o.apiKey.empty()) own.push_back("Authorization: Bearer " + o.apiKey);
  impl_->headers = detail::headerLines(std::move(own), o);
}

ResponsesClient::~ResponsesClient() = default;

const ClientOptions& ResponsesClient::options() const noexcept {
  return impl_->options;
}

LlmEndpoint ResponsesClient::endpoint() const {
  return detail::endpointOf(options());
}

StructuredOutputMode ResponsesClient::structuredOutputMode() const noexcept {
  return options().structuredOutput;
}

std::string ResponsesClient::requestBody(const ChatRequest& request, bool stream) const {
  return detail::buildResponsesBody(request, impl_->options, stream);
}

ChatResult ResponsesClient::generate(const ChatRequest& request) {
  return impl_->call(request, request.stream, nullptr);
}

ChatResult ResponsesClient::generateStream(const ChatRequest& request,
                                           const ChunkHandler& onChunk) {
  return impl_->call(request, true, &onChunk);
}

std::vector<ModelInfo> ResponsesClient::listModels(std::optional<std::chrono::milliseconds> timeout,
                                                   std::stop_token stopToken) {
  return detail::listOpenAiModels(*impl_->transport, impl_->options.baseUrl, impl_->headers,
                                  timeout, std::move(stopToken));
}

}  // namespace parley
