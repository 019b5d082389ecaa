#include "model/toml_json.hpp"

#include <sstream>
#include <string>

#include "parley/errors.hpp"
#include "parley/json.hpp"

namespace parley::detail {

namespace {

nlohmann::json convert(const toml::node& node, const std::string& field, int depth) {
  const bool container = node.is_table() || node.is_array();
  if (container && depth >= kDefaultMaxJsonDepth) {
    throw ValidationError(field,
                          "nested deeper than " + std::to_string(kDefaultMaxJsonDepth) + " levels");
  }
  if (auto* table = node.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : *table)
      out[std::string(key.str())] = convert(value, field, depth + 1);
    return out;
  }
  if (auto* array = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& value : *array)
      out.push_back(convert(value, field, depth + 1));
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

}  // namespace

nlohmann::json tomlToJson(const toml::node& node, const std::string& field) {
  return convert(node, field, 0);
}

}  // namespace parley::detail
