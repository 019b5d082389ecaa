#include "parley/usage.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace parley {

namespace {

constexpr int64_t kMost = std::numeric_limits<int64_t>::max();

// A count as a server wrote it, within 0..2^63-1: a negative one is none, a larger one (an
// unsigned or a double past int64_t, which a cast would wrap or make undefined) is the most.
int64_t count(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return 0;
  if (it->is_number_unsigned())
    return it->get<uint64_t>() > static_cast<uint64_t>(kMost) ? kMost : it->get<int64_t>();
  if (it->is_number_integer()) return std::max<int64_t>(it->get<int64_t>(), 0);
  const double value = it->get<double>();
  if (!(value > 0)) return 0;  // NaN too
  return value >= 9.2e18 ? kMost : static_cast<int64_t>(value);
}

// Counts add up to at most 2^63-1: a sum of many calls (or one hostile reply) saturates rather
// than wrapping to a negative total.
int64_t plus(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    return b > 0 ? kMost : std::numeric_limits<int64_t>::min();
  return sum;
}

}  // namespace

std::optional<TokenUsage> usageFromJson(const nlohmann::json& value) {
  if (!value.is_object()) return std::nullopt;
  TokenUsage usage;
  usage.promptTokens = count(value, "prompt_tokens");
  usage.completionTokens = count(value, "completion_tokens");
  usage.totalTokens = value.contains("total_tokens")
                          ? count(value, "total_tokens")
                          : plus(usage.promptTokens, usage.completionTokens);
  usage.raw = value;
  return usage;
}

void addUsage(TokenUsage& sum, const TokenUsage& usage) {
  sum.promptTokens = plus(sum.promptTokens, usage.promptTokens);
  sum.completionTokens = plus(sum.completionTokens, usage.completionTokens);
  sum.totalTokens = plus(sum.promptTokens, sum.completionTokens);
}

nlohmann::json toJson(const TokenUsage& usage) {
  if (usage.raw.is_object()) return usage.raw;
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.totalTokens}};
}

}  // namespace parley
