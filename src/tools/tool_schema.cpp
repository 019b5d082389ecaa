#define VALIJSON_USE_EXCEPTIONS 1
#include "tools/tool_schema.hpp"

#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <re2/re2.h>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/adapters/std_string_adapter.hpp>
#include <valijson/validation_visitor.hpp>

#include "parley/errors.hpp"

namespace parley {

struct CompiledPatterns {
  std::unordered_map<std::string, std::unique_ptr<const re2::RE2>> byPattern;
};

namespace {

using nlohmann::json;

constexpr std::size_t kMaxReportedFailures = 8;
// Sub-schemas applied inside one another in one check: the value's depth times the schema's
// own nesting; what a thread's stack holds with room to spare.
constexpr std::size_t kMaxCheckNesting = 1'000;

// ECMAScript spells a code point \uXXXX, RE2 \x{XXXX}; the rest of the syntax schemas use is
// common to both. What RE2 refuses (look-around, back-references) is refused with its reason.
std::string toRe2(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size());
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 5 < pattern.size() && pattern[i + 1] == 'u' &&
        std::isxdigit(static_cast<unsigned char>(pattern[i + 2])) &&
        std::isxdigit(static_cast<unsigned char>(pattern[i + 3])) &&
        std::isxdigit(static_cast<unsigned char>(pattern[i + 4])) &&
        std::isxdigit(static_cast<unsigned char>(pattern[i + 5]))) {
      out += "\\x{" + pattern.substr(i + 2, 4) + "}";
      i += 5;
      continue;
    }
    out += pattern[i];
    if (pattern[i] == '\\' && i + 1 < pattern.size()) out += pattern[++i];
  }
  return out;
}

std::unique_ptr<const re2::RE2> compilePattern(const std::string& pattern, std::string* error) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto compiled = std::make_unique<const re2::RE2>(toRe2(pattern), options);
  if (!compiled->ok()) {
    if (error) *error = compiled->error();
    return nullptr;
  }
  return compiled;
}

// Walks the schema document before valijson sees it: depth, size and the length of patterns
// and references capped, every pattern compiled by RE2, every sub-schema noted by its JSON
// pointer for the cycle check. Values that are data, not schemas (enum, const, default,
// examples), count towards the caps but are not read as schemas.
class SchemaScan {
 public:
  SchemaScan(const json& document, std::string field, CompiledPatterns& patterns)
      : document_(document), field_(std::move(field)), patterns_(patterns) {}

  void run() {
    walk(document_, "", "schema", 0, false);
    findInPlaceCycles();
  }

 private:
  struct Node {
    const json* value;
    std::string where;
  };

  [[noreturn]] void fail(const std::string& why) const { throw ValidationError(field_, why); }

  void walk(const json& node, const std::string& pointer, const std::string& where,
            std::size_t depth, bool data) {
    if (depth > kMaxSchemaDepth)
      fail("the schema is nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels at " +
           where);
    if (++values_ > kMaxSchemaValues)
      fail("the schema has more than " + std::to_string(kMaxSchemaValues) + " values");
    if (node.is_array()) {
      for (std::size_t i = 0; i < node.size(); ++i)
        walk(node[i], pointer + "/" + std::to_string(i), where + "[" + std::to_string(i) + "]",
             depth + 1, data);
      return;
    }
    if (!node.is_object()) return;
    if (!data) schemas_.emplace(pointer, Node{&node, where});
    for (const auto& [key, value] : node.items()) {
      const std::string at = where + "." + key;
      const bool isData =
          data || key == "enum" || key == "const" || key == "default" || key == "examples";
      if (!isData) {
        if (key == "pattern" && value.is_string()) addPattern(value.get<std::string>(), at);
        if (key == "patternProperties" && value.is_object())
          for (const auto& [pattern, unused] : value.items())
            addPattern(pattern, at);
        if (key == "$ref" && ++refs_ > kMaxSchemaRefs)
          fail("the schema has more than " + std::to_string(kMaxSchemaRefs) + " $refs");
        if ((key == "$ref" || key == "$id" || key == "id") && value.is_string() &&
            value.get_ref<const std::string&>().size() > kMaxSchemaRefLength)
          fail("the " + key + " at " + at + " is longer than " +
               std::to_string(kMaxSchemaRefLength) + " characters");
      }
      walk(value, pointer + "/" + escapePointer(key), at, depth + 1, isData);
    }
  }

