// The Gemini reply reader: the GenerateContentResponse chunks of a `streamGenerateContent?alt=sse`
// stream, or one whole GenerateContentResponse, into the same ChatResult and StreamDeltas as the
// other protocols. Knows nothing about HTTP.
//
// - candidates[0].content.parts: text -> content; `thought: true` text -> reasoning
//   (extra["reasoning_content"], StreamDelta::reasoning); functionCall -> a tool call whose
//   arguments are `args` as written (its `id`, else a generated one); executableCode ->
//   a provider-run call (StreamDelta::serverToolCalls); any other part (inlineData,
//   codeExecutionResult, fileData, types yet to come) kept;
// - the parts themselves -> extra["gemini_parts"] whenever they hold more than the content and the
//   calls say (a thoughtSignature, a thought, an image, code, a call's id), consecutive text
//   pieces of a stream joined (a piece joins the one before while that one has no signature),
//   so that the next request sends them back exactly;
// - finishReason STOP -> "stop" ("tool_calls" with calls), MAX_TOKENS -> "length", the blocking
//   reasons (SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, IMAGE_SAFETY, ...) ->
//   "content_filter" with extra["refusal"] saying why; others lower-cased; the reason as sent in
//   ChatResult::reportedFinishReason; promptFeedback.blockReason (no candidates) -> a refusal;
// - usageMetadata: prompt = promptTokenCount + toolUsePromptTokenCount (cached included),
//   cached = cachedContentTokenCount, completion = candidatesTokenCount + thoughtsTokenCount,
//   reasoning = thoughtsTokenCount.
// An `error` object in a chunk is an HttpError; a stream without a finishReason is a
// ProtocolError; more than kMaxReplyItems parts, or a kept part over kMaxServerToolResultBytes,
// is a ProtocolError naming the cap.
//
// Thread-safety: one assembler or reader per call.
#pragma once

#include <memory>
#include <string_view>

#include "client/event_stream_reader.hpp"
#include "parley/llm.hpp"

namespace parley::detail {

class GeminiAssembler {
 public:
  GeminiAssembler();
  ~GeminiAssembler();
  GeminiAssembler(const GeminiAssembler&) = delete;
  GeminiAssembler& operator=(const GeminiAssembler&) = delete;

  // Reads one chunk (a GenerateContentResponse). Returns what it added (reused by the next call).
  // `status` is the HTTP status for an error chunk.
  const StreamDelta& addEvent(std::string_view data, int status = 200);
  // A finishReason (or a blocked prompt) has been read.
  bool sawStop() const noexcept;
  // The assembled reply; ProtocolError when no finishReason came. Call once.
  ChatResult finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A whole (non-streamed) GenerateContentResponse as a ChatResult.
ChatResult resultFromGeminiResponse(std::string_view body);

using GeminiReader =
    EventStreamReader<GeminiAssembler, &GeminiAssembler::sawStop, resultFromGeminiResponse>;

}  // namespace parley::detail
