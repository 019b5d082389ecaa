#include "mock/prompt_cache.hpp"

#include <algorithm>
#include <functional>

namespace parley::mock {

using nlohmann::json;

std::int64_t mockTokens(std::size_t bytes) {
  return static_cast<std::int64_t>((bytes + 3) / 4);
}

std::int64_t cachedTokensForPrefix(std::size_t prefixBytes, const PromptCacheOptions& options) {
  const std::int64_t tokens = mockTokens(prefixBytes);
  if (tokens < options.minimum) return 0;
  const std::int64_t block = std::max<std::int64_t>(1, options.block);
  return tokens / block * block;
}

std::string promptCacheKey(const json& body) {
  if (!body.is_object()) return {};
  for (const char* field : {"prompt_cache_key", "user"}) {
    auto it = body.find(field);
    if (it != body.end() && it->is_string())
      return std::string(field) + ":" + it->get<std::string>();
  }
  auto metadata = body.find("metadata");
  if (metadata != body.end() && metadata->is_object()) {
    auto user = metadata->find("user_id");
    if (user != metadata->end() && user->is_string()) return "user:" + user->get<std::string>();
  }
  return {};
}

std::int64_t PromptCache::exchange(const std::string& key, const json& chatBody,
                                   const ChatContext& ctx) {
  if (!options_.enabled || options_.maxKeys == 0) return 0;
  const std::hash<std::string> hash;
  Prompt next;
  auto tools = chatBody.find("tools");
  next.tools = hash(tools != chatBody.end() ? tools->dump() : std::string());
  const json& messages = chatBody.at("messages");
  next.messages.reserve(messages.size());
  for (const auto& m : messages)
    next.messages.push_back(hash(m.dump()));

  std::size_t prefixBytes = 0;
  auto found = prompts_.find(key);
  if (found != prompts_.end()) {
    const Prompt& previous = found->second;
    if (previous.tools == next.tools) {
      const std::size_t n = std::min(previous.messages.size(), next.messages.size());
      for (std::size_t i = 0; i < n && previous.messages[i] == next.messages[i]; ++i) {
        prefixBytes += i < ctx.messageBytes.size() ? ctx.messageBytes[i] : 0;
      }
    }
    recent_.erase(found->second.lru);
    prompts_.erase(found);
  }
  while (prompts_.size() >= options_.maxKeys) {
    prompts_.erase(recent_.back());
    recent_.pop_back();
  }
  recent_.push_front(key);
  next.lru = recent_.begin();
  prompts_.emplace(key, std::move(next));
  return cachedTokensForPrefix(prefixBytes, options_);
}

void PromptCache::clear() {
  prompts_.clear();
  recent_.clear();
}

}  // namespace parley::mock
