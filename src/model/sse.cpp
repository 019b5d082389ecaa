#include "parley/sse.hpp"

#include <cstring>

#include "parley/errors.hpp"

namespace parley {

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

bool allDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

SseDecoder::SseDecoder(Options options) : options_(options) {}

void SseDecoder::checkSize(size_t lineBytes) const {
  if (event_.data.size() + lineBytes > options_.maxEventBytes) {
    throw ProtocolError("event stream: an event is larger than the limit of " +
                        std::to_string(options_.maxEventBytes) + " bytes");
  }
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
  while (p < end) {
    const size_t n = static_cast<size_t>(end - p);
    const char* lf = static_cast<const char*>(std::memchr(p, '\n', n));
    const char* lineEnd = lf ? lf : end;
    const char* cr =
        static_cast<const char*>(std::memchr(p, '\r', static_cast<size_t>(lineEnd - p)));
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
  return keepGoing;
}

bool SseDecoder::processLine(std::string_view line, const EventHandler& onEvent) {
  if (line.empty()) {
    if (hasData_) return dispatch(onEvent);
    // A block without data dispatches nothing and resets the event type.
    event_.type = "message";
    event_.retry.reset();
    return true;
  }
  if (line.front() == ':') return true;  // comment, e.g. ": keep-alive"

  std::string_view field = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (hasData_) event_.data.push_back('\n');
    event_.data.append(value);
    hasData_ = true;
  } else if (field == "event") {
    event_.type.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) event_.lastEventId.assign(value);
  } else if (field == "retry") {
    if (allDigits(value)) event_.retry = std::stoll(std::string(value));
  }
  // Other fields are ignored, as the standard says.
  return true;
}

bool SseDecoder::dispatch(const EventHandler& onEvent) {
  if (event_.type.empty()) event_.type = "message";
  const bool keepGoing = onEvent(event_);
  event_.data.clear();
  event_.type = "message";
  event_.retry.reset();
  hasData_ = false;
  return keepGoing;
}

}  // namespace parley
