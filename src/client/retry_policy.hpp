// When and how long to wait before retrying a failed request, as the official OpenAI SDKs do.
// Pure functions, so the rules are tested without a server.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace parley::detail {

// Whether a response with `status` is retried: 408, 409, 429 and >= 500 are. A
// `x-should-retry` header of "true" or "false" overrides the status ("" = no header).
bool shouldRetryStatus(int status, std::string_view xShouldRetry);

// The wait the server asks for: `retry-after-ms` (milliseconds, may be fractional), else
// (an unreadable retry-after-ms is ignored) `Retry-After` as seconds (may be fractional) or an HTTP
// date relative to `now`. nullopt when neither header is present, a value is malformed, negative or
// in the past, or above 60 s: the caller then uses defaultBackoff().
std::optional<std::chrono::milliseconds> serverRetryDelay(
    std::string_view retryAfterMs, std::string_view retryAfter,
    std::chrono::system_clock::time_point now);

// min(0.5 s * 2^retry, 8 s) reduced by up to 25 % jitter; retry counts from 0 and
// random01 is uniform in [0, 1).
std::chrono::milliseconds defaultBackoff(int retry, double random01);

// Reads an HTTP date (IMF-fixdate, RFC 850 or asctime); nullopt when it is not one.
std::optional<std::chrono::system_clock::time_point> parseHttpDate(std::string_view text);

}  // namespace parley::detail
