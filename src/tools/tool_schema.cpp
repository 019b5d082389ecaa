#define VALIJSON_USE_EXCEPTIONS 1
#include "tools/tool_schema.hpp"

#include <cctype>
#include <regex>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "parley/errors.hpp"

namespace parley {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxReportedFailures = 8;

// valijson compiles "pattern" lazily, at the first validation, and a bad one would then throw
// in the middle of a tool call. Compile every pattern once here instead. Values that are data,
// not schemas (enum, const, default, examples), are skipped.
void checkPatterns(const json& node, const std::string& where, const std::string& field) {
  if (node.is_array()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      checkPatterns(node[i], where + "[" + std::to_string(i) + "]", field);
    return;
  }
  if (!node.is_object()) return;
  for (const auto& [key, value] : node.items()) {
    if (key == "enum" || key == "const" || key == "default" || key == "examples") continue;
    std::vector<std::string> patterns;
    if (key == "pattern" && value.is_string()) patterns.push_back(value.get<std::string>());
    if (key == "patternProperties" && value.is_object())
      for (const auto& [pattern, unused] : value.items())
        patterns.push_back(pattern);
    for (const std::string& pattern : patterns) {
      try {
        std::regex compiled(pattern);
      } catch (const std::regex_error& e) {
        throw ValidationError(
            field, "invalid pattern \"" + pattern + "\" at " + where + "." + key + ": " + e.what());
      }
    }
    checkPatterns(value, where + "." + key, field);
  }
}

std::string typeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

// One failure, located: `path` as a model reads it (`city`, `tags[1]`, `o.x`), the value found
// there and the sub-schema that governs it when they can be found.
struct Located {
  std::string path;
  const json* value = nullptr;
  const json* schema = nullptr;
};

// valijson names the failing node by a context like {"<root>", "[o]", "[x]"}; walk the
// arguments and the schema alongside to render it and to find what was expected.
Located locate(const std::vector<std::string>& context, const json& args, const json& schema,
               const std::string& root) {
  Located at{"", &args, &schema};
  for (std::size_t i = 1; i < context.size(); ++i) {
    std::string token = context[i];
    if (token.size() >= 2 && token.front() == '[' && token.back() == ']')
      token = token.substr(1, token.size() - 2);
    const json* value = at.value;
    const json* sub = at.schema;
    if (value && value->is_array()) {
      std::size_t index = 0;
      bool numeric = !token.empty();
      for (char c : token)
        numeric = numeric && std::isdigit(static_cast<unsigned char>(c));
      if (numeric) index = std::stoul(token);
      at.path += "[" + token + "]";
      at.value = numeric && index < value->size() ? &(*value)[index] : nullptr;
      const json* items =
          sub && sub->is_object() && sub->contains("items") ? &(*sub)["items"] : nullptr;
      if (items && items->is_array())
        at.schema = numeric && index < items->size() ? &(*items)[index] : nullptr;
      else
        at.schema = items;
      continue;
    }
    at.path += (at.path.empty() ? "" : ".") + token;
    at.value = value && value->is_object() && value->contains(token) ? &(*value)[token] : nullptr;
    const json* next = nullptr;
    if (sub && sub->is_object()) {
      auto properties = sub->find("properties");
      if (properties != sub->end() && properties->is_object() && properties->contains(token))
        next = &(*properties)[token];
      else if (auto extra = sub->find("additionalProperties");
               extra != sub->end() && extra->is_object())
        next = &*extra;
    }
    at.schema = next;
  }
  if (at.path.empty()) at.path = root;
  return at;
}

std::string expectedTypes(const json* schema) {
  if (!schema || !schema->is_object()) return "";
  auto type = schema->find("type");
  if (type == schema->end()) return "";
  if (type->is_string()) return type->get<std::string>();
  if (!type->is_array()) return "";
  std::string names;
  for (const json& name : *type) {
    if (!name.is_string()) continue;
    names += (names.empty() ? "" : " or ") + name.get<std::string>();
  }
  return names;
}

// valijson writes "Missing required property 'city'."; the report reads as one sentence per
// line, lower-case and without the full stop, and says which types were expected.
std::string describe(const std::string& description, const Located& at) {
  if (description.rfind("Value type not permitted", 0) == 0 && at.value) {
    std::string expected = expectedTypes(at.schema);
    if (!expected.empty()) return "expected type " + expected + ", got " + typeName(*at.value);
    return "a value of type " + typeName(*at.value) + " is not allowed here";
  }
  std::string text = description;
  if (!text.empty() && text.back() == '.') text.pop_back();
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

// These only say that something deeper failed, and that deeper failure is reported too.
bool isWrapper(const std::string& description) {
  for (std::string_view prefix : {"Failed to validate against schema associated with property",
                                  "Failed to validate item #", "Failed to validate against child"})
    if (description.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

CompiledSchema::CompiledSchema(nlohmann::json schema, std::string field, std::string root)
    : document_(std::move(schema)),
      field_(std::move(field)),
      root_(std::move(root)),
      schema_(std::make_unique<valijson::Schema>()) {
  try {
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter adapter(document_);
    parser.populateSchema(adapter, *schema_);
  } catch (const std::exception& e) {
    throw ValidationError(field_, std::string("cannot compile the schema: ") + e.what());
  }
  checkPatterns(document_, "schema", field_);
}

CompiledSchema::~CompiledSchema() = default;

std::vector<SchemaFailure> CompiledSchema::failures(const nlohmann::json& value) const {
  // A Validator caches compiled regexes and is not safe to share; one per check is cheap.
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter adapter(value);
  try {
    if (validator.validate(*schema_, adapter, &results)) return {};
  } catch (const std::exception& e) {
    return {{root_, root_ + ": the schema could not be applied: " + e.what()}};
  }
  std::vector<SchemaFailure> out;
  std::set<std::string> seen;
  for (const auto& failure : results) {
    if (isWrapper(failure.description)) continue;
    Located at = locate(failure.context, value, document_, root_);
    std::string line = at.path + ": " + describe(failure.description, at);
    // A missing property is the failing value itself, though valijson reports its parent.
    std::string path = at.path;
    constexpr std::string_view kMissing = "Missing required property '";
    if (failure.description.rfind(kMissing, 0) == 0) {
      const size_t end = failure.description.find('\'', kMissing.size());
      const std::string name = failure.description.substr(kMissing.size(), end - kMissing.size());
      path = at.path == root_ ? name : at.path + "." + name;
    }
    if (seen.insert(line).second) out.push_back({std::move(path), std::move(line)});
  }
  if (out.empty()) out.push_back({root_, root_ + ": does not match the schema"});
  return out;
}

std::string CompiledSchema::check(const nlohmann::json& args) const {
  const std::vector<SchemaFailure> found = failures(args);
  std::string report;
  for (std::size_t i = 0; i < found.size() && i < kMaxReportedFailures; ++i)
    report += (i ? "; " : "") + found[i].message;
  if (found.size() > kMaxReportedFailures)
    report += "; (and " + std::to_string(found.size() - kMaxReportedFailures) + " more)";
  return report;
}

}  // namespace parley
