// PartialJson: a tolerant incremental JSON reader for answers that arrive in pieces (a streamed
// structured answer, docs/structured-output.md). After each piece, current() is the value so far,
// closed: an open string is closed, open arrays and objects are closed, and what cannot be
// closed yet is dropped (a key without its value, a number or literal not yet ended, a cut
// escape or UTF-8 sequence). Internal to parley.
//
// Each append() scans only the new bytes (O(piece)); current() parses the closed prefix
// (O(size so far)). Input that cannot be the beginning of a JSON text, or that goes past the
// caps, throws ProtocolError and leaves the reader broken (every later append throws too).
//
// Thread-safety: a value type; one reader per stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace parley {

struct PartialJsonLimits {
  std::size_t maxBytes = std::size_t{4} << 20;  // the whole text
  int maxDepth = 64;                            // arrays and objects open at once
};

class PartialJson {
 public:
  explicit PartialJson(PartialJsonLimits limits = {});

  // Reads `piece`. Returns true when more of the text can be shown; false means current() is
  // what it was (true may still give an equal value: a string or array just closed).
  // Throws ProtocolError naming the byte offset for text that is not JSON, a value past the
  // caps, or a reader already broken.
  bool append(std::string_view piece);
  // The value so far, closed; null before a value has begun.
  nlohmann::json current() const;
  // True once a whole value has been read (the rest may only be whitespace).
  bool complete() const noexcept { return expect_ == Expect::Done; }
  const std::string& text() const noexcept { return text_; }

 private:
  enum class Expect : std::uint8_t { Value, ValueOrEnd, Key, KeyOrEnd, Colon, CommaOrEnd, Done };
  enum class Token : std::uint8_t { None, String, Number, Literal };

  void step(char c, std::size_t at);
  void stepString(unsigned char c, std::size_t at);
  void valueDone(std::size_t end);
  void markGood(std::size_t end, bool inString);
  [[noreturn]] void fail(std::size_t at, const std::string& why);

  PartialJsonLimits limits_;
  std::string text_;
  std::string stack_;  // '{' and '[' open, innermost last
  Expect expect_ = Expect::Value;
  Token token_ = Token::None;
  bool key_ = false;            // the open string is an object key
  int escape_ = 0;              // 0: none; 1: after '\'; 2..5: reading the 4 hex digits of \u
  unsigned hex_ = 0;            // the \u value read so far
  bool highSurrogate_ = false;  // a \uD800-\uDBFF waits for its low half
  int utf8Left_ = 0;            // continuation bytes still due in the open string
  std::string literal_;         // the open number or literal
  bool broken_ = false;
  // The longest prefix that closes into valid JSON, and how to close it.
  std::size_t good_ = 0;
  bool anyGood_ = false;
  bool goodInString_ = false;
  std::string goodStack_;
};

}  // namespace parley
