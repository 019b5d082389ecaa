// Turns a script reply into the bytes OpenAI sends: a chat.completion object, or the
// chat.completion.chunk events of a stream. Knows nothing about HTTP.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mock/script.hpp"

namespace parley::mock {

// A reply with every template expanded and every default decided.
struct ConcreteReply {
  struct Call {
    std::string id;
    std::string name;
    std::string arguments;  // JSON text
  };
  std::string id;
  std::string model;
  std::int64_t created = 0;
  std::optional<std::string> content;
  std::optional<std::string> reasoningContent;
  std::vector<Call> toolCalls;
  std::string finishReason;
  nlohmann::json usage;  // {"prompt_tokens", "completion_tokens", "total_tokens", ...}
  std::size_t chunkSize = 0;
  std::size_t argumentsChunkSize = 4;
};

ConcreteReply makeReply(const ReplySpec& spec, const ChatContext& ctx,
                        const std::vector<std::string>& groups, std::int64_t created);

// The non-streaming response body (a chat.completion object).
std::string completionBody(const ConcreteReply& reply);

// Calls `emit` with each complete SSE event ("data: {...}\n\n") of the stream, in order: the
// role delta, reasoning deltas, content deltas, tool-call deltas, the finish_reason chunk (unless
// omitFinish) and, when includeUsage, the usage chunk with empty choices. "[DONE]" is not
// included. Stops early when `emit` returns false.
void forEachStreamEvent(const ConcreteReply& reply, bool includeUsage, bool omitFinish,
                        const std::function<bool(std::string_view)>& emit);

// Splits UTF-8 text into pieces of about `size` bytes without cutting a character; size 0
// splits into words, each with the whitespace before it (as token streams do).
std::vector<std::string_view> splitPieces(std::string_view text, std::size_t size);

// Appends `text` as a JSON string literal (with quotes).
void appendJsonString(std::string& out, std::string_view text);

}  // namespace parley::mock
