// A decoder for text/event-stream (Server-Sent Events, WHATWG HTML "event stream
// interpretation"). It knows nothing about OpenAI or HTTP: feed it bytes as they arrive, in
// pieces split anywhere (inside a line ending or a UTF-8 character too), and it calls back once
// per complete event.
//
// Handled: LF, CR and CRLF line endings (mixed too), a leading UTF-8 BOM, comment lines
// (": keep-alive"), "field:value" with or without the space after the colon, multi-line data
// (joined with "\n"), event/id/retry fields, unknown fields ignored, blank-line dispatch, and
// events without data not dispatched. Bytes are passed through as they came: validating UTF-8 is
// the job of whoever parses the data.
//
// Thread-safety: one decoder per stream; not safe for concurrent use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace parley {

struct SseEvent {
  std::string type = "message";  // the `event:` field, "message" when absent
  std::string data;              // the `data:` lines joined with "\n"
  std::string lastEventId;       // the last `id:` seen in the stream so far (it persists)
  std::optional<int64_t> retry;  // a valid `retry:` field seen in this event, in ms
};

class SseDecoder {
 public:
  struct Options {
    // Largest event (data, plus the line being read) before feed() throws ProtocolError.
    size_t maxEventBytes = size_t{8} << 20;
    // At finish(): dispatch an event whose lines are complete but whose blank line never came.
    // The standard discards it; some servers close right after "data: [DONE]\n". An unterminated
    // last line is always discarded (the connection may have broken inside it).
    bool dispatchPendingAtEnd = false;
  };

  // Called once per event. The event object is reused: copy what you keep. Return false to
  // stop: feed() then returns at once without reading further.
  using EventHandler = std::function<bool(const SseEvent&)>;

  SseDecoder() : SseDecoder(Options{}) {}
  explicit SseDecoder(Options options);

  // Feeds the next bytes of the stream. Returns false if the handler asked to stop.
  // Throws ProtocolError when an event passes maxEventBytes (nothing is dispatched for it).
  bool feed(std::string_view bytes, const EventHandler& onEvent);

  // The stream has ended. Returns false if the handler asked to stop.
  bool finish(const EventHandler& onEvent);

  // Bytes received and not yet part of a dispatched event (for diagnostics).
  size_t pendingBytes() const noexcept { return line_.size() + event_.data.size(); }

 private:
  bool processLine(std::string_view line, const EventHandler& onEvent);
  void processOtherLine(std::string_view line);  // not blank, `data: ` or `event: `
  bool dispatch(const EventHandler& onEvent);
  void checkSize(size_t lineBytes) const;

  Options options_;
  SseEvent event_;
  std::string line_;       // an incomplete line carried over from the previous feed()
  bool hasData_ = false;   // a data field was seen since the last dispatch
  bool hasType_ = false;   // an event field was seen since the last dispatch
  bool skipLf_ = false;    // the previous piece ended with CR: a leading LF belongs to it
  size_t bomChecked_ = 0;  // how many leading bytes were compared with the BOM so far
  bool bomDone_ = false;
};

}  // namespace parley
