// Listing an endpoint's models (LlmClient::listModels), and the reader of a whole JSON reply it
// shares with the embeddings call. Internal to the client layer.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/llm.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

// Any JSON reply (not a stream), kept whole. `url` names the endpoint in errors (redacted).
class JsonReplyReader final : public HttpReplySink {
 public:
  explicit JsonReplyReader(std::string url) : url_(std::move(url)) {}
  void reset() override { value_ = nullptr; }
  bool onEvent(const SseEvent&, const HttpReplyInfo&) override { return true; }
  void onStreamEnd(const HttpReplyInfo&) override;
  bool streamComplete() const noexcept override { return false; }
  bool delivered() const noexcept override { return false; }
  void onBody(std::string_view body, const HttpReplyInfo&) override;
  nlohmann::json& value() noexcept { return value_; }

 private:
  std::string url_;
  nlohmann::json value_;
};

// A model list can be long (OpenRouter lists hundreds); more than this is a ProtocolError.
inline constexpr size_t kMaxListedModels = 10'000;

// GET {baseUrl}/models in the OpenAI format ({"data": [{"id", "owned_by", "created"}]}).
std::vector<ModelInfo> listOpenAiModels(HttpTransport& transport, const std::string& baseUrl,
                                        std::span<const std::string> headers,
                                        std::optional<std::chrono::milliseconds> timeout,
                                        std::stop_token stopToken);
// GET {baseUrl}/models?limit=1000 in Anthropic's format, page by page (has_more, last_id).
std::vector<ModelInfo> listAnthropicModels(HttpTransport& transport, const std::string& baseUrl,
                                           std::span<const std::string> headers,
                                           std::optional<std::chrono::milliseconds> timeout,
                                           std::stop_token stopToken);

// GET {baseUrl}/models?pageSize=1000 in Gemini's format ({"models": [{"name": "models/...",
// "displayName", ...}], "nextPageToken"}), page by page; ids without the "models/" prefix.
std::vector<ModelInfo> listGeminiModels(HttpTransport& transport, const std::string& baseUrl,
                                        std::span<const std::string> headers,
                                        std::optional<std::chrono::milliseconds> timeout,
                                        std::stop_token stopToken);

}  // namespace parley::detail
