// A JSON Schema compiled once by valijson, and checks against it that explain each failure in
// words a model can act on: a tool's arguments, and structured answers (runStructured).
// Internal to parley.
//
// This is the only place that includes valijson, so its configuration
// (VALIJSON_USE_EXCEPTIONS) is defined consistently in one translation unit.
//
// Thread-safety: check() may run on many threads at once; the compiled schema is read-only.
#pragma once

#include <memory>
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

class CompiledSchema {
 public:
  // Compiles `schema`. Throws ValidationError(field, why) when valijson rejects it, when it
  // refers to a remote document, or when a "pattern" is not a valid regular expression. `root`
  // names the checked value itself in the failures.
  explicit CompiledSchema(nlohmann::json schema, std::string field = "tool.schema",
                          std::string root = "arguments");
  ~CompiledSchema();
  CompiledSchema(const CompiledSchema&) = delete;
  CompiledSchema& operator=(const CompiledSchema&) = delete;

  // "" when `args` matches; otherwise the failures as `<path>: <why>` joined by "; ", e.g.
  // `"city": expected type string, got number` or `arguments: missing required property 'city'`.
  std::string check(const nlohmann::json& args) const;
  // Every failure, in valijson's order, without repeats; empty when `value` matches.
  std::vector<SchemaFailure> failures(const nlohmann::json& value) const;

  const nlohmann::json& document() const noexcept { return document_; }

 private:
  nlohmann::json document_;  // kept alive beside the compiled form built from it
  std::string field_;
  std::string root_;
  std::unique_ptr<valijson::Schema> schema_;
};

}  // namespace parley