  static std::string escapePointer(const std::string& key) {
    std::string out;
    for (char c : key)
      out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }

  void addPattern(const std::string& pattern, const std::string& at) {
    if (pattern.size() > kMaxPatternLength)
      fail("the pattern at " + at + " is longer than " + std::to_string(kMaxPatternLength) +
           " characters");
    if (patterns_.byPattern.count(pattern)) return;
    std::string error;
    auto compiled = compilePattern(pattern, &error);
    if (!compiled)
      fail("invalid pattern \"" + pattern + "\" at " + at + ": " + error +
           " (patterns run on RE2: no look-around or back-references)");
    patterns_.byPattern.emplace(pattern, std::move(compiled));
  }

  // The sub-schemas applied to the same value as `node`: where a cycle among them never
  // descends into the value, checking it would never end.
  std::vector<std::pair<std::string, std::string>> inPlace(const std::string& pointer,
                                                           const Node& node) const {
    std::vector<std::pair<std::string, std::string>> next;  // (pointer, where)
    const json& schema = *node.value;
    for (const char* key : {"allOf", "anyOf", "oneOf"}) {
      auto it = schema.find(key);
      if (it == schema.end() || !it->is_array()) continue;
      for (std::size_t i = 0; i < it->size(); ++i)
        next.emplace_back(pointer + "/" + key + "/" + std::to_string(i),
                          node.where + "." + key + "[" + std::to_string(i) + "]");
    }
    for (const char* key : {"not", "if", "then", "else"})
      if (schema.contains(key)) next.emplace_back(pointer + "/" + key, node.where + "." + key);
    for (const char* key : {"dependencies", "dependentSchemas"}) {
      auto it = schema.find(key);
      if (it == schema.end() || !it->is_object()) continue;
      for (const auto& [name, value] : it->items())
        if (value.is_object())
          next.emplace_back(pointer + "/" + key + "/" + escapePointer(name),
                            node.where + "." + key + "." + name);
    }
    auto ref = schema.find("$ref");
    if (ref != schema.end() && ref->is_string()) {
      const std::string& target = ref->get_ref<const std::string&>();
      // Only references inside the document ("#", "#/definitions/a") can loop; remote ones
      // are refused by the parser.
      if (!target.empty() && target[0] == '#')
        next.emplace_back(unescapeUri(target.substr(1)), node.where + ".$ref");
    }
    return next;
  }

