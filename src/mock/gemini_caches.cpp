#include "mock/gemini_caches.hpp"

#include <cmath>
#include <optional>

#include "parley/iso_time.hpp"

namespace parley::mock {

namespace {

using nlohmann::json;

// A protobuf Duration as JSON writes it ("300s", "1.5s"); nullopt if it is not one.
std::optional<std::chrono::milliseconds> cacheTtlOf(const json& value) {
  if (!value.is_string()) return std::nullopt;
  std::string text = value.get<std::string>();
  if (text.size() < 2 || text.back() != 's') return std::nullopt;
  text.pop_back();
  std::size_t used = 0;
  double seconds = 0;
  try {
    seconds = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || !std::isfinite(seconds) || seconds < 0 || seconds > 1e10)
    return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

[[noreturn]] void missingCache() {
  throw GeminiCacheError(403, "CachedContent not found (or permission denied)");
}

}  // namespace

void GeminiCacheStore::dropExpired(Clock::time_point now) {
  for (auto it = caches_.begin(); it != caches_.end();)
    it = it->second.expires <= now ? caches_.erase(it) : std::next(it);
}

GeminiCacheStore::Cache& GeminiCacheStore::live(const std::string& name, Clock::time_point now) {
  dropExpired(now);
  auto it = caches_.find(name);
  if (it == caches_.end()) missingCache();
  return it->second;
}

json GeminiCacheStore::create(const json& body, Clock::time_point now, const TokenCount& count) {
  dropExpired(now);
  if (!body.is_object()) throw GeminiCacheError(400, "the body is not a CachedContent object");
  const std::string model = body.value("model", "");
  if (model.rfind("models/", 0) != 0 || model.size() == 7) {
    throw GeminiCacheError(400, "* CachedContent.model: model must be \"models/{model}\"");
  }
  if (body.contains("ttl") && body.contains("expireTime")) {
    throw GeminiCacheError(400, "* CachedContent: only one of ttl and expire_time may be set");
  }
  Clock::time_point expires = now + std::chrono::hours(1);  // Google's default TTL
  if (body.contains("ttl")) {
    const auto ttl = cacheTtlOf(body["ttl"]);
    if (!ttl) throw GeminiCacheError(400, "Invalid value at 'cached_content.ttl'");
    expires = now + *ttl;
  } else if (body.contains("expireTime")) {
    const auto at = body["expireTime"].is_string()
                        ? parseIsoTime(body["expireTime"].get<std::string>())
                        : std::nullopt;
    if (!at) throw GeminiCacheError(400, "Invalid value at 'cached_content.expire_time'");
    expires = *at;
  }
  if (expires <= now) throw GeminiCacheError(400, "expire_time must be in the future");
  if (caches_.size() >= options_.maxCaches) {
    throw GeminiCacheError(429, "Quota exceeded for cached contents");
  }
  json content = json::object();
  for (const char* key : {"contents", "systemInstruction", "tools", "toolConfig"}) {
    if (body.contains(key)) content[key] = body[key];
  }
  if (!content.contains("contents") || !content["contents"].is_array() ||
      content["contents"].empty()) {
    // The mock counts a cache as the request it stands for: it needs contents.
    throw GeminiCacheError(400, "* CachedContent.contents: contents is not specified");
  }
  const std::int64_t tokens = count(content, model.substr(7));
  if (tokens < options_.minTokens) {
    throw GeminiCacheError(
        400, "Cached content is too small. total_token_count=" + std::to_string(tokens) +
                 ", min_total_token_count=" + std::to_string(options_.minTokens));
  }
  const std::string name = "cachedContents/mockcache" + std::to_string(++next_);
  json resource = {{"name", name},
                   {"model", model},
                   {"createTime", isoTime(now)},
                   {"updateTime", isoTime(now)},
                   {"expireTime", isoTime(expires)},
                   {"usageMetadata", {{"totalTokenCount", tokens}}}};
  if (body.contains("displayName")) resource["displayName"] = body["displayName"];
  caches_[name] = Cache{resource, std::move(content), tokens, expires};
  return resource;
}

json GeminiCacheStore::get(const std::string& name, Clock::time_point now) {
  return live(name, now).resource;
}

void GeminiCacheStore::remove(const std::string& name, Clock::time_point now) {
  live(name, now);
  caches_.erase(name);
}

json GeminiCacheStore::expand(const json& body, const std::string& model, Clock::time_point now,
                              std::int64_t& tokens) {
  tokens = 0;
  if (!body.is_object() || !body.contains("cachedContent")) return body;
  const std::string name =
      body["cachedContent"].is_string() ? body["cachedContent"].get<std::string>() : "";
  const Cache& cache = live(name, now);
  if (cache.resource["model"] != "models/" + model) {
    throw GeminiCacheError(
        400, "Model used by GenerateContent request (models/" + model + ") and CachedContent (" +
                 cache.resource["model"].get<std::string>() + ") has to be the same.");
  }
  for (const char* key : {"systemInstruction", "tools", "toolConfig"}) {
    if (body.contains(key)) {
      throw GeminiCacheError(400,
                             "CachedContent can not be used with GenerateContent request setting "
                             "system_instruction, tools or tool_config.\n\nProposed fix: move "
                             "those values to CachedContent from GenerateContent request.");
    }
  }
  json out = body;
  out.erase("cachedContent");
  json contents = cache.content["contents"];
  for (const json& c : body.value("contents", json::array()))
    contents.push_back(c);
  out["contents"] = std::move(contents);
  for (const char* key : {"systemInstruction", "tools", "toolConfig"}) {
    if (cache.content.contains(key)) out[key] = cache.content[key];
  }
  tokens = cache.tokens;
  return out;
}

}  // namespace parley::mock
