// An LlmClient for Anthropic's Messages API: POST {baseUrl}/messages, streamed or not, with the
// `x-api-key` and `anthropic-version` headers. The transcript stays in OpenAI chat shape; the
// client writes it the way the API wants it (system on top, tool results as user blocks, roles
// merged) and reads the reply back into the same ChatResult, thinking blocks and their
// signatures kept on the message (extra["thinking_blocks"]) and sent back on the next call.
// Usage: prompt_tokens counts every input token, cache reads and writes included.
//
// Thread-safety, retries and timeouts: as OpenAiClient (openai_client.hpp), over the same
// transport seam (ClientOptions::transport).
#pragma once

#include <memory>
#include <string>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley {

class AnthropicClient : public LlmClient {
 public:
  // Throws ValidationError for an unusable option.
  explicit AnthropicClient(ClientOptions options);
  ~AnthropicClient() override;
  AnthropicClient(const AnthropicClient&) = delete;
  AnthropicClient& operator=(const AnthropicClient&) = delete;

  ChatResult generate(const ChatRequest& request) override;
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) override;
  std::vector<ModelInfo> listModels(std::optional<std::chrono::milliseconds> timeout = {},
                                    std::stop_token stopToken = {}) override;

  const ClientOptions& options() const noexcept;
  StructuredOutputMode structuredOutputMode() const noexcept override;
  LlmEndpoint endpoint() const override;  // from the options: provider, host, port, model
  bool acceptsResponseFormat() const noexcept override { return false; }
  // The JSON body a call with `request` would send (for logs and tests; it carries no key).
  std::string requestBody(const ChatRequest& request, bool stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
