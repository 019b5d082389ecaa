// An LlmClient for the OpenAI Responses API: POST {baseUrl}/responses, streamed or not. The
// transcript stays in OpenAI chat shape; the client writes it as input items and reads the reply
// back into the same ChatResult. Stateless by default (`store: false`, encrypted reasoning
// included): the reasoning items of a reply are kept on the message (extra["reasoning_items"])
// and sent back on the next call, which reasoning models need across a tool loop.
//
// Thread-safety, retries and timeouts: as OpenAiClient (openai_client.hpp), over the same
// transport seam (ClientOptions::transport).
#pragma once

#include <memory>
#include <string>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley {

class ResponsesClient : public LlmClient {
 public:
  // Throws ValidationError for an unusable option.
  explicit ResponsesClient(ClientOptions options);
  ~ResponsesClient() override;
  ResponsesClient(const ResponsesClient&) = delete;
  ResponsesClient& operator=(const ResponsesClient&) = delete;

  ChatResult generate(const ChatRequest& request) override;
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) override;
  std::vector<ModelInfo> listModels(std::optional<std::chrono::milliseconds> timeout = {},
                                    std::stop_token stopToken = {}) override;

  const ClientOptions& options() const noexcept;
  StructuredOutputMode structuredOutputMode() const noexcept override;
  LlmEndpoint endpoint() const override;  // from the options: provider, host, port, model
  // The JSON body a call with `request` would send (for logs and tests; it carries no key).
  std::string requestBody(const ChatRequest& request, bool stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
