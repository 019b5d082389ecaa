#include "executor/response_cache.hpp"

#include <functional>
#include <random>

#include "client/request_body.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

namespace {

size_t hashOf(std::string_view key) noexcept {
  return std::hash<std::string_view>{}(key);
}

}  // namespace

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity) {
  if (capacity == 0) throw ValidationError("capacity", "must be at least 1");
}

std::optional<ChatResult> ResponseCache::find(std::string_view key) {
  const KeyRef ref{hashOf(key), key};
  std::shared_ptr<const ChatResult> value;
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(ref);
    if (it == index_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    order_.splice(order_.begin(), order_, it->second);
    ++stats_.hits;
    value = it->second->value;
  }
  return *value;  // copied outside the lock
}

void ResponseCache::insert(std::string key, ChatResult value) {
  const size_t hash = hashOf(key);
  auto stored = std::make_shared<const ChatResult>(std::move(value));
  std::list<Entry> evicted;  // destroyed after the lock is released
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(KeyRef{hash, key}); it != index_.end()) {
    // The same request again: the newer reply wins. The key stays, as the index points into it.
    std::swap(it->second->value, stored);
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  if (order_.size() == capacity_) {
    const Entry& oldest = order_.back();
    index_.erase(KeyRef{oldest.hash, oldest.key});
    evicted.splice(evicted.begin(), order_, std::prev(order_.end()));
    ++stats_.evictions;
  }
  order_.push_front(Entry{hash, std::move(key), std::move(stored)});
  index_.emplace(KeyRef{hash, order_.front().key}, order_.begin());
}

ResponseCache::Stats ResponseCache::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.size = order_.size();
  return s;
}

namespace {

// "call_" and 24 random letters and digits, the shape OpenAI's ids have.
std::string freshToolCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i)
    id += kAlphabet[pick(random)];
  return id;
}

void renewToolCallIds(ChatResult& result) {
  if (result.message.toolCalls.empty()) return;
  json* rawCalls = nullptr;
  if (result.raw.is_object()) {
    auto choices = result.raw.find("choices");
    if (choices != result.raw.end() && choices->is_array() && !choices->empty()) {
      json& message = (*choices)[0]["message"];
      if (message.is_object()) {
        auto calls = message.find("tool_calls");
        if (calls != message.end() && calls->is_array()) rawCalls = &*calls;
      }
    }
  }
  for (size_t i = 0; i < result.message.toolCalls.size(); ++i) {
    std::string id = freshToolCallId();
    if (rawCalls && i < rawCalls->size() && (*rawCalls)[i].is_object()) (*rawCalls)[i]["id"] = id;
    result.message.toolCalls[i].id = std::move(id);
  }
}

}  // namespace

CachedLlmClient::CachedLlmClient(std::shared_ptr<LlmClient> inner,
                                 std::shared_ptr<ResponseCache> cache, std::string profileId,
                                 ClientOptions profile)
    : inner_(std::move(inner)),
      cache_(std::move(cache)),
      profileId_(std::move(profileId)),
      profile_(std::move(profile)) {
  profile_.apiKey.clear();  // only the body is needed from it; keep no secret around
}

std::optional<std::string> CachedLlmClient::key(const ChatRequest& request) const {
  std::string body;
  try {
    body = buildRequestBody(request, profile_, /*stream=*/false);
  } catch (const ValidationError&) {
    return std::nullopt;
  }
  std::string key;
  key.reserve(profileId_.size() + profile_.baseUrl.size() + body.size() + 2);
  key.append(profileId_).append(1, '\n').append(profile_.baseUrl).append(1, '\n').append(body);
  return key;
}

std::optional<ChatResult> CachedLlmClient::replay(const std::optional<std::string>& key,
                                                  const ChatRequest& request) {
  if (!key) return std::nullopt;
  std::optional<ChatResult> hit = cache_->find(*key);
  if (!hit) return std::nullopt;
  if (request.stopToken.stop_requested()) throw CancelledError("the model call was cancelled");
  renewToolCallIds(*hit);
  return hit;
}

void CachedLlmClient::store(const std::optional<std::string>& key, const ChatResult& result) {
  // An empty reply is an error to the conversation (ProtocolError): not worth replaying.
  if (!key || (result.message.content.empty() && result.message.toolCalls.empty())) return;
  cache_->insert(*key, result);
}

ChatResult CachedLlmClient::generate(const ChatRequest& request) {
  const std::optional<std::string> k = key(request);
  if (auto hit = replay(k, request)) return std::move(*hit);
  ChatResult result = inner_->generate(request);
  store(k, result);
  return result;
}

ChatResult CachedLlmClient::generateStream(const ChatRequest& request,
                                           const ChunkHandler& onChunk) {
  const std::optional<std::string> k = key(request);
  if (auto hit = replay(k, request)) {
    StreamDelta delta;
    delta.content = hit->message.content;
    if (auto r = hit->message.extra.find("reasoning_content");
        r != hit->message.extra.end() && r->is_string()) {
      delta.reasoning = r->get<std::string>();
    }
    for (size_t i = 0; i < hit->message.toolCalls.size(); ++i) {
      const ToolCall& call = hit->message.toolCalls[i];
      delta.toolCalls.push_back({i, call.id, call.name, call.arguments});
    }
    delta.usage = hit->usage;
    delta.finishReason = hit->reportedFinishReason;
    if (onChunk && !delta.empty() && !onChunk(delta)) {
      throw CancelledError("the stream was stopped by its chunk handler");
    }
    return std::move(*hit);
  }
  ChatResult result = inner_->generateStream(request, onChunk);
  store(k, result);
  return result;
}

MessageJsonOptions CachedLlmClient::messageJsonOptions() const noexcept {
  return inner_->messageJsonOptions();
}

StructuredOutputMode CachedLlmClient::structuredOutputMode() const noexcept {
  return inner_->structuredOutputMode();
}

bool CachedLlmClient::acceptsResponseFormat() const noexcept {
  return inner_->acceptsResponseFormat();
}

}  // namespace parley::detail
