// The OpenAI Responses request writer: a ChatRequest as the body of POST {base}/responses.
//
// - system messages -> `instructions` (joined with blank lines);
// - user and assistant text -> `message` input items; assistant tool calls -> `function_call`
//   items (call_id = the tool call's id, the item id kept in extra["response_item_ids"]); tool
//   messages -> `function_call_output` items; reasoning items kept on a message
//   (extra["reasoning_items"], encrypted content included) go back unchanged before it;
// - stateless by default: `store: false` with `include: ["reasoning.encrypted_content"]`
//   (ClientOptions::responsesStore = true lets the server keep them instead);
// - tools -> flat function tools; max_tokens -> max_output_tokens; response_format ->
//   text.format; prompt_cache_key from ClientOptions::promptCacheKey.
// The same request always gives the same bytes.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

// Throws ValidationError naming the field for a request the API cannot take.
std::string buildResponsesBody(const ChatRequest& request, const ClientOptions& options,
                               bool stream);

}  // namespace parley::detail
