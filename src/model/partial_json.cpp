#include "model/partial_json.hpp"

#include <cctype>

#include "parley/errors.hpp"

namespace parley {

namespace {

bool isNumberChar(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' ||
         c == 'e' || c == 'E';
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool isJsonNumber(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
      ++i;
    return i > start;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

int hexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

PartialJson::PartialJson(PartialJsonLimits limits) : limits_(limits) {}

void PartialJson::fail(std::size_t at, const std::string& why) {
  broken_ = true;
  throw ProtocolError("partial JSON at byte " + std::to_string(at) + ": " + why);
}

bool PartialJson::append(std::string_view piece) {
  if (broken_) throw ProtocolError("partial JSON: the text before was already not JSON");
  if (text_.size() + piece.size() > limits_.maxBytes) {
    broken_ = true;
    throw ProtocolError("partial JSON: the answer is longer than its cap of " +
                        std::to_string(limits_.maxBytes) + " bytes");
  }
  const std::size_t before = good_;
  const bool hadGood = anyGood_;
  const std::size_t start = text_.size();
  text_.append(piece);
  for (std::size_t i = start; i < text_.size(); ++i)
    step(text_[i], i);
  return good_ != before || anyGood_ != hadGood;
}

void PartialJson::markGood(std::size_t end, bool inString) {
  good_ = end;
  anyGood_ = true;
  goodInString_ = inString;
  goodStack_ = stack_;
}

void PartialJson::valueDone(std::size_t end) {
  token_ = Token::None;
  expect_ = stack_.empty() ? Expect::Done : Expect::CommaOrEnd;
  markGood(end, false);
}

void PartialJson::stepString(unsigned char c, std::size_t at) {
  if (escape_ == 1) {
    if (c == 'u') {
      escape_ = 2;
      hex_ = 0;
      return;
    }
    if (highSurrogate_) fail(at, "a high surrogate \\u escape without its low half");
    if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' &&
        c != 't') {
      fail(at, "invalid escape");
    }
    escape_ = 0;
  } else if (escape_ >= 2) {
    const int h = hexValue(c);
    if (h < 0) fail(at, "invalid \\u escape");
    hex_ = hex_ * 16 + static_cast<unsigned>(h);
    if (++escape_ < 6) return;
    escape_ = 0;
    const bool high = hex_ >= 0xD800 && hex_ <= 0xDBFF;
    const bool low = hex_ >= 0xDC00 && hex_ <= 0xDFFF;
    if (highSurrogate_ != low) fail(at, "an unpaired surrogate \\u escape");
    highSurrogate_ = high;
  } else if (highSurrogate_ && c != '\\') {
    fail(at, "a high surrogate \\u escape without its low half");
  } else if (utf8Left_ > 0) {
    if ((c & 0xC0) != 0x80) fail(at, "invalid UTF-8");
    --utf8Left_;
  } else if (c == '\\') {
    escape_ = 1;
    return;
  } else if (c == '"') {
    token_ = Token::None;
    if (key_) {
      expect_ = Expect::Colon;
    } else {
      valueDone(at + 1);
    }
    return;
  } else if (c < 0x20) {
    fail(at, "a control character inside a string");
  } else if (c >= 0x80) {
    if (c >= 0xC2 && c <= 0xDF) {
      utf8Left_ = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      utf8Left_ = 2;
    } else if (c >= 0xF0 && c <= 0xF4) {
      utf8Left_ = 3;
    } else {
      fail(at, "invalid UTF-8");
    }
  }
  // A value's text so far can be shown once no escape or character is cut.
  if (!key_ && escape_ == 0 && utf8Left_ == 0 && !highSurrogate_) markGood(at + 1, true);
}

void PartialJson::step(char ch, std::size_t at) {
  const auto c = static_cast<unsigned char>(ch);
  if (token_ == Token::String) return stepString(c, at);
  if (token_ == Token::Number) {
    if (isNumberChar(ch)) {
      literal_ += ch;
      return;
    }
    if (!isJsonNumber(literal_)) fail(at, "invalid number \"" + literal_ + "\"");
    valueDone(at);  // the number ends before this character, which is read below
  } else if (token_ == Token::Literal) {
    literal_ += ch;
    for (std::string_view word : {"true", "false", "null"}) {
      if (word == literal_) return valueDone(at + 1);
      if (word.substr(0, literal_.size()) == literal_) return;
    }
    fail(at, "invalid literal \"" + literal_ + "\"");
  }
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return;
  const bool wantValue = expect_ == Expect::Value || expect_ == Expect::ValueOrEnd;
  switch (ch) {
    case '{':
    case '[':
      if (!wantValue) break;
      if (static_cast<int>(stack_.size()) >= limits_.maxDepth) {
        fail(at, "nested deeper than its cap of " + std::to_string(limits_.maxDepth));
      }
      stack_ += ch;
      expect_ = ch == '{' ? Expect::KeyOrEnd : Expect::ValueOrEnd;
      markGood(at + 1, false);
      return;
    case '}':
      if (stack_.empty() || stack_.back() != '{' ||
          (expect_ != Expect::KeyOrEnd && expect_ != Expect::CommaOrEnd)) {
        break;
      }
      stack_.pop_back();
      return valueDone(at + 1);
    case ']':
      if (stack_.empty() || stack_.back() != '[' ||
          (expect_ != Expect::ValueOrEnd && expect_ != Expect::CommaOrEnd)) {
        break;
      }
      stack_.pop_back();
      return valueDone(at + 1);
    case ',':
      if (expect_ != Expect::CommaOrEnd) break;
      expect_ = stack_.back() == '{' ? Expect::Key : Expect::Value;
      return;
    case ':':
      if (expect_ != Expect::Colon) break;
      expect_ = Expect::Value;
      return;
    case '"':
      if (expect_ == Expect::Key || expect_ == Expect::KeyOrEnd) {
        key_ = true;
      } else if (wantValue) {
        key_ = false;
        markGood(at + 1, true);
      } else {
        break;
      }
      token_ = Token::String;
      return;
    default:
      if (!wantValue) break;
      if (ch == '-' || std::isdigit(c)) {
        token_ = Token::Number;
        literal_.assign(1, ch);
        return;
      }
      if (ch == 't' || ch == 'f' || ch == 'n') {
        token_ = Token::Literal;
        literal_.assign(1, ch);
        return;
      }
      break;
  }
  fail(at, std::string("unexpected '") + ch + "'");
}

nlohmann::json PartialJson::current() const {
  if (!anyGood_) return nullptr;
  std::string closed = text_.substr(0, good_);
  if (goodInString_) closed += '"';
  for (auto it = goodStack_.rbegin(); it != goodStack_.rend(); ++it)
    closed += *it == '{' ? '}' : ']';
  try {
    return nlohmann::json::parse(closed);
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(std::string("partial JSON: ") + e.what());
  }
}

}  // namespace parley
