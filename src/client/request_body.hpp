// The JSON body of POST /chat/completions, written as text: messages are joined from their
// encodings (ChatRequest::encodedMessages as given, the rest encoded once here), the few other
// fields built as a small json value.
#pragma once

#include <string>
#include <vector>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

// Throws ValidationError naming the field for a request that cannot be sent (no model, no
// messages, bad tools, an `extra` that is not an object or tries to replace `messages`).
std::string buildRequestBody(const ChatRequest& request, const ClientOptions& options, bool stream);

// The whole transcript of a request as messages: ChatRequest::encodedMessages read back, then
// ChatRequest::messages. For the protocols whose wire shape is not OpenAI chat's. Throws
// ValidationError naming the message when the request cannot be sent.
std::vector<Message> requestMessages(const ChatRequest& request);

// The model a request names, else the client's; ValidationError when neither does.
const std::string& requestModel(const ChatRequest& request, const ClientOptions& options);

}  // namespace parley::detail
