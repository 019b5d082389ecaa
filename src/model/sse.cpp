#include "parley/sse.hpp"

#include <cstring>

#include "parley/errors.hpp"

namespace parley {

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// A field name against a literal, compared with a constant size so that it compiles to a load or
// two instead of a call (the decoder reads three lines per event).
template <size_t N>
bool fieldIs(std::string_view field, const char (&name)[N]) {
  return field.size() == N - 1 && std::memcmp(field.data(), name, N - 1) == 0;
}

// Sets `to` to `value` unless it holds it already: most streams repeat one event type.
void assignIfChanged(std::string& to, std::string_view value) {
  if (to != value) to.assign(value);
}

bool allDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

[[noreturn]] void throwTooLarge(size_t maxEventBytes) {
  throw ProtocolError("event stream: an event is larger than the limit of " +
                      std::to_string(maxEventBytes) + " bytes");
}

}  // namespace

SseDecoder::SseDecoder(Options options) : options_(options) {}

// Inline, as processLine's common cases: the decoder reads three lines per event, and calls cost
// more than the work (issue 42: the SSE decoding was a third of an Anthropic delta's cost).
inline void SseDecoder::checkSize(size_t lineBytes) const {
  if (event_.data.size() + lineBytes > options_.maxEventBytes) [[unlikely]]
    throwTooLarge(options_.maxEventBytes);
}

// The blank line, `data: ` and `event: ` (nearly every line of a stream) here; the rest in
// processOtherLine.
inline bool SseDecoder::processLine(std::string_view line, const EventHandler& onEvent) {
  if (line.empty()) {
    if (hasData_) return dispatch(onEvent);
    // A block without data dispatches nothing and resets the event type.
    hasType_ = false;
    event_.retry.reset();
    return true;
  }
  if (line.size() >= 6 && std::memcmp(line.data(), "data: ", 6) == 0) {
    if (hasData_) event_.data.push_back('\n');
    event_.data.append(line.data() + 6, line.size() - 6);
    hasData_ = true;
    return true;
  }
  if (line.size() >= 7 && std::memcmp(line.data(), "event: ", 7) == 0) {
    assignIfChanged(event_.type, line.substr(7));
    hasType_ = true;
    return true;
  }
  processOtherLine(line);
  return true;
}

bool SseDecoder::feed(std::string_view bytes, const EventHandler& onEvent) {
  // A leading BOM is stripped once; it may arrive split across pieces.
  if (!bomDone_) {
    while (!bytes.empty() && bomChecked_ < kBom.size() && bytes.front() == kBom[bomChecked_]) {
      ++bomChecked_;
      bytes.remove_prefix(1);
    }
    if (bomChecked_ == kBom.size()) {
      bomDone_ = true;
    } else if (!bytes.empty()) {
      // Not a BOM after all: the bytes matched so far are ordinary stream bytes.
      bomDone_ = true;
      if (bomChecked_ > 0 && !feed(kBom.substr(0, bomChecked_), onEvent)) return false;
    } else {
      return true;  // all bytes so far match the start of a BOM; wait for more
    }
  }

  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  if (skipLf_ && p < end) {
    skipLf_ = false;
    if (*p == '\n') ++p;
  }
  // The first CR at or after p, searched once per piece and again only after it is passed: most
  // streams have none, so each line costs one search (for its LF) instead of two.
  const char* nextCr = static_cast<const char*>(std::memchr(p, '\r', static_cast<size_t>(end - p)));
  while (p < end) {
    const size_t n = static_cast<size_t>(end - p);
    if (nextCr && nextCr < p) nextCr = static_cast<const char*>(std::memchr(p, '\r', n));
    // A blank line (an event's end) needs no search.
    const char* lf = *p == '\n' ? p : static_cast<const char*>(std::memchr(p, '\n', n));
    const char* lineEnd = lf ? lf : end;
    const char* cr = nextCr && nextCr < lineEnd ? nextCr : nullptr;
    if (cr) lineEnd = cr;
    if (!lf && !cr) {
      // No line ending in the rest of this piece: keep the partial line for the next feed().
      checkSize(line_.size() + n);
      line_.append(p, n);
      return true;
    }
    std::string_view piece(p, static_cast<size_t>(lineEnd - p));
    bool keepGoing;
    if (line_.empty()) {
      checkSize(piece.size());
      keepGoing = processLine(piece, onEvent);
    } else {
      checkSize(line_.size() + piece.size());
      line_.append(piece);
      keepGoing = processLine(line_, onEvent);
      line_.clear();
    }
    p = lineEnd + 1;
    if (*lineEnd == '\r') {
      if (p < end) {
        if (*p == '\n') ++p;
      } else {
        skipLf_ = true;  // a CRLF may be split across pieces
      }
    }
    if (!keepGoing) return false;
  }
  return true;
}

bool SseDecoder::finish(const EventHandler& onEvent) {
  line_.clear();  // an unterminated last line may be cut short: never trust it
  bool keepGoing = true;
  if (options_.dispatchPendingAtEnd && hasData_) keepGoing = dispatch(onEvent);
  event_.data.clear();
  event_.type = "message";
  event_.retry.reset();
  hasData_ = false;
  hasType_ = false;
  return keepGoing;
}

void SseDecoder::processOtherLine(std::string_view line) {
  if (line.front() == ':') return;  // comment, e.g. ": keep-alive"

  std::string_view field = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (fieldIs(field, "data")) {
    if (hasData_) event_.data.push_back('\n');
    event_.data.append(value);
    hasData_ = true;
  } else if (fieldIs(field, "event")) {
    assignIfChanged(event_.type, value);
    hasType_ = true;
  } else if (fieldIs(field, "id")) {
    if (value.find('\0') == std::string_view::npos) event_.lastEventId.assign(value);
  } else if (fieldIs(field, "retry")) {
    if (allDigits(value)) event_.retry = std::stoll(std::string(value));
  }
  // Other fields are ignored, as the standard says.
}

bool SseDecoder::dispatch(const EventHandler& onEvent) {
  // The type is set here rather than reset after each event, so that a stream naming every
  // event the same (Anthropic's) writes it once.
  if (!hasType_ || event_.type.empty()) assignIfChanged(event_.type, "message");
  const bool keepGoing = onEvent(event_);
  event_.data.clear();
  event_.retry.reset();
  hasData_ = false;
  hasType_ = false;
  return keepGoing;
}

}  // namespace parley
