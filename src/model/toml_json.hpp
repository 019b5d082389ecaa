// TOML values as JSON, for the files parley reads in TOML (profiles, tools files).
// Internal: not installed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

namespace parley::detail {

// Tables become objects, arrays arrays, scalars their JSON value; dates and times their TOML text.
// A value nested deeper than kDefaultMaxJsonDepth (json.hpp) is a ValidationError naming
// `field`: the JSON made here is copied and serialised by recursive code later.
nlohmann::json tomlToJson(const toml::node& node, const std::string& field);

// Parses `text` as TOML; a syntax error is a ValidationError "SOURCE:LINE:COLUMN" + what is wrong.
toml::table parseTomlTable(std::string_view text, const std::string& source);
// Reads a TOML file of at most `maxBytes` (toml.hpp's kMaxTomlFileBytes by default) and parses
// it; `what` names the kind of file in errors ("the profiles file").
toml::table readTomlTable(const std::string& path, const std::string& what,
                          std::size_t maxBytes);

}  // namespace parley::detail
