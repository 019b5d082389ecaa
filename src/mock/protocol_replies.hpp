// The two other wire protocols the mock speaks, beside Chat Completions (chat_reply.hpp): the
// same script reply rendered as an Anthropic Messages reply (POST /v1/messages) or an OpenAI
// Responses reply (POST /v1/responses), streamed or not, and their requests read back into the
// chat shape the script matches on. Knows nothing about HTTP.
//
// What the real APIs refuse, the mock refuses too (ValidationError -> 400), so that clients are
// tested against it: an Anthropic request with thinking enabled whose last assistant turn made a
// tool call without its thinking block, or with a signature the mock did not issue; a Responses
// function_call item that came after reasoning (its id starts "fc_r_") sent back without that
// reasoning item and its encrypted content.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mock/chat_reply.hpp"

namespace parley::mock {

// An integer field of a request's object; 0 when absent or of another type (the protocols'
// optional counts).
inline int64_t num(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

enum class WireProtocol { Chat, Responses, Anthropic, Gemini };

// The request as a chat completion request body ({model, stream, stream_options, tools,
// messages}) for describeRequest(). Throws ValidationError naming the field for a request the
// API would refuse.
nlohmann::json chatRequestFromAnthropic(const nlohmann::json& body);
nlohmann::json chatRequestFromResponses(const nlohmann::json& body);

// The signature the mock gives a thinking block, and the encrypted content of a reasoning item.
std::string thinkingSignature(std::string_view thinking);
std::string encryptedReasoning(std::string_view summary);

// Whole replies.
std::string anthropicMessageBody(const ConcreteReply& reply);
std::string responsesBody(const ConcreteReply& reply);

// Each complete SSE event ("event: T\ndata: {...}\n\n") of the streamed reply, in order; without
// the final events (message_delta + message_stop, response.completed) when omitFinish. Stops
// early when `emit` returns false.
void forEachAnthropicEvent(const ConcreteReply& reply, bool omitFinish,
                           const std::function<bool(std::string_view)>& emit);
void forEachResponsesEvent(const ConcreteReply& reply, bool omitFinish,
                           const std::function<bool(std::string_view)>& emit);

// An in-stream error event in the protocol's shape.
std::string streamErrorEvent(WireProtocol protocol, const nlohmann::json& error);

}  // namespace parley::mock
