#include "prices_option.hpp"

#include <filesystem>

#include "parley/toml.hpp"

namespace parley::cli {

void addPricesOption(CLI::App& cmd, std::string& file) {
  cmd.add_option("--prices", file,
                 "Price table for the cost of each reply (TOML, [prices.\"MODEL\"] input, "
                 "cached_input, cache_write, output, reasoning in USD per million tokens; "
                 "default: the shipped table with the config file's [prices] over it)");
}

PriceTable cliPriceTable(const std::string& pricesFile, const std::string& configFile) {
  if (!pricesFile.empty()) return PriceTable::fromFile(pricesFile);
  PriceTable table;
  if (auto shipped = PriceTable::shippedFile()) table = PriceTable::fromFile(shipped->string());
  std::error_code ignored;
  if (std::filesystem::exists(configFile, ignored)) {
    table.merge(PriceTable::fromDocument(readTomlFile(configFile), configFile));
  }
  return table;
}

}  // namespace parley::cli
