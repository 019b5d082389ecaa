#include "model/toml_json.hpp"

#include <fstream>
#include <sstream>
#include <string>

#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/toml.hpp"

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

toml::table parseTomlTable(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw ValidationError(
        source + ":" + std::to_string(where.line) + ":" + std::to_string(where.column),
        std::string(e.description()));
  }
}

toml::table readTomlTable(const std::string& path, const std::string& what, std::size_t maxBytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValidationError(path, "cannot open " + what);
  std::string text;
  char buffer[16384];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (text.size() > maxBytes) {
      throw ValidationError(path, what + " is larger than " + std::to_string(maxBytes) +
                                      " bytes; is it the right file?");
    }
  }
  return parseTomlTable(text, path);
}

}  // namespace parley::detail

namespace parley {

nlohmann::json parseToml(std::string_view text, const std::string& source) {
  return detail::tomlToJson(detail::parseTomlTable(text, source), source);
}

nlohmann::json readTomlFile(const std::string& path, std::size_t maxBytes) {
  return detail::tomlToJson(detail::readTomlTable(path, "the file", maxBytes), path);
}

}  // namespace parley
