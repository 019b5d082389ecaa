#include "parley/cost.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <system_error>
#include <vector>

#include "parley/errors.hpp"
#include "parley/server_tools.hpp"
#include "parley/tokens.hpp"
#include "parley/toml.hpp"

namespace parley {

namespace {

int64_t countAt(const nlohmann::json& raw, const char* object, const char* key) {
  if (!raw.is_object()) return 0;
  auto details = raw.find(object);
  if (details == raw.end() || !details->is_object()) return 0;
  auto it = details->find(key);
  if (it == details->end() || !it->is_number()) return 0;
  const int64_t n =
      it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
  return std::max<int64_t>(n, 0);
}

bool isSeparator(char c) {
  return c == '-' || c == '_' || c == ':' || c == '@' || c == '.' || c == '/';
}

double priceField(const nlohmann::json& value, const std::string& field) {
  if (!value.is_number()) throw ValidationError(field, "must be a number (USD per million tokens)");
  const double price = value.get<double>();
  if (!std::isfinite(price) || price < 0) {
    throw ValidationError(field, "must be a non-negative number (USD per million tokens)");
  }
  return price;
}

ModelPrice priceOf(const nlohmann::json& entry, const std::string& field) {
  if (!entry.is_object()) throw ValidationError(field, "must be a table of prices");
  ModelPrice price;
  bool input = false;
  bool output = false;
  for (const auto& [key, value] : entry.items()) {
    const std::string at = field + "." + key;
    if (key == "input") {
      price.input = priceField(value, at);
      input = true;
    } else if (key == "output") {
      price.output = priceField(value, at);
      output = true;
    } else if (key == "cached_input") {
      price.cachedInput = priceField(value, at);
    } else if (key == "cache_write") {
      price.cacheWrite = priceField(value, at);
    } else if (key == "reasoning") {
      price.reasoning = priceField(value, at);
    } else if (key == "web_search") {
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
        throw ValidationError(at, "must be a non-negative number (USD per 1 000 web searches)");
      }
      price.webSearch = value.get<double>();
    } else {
      throw ValidationError(at,
                            "unknown price (expected input, cached_input, cache_write, "
                            "output, reasoning, web_search)");
    }
  }
  // A missing price is not a zero one: an entry must say what input and output cost.
  if (!input) throw ValidationError(field + ".input", "is required");
  if (!output) throw ValidationError(field + ".output", "is required");
  return price;
}

}  // namespace

BilledTokens billedTokens(const TokenUsage& usage) {
  BilledTokens out;
  out.cachedInput = countAt(usage.raw, "prompt_tokens_details", "cached_tokens");
  out.cacheWrite = countAt(usage.raw, "prompt_tokens_details", "cache_creation_tokens");
  out.input = std::max<int64_t>(usage.promptTokens - out.cachedInput - out.cacheWrite, 0);
  out.reasoning = countAt(usage.raw, "completion_tokens_details", "reasoning_tokens");
  out.output = std::max<int64_t>(usage.completionTokens - out.reasoning, 0);
  return out;
}

double costOf(const BilledTokens& tokens, const ModelPrice& price) {
  const auto usd = [](int64_t count, double perMillion) {
    return static_cast<double>(count) * perMillion / 1e6;
  };
  return usd(tokens.input, price.input) +
         usd(tokens.cachedInput, price.cachedInput.value_or(price.input)) +
         usd(tokens.cacheWrite, price.cacheWrite.value_or(price.input)) +
         usd(tokens.output, price.output) +
         usd(tokens.reasoning, price.reasoning.value_or(price.output));
}

double costOf(const TokenUsage& usage, const ModelPrice& price) {
  return costOf(billedTokens(usage), price);
}

double webSearchCost(const Message& reply, const ModelPrice& price) {
  if (!price.webSearch || reply.role != Role::Assistant) return 0;
  return static_cast<double>(webSearchCount(reply)) * *price.webSearch / 1000;
}

double costOf(const Message& reply, const ModelPrice& price) {
  return (reply.usage ? costOf(*reply.usage, price) : 0) + webSearchCost(reply, price);
}

PriceTable PriceTable::fromDocument(const nlohmann::json& document, const std::string& source) {
  PriceTable table;
  if (!document.is_object()) return table;
  auto prices = document.find("prices");
  if (prices == document.end()) return table;
  if (!prices->is_object()) throw ValidationError(source + ": prices", "must be a table");
  for (const auto& [model, entry] : prices->items()) {
    const std::string field = source + ": prices." + model;
    if (model == "as_of" && !entry.is_object()) {
      if (!entry.is_string()) throw ValidationError(field, "must be a date");
      table.asOf_ = entry.get<std::string>();
      continue;
    }
    if (model.empty()) throw ValidationError(field, "a model name cannot be empty");
    if (model.size() > kMaxPricedModelNameBytes) {
      throw ValidationError(
          source + ": prices",
          "a model name is longer than " + std::to_string(kMaxPricedModelNameBytes) + " bytes");
    }
    if (table.prices_.size() == kMaxPriceEntries) {
      throw ValidationError(source + ": prices",
                            "more than " + std::to_string(kMaxPriceEntries) + " models");
    }
    table.prices_.emplace(model, priceOf(entry, field));
  }
  return table;
}

PriceTable PriceTable::fromFile(const std::string& path) {
  return fromDocument(readTomlFile(path, kMaxPriceFileBytes), path);
}

