// trimBlanks(): a header value, a line or a field without the blanks around it. Internal to
// parley; the one trim of the library's HTTP readers and its schema shorthand.
//
// Blanks are space, tab, CR and LF: HTTP's optional whitespace plus the line end a header line
// keeps, and JSON's whitespace. Other control characters are content.
#pragma once

#include <string_view>

namespace parley::detail {

constexpr bool isBlank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

constexpr std::string_view trimBlanks(std::string_view text) {
  while (!text.empty() && isBlank(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && isBlank(text.back()))
    text.remove_suffix(1);
  return text;
}

}  // namespace parley::detail
