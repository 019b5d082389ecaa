// Provider-run tools: the calls a provider makes itself within one reply (Anthropic's
// server_tool_use and mcp_tool_use blocks and their *_tool_result blocks; OpenAI Responses'
// web_search_call, file_search_call, code_interpreter_call, image_generation_call, mcp_call, ...
// items), and the content of a reply parley does not model, kept as the provider sent it
// (docs/protocols.md, "Provider-run tools").
//
// Such a reply keeps its provider's content whole and in order in Message::extra (the keys
// below), so the stores keep it as they keep any message, and the protocol that made it gets it
// back on the next turn in exactly the shape and order it requires (signatures, encrypted
// content and all). serverToolCallsOf() is the typed view of it. parley never runs these calls:
// they are not Message::toolCalls, and a stream's StreamDelta::serverToolCalls reports them apart
// from client tool calls.
//
// Thread-safety: constants, values and pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley {

struct Message;
struct Part;

// Message::extra key: an Anthropic reply's content blocks, in order, as the API would return
// them unstreamed (tool inputs as objects, streamed deltas joined). Kept when a reply holds a
// block beyond text, client tool_use and thinking (or a tool_use with a `caller`); sent back to
// the Anthropic protocol only, in place of the blocks rebuilt from the message.
inline constexpr std::string_view kAnthropicContent = "anthropic_content";
// Message::extra key: a Responses reply's output items, in order, as response.output_item.done
// gave them. Kept when a reply holds an item beyond message, function_call and reasoning; sent
// back to the Responses protocol only, in place of the items rebuilt from the message.
inline constexpr std::string_view kResponseOutput = "response_output";

// Message::extra key: a Gemini reply's parts as sent (thought parts, every thoughtSignature,
// code and its results, images, a call's id), when they say more than the content and the
// calls; sent back to the Gemini protocol only, exactly as they came.
inline constexpr std::string_view kGeminiParts = "gemini_parts";
// Message::extra key: what Gemini said about its reply beside the parts, as it sent it (the last
// value of each field in a stream): `groundingMetadata` (the web searches run for the reply,
// its sources and which text each supports), `urlContextMetadata`, `citationMetadata` and
// `safetyRatings`. For display and billing (webSearchCount); never sent back to any protocol.
inline constexpr std::string_view kGeminiMetadata = "gemini_metadata";

// The caps on what a reply may carry beyond text and client tool calls. Past either the reply is
// a ProtocolError naming the cap (docs/protocols.md, "Provider-run tools").
// Content blocks or output items in one reply.
inline constexpr std::size_t kMaxReplyItems = 1024;
// One provider-run tool's input or result (a fetched page, a generated image) or one item or
// block parley does not model, in bytes of JSON text.
inline constexpr std::size_t kMaxServerToolResultBytes = std::size_t{16} << 20;

struct ServerToolCall {
  std::string id;         // the block's or item's id
  std::string name;       // Anthropic: the tool's name ("web_search"); Responses: the item type
                          // less "_call" ("web_search", "code_interpreter", "mcp")
  std::string input;      // JSON text of what it was given (query, URL, code, arguments); "{}"
  nlohmann::json result;  // Anthropic: the *_tool_result block; Responses: the whole item
  std::string status;     // Responses: the item's status ("completed", "failed", ...)

  bool operator==(const ServerToolCall&) const = default;
};

// The provider-run tool calls of an assistant message, in order (none for any other message).
std::vector<ServerToolCall> serverToolCallsOf(const Message& message);

// Whether an assistant message keeps its provider's content whole (kAnthropicContent or
// kResponseOutput): such a reply is a reply even with no text and no client tool call (an image
// generated, a patch to apply, a search whose answer comes next turn).
bool hasProviderContent(const Message& message);

// The images the provider generated for the message's reply, in order, as image parts (bytes
// and MIME type): Gemini's inlineData image parts (not its thoughts) and Responses'
// image_generation_call results. Empty for any other message. Content that does not decode is
// skipped: the reply itself keeps it as sent.
std::vector<Part> generatedImagesOf(const Message& message);

// How many web searches the provider ran for the message's reply (each is billed per call):
// Anthropic's and Responses' web_search calls, and the queries of Gemini's grounding with
// Google Search (groundingMetadata.webSearchQueries).
std::size_t webSearchCount(const Message& message);

}  // namespace parley
