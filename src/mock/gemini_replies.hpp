// The mock's Gemini protocol (POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent?alt=sse, also under /v1): the same script reply rendered as a Gemini
// GenerateContentResponse, whole or as SSE chunks, and a Gemini request read back into the chat
// shape the script matches on. Knows nothing about HTTP.
//
// What Gemini 3 refuses, the mock refuses too (ValidationError -> 400 INVALID_ARGUMENT): a
// functionCall of the current turn (the model turns after the last user text) whose first call
// part lost its thoughtSignature, and a thoughtSignature the mock did not issue (another
// provider's, or garbage), unless it is one of the validator-skipping values Google documents.
// The mock's replies carry a signature on their first functionCall part, and on a last empty text
// part when the reply thought but called nothing, as Gemini 3 does.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mock/chat_reply.hpp"

namespace parley::mock {

// The request as a chat completion request body for describeRequest(); `model` and `stream` come
// from the URL. Throws ValidationError naming the field for a request Gemini would refuse.
nlohmann::json chatRequestFromGemini(const nlohmann::json& body, const std::string& model,
                                     bool stream);

// The signature the mock gives the first functionCall part of a reply calling `name`.
std::string geminiCallSignature(std::string_view name);

// A whole GenerateContentResponse.
std::string geminiBody(const ConcreteReply& reply);
// Each complete SSE event ("data: {...}\n\n") of the streamed reply, in order; without the
// finishReason chunk when omitFinish. Stops early when `emit` returns false.
void forEachGeminiEvent(const ConcreteReply& reply, bool omitFinish,
                        const std::function<bool(std::string_view)>& emit);

// Google's error body: {"error": {"code", "message", "status"}}.
std::string geminiErrorBody(int code, const std::string& message);

// A models.list reply for `models` ({"models": [{"name": "models/<id>", ...}]}).
std::string geminiModelList(const std::vector<std::string>& models);

}  // namespace parley::mock
