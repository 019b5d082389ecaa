// Percent-encoding of a URL query value or form field (RFC 3986: every byte but the unreserved
// letters, digits, '-', '.', '_' and '~'). Shared by the model-list pager (client) and the MCP
// sign-in (tools). Internal to parley.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace parley::detail {

inline std::string percentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace parley::detail
