// Unicode character classes for the BPE pre-tokenizers (internal).
//
// The split patterns of cl100k_base and o200k_base use \p{L}, \p{N}, \p{M}, letter subclasses
// and \s (the White_Space property). One byte of flags per code point answers all of them; the
// table is generated at build time from ICU's Unicode data (src/gen/char_class_gen.cpp), so the
// library itself does not link ICU. ASCII has its own small table: it is the hot path.
#pragma once

#include <cstdint>

namespace parley::detail {

inline constexpr uint8_t kClassLetter = 1;     // \p{L}
inline constexpr uint8_t kClassNumber = 2;     // \p{N}
inline constexpr uint8_t kClassSpace = 4;      // \s: White_Space
inline constexpr uint8_t kClassUpperish = 8;   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k)
inline constexpr uint8_t kClassLowerish = 16;  // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k)
inline constexpr uint8_t kClassMark = 32;      // \p{M}

inline constexpr int kCharClassBlockBits = 7;

// Two-stage table: kCharClassBlocks[cp >> 7] selects a 128-entry block in kCharClassData.
extern const uint16_t kCharClassBlocks[0x110000 >> kCharClassBlockBits];
extern const uint8_t kCharClassData[];
extern const char kCharClassUnicodeVersion[];

inline uint8_t charClass(uint32_t cp) {
  return kCharClassData[(static_cast<uint32_t>(kCharClassBlocks[cp >> kCharClassBlockBits])
                         << kCharClassBlockBits) |
                        (cp & ((1u << kCharClassBlockBits) - 1))];
}

}  // namespace parley::detail
