#include "parley/openai_client.hpp"

#include "client/endpoint.hpp"
#include "client/http_transport.hpp"
#include "client/model_list.hpp"
#include "client/request_body.hpp"
#include "client/stream_assembler.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/telemetry.hpp"

namespace parley {

struct OpenAiClient::Impl {
  ClientOptions options;
  std::shared_ptr<HttpTransport> transport;
  std::string url;
  std::string embeddingsUrl;
  std::vector<std::string> headers;  // authorization and ClientOptions::headers

  ChatResult call(const ChatRequest& request, bool stream, const ChunkHandler* onChunk) {
    const std::string body = detail::buildRequestBody(request, options, stream);
    detail::ChatCompletionsReader reader(onChunk, stream);
    transport->send(HttpRequest{url, body, headers, stream, request.timeout, request.stopToken},
                    reader);
    return detail::withReplayedTime(std::move(reader.result()));
  }
};

OpenAiClient::OpenAiClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.protocol != Protocol::OpenAiChat) {
    throw ValidationError("options.protocol",
                          "OpenAiClient speaks openai-chat; makeClient() (protocol.hpp) builds the "
                          "client of another protocol");
  }
  impl_->options = detail::checkedClientOptions(std::move(options));
  const ClientOptions& o = impl_->options;
  impl_->transport = detail::transportFor(o);
  impl_->url = detail::joinUrl(o.baseUrl, "/chat/completions");
  impl_->embeddingsUrl = detail::joinUrl(o.baseUrl, "/embeddings");
  std::vector<std::string> own;
  if (!o.apiKey.empty()) own.push_back("Authorization: Bearer " + o.apiKey);
  impl_->headers = detail::headerLines(std::move(own), o);
}

OpenAiClient::~OpenAiClient() = default;

const ClientOptions& OpenAiClient::options() const noexcept {
  return impl_->options;
}

LlmEndpoint OpenAiClient::endpoint() const {
  return detail::endpointOf(options());
}

StructuredOutputMode OpenAiClient::structuredOutputMode() const noexcept {
  return options().structuredOutput;
}

MessageJsonOptions OpenAiClient::messageJsonOptions() const noexcept {
  return MessageJsonOptions{impl_->options.emptyToolCallContent};
}

std::string OpenAiClient::requestBody(const ChatRequest& request, bool stream) const {
  return detail::buildRequestBody(request, impl_->options, stream);
}

ChatResult OpenAiClient::generate(const ChatRequest& request) {
  return impl_->call(request, request.stream, nullptr);
}

ChatResult OpenAiClient::generateStream(const ChatRequest& request, const ChunkHandler& onChunk) {
  return impl_->call(request, true, &onChunk);
}

std::vector<ModelInfo> OpenAiClient::listModels(std::optional<std::chrono::milliseconds> timeout,
                                                std::stop_token stopToken) {
  return detail::listOpenAiModels(*impl_->transport, impl_->options.baseUrl, impl_->headers,
                                  timeout, std::move(stopToken));
}

EmbeddingResult OpenAiClient::createEmbeddings(const std::vector<std::string>& inputs,
                                               const std::string& model,
                                               std::optional<std::chrono::milliseconds> timeout,
                                               std::stop_token stopToken) {
  if (inputs.empty()) throw ValidationError("inputs", "must hold at least one text");
  if (model.empty()) throw ValidationError("model", "must name an embedding model");
  const std::string body =
      nlohmann::json{{"model", model}, {"input", inputs}, {"encoding_format", "float"}}.dump();
  // An `embeddings {model}` CLIENT span (the GenAI conventions; docs/telemetry.md).
  Span span("embeddings", model, SpanKind::Client);
  if (span.recording()) {
    const LlmEndpoint where = endpoint();
    span.set("gen_ai.operation.name", "embeddings");
    if (!where.provider.empty()) span.set("gen_ai.provider.name", where.provider);
    span.set("gen_ai.request.model", model);
    span.set("gen_ai.request.encoding_formats", std::vector<std::string>{"float"});
    if (!where.address.empty()) {
      span.set("server.address", where.address);
      if (where.port) span.set("server.port", where.port);
    }
  }
  detail::JsonReplyReader reader(redactUrl(impl_->embeddingsUrl));
  try {
    impl_->transport->send(HttpRequest{impl_->embeddingsUrl, body, impl_->headers, false, timeout,
                                       std::move(stopToken)},
                           reader);
  } catch (const std::exception& e) {
    span.setError(e);
    throw;
  }

  EmbeddingResult result;
  result.raw = std::move(reader.value());
  const nlohmann::json& data = result.raw.contains("data") ? result.raw["data"] : nlohmann::json();
  if (!data.is_array()) throw ProtocolError("the embeddings reply has no \"data\" array");
  result.embeddings.resize(data.size());
  for (const nlohmann::json& item : data) {
    const size_t index = item.value("index", size_t{0});
    const nlohmann::json* vector = item.contains("embedding") ? &item["embedding"] : nullptr;
    if (index >= data.size() || !vector || !vector->is_array()) {
      throw ProtocolError("the embeddings reply has a malformed item");
    }
    auto& values = result.embeddings[index];
    values.reserve(vector->size());
    for (const nlohmann::json& v : *vector) {
      if (!v.is_number()) throw ProtocolError("the embeddings reply has a non-numeric value");
      values.push_back(v.get<float>());
    }
  }
  if (auto usage = result.raw.find("usage"); usage != result.raw.end()) {
    result.usage = usageFromJson(*usage);
  }
  if (span.recording()) {
    if (!result.embeddings.empty()) {
      span.set("gen_ai.embeddings.dimension.count",
               static_cast<int64_t>(result.embeddings.front().size()));
    }
    if (result.usage) span.set("gen_ai.usage.input_tokens", result.usage->promptTokens);
    if (result.raw.contains("model") && result.raw["model"].is_string()) {
      span.set("gen_ai.response.model", result.raw["model"].get<std::string>());
    }
  }
  return result;
}

std::string redactUrl(std::string_view url) {
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const std::size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const std::size_t at = url.substr(start, end - start).rfind('@');
  std::string shown;
  if (at == std::string_view::npos) {
    shown = url;
  } else {
    shown.assign(url.substr(0, start));
    shown += "***";
    shown.append(url.substr(start + at));
  }
  const std::size_t query = shown.find('?');
  if (query == std::string::npos) return shown;
  const std::size_t fragment = std::min(shown.find('#', query), shown.size());
  std::string out = shown.substr(0, query + 1);
  std::string_view rest = std::string_view(shown).substr(query + 1, fragment - query - 1);
  while (true) {
    const std::size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const std::size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const bool secret = name == "key" || name == "api_key" || name == "apikey" ||
                        name == "access_token" || name == "token";
    if (secret && eq != std::string_view::npos) {
      out.append(name);
      out += "=***";
    } else {
      out.append(pair);
    }
    if (amp == std::string_view::npos) break;
    out += '&';
    rest.remove_prefix(amp + 1);
  }
  out.append(std::string_view(shown).substr(fragment));
  return out;
}

}  // namespace parley
