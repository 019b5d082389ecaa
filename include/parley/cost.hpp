// What a reply costs: a price table per model (USD per million tokens) and the arithmetic that
// turns a reply's usage into dollars.
//
// Prices are TOML, one table per model (the shipped file data/prices.toml, a user's file, or the
// `[prices]` tables of the command line's config file):
//
//   [prices]
//   as_of = 2025-08-15            # optional: when the prices were read off the providers' pages
//   [prices."gpt-4o-mini"]        # USD per million tokens
//   input = 0.15                  # required
//   cached_input = 0.075          # cache reads; default: input
//   cache_write = 0.1875          # cache writes; default: input
//   output = 0.60                 # required
//   reasoning = 0.60              # reasoning tokens; default: output
//
// A model is looked up by its exact name, then by the longest name in the table that is a prefix
// of it ending at a separator ('-', '_', ':', '@', '.', '/'): "gpt-4o-mini" prices
// "gpt-4o-mini-2024-07-18", "gpt-4" does not price "gpt-4o". A model the table does not know is
// unpriced (std::nullopt), never free.
//
// Budgets (CostBudget, checkBudget) bound what a run or a thread may spend: before a model call
// the call's worst case (the exact prompt count at the input price, the max_tokens bound at the
// output price) is added to what was spent, and a call that could go over is refused
// (BudgetExceeded) before anything is sent.
//
// Thread-safety: PriceTable and CostBudget are values; const methods are safe from several
// threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"
#include "parley/tokens.hpp"
#include "parley/usage.hpp"

namespace parley {

// Caps on a price file: a bigger file or more entries is a mistake (or not a price file).
inline constexpr std::size_t kMaxPriceFileBytes = std::size_t{256} << 10;
inline constexpr std::size_t kMaxPriceEntries = 2000;
inline constexpr std::size_t kMaxPricedModelNameBytes = 256;

// USD per million tokens, and per thousand provider-run web searches.
struct ModelPrice {
  double input = 0;
  std::optional<double> cachedInput;  // cache reads; nullopt: billed as input
  std::optional<double> cacheWrite;   // cache writes; nullopt: billed as input
  double output = 0;
  std::optional<double> reasoning;  // reasoning tokens; nullopt: billed as output
  // USD per 1 000 web searches the provider ran for a reply (server_tools.hpp webSearchCount),
  // billed per call on top of the tokens; nullopt: not priced (counted as free).
  std::optional<double> webSearch;

  bool operator==(const ModelPrice&) const = default;
};

// A reply's tokens by how they are billed, from usage in the one meaning every protocol reports
// (docs/protocols.md, "Usage, one meaning"): prompt_tokens counts cached reads and writes,
// completion_tokens counts reasoning.
struct BilledTokens {
  int64_t input = 0;        // prompt tokens neither read from nor written to the cache
  int64_t cachedInput = 0;  // prompt_tokens_details.cached_tokens
  int64_t cacheWrite = 0;   // prompt_tokens_details.cache_creation_tokens
  int64_t output = 0;       // completion tokens that are not reasoning
  int64_t reasoning = 0;    // completion_tokens_details.reasoning_tokens
};

BilledTokens billedTokens(const TokenUsage& usage);

// USD for `tokens` at `price`.
double costOf(const BilledTokens& tokens, const ModelPrice& price);
double costOf(const TokenUsage& usage, const ModelPrice& price);
// USD for the web searches the provider ran for one reply (0 when webSearch is unpriced).
double webSearchCost(const Message& reply, const ModelPrice& price);
// USD for one reply: its usage (none: 0) and its web searches.
double costOf(const Message& reply, const ModelPrice& price);

class PriceTable {
 public:
  PriceTable() = default;

  // The `prices` table of a parsed TOML document (toml.hpp's parseToml/readTomlFile); a document
  // without one gives an empty table. ValidationError naming `source` and the entry for a price
  // that is not a non-negative number, a missing input or output, an unknown key, a model name
  // longer than kMaxPricedModelNameBytes, more than kMaxPriceEntries models.
  static PriceTable fromDocument(const nlohmann::json& document, const std::string& source);
  // Reads a price file (at most kMaxPriceFileBytes): the rules of fromDocument.
  static PriceTable fromFile(const std::string& path);
  // The shipped table (data/prices.toml, installed as <datadir>/parley/prices.toml), found on
  // tokens.hpp's vocabularySearchPath(); nullopt when no directory there has it.
  static std::optional<std::filesystem::path> shippedFile();

