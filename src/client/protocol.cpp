#include "parley/protocol.hpp"

#include "parley/anthropic_client.hpp"
#include "parley/errors.hpp"
#include "parley/gemini_client.hpp"
#include "parley/responses_client.hpp"

namespace parley {

std::string_view toString(Protocol protocol) noexcept {
  switch (protocol) {
    case Protocol::OpenAiChat:
      return "openai-chat";
    case Protocol::OpenAiResponses:
      return "openai-responses";
    case Protocol::Anthropic:
      return "anthropic";
    case Protocol::Gemini:
      return "gemini";
  }
  return "openai-chat";
}

std::optional<Protocol> parseProtocol(std::string_view name) noexcept {
  for (Protocol p :
       {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic, Protocol::Gemini}) {
    if (toString(p) == name) return p;
  }
  return std::nullopt;
}

Protocol protocolFromString(std::string_view name, const std::string& field) {
  if (auto p = parseProtocol(name)) return *p;
  throw ValidationError(field, "unknown protocol \"" + std::string(name) +
                                   "\" (one of openai-chat, openai-responses, anthropic, gemini)");
}

std::shared_ptr<LlmClient> makeClient(ClientOptions options) {
  switch (options.protocol) {
    case Protocol::OpenAiResponses:
      return std::make_shared<ResponsesClient>(std::move(options));
    case Protocol::Anthropic:
      return std::make_shared<AnthropicClient>(std::move(options));
    case Protocol::Gemini:
      return std::make_shared<GeminiClient>(std::move(options));
    case Protocol::OpenAiChat:
      break;
  }
  return std::make_shared<OpenAiClient>(std::move(options));
}

}  // namespace parley
