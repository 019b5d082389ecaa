#include "parley/usage.hpp"

namespace parley {

namespace {

int64_t count(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return 0;
  return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
}

}  // namespace

std::optional<TokenUsage> usageFromJson(const nlohmann::json& value) {
  if (!value.is_object()) return std::nullopt;
  TokenUsage usage;
  usage.promptTokens = count(value, "prompt_tokens");
  usage.completionTokens = count(value, "completion_tokens");
  usage.totalTokens = value.contains("total_tokens") ? count(value, "total_tokens")
                                                     : usage.promptTokens + usage.completionTokens;
  usage.raw = value;
  return usage;
}

void addUsage(TokenUsage& sum, const TokenUsage& usage) {
  sum.promptTokens += usage.promptTokens;
  sum.completionTokens += usage.completionTokens;
  sum.totalTokens = sum.promptTokens + sum.completionTokens;
}

nlohmann::json toJson(const TokenUsage& usage) {
  if (usage.raw.is_object()) return usage.raw;
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.totalTokens}};
}

}  // namespace parley
