#include "parley/cache_diagnostic.hpp"

namespace parley {

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
