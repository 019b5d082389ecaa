// Token usage as an API reports it.
//
// Thread-safety: a value; no shared state.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace parley {

struct TokenUsage {
  int64_t promptTokens = 0;
  int64_t completionTokens = 0;
  int64_t totalTokens = 0;
  nlohmann::json raw;  // the usage object exactly as the server sent it (details, cache hits, ...)

  bool operator==(const TokenUsage&) const = default;
};

// Reads an OpenAI `usage` object. Missing numbers are 0; total defaults to prompt + completion.
// Returns nullopt for null or a non-object.
std::optional<TokenUsage> usageFromJson(const nlohmann::json& value);
nlohmann::json toJson(const TokenUsage& usage);
// Adds `usage` to a running sum of calls. The sum's total is its prompt + completion, whatever
// totals the servers reported (some count cached or reasoning tokens in it); raw is untouched.
// Sums saturate at 2^63-1 instead of overflowing (usageFromJson reads counts as 0..2^63-1).
void addUsage(TokenUsage& sum, const TokenUsage& usage);

}  // namespace parley
