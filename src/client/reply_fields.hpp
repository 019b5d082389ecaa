// Reading a field of a provider's reply (the JSON readers of each protocol share these): a
// missing field or one of another type reads as 0 or "", as the APIs' optional fields mean.
// Internal to src/client/.
#pragma once

#include <cstdint>
#include <string>

#include "parley/json.hpp"

namespace parley::detail {

inline int64_t count(const nlohmann::ordered_json& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

inline std::string stringOf(const nlohmann::ordered_json& object, const char* key) {
  if (!object.is_object()) return {};
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace parley::detail