std::optional<std::filesystem::path> PriceTable::shippedFile() {
  for (const std::filesystem::path& dir : vocabularySearchPath()) {
    std::filesystem::path file = dir / "prices.toml";
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec)) return file;
  }
  return std::nullopt;
}

void PriceTable::set(std::string model, ModelPrice price) {
  prices_.insert_or_assign(std::move(model), price);
}

void PriceTable::merge(const PriceTable& over) {
  for (const auto& [model, price] : over.prices_)
    prices_.insert_or_assign(model, price);
  if (!over.asOf_.empty()) asOf_ = over.asOf_;
}

std::optional<ModelPrice> PriceTable::find(std::string_view model) const {
  if (auto it = prices_.find(model); it != prices_.end()) return it->second;
  // Longest first: walk back from the cut points of `model`, each a separator.
  for (std::size_t cut = model.size(); cut-- > 0;) {
    if (!isSeparator(model[cut])) continue;
    if (auto it = prices_.find(model.substr(0, cut)); it != prices_.end()) return it->second;
  }
  return std::nullopt;
}

std::optional<double> PriceTable::cost(std::string_view model, const TokenUsage& usage) const {
  auto price = find(model);
  if (!price) return std::nullopt;
  return costOf(usage, *price);
}

std::optional<double> PriceTable::cost(std::string_view model, const Message& reply) const {
  auto price = find(model);
  if (!price) return std::nullopt;
  return costOf(reply, *price);
}

std::optional<double> PriceTable::cost(std::string_view model,
                                       std::span<const Message> messages) const {
  auto price = find(model);
  if (!price) return std::nullopt;
  double sum = 0;
  for (const Message& message : messages)
    sum += costOf(message, *price);
  return sum;
}

double worstCaseCost(int64_t promptTokens, int64_t maxOutputTokens, const ModelPrice& price) {
  const double in = std::max(price.input, price.cacheWrite.value_or(price.input));
  const double out = std::max(price.output, price.reasoning.value_or(price.output));
  return (static_cast<double>(promptTokens) * in + static_cast<double>(maxOutputTokens) * out) /
         1e6;
}

double checkBudget(const CostBudget& budget, const BudgetCall& call) {
  struct Limit {
    const char* name;
    double limit;
    double spent;
    const char* scope;
  };
  std::vector<Limit> limits;
  if (budget.maxCostPerRun) {
    limits.push_back({"maxCostPerRun", *budget.maxCostPerRun, call.spentRun, "this run"});
  }
  if (budget.maxCostPerThread) {
    limits.push_back(
        {"maxCostPerThread", *budget.maxCostPerThread, call.spentThread, "this thread"});
  }
  if (budget.maxCostShared && budget.shared) {
    limits.push_back(
        {budget.sharedName.c_str(), *budget.maxCostShared, call.spentShared, "the shared budget"});
  }
  if (limits.empty()) return 0;
  const std::optional<ModelPrice> price =
      budget.prices ? budget.prices->find(call.model) : std::nullopt;
  if (!price) {
    const Limit& first = limits.front();
    throw BudgetExceeded(first.name, first.limit, std::numeric_limits<double>::infinity(),
                         std::string(first.name) + " of " + formatUsd(first.limit) +
                             " cannot be kept: model " + call.model +
                             " has no price (give one with --prices or a [prices] table); "
                             "nothing was sent");
  }
  const double bound = worstCaseCost(call.prompt.tokens, call.maxTokens, *price);
  for (const Limit& limit : limits) {
    const double estimate = limit.spent + bound;
    // A relative tolerance: sums of per-reply costs carry rounding in the last digits.
    if (estimate <= limit.limit * (1 + 1e-12)) continue;
    throw BudgetExceeded(limit.name, limit.limit, estimate,
                         std::string(limit.name) + " of " + formatUsd(limit.limit) +
                             " would be exceeded: " + formatUsd(limit.spent) + " spent in " +
                             limit.scope + " + up to " + formatUsd(bound) + " for this call (" +
                             std::to_string(call.prompt.tokens) + " prompt tokens" +
                             (call.prompt.estimate ? ", estimated," : "") + " and max_tokens " +
                             std::to_string(call.maxTokens) + " of " + call.model +
                             ") = " + formatUsd(estimate) + "; nothing was sent");
  }
  return bound;
}

void SharedSpending::reserve(const std::string& name, double limit, double worstCase) {
  std::lock_guard lock(mutex_);
  const double estimate = spent_ + reserved_ + worstCase;
  if (estimate > limit * (1 + 1e-12)) {
    throw BudgetExceeded(name, limit, estimate,
                         name + " of " + formatUsd(limit) +
                             " would be exceeded: " + formatUsd(spent_ + reserved_) +
                             " spent or reserved + up to " + formatUsd(worstCase) +
                             " for this call = " + formatUsd(estimate) + "; nothing was sent");
  }
  reserved_ += worstCase;
}

void SharedSpending::settle(double reserved, double cost) {
  std::lock_guard lock(mutex_);
  reserved_ = std::max(0.0, reserved_ - reserved);
  spent_ += cost;
}

double SharedSpending::spent() const {
  std::lock_guard lock(mutex_);
  return spent_;
}

double SharedSpending::committed() const {
  std::lock_guard lock(mutex_);
  return spent_ + reserved_;
}

std::string formatUsd(std::optional<double> usd) {
  if (!usd) return "unpriced";
  std::ostringstream out;
  out << "$" << std::fixed << std::setprecision(*usd < 1 ? 6 : 2) << *usd;
  return out.str();
}

}  // namespace parley
