#include "model/toml_json.hpp"

#include <sstream>
#include <string>

namespace parley::detail {

nlohmann::json tomlToJson(const toml::node& node) {
  if (auto* table = node.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : *table)
      out[std::string(key.str())] = tomlToJson(value);
    return out;
  }
  if (auto* array = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& value : *array)
      out.push_back(tomlToJson(value));
    return out;
  }
  if (auto v = node.value_exact<std::string>()) return *v;
  if (auto v = node.value_exact<int64_t>()) return *v;
  if (auto v = node.value_exact<double>()) return *v;
  if (auto v = node.value_exact<bool>()) return *v;
  std::ostringstream text;  // dates and times: their TOML text
  node.visit([&text](const auto& value) { text << value; });
  return text.str();
}

}  // namespace parley::detail
