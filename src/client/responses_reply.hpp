// The OpenAI Responses reply reader: the stream's events (response.output_item.added/done,
// response.output_text.delta, response.function_call_arguments.delta/done, reasoning summary
// deltas, response.completed / incomplete / failed, error) or a whole response object, into the
// same ChatResult and StreamDeltas as Chat Completions. Knows nothing about HTTP.
//
// - message items -> content; function_call items -> tool calls whose id is the call_id (the id
//   a function_call_output answers), the item ids kept in extra["response_item_ids"];
// - reasoning items -> extra["reasoning_items"] unchanged (encrypted_content included) for the
//   next request, their summary text -> extra["reasoning_content"] and StreamDelta::reasoning;
// - finish: "tool_calls" when calls were made, else "stop"; an incomplete response's reason
//   max_output_tokens -> "length", others as reported;
// - usage: input_tokens (cached included), cached_tokens, reasoning_tokens (normalisedUsage()).
// An `error` event or response.failed is an HttpError; an unknown event type or a stream that
// ends before response.completed / response.incomplete is a ProtocolError.
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
