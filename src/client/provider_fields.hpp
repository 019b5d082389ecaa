// What a provider sent on an assistant message that parley does not model but must keep: the
// reasoning and signatures thinking models need back on the next call (without them the second
// call of a tool loop fails with HTTP 400). They live in Message::extra under the keys below,
// so both stores keep them (the message JSON is opaque to the stores), and each protocol's
// request writer sends them back only where the rule table says: to the protocol that produced
// them, and never to a provider that rejects them.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "parley/openai_client.hpp"
#include "parley/server_tools.hpp"

namespace parley::detail {

// Reasoning text as Chat Completions servers send it (DeepSeek, vLLM, Qwen, ...); the other two
// protocols' readers fill it too, with their reasoning or thinking text, for display.
inline constexpr std::string_view kReasoningContent = "reasoning_content";
// OpenRouter's structured reasoning (Chat Completions), kept verbatim.
inline constexpr std::string_view kReasoningDetails = "reasoning_details";
// Anthropic's thinking blocks, in order: {"type": "thinking", "thinking", "signature"} and
// {"type": "redacted_thinking", "data"}.
inline constexpr std::string_view kThinkingBlocks = "thinking_blocks";
// OpenAI Responses reasoning items, verbatim ({"type": "reasoning", "id", "summary",
// "encrypted_content"}).
inline constexpr std::string_view kReasoningItems = "reasoning_items";
// OpenAI Responses item ids of the reply: {"message": "msg_...", "<call_id>": "fc_...", ...}.
inline constexpr std::string_view kResponseItemIds = "response_item_ids";
// An explicit prompt-cache breakpoint on a message (PromptCachePolicy::Mode::Explicit); its
// value is the cache_control object to send, or true for {"type": "ephemeral"}.
inline constexpr std::string_view kCacheControl = "cache_control";
// Anthropic's details of a refusal ({"type": "refusal", "category", "explanation", ...}).
inline constexpr std::string_view kStopDetails = "stop_details";
// Also kept (server_tools.hpp): kAnthropicContent, kResponseOutput and kGeminiParts, a reply's
// content whole, and kGeminiMetadata.

struct ProviderFieldRule {
  std::string_view key;   // in Message::extra
  std::string_view docs;  // the provider's documentation of the rule
  // Whether a request to `endpoint` carries the field back (in its protocol's shape).
  bool (*sentTo)(const ClientOptions& endpoint);
};

// Every rule, one per key above.
std::span<const ProviderFieldRule> providerFieldRules();

// Whether a request to `endpoint` carries `key` back; keys without a rule: true.
bool sendsField(std::string_view key, const ClientOptions& endpoint);

// The keys a Chat Completions request to `endpoint` leaves out of every message.
std::vector<std::string_view> chatDroppedKeys(const ClientOptions& endpoint);

}  // namespace parley::detail
