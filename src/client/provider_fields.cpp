#include "client/provider_fields.hpp"

#include <algorithm>
#include <array>

namespace parley::detail {

namespace {

bool isDeepSeek(const ClientOptions& endpoint) {
  return endpoint.baseUrl.find("deepseek.com") != std::string::npos;
}

constexpr std::array kRules = {
    // DeepSeek answers 400 when an input message carries reasoning_content; other Chat
    // Completions servers (vLLM, Qwen, Kimi) take it back or ignore it.
    ProviderFieldRule{kReasoningContent, "https://api-docs.deepseek.com/guides/reasoning_model",
                      [](const ClientOptions& e) {
                        return e.protocol == Protocol::OpenAiChat && !isDeepSeek(e);
                      }},
    // OpenRouter wants reasoning_details back unchanged to continue a reasoning model's turn.
    ProviderFieldRule{
        kReasoningDetails,
        "https://openrouter.ai/docs/use-cases/reasoning-tokens#preserving-reasoning-blocks",
        [](const ClientOptions& e) { return e.protocol == Protocol::OpenAiChat; }},
    // Anthropic: thinking blocks go back unchanged, signature included, on the assistant turn
    // that made a tool call; other APIs do not know them.
    ProviderFieldRule{kThinkingBlocks,
                      "https://docs.anthropic.com/en/docs/build-with-claude/"
                      "extended-thinking#preserving-thinking-blocks",
                      [](const ClientOptions& e) { return e.protocol == Protocol::Anthropic; }},
    // OpenAI Responses: reasoning items (with encrypted_content when stateless) go back as
    // input items; Chat Completions has no place for them.
    ProviderFieldRule{
        kReasoningItems,
        "https://platform.openai.com/docs/guides/reasoning#keeping-reasoning-items-in-context",
        [](const ClientOptions& e) { return e.protocol == Protocol::OpenAiResponses; }},
    ProviderFieldRule{
        kResponseItemIds, "https://platform.openai.com/docs/api-reference/responses/create#input",
        [](const ClientOptions& e) { return e.protocol == Protocol::OpenAiResponses; }},
    // A reply's content as Anthropic sent it (provider-run tools and their results, citations,
    // compaction, a call's caller): back to Anthropic only, in order, signatures kept.
    ProviderFieldRule{kAnthropicContent,
                      "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/"
                      "web-search-tool#response",
                      [](const ClientOptions& e) { return e.protocol == Protocol::Anthropic; }},
    // A reply's output items as Responses sent them (provider-run tool items, and the reasoning
    // items they follow): back to Responses only, in order.
    ProviderFieldRule{
        kResponseOutput,
        "https://platform.openai.com/docs/guides/"
        "conversation-state#manually-manage-conversation-state",
        [](const ClientOptions& e) { return e.protocol == Protocol::OpenAiResponses; }},
    // Gemini: the parts go back exactly as they came (a thoughtSignature on the part that
    // carried it, thoughts included), or the next turn of a tool loop is refused with a 400;
    // other providers cannot read them.
    ProviderFieldRule{kGeminiParts, "https://ai.google.dev/gemini-api/docs/thought-signatures",
                      [](const ClientOptions& e) { return e.protocol == Protocol::Gemini; }},
    // Gemini's grounding, citations and safety ratings of a reply: nothing to send back.
    ProviderFieldRule{kGeminiMetadata, "https://ai.google.dev/api/generate-content#candidate",
                      [](const ClientOptions&) { return false; }},
    // The refusal details Anthropic gives (stop_details): nothing to send back anywhere.
    ProviderFieldRule{kStopDetails,
                      "https://docs.anthropic.com/en/api/messages#response-stop-details",
                      [](const ClientOptions&) { return false; }},
    // Breakpoints are Anthropic's; the Messages writer turns them into content-block
    // cache_control (OpenAI caches by prefix on its own).
    ProviderFieldRule{kCacheControl,
                      "https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching",
                      [](const ClientOptions& e) { return e.protocol == Protocol::Anthropic; }},
};

}  // namespace

std::span<const ProviderFieldRule> providerFieldRules() {
  return kRules;
}

bool sendsField(std::string_view key, const ClientOptions& endpoint) {
  auto it = std::find_if(kRules.begin(), kRules.end(),
                         [&](const ProviderFieldRule& r) { return r.key == key; });
  return it == kRules.end() || it->sentTo(endpoint);
}

std::vector<std::string_view> chatDroppedKeys(const ClientOptions& endpoint) {
  std::vector<std::string_view> keys;
  for (const ProviderFieldRule& rule : kRules) {
    if (!rule.sentTo(endpoint)) keys.push_back(rule.key);
  }
  return keys;
}

}  // namespace parley::detail
