#include "model/secrets.hpp"

#include <algorithm>
#include <cctype>
#include <exception>

#include <nlohmann/json.hpp>

#include "model/blanks.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

namespace {

bool redactJson(nlohmann::json& value, const std::vector<std::string>& secrets) {
  bool changed = false;
  if (value.is_string()) {
    value = redactSecrets(value.get<std::string>(), secrets, &changed);
  } else if (value.is_structured()) {
    for (nlohmann::json& child : value)
      changed = redactJson(child, secrets) || changed;
  }
  return changed;
}

}  // namespace

bool looksSecret(std::string_view name) {
  std::string key(name);
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"key", "authorization", "secret", "password", "credential", "cookie"})
    if (key.find(word) != std::string::npos) return true;
  // "token" alone is a credential; "max_tokens", "top_logprobs" and the like are not.
  return key.find("token") != std::string::npos && key.find("tokens") == std::string::npos;
}

std::vector<std::string> secretHeaderValues(std::span<const std::string> lines) {
  std::vector<std::string> secrets;
  auto add = [&secrets](std::string_view value) {
    value = trimBlanks(value);
    if (value.size() >= kMinSecretLength) secrets.emplace_back(value);
  };
  for (const std::string& line : lines) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos || !looksSecret(std::string_view(line).substr(0, colon)))
      continue;
    const std::string_view value = trimBlanks(std::string_view(line).substr(colon + 1));
    add(value);
    if (const std::size_t space = value.find(' '); space != std::string_view::npos)
      add(value.substr(space + 1));  // "Bearer <key>", "Basic <credentials>"
  }
  // The longest first, so that a key inside a longer value is not cut out of it first.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return secrets;
}

std::string redactSecrets(std::string text, const std::vector<std::string>& secrets,
                          bool* changed) {
  if (changed) *changed = false;
  for (const std::string& secret : secrets) {
    if (secret.empty()) continue;
    for (std::size_t at = text.find(secret); at != std::string::npos;
         at = text.find(secret, at + 10)) {
      text.replace(at, secret.size(), "[redacted]");
      if (changed) *changed = true;
    }
  }
  return text;
}

void rethrowRedacted(const std::vector<std::string>& secrets) {
  std::exception_ptr current = std::current_exception();
  if (secrets.empty()) std::rethrow_exception(current);
  try {
    std::rethrow_exception(current);
  } catch (const Error& e) {
    nlohmann::json document = errorToJson(e);
    if (redactJson(document, secrets)) std::rethrow_exception(errorFromJson(document));
  } catch (...) {
  }
  std::rethrow_exception(current);
}

}  // namespace parley::detail

namespace parley::detail {

nlohmann::json redactSecretKeys(nlohmann::json value) {
  if (value.is_object()) {
    for (auto& [key, item] : value.items()) {
      if (looksSecret(key) && !item.is_object() && !item.is_array()) {
        item = "[redacted]";
      } else {
        item = redactSecretKeys(std::move(item));
      }
    }
  } else if (value.is_array()) {
    for (nlohmann::json& item : value)
      item = redactSecretKeys(std::move(item));
  }
  return value;
}

}  // namespace parley::detail
