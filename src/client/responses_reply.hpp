// The OpenAI Responses reply reader: the stream's events (response.output_item.added/done,
// response.output_text.delta, response.function_call_arguments.delta, reasoning deltas,
// provider-run tools' input deltas, response.completed / incomplete / failed, error) or a whole
// response object, into the same ChatResult and StreamDeltas as Chat Completions. Knows nothing
// about HTTP.
//
// - message items -> content; function_call items -> tool calls whose id is the call_id (the id
//   a function_call_output answers), the item ids kept in extra["response_item_ids"];
// - reasoning items -> extra["reasoning_items"] unchanged (encrypted_content included) for the
//   next request, their summary text -> extra["reasoning_content"] and StreamDelta::reasoning;
// - provider-run calls (web_search_call, code_interpreter_call, ...) -> StreamDelta::
//   serverToolCalls; when the reply holds any item beyond those three kinds, or them in another
//   order, the output whole -> extra["response_output"] (parley/server_tools.hpp), within
//   kMaxReplyItems and kMaxServerToolResultBytes;
// - finish: "tool_calls" when calls were made, else "stop"; an incomplete response's reason
//   max_output_tokens -> "length", others as reported;
// - usage: input_tokens (cached included), cached_tokens, reasoning_tokens (normalisedUsage()),
//   web searches counted in raw["server_tool_use"].
// An `error` event (flat or nested) or response.failed is an HttpError; other unknown events are
// skipped; a stream that ends before response.completed / response.incomplete is a
// ProtocolError.
//
// Thread-safety: one assembler or reader per call.
#pragma once

#include <memory>
#include <string_view>

#include "client/event_stream_reader.hpp"
#include "parley/llm.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

class ResponsesAssembler {
 public:
  ResponsesAssembler();
  ~ResponsesAssembler();
  ResponsesAssembler(const ResponsesAssembler&) = delete;
  ResponsesAssembler& operator=(const ResponsesAssembler&) = delete;

  // Reads one event's data (its "type" names the event). Returns what it added (reused by the
  // next call). `status` is the HTTP status for an error event.
  const StreamDelta& addEvent(std::string_view data, int status = 200);
  bool sawEnd() const noexcept;
  // The assembled reply; ProtocolError when the response never completed. Call once.
  ChatResult finish();

 private:
  friend ChatResult resultFromResponse(std::string_view body);
  struct State;
  std::unique_ptr<State> state_;
};

// A whole (non-streamed) response object as a ChatResult.
ChatResult resultFromResponse(std::string_view body);

using ResponsesReader =
    EventStreamReader<ResponsesAssembler, &ResponsesAssembler::sawEnd, resultFromResponse>;

}  // namespace parley::detail
