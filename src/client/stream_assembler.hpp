// Turns chat.completion chunks (the data of stream events) into one assistant message, and a
// whole chat.completion body into the same ChatResult. Knows nothing about HTTP or SSE framing.
//
// Tolerates what servers really send (see the tests for each case):
// - tool-call deltas without `index` (matched by id, else they extend the last call), the same
//   index for parallel calls with different ids (Ollama: a new id starts a new call), missing
//   ids (generated: "call_" + 24 random characters), the name resent on every chunk (set once),
//   several calls in one delta, arguments sent as an object instead of text;
// - `reasoning_content` (or `reasoning`) kept apart from content, in extra["reasoning_content"];
// - chunks whose choices are empty or null (usage at the end, or nothing before the first delta);
// - finish_reason "stop" although tools were called: the tool calls decide ("tool_calls").
// Only choice 0 is assembled; other choices (n > 1) are ignored.
//
// Thread-safety: one assembler per stream.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

// The most tool calls one reply may carry (streamed or whole); past it the reply is a
// ProtocolError, so that a server cannot make a reply grow without bound in calls.
inline constexpr size_t kMaxToolCallsPerReply = 10'000;

class StreamAssembler {
 public:
  StreamAssembler();
  ~StreamAssembler();
  StreamAssembler(const StreamAssembler&) = delete;
  StreamAssembler& operator=(const StreamAssembler&) = delete;

  // Reads one chunk. Returns what it added (reused by the next call). Throws ProtocolError on
  // malformed JSON, HttpError when the chunk is an error object ({"error": {...}}; status is
  // the error's numeric code when it has one, else 0 for the caller to fill in).
  const StreamDelta& addChunk(std::string_view json);

  // The event data "[DONE]" arrived.
  void markDone() noexcept { done_ = true; }
  bool sawDone() const noexcept { return done_; }
  bool sawFinishReason() const noexcept { return !reportedFinishReason_.empty(); }
  // A chunk with something in it (text, reasoning, a tool call, usage) has been read.
  bool sawContent() const noexcept { return sawContent_; }

  // The assembled reply. Throws ProtocolError when the stream ended with neither "[DONE]" nor
  // a finish reason (it was cut short). Call once.
  ChatResult finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
  StreamDelta delta_;
  std::string reportedFinishReason_;
  bool done_ = false;
  bool sawContent_ = false;
};

// The Chat Completions reply reader on the transport: a stream's events through a
// StreamAssembler to `onChunk`, or a whole chat.completion body (handed to `onChunk` as one
// delta when the server ignored "stream"). One per call.
class ChatCompletionsReader final : public HttpReplySink {
 public:
  // `onChunk` may be null (generate() without streaming to a caller); it must outlive the call.
  ChatCompletionsReader(const ChunkHandler* onChunk, bool stream)
      : onChunk_(onChunk && *onChunk ? onChunk : nullptr), stream_(stream) {}

  void reset() override;
  bool onEvent(const SseEvent& event, const HttpReplyInfo& reply) override;
  void onStreamEnd(const HttpReplyInfo& reply) override;
  bool streamComplete() const noexcept override {
    return assembler_ && assembler_->sawFinishReason();
  }
  bool delivered() const noexcept override { return delivered_; }
  void onBody(std::string_view body, const HttpReplyInfo& reply) override;

  // The reply, once the transport's send() has returned.
  ChatResult& result() noexcept { return result_; }

 private:
  const ChunkHandler* onChunk_;
  bool stream_;
  bool delivered_ = false;
  std::unique_ptr<StreamAssembler> assembler_;
  ChatResult result_;
};

// Reads a whole (non-streamed) chat.completion body with the same tolerance: missing tool-call
// ids generated, empty arguments stored as "{}", finish reason normalised, content null or
// absent read as "". Throws ProtocolError if the body is not a chat.completion, HttpError if it
// is an error object.
ChatResult resultFromCompletion(std::string_view body);

// Hands a whole reply to `onChunk` as one delta (for a server that ignored "stream"). Throws
// CancelledError when the handler stops.
void deliverWhole(const ChatResult& result, const ChunkHandler& onChunk);

// A reply of any protocol as a chat.completion object (ChatResult::raw): id, object, created,
// model, choices[0] {message, finish_reason (the reported one)}, usage.
nlohmann::json completionObject(const ChatResult& result, int64_t created);

// Usage in the one meaning every protocol reports: `prompt` counts every input token, cached
// ones included; raw is OpenAI's shape with prompt_tokens_details.cached_tokens (cache reads),
// prompt_tokens_details.cache_creation_tokens (cache writes) and
// completion_tokens_details.reasoning_tokens; total = prompt + completion.
TokenUsage normalisedUsage(int64_t prompt, int64_t completion, int64_t cacheRead,
                           int64_t cacheWrite, int64_t reasoning);

// A tool-call id for a call the server sent without one: "call_" + 24 random [A-Za-z0-9].
std::string generateToolCallId();
// Gives a call whose id repeats an earlier call's of the same reply a generated id. Some
// servers' parsers repeat ids; two calls are two calls, and each must get its own result, which
// the API matches by id. Returns how many ids were replaced.
size_t makeToolCallIdsUnique(std::vector<ToolCall>& calls);

// The finish reason a reply reports: "tool_calls" when calls were collected and the server
// said "stop" or nothing; otherwise what the server said.
std::string normaliseFinishReason(const std::string& reported, bool hasToolCalls);

}  // namespace parley::detail
