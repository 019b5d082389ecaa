// RateLimiter: a token bucket per key (a bearer token, or a client address), for the service's
// per-client request limit. Internal to src/service/.
//
// Thread-safety: take() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

namespace parley::service {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // `perSecond` 0 turns the limit off. At most `maxKeys` buckets are kept: past it, the full
  // (idle) ones are dropped, which changes nothing for their keys, and if none is full the
  // fullest goes (its key starts afresh: the table stays bounded under a flood of keys).
  RateLimiter(double perSecond, double burst, std::function<Clock::time_point()> clock = {},
              size_t maxKeys = 100'000);

  // Takes one request's token from `key`'s bucket; returns 0 if there was one, else how long
  // until there is (the Retry-After).
  std::chrono::milliseconds take(const std::string& key);
  // How long until `key` has a token, taking none (0 now).
  std::chrono::milliseconds peek(const std::string& key);
  size_t keys();  // buckets kept now

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point at{};
  };
  double perSecond_;
  double burst_;
  std::function<Clock::time_point()> clock_;
  size_t maxKeys_;
  std::mutex mutex_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace parley::service
