// RFC 8785 (JCS): parley/canonical_json.hpp.
#include "parley/canonical_json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "parley/errors.hpp"

namespace parley {

namespace {

// The UTF-16 code units of a UTF-8 string: the order JCS sorts member names in (it differs from
// byte order for characters past U+FFFF against U+E000..U+FFFF). Throws on malformed UTF-8.
std::u16string jcsUtf16(const std::string& text) {
  std::u16string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = lead < 0x80         ? 1
                         : (lead >> 5) == 6  ? 2
                         : (lead >> 4) == 14 ? 3
                         : (lead >> 3) == 30 ? 4
                                             : 0;
    if (length == 0 || i + length > text.size())
      throw ValidationError("json", "a string that is not UTF-8 cannot be canonicalized");
    char32_t cp = length == 1 ? lead : lead & (0x7F >> length);
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80)
        throw ValidationError("json", "a string that is not UTF-8 cannot be canonicalized");
      cp = (cp << 6) | (next & 0x3F);
    }
    const bool overlong =
        (length == 2 && cp < 0x80) || (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      throw ValidationError("json", "a string that is not UTF-8 cannot be canonicalized");
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
    i += length;
  }
  return out;
}

void jcsString(const std::string& text, std::string& out) {
  jcsUtf16(text);  // checks it is UTF-8
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out.push_back(kHex[(c >> 4) & 0xF]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// ECMAScript's Number::toString for a finite double (ECMA-262, 6.1.6.1.20): the shortest digits
// that read back as the same double, placed as plain decimals from 1e-6 up to 1e21.
void jcsNumber(double value, std::string& out) {
  if (!std::isfinite(value))
    throw ValidationError("json", "a NaN or infinite number cannot be canonicalized");
  if (value == 0) {  // and -0
    out.push_back('0');
    return;
  }
  if (value < 0) {
    out.push_back('-');
    value = -value;
  }
  char buffer[64];
  const auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  if (ec != std::errc()) throw ValidationError("json", "a number that cannot be written");
  // buffer: d[.ddd]e±xx
  const std::string_view text(buffer, static_cast<std::size_t>(end - buffer));
  const std::size_t e = text.find('e');
  std::string digits;
  for (const char c : text.substr(0, e))
    if (c != '.') digits.push_back(c);
  int exponent = 0;
  std::from_chars(text.data() + e + (text[e + 1] == '+' ? 2 : 1), text.data() + text.size(),
                  exponent);
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // the decimal point's place after the first digit
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out.append(digits, 0, static_cast<std::size_t>(n));
    out.push_back('.');
    out.append(digits, static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-n), '0');
    out += digits;
  } else {
    out.push_back(digits[0]);
    if (k > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out.push_back('e');
    out.push_back(n - 1 < 0 ? '-' : '+');
    out += std::to_string(std::abs(n - 1));
  }
}

void jcsValue(const nlohmann::json& value, std::string& out) {
  switch (value.type()) {
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::u16string, const nlohmann::json::object_t::value_type*>> members;
      members.reserve(value.size());
      for (const auto& member : value.get_ref<const nlohmann::json::object_t&>())
        members.emplace_back(jcsUtf16(member.first), &member);
      std::sort(members.begin(), members.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out.push_back(',');
        jcsString(members[i].second->first, out);
        out.push_back(':');
        jcsValue(members[i].second->second, out);
      }
      out.push_back('}');
      break;
    }
    case nlohmann::json::value_t::array:
      out.push_back('[');
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out.push_back(',');
        jcsValue(value[i], out);
      }
      out.push_back(']');
      break;
    case nlohmann::json::value_t::string:
      jcsString(value.get_ref<const std::string&>(), out);
      break;
    case nlohmann::json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      break;
    case nlohmann::json::value_t::number_integer:
      jcsNumber(static_cast<double>(value.get<std::int64_t>()), out);
      break;
    case nlohmann::json::value_t::number_unsigned:
      jcsNumber(static_cast<double>(value.get<std::uint64_t>()), out);
      break;
    case nlohmann::json::value_t::number_float:
      jcsNumber(value.get<double>(), out);
      break;
    case nlohmann::json::value_t::null:
      out += "null";
      break;
    default:  // binary, discarded: not JSON
      throw ValidationError("json", "a value that is not JSON cannot be canonicalized");
  }
}

}  // namespace

std::string canonicalJson(const nlohmann::json& value) {
  std::string out;
  jcsValue(value, out);
  return out;
}

}  // namespace parley
