#include "parley/cache_diagnostic.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

namespace parley {

namespace {

using nlohmann::json;

// The fields of a message in the order the diagnostic names them (ConversationManager's
// comparison of two messages), then any other key.
constexpr std::array<std::string_view, 5> kMessageFields = {"role", "name", "content", "tool_calls",
                                                            "tool_call_id"};
constexpr std::array<std::string_view, 3> kMessageArrays = {"messages", "input", "contents"};
constexpr std::array<std::string_view, 3> kSystemFields = {"system", "instructions",
                                                           "systemInstruction"};

// The path below two unequal values to the first place they differ ("" at the values
// themselves): objects key by key (sorted), arrays index by index.
std::string diagnosticPathBelow(const json& a, const json& b) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const auto other = b.find(key);
      if (other == b.end()) return "." + key;
      if (*other != value) return "." + key + diagnosticPathBelow(value, *other);
    }
    for (const auto& [key, value] : b.items()) {
      if (!a.contains(key)) return "." + key;
    }
    return {};
  }
  if (a.is_array() && b.is_array()) {
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return "[" + std::to_string(i) + "]" + diagnosticPathBelow(a[i], b[i]);
    }
    return "[" + std::to_string(n) + "]";
  }
  return {};
}

const json& memberOrNull(const json& object, std::string_view key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(std::string(key));
  return it == object.end() ? kNull : *it;
}

// The model a Gemini URL names (".../models/NAME:generateContent"), "" for other URLs.
std::string_view urlModel(std::string_view url) {
  const size_t at = url.find("/models/");
  if (at == std::string_view::npos) return {};
  std::string_view rest = url.substr(at + 8);
  return rest.substr(0, rest.find_first_of(":?/"));
}

std::string messageFieldDifference(const json& before, const json& after) {
  if (!before.is_object() || !after.is_object()) return "content";
  for (std::string_view field : kMessageFields) {
    const json& a = memberOrNull(before, field);
    const json& b = memberOrNull(after, field);
    if (a != b) return std::string(field) + diagnosticPathBelow(a, b);
  }
  const std::string path = diagnosticPathBelow(before, after);
  return path.empty() ? std::string("content") : path.substr(1);
}

}  // namespace

std::optional<CacheDiagnostic::Difference> firstRequestDifference(const json& before,
                                                                  const json& after,
                                                                  const std::string& beforeUrl,
                                                                  const std::string& afterUrl) {
  using Difference = CacheDiagnostic::Difference;
  if (memberOrNull(before, "model") != memberOrNull(after, "model") ||
      urlModel(beforeUrl) != urlModel(afterUrl)) {
    return Difference{std::nullopt, "model"};
  }
  if (memberOrNull(before, "tools") != memberOrNull(after, "tools")) {
    const json& a = memberOrNull(before, "tools");
    const json& b = memberOrNull(after, "tools");
    return Difference{std::nullopt, "tools" + diagnosticPathBelow(a, b)};
  }
  for (std::string_view field : kSystemFields) {
    const json& a = memberOrNull(before, field);
    const json& b = memberOrNull(after, field);
    if (a != b) return Difference{std::nullopt, std::string(field) + diagnosticPathBelow(a, b)};
  }
  for (std::string_view field : kMessageArrays) {
    const json& a = memberOrNull(before, field);
    const json& b = memberOrNull(after, field);
    if (a == b) continue;
    if (!a.is_array() || !b.is_array()) return Difference{std::nullopt, std::string(field)};
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return Difference{i, messageFieldDifference(a[i], b[i])};
    }
    return Difference{n, a.size() > b.size() ? "removed" : "added"};
  }
  if (before != after) {
    const std::string path = diagnosticPathBelow(before, after);
    return Difference{std::nullopt, path.empty() ? std::string("body") : path.substr(1)};
  }
  if (beforeUrl != afterUrl) return Difference{std::nullopt, "url"};
  return std::nullopt;
}

nlohmann::json toJson(const CacheDiagnostic& diagnostic) {
  nlohmann::json difference = nullptr;
  if (const auto& d = diagnostic.firstDifference) {
    difference = {{"message", d->message ? nlohmann::json(*d->message) : nlohmann::json()},
                  {"field", d->field}};
  }
  return {{"reusable_prefix_tokens", diagnostic.reusablePrefixTokens},
          {"reusable_prefix_bytes", diagnostic.reusablePrefixBytes},
          {"reusable_messages", diagnostic.reusableMessages},
          {"first_difference", std::move(difference)}};
}

}  // namespace parley
