// A tool's argument schema compiled once by valijson, and argument checks against it that
// explain each failure in words a model can act on. Internal to parley.
//
// This is the only place that includes valijson, so its configuration
// (VALIJSON_USE_EXCEPTIONS) is defined consistently in one translation unit.
//
// Thread-safety: check() may run on many threads at once; the compiled schema is read-only.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace valijson {
class Schema;
}

namespace parley {

class CompiledSchema {
 public:
  // Compiles `schema`. Throws ValidationError("tool.schema", why) when valijson rejects it,
  // when it refers to a remote document, or when a "pattern" is not a valid regular expression.
  explicit CompiledSchema(nlohmann::json schema);
  ~CompiledSchema();
  CompiledSchema(const CompiledSchema&) = delete;
  CompiledSchema& operator=(const CompiledSchema&) = delete;

  // "" when `args` matches; otherwise the failures as `<path>: <why>` joined by "; ", e.g.
  // `"city": expected type string, got number` or `arguments: missing required property 'city'`.
  std::string check(const nlohmann::json& args) const;

  const nlohmann::json& document() const noexcept { return document_; }

 private:
  nlohmann::json document_;  // kept alive beside the compiled form built from it
  std::unique_ptr<valijson::Schema> schema_;
};

}  // namespace parley
