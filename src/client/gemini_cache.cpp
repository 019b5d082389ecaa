#include "client/gemini_cache.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client/http_transport.hpp"
#include "client/model_list.hpp"
#include "client/request_body.hpp"
#include "parley/errors.hpp"
#include "parley/iso_time.hpp"

namespace parley::detail {

namespace {

using ojson = nlohmann::ordered_json;
using CacheClock = std::chrono::system_clock;

// A cache this close to its expiry is not used: the request could reach the server after it.
constexpr auto kExpiryMargin = std::chrono::minutes(1);

struct MadeCache {
  std::string name;
  std::vector<std::size_t> contents;  // the hashes of the contents it holds
  CacheClock::time_point expires;
};

struct Slot {
  std::vector<std::size_t> previous;  // the hashes of the previous request's contents
  std::optional<MadeCache> cache;
  std::list<std::size_t>::iterator recent;
};

std::size_t hashOf(const ojson& value) {
  return std::hash<std::string>{}(value.dump());
}

}  // namespace

std::string geminiCacheTtl(const std::string& ttl, const std::string& field) {
  if (ttl.empty()) return "";
  std::size_t digits = 0;
  while (digits < ttl.size() && std::isdigit(static_cast<unsigned char>(ttl[digits])))
    ++digits;
  const std::string unit = ttl.substr(digits);
  long long factor = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
  if (digits == 0 || digits > 9 || factor == 0) {
    throw ValidationError(
        field, "must be a duration such as \"300s\", \"5m\" or \"1h\" (got \"" + ttl + "\")");
  }
  const long long seconds = std::stoll(ttl.substr(0, digits)) * factor;
  if (seconds <= 0) throw ValidationError(field, "must be longer than 0 seconds");
  return std::to_string(seconds) + "s";
}

struct GeminiCaches::State {
  State(const ClientOptions& o, HttpTransport& t, std::span<const std::string> h)
      : options(o),
        transport(t),
        headers(h),
        ttl(geminiCacheTtl(o.promptCache.ttl, "options.promptCache.ttl")) {}

  const ClientOptions& options;
  HttpTransport& transport;
  std::span<const std::string> headers;
  std::string ttl;
  std::mutex mutex;
  std::unordered_map<std::size_t, Slot> slots;
  std::list<std::size_t> recent;  // slot keys, most recently used first

  CacheClock::time_point now() const { return options.now ? options.now() : CacheClock::now(); }

  std::string cacheUrl(const std::string& path) const { return joinUrl(options.baseUrl, path); }

  Slot& slotFor(std::size_t key) {
    auto it = slots.find(key);
    if (it != slots.end()) {
      recent.splice(recent.begin(), recent, it->second.recent);
      return it->second;
    }
    if (slots.size() >= kMaxGeminiCacheSlots) {
      slots.erase(recent.back());
      recent.pop_back();
    }
    recent.push_front(key);
    Slot& slot = slots[key];
    slot.recent = recent.begin();
    return slot;
  }

