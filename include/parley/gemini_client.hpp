// An LlmClient for Google's Gemini API: POST {baseUrl}/models/{model}:generateContent, or
// :streamGenerateContent?alt=sse, with the `x-goog-api-key` header (baseUrl
// https://generativelanguage.googleapis.com/v1beta). The transcript stays in OpenAI chat shape;
// the client writes it the way the API wants it (systemInstruction, contents of user and model
// parts, functionResponse parts) and reads the reply back into the same ChatResult, the reply's
// parts kept on the message (extra["gemini_parts"]: thoughts and every thoughtSignature) and sent
// back exactly on the next call. docs/protocols.md, "Gemini", has the whole mapping.
// Usage: prompt_tokens counts every input token, cached ones included; completion_tokens
// includes the thinking tokens.
//
// Thread-safety, retries and timeouts: as OpenAiClient (openai_client.hpp), over the same
// transport seam (ClientOptions::transport).
#pragma once

#include <memory>
#include <string>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley {

// The Gemini API's base URL (the v1beta surface, where thinking and the newest fields are).
inline constexpr const char* kGeminiBaseUrl = "https://generativelanguage.googleapis.com/v1beta";

class GeminiClient : public LlmClient {
 public:
  // Throws ValidationError for an unusable option.
  explicit GeminiClient(ClientOptions options);
  ~GeminiClient() override;
  GeminiClient(const GeminiClient&) = delete;
  GeminiClient& operator=(const GeminiClient&) = delete;

  ChatResult generate(const ChatRequest& request) override;
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) override;
  // GET {base}/models (models.list), page by page; ids without the "models/" prefix.
  std::vector<ModelInfo> listModels(std::optional<std::chrono::milliseconds> timeout = {},
                                    std::stop_token stopToken = {}) override;

  const ClientOptions& options() const noexcept;
  StructuredOutputMode structuredOutputMode() const noexcept override;
  LlmEndpoint endpoint() const override;  // from the options: provider, host, port, model
  // The JSON body a call with `request` would send (for logs and tests; it carries no key).
  std::string requestBody(const ChatRequest& request) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
