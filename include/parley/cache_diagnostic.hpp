// CacheDiagnostic: how much of a provider's prompt cache the request about to be sent can reuse
// (docs/architecture.md, "Prompt caching").
//
// Providers cache the prompt of a request and serve a later request whose prompt begins with the
// same bytes at a fraction of the price (OpenAI, Anthropic, DeepSeek; llama.cpp and vLLM skip the
// prefill). Any edit of an early message throws that away. ConversationManager::diagnoseCache()
// compares the request about to be sent with the thread's previous one, message by message (a
// message kept in storage is the same bytes, so the comparison is mostly of indices), and says
// how long the common prefix is and where they first differ, before anything is sent. The
// provider's own figure comes back in the reply's usage (prompt_tokens_details.cached_tokens):
// compare the two after the call.
//
// Thread-safety: a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace parley {

struct CacheDiagnostic {
  // The previous request's prompt that the new one begins with: its messages' tokens (exact
  // counts with a vocabulary) and the bytes of their JSON.
  int64_t reusablePrefixTokens = 0;
  int64_t reusablePrefixBytes = 0;
  size_t reusableMessages = 0;  // how many messages that prefix holds
  // Where the new request first departs from the previous one; nullopt when it only appends to
  // it. `message` is the index in the new request's messages (nullopt when the tool definitions
  // changed, which comes before every message); `field` is the first of "role", "name",
  // "content", "tool_calls", "tool_call_id" that differs, or "removed" when the new request
  // stops before the previous one did.
  struct Difference {
    std::optional<size_t> message;
    std::string field;
  };
  std::optional<Difference> firstDifference;
};

// {"reusable_prefix_tokens": N, "reusable_prefix_bytes": B, "reusable_messages": M,
//  "first_difference": {"message": I or null, "field": "..."} or null}
nlohmann::json toJson(const CacheDiagnostic& diagnostic);

// The same comparison over two request bodies as JSON, in any protocol's shape: where `after`
// first departs from `before`. Checked in the order a prompt is built: "model" (the body's, or
// the /models/NAME of `beforeUrl`/`afterUrl` for Gemini), "tools" (tool order counts), the system
// prompt ("system", "instructions", "systemInstruction"), then message by message (the
// "messages", "input" or "contents" array: `message` is the index and `field` the first of
// role, name, content, tool_calls, tool_call_id, then any other key in order, that differs;
// "removed" / "added" when one array ends first), then the other keys (parameters:
// "temperature", ...). `field` may carry a path below the field ("content[1].image_url.url").
// nullopt when they are equal. Used by cassettes (cassette.hpp) to explain a miss.
std::optional<CacheDiagnostic::Difference> firstRequestDifference(const nlohmann::json& before,
                                                                  const nlohmann::json& after,
                                                                  const std::string& beforeUrl = {},
                                                                  const std::string& afterUrl = {});

}  // namespace parley
