// The price table `parley ask` and `chat` compute a reply's cost with (cost.hpp): --prices FILE
// alone when given; else the shipped table (data/prices.toml) with the config file's `[prices]`
// tables over it (an entry there replaces the shipped one of that model).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "parley/cost.hpp"

namespace parley::cli {

void addPricesOption(CLI::App& cmd, std::string& file);

// ValidationError naming the file for a bad price file or a bad `[prices]` table.
PriceTable cliPriceTable(const std::string& pricesFile, const std::string& configFile);

// "$0.000123" (six decimals below a dollar, else cents: "$12.34"); "unpriced" for nullopt.
std::string formatCost(std::optional<double> usd);

}  // namespace parley::cli
