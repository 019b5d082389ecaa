// TOML documents as JSON: how parley reads its own TOML files (profiles, tools files, the command
// line's config), for a program that keeps its settings beside them.
//
// Tables become objects, arrays arrays, strings, integers, floats and booleans their JSON value;
// dates and times their TOML text. Limits: a file of at most kMaxTomlFileBytes, nesting of at
// most kDefaultMaxJsonDepth levels (json.hpp).
//
// Thread-safety: free functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace parley {

// Config files are small; a bigger one is a mistake (or not a config file).
inline constexpr std::size_t kMaxTomlFileBytes = std::size_t{1} << 20;

// Parses `text`; `source` names it in errors. ValidationError "SOURCE:LINE:COLUMN: what is
// wrong" for a syntax error, "SOURCE: nested deeper than 128 levels" past the depth limit.
nlohmann::json parseToml(std::string_view text, const std::string& source);

// Reads and parses the file at `path`. ValidationError naming the file when it cannot be read or
// is larger than `maxBytes`.
nlohmann::json readTomlFile(const std::string& path, std::size_t maxBytes = kMaxTomlFileBytes);

}  // namespace parley
