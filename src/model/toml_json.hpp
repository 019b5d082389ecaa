// TOML values as JSON, for the files parley reads in TOML (profiles, CLI tool files).
// Internal: not installed.
#pragma once

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

namespace parley::detail {

// Tables become objects, arrays arrays, scalars their JSON value; dates and times their TOML text.
nlohmann::json tomlToJson(const toml::node& node);

}  // namespace parley::detail