  std::optional<MadeCache> create(const ojson& body, const std::string& model,
                                  const std::vector<std::size_t>& hashes, std::size_t count,
                                  std::optional<std::chrono::milliseconds> timeout,
                                  std::stop_token stop) {
    ojson cache;
    cache["model"] = "models/" + model;
    ojson contents = ojson::array();
    for (std::size_t i = 0; i < count; ++i)
      contents.push_back(body["contents"][i]);
    cache["contents"] = std::move(contents);
    for (const char* key : {"systemInstruction", "tools", "toolConfig"}) {
      if (body.contains(key)) cache[key] = body[key];
    }
    if (!ttl.empty()) cache["ttl"] = ttl;
    const std::string text = cache.dump();
    const std::string url = cacheUrl("/cachedContents");
    JsonReplyReader reader(redactUrl(url));
    try {
      transport.send(HttpRequest{url, text, headers, false, timeout, stop}, reader);
    } catch (const CancelledError&) {
      throw;
    } catch (const Error&) {
      return std::nullopt;  // too small for the model, a quota: the request goes whole
    }
    const nlohmann::json& made = reader.value();
    if (!made.is_object() || !made.contains("name") || !made["name"].is_string()) {
      return std::nullopt;
    }
    MadeCache out{made["name"].get<std::string>(),
                  std::vector<std::size_t>(hashes.begin(),
                                           hashes.begin() + static_cast<std::ptrdiff_t>(count)),
                  {}};
    std::optional<CacheClock::time_point> expires;
    if (made.contains("expireTime") && made["expireTime"].is_string()) {
      expires = parseIsoTime(made["expireTime"].get<std::string>());
    }
    out.expires = expires ? *expires : now() + std::chrono::hours(1);
    return out;
  }
};

GeminiCaches::GeminiCaches(const ClientOptions& options, HttpTransport& transport,
                           std::span<const std::string> headers)
    : state_(std::make_unique<State>(options, transport, headers)) {}

GeminiCaches::~GeminiCaches() = default;

std::string GeminiCaches::apply(ojson& body, const std::string& model,
                                std::optional<std::chrono::milliseconds> timeout,
                                std::stop_token stop) {
  State& s = *state_;
  if (body.contains("cachedContent") || !body.contains("contents") ||
      !body["contents"].is_array() || body["contents"].empty()) {
    return "";
  }
  const ojson& contents = body["contents"];
  std::vector<std::size_t> hashes;
  hashes.reserve(contents.size());
  for (const ojson& c : contents)
    hashes.push_back(hashOf(c));
  // A conversation: its model, what would go in the cache besides contents, its first content.
  ojson head = ojson::array({model, body.value("systemInstruction", ojson()),
                             body.value("tools", ojson()), body.value("toolConfig", ojson())});
  const std::size_t key = hashOf(head) ^ (hashes.empty() ? 0 : hashes.front() * 31);

  std::optional<MadeCache> use;
  std::size_t stable = 0;
  {
    std::lock_guard lock(s.mutex);
    Slot& slot = s.slotFor(key);
    const CacheClock::time_point now = s.now();
    if (slot.cache) {
      const MadeCache& c = *slot.cache;
      const bool prefix = c.contents.size() < hashes.size() &&
                          std::equal(c.contents.begin(), c.contents.end(), hashes.begin());
      // One that is no longer a prefix (an edited thread) is left to its TTL: deleting it
      // would save a few minutes of storage at the price of a call.
      if (prefix && now + kExpiryMargin < c.expires) {
        use = c;
      } else {
        slot.cache.reset();
      }
    }
    if (!use) {
      // The diagnostic's measure: the leading contents the previous request had too; the last
      // content always goes with the request itself.
      const std::size_t limit = std::min(slot.previous.size(), hashes.size() - 1);
      while (stable < limit && slot.previous[stable] == hashes[stable])
        ++stable;
    }
    slot.previous = hashes;
  }
  if (!use && stable > 0) {
    std::size_t bytes = head.dump().size();
    for (std::size_t i = 0; i < stable; ++i)
      bytes += contents[i].dump().size();
    if (static_cast<int64_t>((bytes + 3) / 4) >= kGeminiCacheMinTokens) {
      use = s.create(body, model, hashes, stable, timeout, stop);
      if (use) {
        std::lock_guard lock(s.mutex);
        Slot& slot = s.slotFor(key);
        if (!slot.cache) slot.cache = use;
      }
    }
  }
  if (!use) return "";
  ojson rest = ojson::array();
  for (std::size_t i = use->contents.size(); i < contents.size(); ++i)
    rest.push_back(contents[i]);
  body["contents"] = std::move(rest);
  for (const char* field : {"systemInstruction", "tools", "toolConfig"})
    body.erase(field);
  body["cachedContent"] = use->name;
  return use->name;
}

void GeminiCaches::forget(const std::string& name) {
  std::lock_guard lock(state_->mutex);
  for (auto& [key, slot] : state_->slots) {
    if (slot.cache && slot.cache->name == name) slot.cache.reset();
  }
}

}  // namespace parley::detail
