// The pre-tokenizers of cl100k_base and o200k_base, written by hand (internal).
//
// Each function returns where the piece starting at `pos` ends, exactly as tiktoken's regex
// (fancy-regex, leftmost-first alternation, backtracking) would match it. The input must be
// valid UTF-8 (Encoding sanitises it first). Patterns, from npm tiktoken's encoders/*.json:
//
// cl100k_base:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
//   |\s*[\r\n]+|\s+(?!\S)|\s+
// o200k_base:
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "tokens/char_class.hpp"

namespace parley::detail {

inline constexpr std::array<uint8_t, 128> kAsciiClass = [] {
  std::array<uint8_t, 128> t{};
  for (int c = 'A'; c <= 'Z'; ++c)
    t[c] = kClassLetter | kClassUpperish;
  for (int c = 'a'; c <= 'z'; ++c)
    t[c] = kClassLetter | kClassLowerish;
  for (int c = '0'; c <= '9'; ++c)
    t[c] = kClassNumber;
  for (char c : {'\t', '\n', '\v', '\f', '\r', ' '})
    t[static_cast<unsigned char>(c)] = kClassSpace;
  return t;
}();

struct CharInfo {
  uint8_t cls;
  uint8_t len;
};

// The class and byte length of the (valid UTF-8) character at p.
inline CharInfo charAt(const uint8_t* p) {
  uint8_t b = p[0];
  if (b < 0x80) return {kAsciiClass[b], 1};
  uint32_t cp;
  uint8_t len;
  if (b < 0xE0) {
    cp = ((b & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    len = 2;
  } else if (b < 0xF0) {
    cp = ((b & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    len = 3;
  } else {
    cp = ((b & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    len = 4;
  }
  return {charClass(cp), len};
}

inline bool isCrLf(uint8_t b) {
  return b == '\r' || b == '\n';
}

// End of the run of characters whose class has any bit of `mask`.
inline size_t scanClass(const uint8_t* s, size_t n, size_t pos, uint8_t mask) {
  while (pos < n) {
    uint8_t b = s[pos];
    if (b < 0x80) {
      if (!(kAsciiClass[b] & mask)) break;
      ++pos;
      continue;
    }
    CharInfo c = charAt(s + pos);
    if (!(c.cls & mask)) break;
    pos += c.len;
  }
  return pos;
}

// End of the run of characters whose class has no bit of `mask`.
inline size_t scanNotClass(const uint8_t* s, size_t n, size_t pos, uint8_t mask) {
  while (pos < n) {
    CharInfo c = charAt(s + pos);
    if (c.cls & mask) break;
    pos += c.len;
  }
  return pos;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d): the length matched at pos, or 0. Case-insensitive as Rust's
// regex folds case: besides ASCII case, 's' also matches U+017F LATIN SMALL LETTER LONG S.
inline size_t contractionLength(const uint8_t* s, size_t n, size_t pos) {
  if (pos + 1 >= n || s[pos] != '\'') return 0;
  auto lower = [](uint8_t c) -> uint8_t { return (c >= 'A' && c <= 'Z') ? c | 0x20 : c; };
  uint8_t c = lower(s[pos + 1]);
  switch (c) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return pos + 2 < n && lower(s[pos + 2]) == 'e' ? 3 : 0;
    case 'l':
      return pos + 2 < n && lower(s[pos + 2]) == 'l' ? 3 : 0;
    case 0xC5:
      return pos + 2 < n && s[pos + 2] == 0xBF ? 3 : 0;  // U+017F
    default:
      return 0;
  }
}

// \s*[\r\n]+ | \s+(?!\S) | \s+, for a piece starting with whitespace.
inline size_t whitespacePieceEnd(const uint8_t* s, size_t n, size_t pos) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t i = pos;
  size_t lastLineBreak = kNone;
  size_t lastStart = pos;
  while (i < n) {
    CharInfo c = charAt(s + i);
    if (!(c.cls & kClassSpace)) break;
    if (isCrLf(s[i])) lastLineBreak = i;
    lastStart = i;
    i += c.len;
  }
  if (lastLineBreak != kNone) return lastLineBreak + 1;  // \s*[\r\n]+ backtracks to the last one
  if (i == n) return n;
  if (lastStart > pos) return lastStart;  // \s+(?!\S): leave one space for the next word
  return i;                               // \s+
}

inline size_t cl100kPieceEnd(const uint8_t* s, size_t n, size_t pos) {
  if (size_t k = contractionLength(s, n, pos)) return pos + k;
  const uint8_t b0 = s[pos];
  const CharInfo c0 = charAt(s + pos);
  if (c0.cls & kClassLetter) return scanClass(s, n, pos, kClassLetter);
  if (c0.cls & kClassNumber) {
    size_t j = pos;
    for (int k = 0; k < 3 && j < n; ++k) {
      CharInfo c = charAt(s + j);
      if (!(c.cls & kClassNumber)) break;
      j += c.len;
    }
    return j;
  }
  // [^\r\n\p{L}\p{N}]\p{L}+
  if (!isCrLf(b0)) {
    size_t j = pos + c0.len;
    if (j < n && (charAt(s + j).cls & kClassLetter)) return scanClass(s, n, j, kClassLetter);
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  constexpr uint8_t kWordish = kClassSpace | kClassLetter | kClassNumber;
  size_t j = b0 == ' ' ? pos + 1 : pos;
  if (j < n && !(charAt(s + j).cls & kWordish)) {
    j = scanNotClass(s, n, j, kWordish);
    while (j < n && isCrLf(s[j]))
      ++j;
    return j;
  }
  return whitespacePieceEnd(s, n, pos);
}

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ from start, or kNone. The classes
// overlap; when the first run is not followed by a lower-ish character, the regex backtracks
// to the last lower-ish character inside it.
inline size_t o200kUpperLowerEnd(const uint8_t* s, size_t n, size_t start) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t u = start;
  size_t lastLowerEnd = kNone;
  while (u < n) {
    CharInfo c = charAt(s + u);
    if (!(c.cls & kClassUpperish)) break;
    u += c.len;
    if (c.cls & kClassLowerish) lastLowerEnd = u;
  }
  if (u < n && (charAt(s + u).cls & kClassLowerish)) return scanClass(s, n, u, kClassLowerish);
  return lastLowerEnd;
}

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]* from start, or kNone.
inline size_t o200kUpperThenLowerEnd(const uint8_t* s, size_t n, size_t start) {
  size_t u = scanClass(s, n, start, kClassUpperish);
  if (u == start) return static_cast<size_t>(-1);
  return scanClass(s, n, u, kClassLowerish);
}

inline size_t o200kPieceEnd(const uint8_t* s, size_t n, size_t pos) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  const uint8_t b0 = s[pos];
  const CharInfo c0 = charAt(s + pos);
  // Where the letter alternatives may start, in the order the regex tries them: after an
  // optional prefix character, then (a mark can be both) without it.
  size_t starts[2];
  int startCount = 0;
  const bool prefixable = !isCrLf(b0) && !(c0.cls & (kClassLetter | kClassNumber));
  if (prefixable && pos + c0.len < n) starts[startCount++] = pos + c0.len;
  if (c0.cls & (kClassUpperish | kClassLowerish)) starts[startCount++] = pos;
  for (int k = 0; k < startCount; ++k) {
    size_t e = o200kUpperLowerEnd(s, n, starts[k]);
    if (e != kNone) return e + contractionLength(s, n, e);
  }
  for (int k = 0; k < startCount; ++k) {
    size_t e = o200kUpperThenLowerEnd(s, n, starts[k]);
    if (e != kNone) return e + contractionLength(s, n, e);
  }
  if (c0.cls & kClassNumber) {
    size_t j = pos;
    for (int k = 0; k < 3 && j < n; ++k) {
      CharInfo c = charAt(s + j);
      if (!(c.cls & kClassNumber)) break;
      j += c.len;
    }
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
  constexpr uint8_t kWordish = kClassSpace | kClassLetter | kClassNumber;
  size_t j = b0 == ' ' ? pos + 1 : pos;
  if (j < n && !(charAt(s + j).cls & kWordish)) {
    j = scanNotClass(s, n, j, kWordish);
    while (j < n && (isCrLf(s[j]) || s[j] == '/'))
      ++j;
    return j;
  }
  return whitespacePieceEnd(s, n, pos);
}

}  // namespace parley::detail
