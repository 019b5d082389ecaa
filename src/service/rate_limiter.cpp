#include "service/rate_limiter.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace parley::service {

RateLimiter::RateLimiter(double perSecond, double burst, std::function<Clock::time_point()> clock,
                         size_t maxKeys)
    : perSecond_(perSecond),
      burst_(std::max(burst, 1.0)),
      clock_(clock ? std::move(clock) : [] { return Clock::now(); }),
      maxKeys_(maxKeys) {}

std::chrono::milliseconds RateLimiter::take(const std::string& key) {
  if (perSecond_ <= 0) return std::chrono::milliseconds(0);
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  auto refill = [&](Bucket& b) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(burst_, b.tokens + elapsed * perSecond_);
    b.at = now;
  };
  auto found = buckets_.find(key);
  if (found == buckets_.end()) {
    if (buckets_.size() >= maxKeys_) {
      for (auto it = buckets_.begin(); it != buckets_.end();) {
        refill(it->second);
        it = it->second.tokens >= burst_ ? buckets_.erase(it) : std::next(it);
      }
    }
    if (buckets_.size() >= maxKeys_ && !buckets_.empty()) {
      buckets_.erase(std::max_element(
          buckets_.begin(), buckets_.end(),
          [](const auto& a, const auto& b) { return a.second.tokens < b.second.tokens; }));
    }
    found = buckets_.emplace(key, Bucket{burst_, now}).first;
  }
  Bucket& bucket = found->second;
  refill(bucket);
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    return std::chrono::milliseconds(0);
  }
  const double wait = (1 - bucket.tokens) / perSecond_;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(wait * 1000)));
}

std::chrono::milliseconds RateLimiter::peek(const std::string& key) {
  if (perSecond_ <= 0) return std::chrono::milliseconds(0);
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  auto found = buckets_.find(key);
  if (found == buckets_.end()) return std::chrono::milliseconds(0);
  const double elapsed = std::chrono::duration<double>(now - found->second.at).count();
  const double tokens = std::min(burst_, found->second.tokens + elapsed * perSecond_);
  if (tokens >= 1) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil((1 - tokens) / perSecond_ * 1000)));
}

size_t RateLimiter::keys() {
  std::lock_guard lock(mutex_);
  return buckets_.size();
}

}  // namespace parley::service
