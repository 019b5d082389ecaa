// The wire protocols an endpoint may speak, by name, and the client for each: one LlmClient
// interface, so the loop, the executor, the facade, the stores and the CLI work the same over
// any of them.
//
//   "openai-chat"       OpenAiClient     POST {base}/chat/completions (the default)
//   "openai-responses"  ResponsesClient  POST {base}/responses
//   "anthropic"         AnthropicClient  POST {base}/messages
//   "gemini"            GeminiClient     POST {base}/models/{model}:generateContent
//
// Thread-safety: pure functions; the clients say their own.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley {

// "openai-chat", "openai-responses", "anthropic", "gemini".
std::string_view toString(Protocol protocol) noexcept;
// The protocol named `name`, or nullopt.
std::optional<Protocol> parseProtocol(std::string_view name) noexcept;
// As parseProtocol(), but an unknown name throws ValidationError naming `field` and the choices.
Protocol protocolFromString(std::string_view name, const std::string& field = "protocol");

// The client of options.protocol. Throws ValidationError for unusable options.
std::shared_ptr<LlmClient> makeClient(ClientOptions options);

}  // namespace parley
