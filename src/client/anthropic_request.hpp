// The Anthropic Messages request writer: a ChatRequest (OpenAI-shaped transcript and tools) as
// the body of POST {base}/messages.
//
// - system messages -> the top-level `system` (text blocks, in order);
// - tool messages -> `tool_result` blocks in a user message; consecutive messages of one role
//   are merged into one, as the API requires;
// - assistant tool calls -> `tool_use` blocks whose `input` is the arguments object (its keys
//   in the order the model wrote them); thinking blocks kept on the message go first, unchanged;
// - OpenAI tools -> {name, description, input_schema}; tool_choice auto/none/required/{function}
//   -> auto/none/any/tool; parallel_tool_calls false -> disable_parallel_tool_use;
// - max_tokens from the request, else ClientOptions::defaultMaxTokens; stop -> stop_sequences;
// - cache_control breakpoints placed by ClientOptions::promptCache, at most 4.
// The same request always gives the same bytes (keys in a fixed order), so prompt caches hit.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

// The API's limit of cache_control breakpoints in one request.
inline constexpr int kMaxCacheBreakpoints = 4;

// Throws ValidationError naming the field for a request the API cannot take (no messages, only
// system messages, arguments that are not a JSON object, a response_format, more than 4 explicit
// cache breakpoints, ...).
std::string buildAnthropicBody(const ChatRequest& request, const ClientOptions& options,
                               bool stream);

}  // namespace parley::detail
