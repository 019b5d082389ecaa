// The Anthropic Messages reply reader: the stream's events (message_start, with the blocks it may
// already hold; content_block_start/delta/stop; message_delta, message_stop, ping, error) or a
// whole message object, into the same ChatResult and StreamDeltas as Chat Completions. Knows
// nothing about HTTP.
//
// - text blocks -> content; tool_use blocks -> tool calls whose arguments are the
//   input_json_delta pieces joined, exactly as sent ("" -> "{}"), or the input given whole in
//   content_block_start / message_start;
// - thinking and redacted_thinking blocks -> extra["thinking_blocks"] unchanged (signature
//   included) for the next request, and the thinking text -> extra["reasoning_content"] and
//   StreamDelta::reasoning;
// - server_tool_use / mcp_tool_use blocks -> provider-run calls (StreamDelta::serverToolCalls,
//   never tool calls); they, their result blocks, blocks and deltas of any type parley does not
//   model, citations and a call's `caller` -> the content whole in extra["anthropic_content"]
//   (parley/server_tools.hpp), within kMaxReplyItems and kMaxServerToolResultBytes;
// - stop_reason end_turn / stop_sequence -> "stop", tool_use -> "tool_calls", max_tokens ->
//   "length", refusal -> "refusal" with extra["refusal"] the explanation, others as reported;
// - usage: prompt = input + cache reads + cache writes (normalisedUsage()), server_tool_use kept.
// An `error` event is an HttpError (overloaded_error as status 529, so it is retried while
// nothing has reached the caller); an unknown event type is skipped; a block index out of order
// or a stream without message_stop is a ProtocolError.
//
// Thread-safety: one assembler or reader per call.
#pragma once

#include <memory>
#include <string_view>

#include "client/event_stream_reader.hpp"
#include "parley/llm.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

class AnthropicAssembler {
 public:
  AnthropicAssembler();
  ~AnthropicAssembler();
  AnthropicAssembler(const AnthropicAssembler&) = delete;
  AnthropicAssembler& operator=(const AnthropicAssembler&) = delete;

  // Reads one event's data (the JSON object; its "type" names the event). Returns what it
  // added (reused by the next call). `status` is the HTTP status for an error event.
  const StreamDelta& addEvent(std::string_view data, int status = 200);
  bool sawStop() const noexcept;
  // The assembled reply; ProtocolError when message_stop never came. Call once.
  ChatResult finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A whole (non-streamed) message object as a ChatResult.
ChatResult resultFromAnthropicMessage(std::string_view body);

using AnthropicReader =
    EventStreamReader<AnthropicAssembler, &AnthropicAssembler::sawStop, resultFromAnthropicMessage>;

}  // namespace parley::detail
