// The price table `parley ask` and `chat` compute a reply's cost with (cost.hpp): --prices FILE
// alone when given; else the shipped table (data/prices.toml) with the config file's `[prices]`
// tables over it (an entry there replaces the shipped one of that model).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "parley/cost.hpp"

namespace parley::cli {

void addPricesOption(CLI::App& cmd, std::string& file);

// ValidationError naming the file for a bad price file or a bad `[prices]` table.
PriceTable cliPriceTable(const std::string& pricesFile, const std::string& configFile);

}  // namespace parley::cli
