#include "parley/json.hpp"

#include <algorithm>
#include <string>

#include "parley/errors.hpp"

namespace parley {

std::size_t findJsonTooDeep(std::string_view text, int maxDepth) noexcept {
  int depth = 0;
  const char* const begin = text.data();
  const char* const end = begin + text.size();
  for (const char* p = begin; p < end; ++p) {
    switch (*p) {
      case '"':
        // Skip the string: an escaped quote does not end it.
        for (++p; p < end && *p != '"'; ++p) {
          if (*p == '\\') ++p;
        }
        break;
      case '[':
      case '{':
        if (++depth > maxDepth) return static_cast<std::size_t>(p - begin);
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return std::string_view::npos;
}

namespace {

template <class Json>
Json parseBounded(std::string_view text, const JsonLimits& limits, bool allowExceptions) {
  const int maxDepth = std::max(1, limits.maxDepth);
  const std::size_t tooDeep = findJsonTooDeep(text, maxDepth);
  if (tooDeep != std::string_view::npos) {
    if (!allowExceptions) return Json(Json::value_t::discarded);
    throw ProtocolError("JSON nested deeper than " + std::to_string(maxDepth) +
                        " levels (at byte " + std::to_string(tooDeep) + ")");
  }
  if (!allowExceptions) return Json::parse(text, nullptr, false);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann prefixes "[json.exception.parse_error.101] ", which tells a reader nothing.
    std::string what = e.what();
    if (what.rfind("[json.exception.", 0) == 0) {
      if (auto close = what.find("] "); close != std::string::npos) what.erase(0, close + 2);
    }
    throw ProtocolError("not valid JSON: " + what);
  }
}

}  // namespace

nlohmann::json parseJson(std::string_view text, const JsonLimits& limits, bool allowExceptions) {
  return parseBounded<nlohmann::json>(text, limits, allowExceptions);
}

nlohmann::ordered_json parseOrderedJson(std::string_view text, const JsonLimits& limits,
                                        bool allowExceptions) {
  return parseBounded<nlohmann::ordered_json>(text, limits, allowExceptions);
}

}  // namespace parley