  // Adds or replaces a model's price.
  void set(std::string model, ModelPrice price);
  // Adds or replaces every price of `over` (and takes its as_of when it has one).
  void merge(const PriceTable& over);
  // Exact name, then the longest prefix ending at a separator (see above); nullopt: unpriced.
  std::optional<ModelPrice> find(std::string_view model) const;
  // USD for one reply of `model`; nullopt when the model is unpriced.
  std::optional<double> cost(std::string_view model, const TokenUsage& usage) const;
  // USD for one reply of `model`, its web searches included; nullopt when the model is unpriced.
  std::optional<double> cost(std::string_view model, const Message& reply) const;
  // USD for the replies among `messages` (their usage and web searches), all of `model`: a
  // turn's cost. nullopt when the model is unpriced; 0 when no message carries usage.
  std::optional<double> cost(std::string_view model, std::span<const Message> messages) const;

  std::size_t size() const noexcept { return prices_.size(); }
  bool empty() const noexcept { return prices_.empty(); }
  // The table's `as_of` date as written ("" when it has none).
  const std::string& asOf() const noexcept { return asOf_; }

 private:
  std::map<std::string, ModelPrice, std::less<>> prices_;
  std::string asOf_;
};

// Spending that several conversations share under one limit (CostBudget::shared): a durable-run
// worker's runs over the worker's lifetime. A call reserves its worst case before it is sent, so
// calls running at once cannot together go over, and settles at what it cost once it returns.
// Thread-safety: every method may be called from any thread.
class SharedSpending {
 public:
  // Reserves `worstCase` USD for one call. Throws BudgetExceeded naming `name` (e.g.
  // "maxCostPerWorker") when what was spent, what other calls reserved and `worstCase` together
  // exceed `limit`; nothing is reserved then.
  void reserve(const std::string& name, double limit, double worstCase);
  // Ends a reservation of `reserved` USD: `cost` (what the call cost) is spent instead.
  void settle(double reserved, double cost);
  double spent() const;      // settled calls
  double committed() const;  // settled calls and the reservations of calls under way

 private:
  mutable std::mutex mutex_;
  double spent_ = 0;
  double reserved_ = 0;
};

// Spending limits in USD (ConversationOptions::budget). No limit set: nothing is checked.
struct CostBudget {
  std::shared_ptr<const PriceTable> prices;  // required with a limit
  // The model priced when a call's request names none (the client's default model).
  std::string model;
  std::optional<double> maxCostPerRun;     // a run: the replies after the view's last user prompt
  std::optional<double> maxCostPerThread;  // every reply in the history, hidden ones included
  // A limit shared with other conversations: `shared` keeps what they spent together (every
  // call reserves its worst case there before it is sent, and settles at its usage's cost, or 0
  // when it fails; a reply without usage stays at its worst case). Refused as `sharedName`.
  std::optional<double> maxCostShared;
  std::shared_ptr<SharedSpending> shared;
  std::string sharedName = "maxCostShared";
  // The output bound of a call whose request sets no max_tokens: sent as its max_tokens, so
  // the worst case checked is the one that can happen.
  int64_t defaultMaxTokens = 4096;

  bool limited() const noexcept {
    return maxCostPerRun || maxCostPerThread || (maxCostShared && shared);
  }
};

// One call about to be sent.
struct BudgetCall {
  std::string model;       // as priced (the request's, else CostBudget::model)
  TokenCount prompt;       // the exact prompt count (an estimate without a vocabulary)
  int64_t maxTokens = 0;   // the max_tokens bound sent
  double spentRun = 0;     // USD the run's replies cost so far
  double spentThread = 0;  // USD the thread's replies cost so far
  double spentShared = 0;  // USD committed in CostBudget::shared so far
};

// The most one call can cost: `promptTokens` at the dearer of input and cache writes (no cache
// reads assumed), `maxOutputTokens` at the dearer of output and reasoning.
double worstCaseCost(int64_t promptTokens, int64_t maxOutputTokens, const ModelPrice& price);

// Checks `call` against every limit of `budget` and returns the call's worst case in USD.
// Throws BudgetExceeded (errors.hpp) naming the budget, its limit and the estimate (spent + the
// call's worst case) when the call could go over one, or when the model is unpriced (a budget
// cannot be kept then): nothing should be sent. The check ConversationManager makes before every
// call, callable alone for loops that keep their own spending (a durable-run worker's).
double checkBudget(const CostBudget& budget, const BudgetCall& call);

// "$0.000123" (six decimals below a dollar, else cents); "unpriced" for nullopt.
std::string formatUsd(std::optional<double> usd);

}  // namespace parley