  static std::string unescapeUri(const std::string& fragment) {
    std::string out;
    for (std::size_t i = 0; i < fragment.size(); ++i) {
      if (fragment[i] == '%' && i + 2 < fragment.size() &&
          std::isxdigit(static_cast<unsigned char>(fragment[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(fragment[i + 2]))) {
        out += static_cast<char>(std::stoi(fragment.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += fragment[i];
      }
    }
    return out;
  }

  // Depth-first over the in-place edges, without recursion (a chain of references can be as
  // long as the schema is large).
  void findInPlaceCycles() const {
    enum class Colour { Grey, Black };
    std::map<std::string, Colour> colour;
    struct Frame {
      std::string pointer;
      std::vector<std::pair<std::string, std::string>> next;
      std::size_t index = 0;
    };
    for (const auto& [start, startNode] : schemas_) {
      if (colour.count(start)) continue;
      std::vector<Frame> stack;
      stack.push_back({start, inPlace(start, startNode)});
      colour[start] = Colour::Grey;
      while (!stack.empty()) {
        Frame& top = stack.back();
        if (top.index == top.next.size()) {
          colour[top.pointer] = Colour::Black;
          stack.pop_back();
          continue;
        }
        const auto [pointer, where] = top.next[top.index++];
        auto seen = colour.find(pointer);
        if (seen != colour.end()) {
          if (seen->second == Colour::Grey)
            fail("a $ref cycle never descends into the value: " + where + " leads back to " +
                 schemas_.at(pointer).where + " (#" + pointer + ")");
          continue;
        }
        auto node = schemas_.find(pointer);
        if (node == schemas_.end()) continue;  // not a schema: the parser reports it
        colour[pointer] = Colour::Grey;
        stack.push_back({pointer, inPlace(pointer, node->second)});
      }
    }
  }

  const json& document_;
  std::string field_;
  CompiledPatterns& patterns_;
  std::size_t values_ = 0;
  std::size_t refs_ = 0;
  std::map<std::string, Node> schemas_;  // by JSON pointer ("" is the root)
};

// The check under way on this thread: valijson's visitor has no place for it, so the
// specialisations below find it here.
struct CheckState {
  const CompiledPatterns* patterns = nullptr;
  const CheckLimits* limits = nullptr;
  std::size_t steps = 0;
  std::size_t nesting = 0;
};
thread_local CheckState* tCheck = nullptr;

// Thrown past a cap from inside valijson; failures() reports it as the value's failure.
struct CheckAborted {
  std::string why;
};

void enterSubschema() {
  CheckState* check = tCheck;
  if (!check) return;
  if (++check->steps > kMaxCheckSteps)
    throw CheckAborted{"the check took more than " + std::to_string(kMaxCheckSteps) +
                       " steps; send a smaller value"};
  if (check->nesting >= kMaxCheckNesting)
    throw CheckAborted{"the schema nests more than " + std::to_string(kMaxCheckNesting) +
                       " levels deep for this value"};
  if (check->steps % 64 == 0 && check->limits) {
    if (check->limits->stop.stop_requested())
      throw CancelledError("the schema check was cancelled");
    if (check->limits->deadline && std::chrono::steady_clock::now() >= *check->limits->deadline)
      throw TimeoutError("the schema check ran past the deadline");
  }
  ++check->nesting;
}

struct Nested {
  Nested() { enterSubschema(); }
  ~Nested() {
    if (tCheck) --tCheck->nesting;
  }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;
};

enum class Match { Yes, No, TooLong };

Match matches(const std::string& pattern, const std::string& text) {
  if (text.size() > kMaxMatchedLength) return Match::TooLong;
  const re2::RE2* compiled = nullptr;
  std::unique_ptr<const re2::RE2> local;
  if (tCheck && tCheck->patterns) {
    auto it = tCheck->patterns->byPattern.find(pattern);
    if (it != tCheck->patterns->byPattern.end()) compiled = it->second.get();
  }
  if (!compiled) {  // every pattern is compiled with the schema; this is only a safety net
    local = compilePattern(pattern, nullptr);
    if (!local) return Match::No;
    compiled = local.get();
  }
  return re2::RE2::PartialMatch(text, *compiled) ? Match::Yes : Match::No;
}

std::string tooLong() {
  return "String longer than " + std::to_string(kMaxMatchedLength) +
         " bytes cannot be matched against a pattern.";
}

// valijson's "date", "time" and "date-time" formats, on RE2 instead of std::regex (whose
// recursion follows the string's length). 0 when `format` is not one of them or `s` matches;
// otherwise valijson's message.
const char* formatProblem(const std::string& format, const std::string& s) {
  static const re2::RE2 kDate("([0-9]+)-(0[1-9]|1[012])-(0[1-9]|[12][0-9]|3[01])");
  static const re2::RE2 kTime(
      "([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9]|60)(\\.[0-9]+)?(([Zz])|([\\+|\\-]([01][0-9]|"
      "2[0-3]):[0-5][0-9]))");
  static const re2::RE2 kDateTime(
      "([0-9]+)-(0[1-9]|1[012])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):([0-5][0-9]):([0-"
      "5][0-9]|60)(\\.[0-9]+)?(([Zz])|([\\+|\\-]([01][0-9]|2[0-3]):[0-5][0-9]))");
  const bool date = format == "date";
  const bool dateTime = format == "date-time";
  if (!date && !dateTime && format != "time") return nullptr;
  const char* problem = date       ? "String should be a valid date"
                        : dateTime ? "String should be a valid date-time"
                                   : "String should be a valid time";
  int month = 0;
  int day = 0;
  if (date && !re2::RE2::FullMatch(s, kDate, static_cast<void*>(nullptr), &month, &day))
    return problem;
  if (dateTime && !re2::RE2::FullMatch(s, kDateTime, static_cast<void*>(nullptr), &month, &day))
    return problem;
  if (!date && !dateTime) return re2::RE2::FullMatch(s, kTime) ? nullptr : problem;
  // valijson's day range check: its message is the date-time one for both formats.
  const int maxDay = month == 2                                                ? 29
                     : (month == 4 || month == 6 || month == 9 || month == 11) ? 30
                                                                               : 31;
  return day < 0 || day > maxDay ? "String should be a valid date-time" : nullptr;
}

}  // namespace

}  // namespace parley

// valijson 1.0 runs "pattern", "patternProperties" and "format" on std::regex, which
// backtracks (`^(a+)+$` doubles its time per character) and recurses per character (a long
// pattern or string overflows the stack), and applies sub-schemas without a bound. It has no
// hook for either, so the members concerned are specialised for the two adapters parley checks
// with: the same logic on RE2, and every sub-schema counted (CheckState).
namespace valijson {

namespace {

template <typename Adapter>
bool boundedPattern(const Adapter& target, bool strictTypes,
                    const std::vector<std::string>& context, ValidationResults* results,
                    const std::string& pattern) {
  if ((strictTypes && !target.isString()) || !target.maybeString()) return true;
  const parley::Match match = parley::matches(pattern, target.asString());
  if (match == parley::Match::Yes) return true;
  if (results)
    results->pushError(context, match == parley::Match::TooLong
                                    ? parley::tooLong()
                                    : "Failed to match regex specified by 'pattern' constraint.");
  return false;
}

template <typename Adapter>
bool boundedFormat(const Adapter& target, const std::vector<std::string>& context,
                   ValidationResults* results, const std::string& format) {
  if (!target.maybeString()) return true;
  const std::string s = target.asString();
  const char* problem = s.size() > parley::kMaxMatchedLength ? "String is too long for its format"
                                                             : parley::formatProblem(format, s);
  if (!problem) return true;
  if (results) results->pushError(context, problem);
  return false;
}

}  // namespace

using parley::Nested;
using NlohmannAdapter = adapters::NlohmannJsonAdapter;
using StringAdapter = adapters::StdStringAdapter;

template <>
bool ValidationVisitor<NlohmannAdapter>::validateSchema(const Subschema& subschema) {
  const Nested nested;
  if (subschema.getAlwaysInvalid()) return false;
  Subschema::ApplyFunction fn(
      std::bind(validationCallback, std::placeholders::_1, std::ref(*this)));
  return m_results ? subschema.apply(fn) : subschema.applyStrict(fn);
}

template <>
bool ValidationVisitor<StringAdapter>::validateSchema(const Subschema& subschema) {
  const Nested nested;
  if (subschema.getAlwaysInvalid()) return false;
  Subschema::ApplyFunction fn(
      std::bind(validationCallback, std::placeholders::_1, std::ref(*this)));
  return m_results ? subschema.apply(fn) : subschema.applyStrict(fn);
}

template <>
bool ValidationVisitor<NlohmannAdapter>::visit(const PatternConstraint& constraint) {
  return boundedPattern(m_target, m_strictTypes, m_context, m_results,
                        constraint.getPattern<std::string::allocator_type>());
}

template <>
bool ValidationVisitor<StringAdapter>::visit(const PatternConstraint& constraint) {
  return boundedPattern(m_target, m_strictTypes, m_context, m_results,
                        constraint.getPattern<std::string::allocator_type>());
}

template <>
bool ValidationVisitor<NlohmannAdapter>::visit(const FormatConstraint& constraint) {
  return boundedFormat(m_target, m_context, m_results, constraint.getFormat());
}

template <>
bool ValidationVisitor<StringAdapter>::visit(const FormatConstraint& constraint) {
  return boundedFormat(m_target, m_context, m_results, constraint.getFormat());
}

// valijson's loop over the properties a "patternProperties" pattern matches, on RE2. (Property
// names are keys of a value, never names of a string adapter's value.)
template <>
template <>
bool ValidationVisitor<NlohmannAdapter>::ValidatePatternPropertySubschemas::operator()(
    const constraints::PropertiesConstraint::String& patternProperty,
    const Subschema* subschema) const {
  const std::string pattern(patternProperty.c_str());
  bool matchFound = false;
  for (const NlohmannAdapter::ObjectMember m : m_object) {
    const parley::Match match = parley::matches(pattern, m.first);
    if (match == parley::Match::TooLong) {
      if (m_results) m_results->pushError(m_context, parley::tooLong());
      if (m_validated) *m_validated = false;
      if (!m_continueOnFailure) return false;
      continue;
    }
    if (match == parley::Match::No) continue;
    matchFound = true;
    if (m_propertiesMatched) m_propertiesMatched->insert(m.first);
    std::vector<std::string> newContext = m_context;
    newContext.push_back("[" + m.first + "]");
    ValidationVisitor validator(m.second, newContext, m_strictTypes, m_results, m_regexesCache);
    if (validator.validateSchema(*subschema)) continue;
    if (m_results)
      m_results->pushError(
          m_context,
          "Failed to validate against schema associated with pattern '" + pattern + "'.");
    if (m_validated) *m_validated = false;
    if (!m_continueOnFailure) return false;
  }
  if (!matchFound && !m_continueIfUnmatched) return false;
  return m_continueOnSuccess;
}

}  // namespace valijson

#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace parley {

namespace {

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

// Without recursion: the value may be nested far deeper than the stack allows.
bool nestedDeeperThan(const json& value, std::size_t limit) {
  std::vector<std::pair<const json*, std::size_t>> pending{{&value, 0}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    if (depth >= limit) return true;
    for (const json& child : *node)
      pending.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace

CompiledSchema::CompiledSchema(nlohmann::json schema, std::string field, std::string root)
    : document_(std::move(schema)),
      field_(std::move(field)),
      root_(std::move(root)),
      patterns_(std::make_unique<CompiledPatterns>()),
      schema_(std::make_unique<valijson::Schema>()) {
  SchemaScan(document_, field_, *patterns_).run();  // the caps first: valijson recurses
  try {
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter adapter(document_);
    parser.populateSchema(adapter, *schema_);
  } catch (const std::exception& e) {
    throw ValidationError(field_, std::string("cannot compile the schema: ") + e.what());
  }
}

CompiledSchema::~CompiledSchema() = default;

std::vector<SchemaFailure> CompiledSchema::failures(const nlohmann::json& value,
                                                    const CheckLimits& limits) const {
  if (nestedDeeperThan(value, kMaxCheckedDepth))
    return {
        {root_, root_ + ": nested deeper than " + std::to_string(kMaxCheckedDepth) + " levels"}};
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter adapter(value);
  CheckState state{patterns_.get(), &limits};
  CheckState* const outer = tCheck;  // a check never runs inside another, but keep it whole
  tCheck = &state;
  struct Restore {
    CheckState* outer;
    ~Restore() { tCheck = outer; }
  } restore{outer};
  try {
    if (validator.validate(*schema_, adapter, &results)) return {};
  } catch (const CheckAborted& e) {
    return {{root_, root_ + ": " + e.why}};
  } catch (const Error&) {
    throw;  // cancelled or past the deadline
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

std::string CompiledSchema::check(const nlohmann::json& args, const CheckLimits& limits) const {
  const std::vector<SchemaFailure> found = failures(args, limits);
  std::string report;
  for (std::size_t i = 0; i < found.size() && i < kMaxReportedFailures; ++i)
    report += (i ? "; " : "") + found[i].message;
  if (found.size() > kMaxReportedFailures)
    report += "; (and " + std::to_string(found.size() - kMaxReportedFailures) + " more)";
  return report;
}

}  // namespace parley
