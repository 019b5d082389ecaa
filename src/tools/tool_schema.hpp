// A JSON Schema compiled once by valijson, and checks against it that explain each failure in
// words a model can act on: a tool's arguments, and structured answers (runStructured).
// Internal to parley.
//
// This is the only place that includes valijson, so its configuration
// (VALIJSON_USE_EXCEPTIONS) is defined consistently in one translation unit.
//
// A schema can come from anyone (an MCP server, a tools file, --schema) and the value from the
// model, so both are capped (docs/structured-output.md, "Limits"): the schema's depth, size and
// pattern length, and `$ref` cycles that never descend into the value, are refused when it is
// compiled; "pattern" and "patternProperties" run on RE2 (linear time, not std::regex); a check
// is bounded in steps, nesting and string length, and stops when its stop token is requested
// or its deadline passes.
//
// Thread-safety: check() may run on many threads at once; the compiled schema is read-only.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace valijson {
class Schema;
}

namespace parley {

// Whether `name` may name a tool: ^[a-zA-Z0-9_-]{1,64}$ (tools.cpp).
bool isValidToolName(const std::string& name);

// One failure of a value against a schema.
struct SchemaFailure {
  std::string path;     // the failing value: `city`, `tags[1]`, `o.x`; the root's name for the root
  std::string message;  // `<path>: <why>`
};

// The caps on a schema and on one check against it.
inline constexpr std::size_t kMaxSchemaDepth = 64;         // nesting of the schema document
inline constexpr std::size_t kMaxSchemaValues = 20'000;    // values in the schema document
inline constexpr std::size_t kMaxPatternLength = 4'096;    // characters of one pattern
inline constexpr std::size_t kMaxSchemaRefLength = 2'048;  // characters of a $ref or $id
// $refs in the schema: valijson follows a chain of them recursively when it compiles the schema
// (a chain of 5 000 overflows an 8 MiB stack).
inline constexpr std::size_t kMaxSchemaRefs = 256;
inline constexpr std::size_t kMaxCheckedDepth = 128;       // nesting of a checked value
inline constexpr std::size_t kMaxMatchedLength = 1 << 20;  // bytes of a string matched by a pattern
inline constexpr std::size_t kMaxCheckSteps = 100'000;     // sub-schemas applied in one check

// Where a check must stop: `stop` requested, or `deadline` passed. An empty value never stops.
struct CheckLimits {
  std::stop_token stop;
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

struct CompiledPatterns;

class CompiledSchema {
 public:
  // Compiles `schema`. Throws ValidationError(field, why) when valijson rejects it, when it
  // refers to a remote document, when a "pattern" is not a regular expression RE2 accepts, when
  // it goes past a cap above, or when a `$ref` cycle never descends into the value (the error
  // names the path). `root` names the checked value itself in the failures.
  explicit CompiledSchema(nlohmann::json schema, std::string field = "tool.schema",
                          std::string root = "arguments");
  ~CompiledSchema();
  CompiledSchema(const CompiledSchema&) = delete;
  CompiledSchema& operator=(const CompiledSchema&) = delete;

  // "" when `args` matches; otherwise the failures as `<path>: <why>` joined by "; ", e.g.
  // `"city": expected type string, got number` or `arguments: missing required property 'city'`.
  // A value nested deeper than kMaxCheckedDepth, or a check past kMaxCheckSteps, fails.
  // Throws CancelledError when `limits.stop` is requested and TimeoutError when
  // `limits.deadline` passes during the check.
  std::string check(const nlohmann::json& args, const CheckLimits& limits = {}) const;
  // Every failure, in valijson's order, without repeats; empty when `value` matches.
  std::vector<SchemaFailure> failures(const nlohmann::json& value,
                                      const CheckLimits& limits = {}) const;

  const nlohmann::json& document() const noexcept { return document_; }

 private:
  nlohmann::json document_;  // kept alive beside the compiled form built from it
  std::string field_;
  std::string root_;
  std::unique_ptr<CompiledPatterns> patterns_;  // every pattern, compiled by RE2
  std::unique_ptr<valijson::Schema> schema_;
};

}  // namespace parley
