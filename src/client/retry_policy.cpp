#include "client/retry_policy.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <string>

#include "model/blanks.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

namespace {

constexpr double kMaxServerDelayMs = 60'000;

// A plain non-negative decimal number ("1.5", "20"); nullopt for anything else.
std::optional<double> parseNumber(std::string_view s) {
  s = trimBlanks(s);
  if (s.empty()) return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::chrono::milliseconds> accept(double ms) {
  if (!(ms >= 0 && ms <= kMaxServerDelayMs)) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(ms)));
}

}  // namespace

bool shouldRetryStatus(int status, std::string_view xShouldRetry) {
  xShouldRetry = trimBlanks(xShouldRetry);
  if (xShouldRetry == "true") return true;
  if (xShouldRetry == "false") return false;
  return HttpError::retryableStatus(status);
}

std::optional<std::chrono::system_clock::time_point> parseHttpDate(std::string_view text) {
  const std::string s(trimBlanks(text));
  static constexpr const char* kFormats[] = {
      "%a, %d %b %Y %H:%M:%S GMT",  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
      "%A, %d-%b-%y %H:%M:%S GMT",  // RFC 850:     Sunday, 06-Nov-94 08:49:37 GMT
      "%a %b %e %H:%M:%S %Y",       // asctime:     Sun Nov  6 08:49:37 1994
  };
  for (const char* format : kFormats) {
    std::tm tm{};
    const char* end = strptime(s.c_str(), format, &tm);
    if (end == nullptr || *end != '\0') continue;
    const time_t seconds = timegm(&tm);
    if (seconds == static_cast<time_t>(-1)) continue;
    return std::chrono::system_clock::from_time_t(seconds);
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> serverRetryDelay(
    std::string_view retryAfterMs, std::string_view retryAfter,
    std::chrono::system_clock::time_point now) {
  // As the SDKs do: a readable retry-after-ms decides alone; an unreadable one is ignored.
  if (auto ms = parseNumber(retryAfterMs)) return accept(*ms);
  if (trimBlanks(retryAfter).empty()) return std::nullopt;
  if (auto seconds = parseNumber(retryAfter)) return accept(*seconds * 1000.0);
  if (auto date = parseHttpDate(retryAfter)) {
    const auto ms = std::chrono::duration<double, std::milli>(*date - now).count();
    return accept(ms);
  }
  return std::nullopt;
}

std::chrono::milliseconds defaultBackoff(int retry, double random01) {
  constexpr double kInitialSeconds = 0.5;
  constexpr double kMaxSeconds = 8.0;
  const double seconds = std::min(kInitialSeconds * std::pow(2.0, std::max(retry, 0)), kMaxSeconds);
  const double jitter = 1.0 - std::clamp(random01, 0.0, 1.0) * 0.25;
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * jitter * 1000.0));
}

}  // namespace parley::detail
