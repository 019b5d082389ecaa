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

}  // namespace parley::service
