// TOML values as JSON, for the files parley reads in TOML (profiles, tools files).
// Internal: not installed.
#pragma once

#include <string>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

namespace parley::detail {

// Tables become objects, arrays arrays, scalars their JSON value; dates and times their TOML text.
// A value nested deeper than kDefaultMaxJsonDepth (json.hpp) is a ValidationError naming
// `field`: the JSON made here is copied and serialised by recursive code later.
nlohmann::json tomlToJson(const toml::node& node, const std::string& field);

}  // namespace parley::detail
