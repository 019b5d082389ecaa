// deadlineAfter(): now + a timeout, for any timeout a caller may give ("practically forever"
// included). Internal to parley: the one such sum of the tools' attempts, the transport's calls
// and a turn's deadline. Stateless; thread-safe.
#pragma once

#include <algorithm>
#include <chrono>

namespace parley::detail {

// Timeouts longer than this (50 years) are taken as this: steady_clock counts nanoseconds in 64
// bits, so converting a huge timeout to them, or adding it to now, would overflow.
inline constexpr std::chrono::milliseconds kLongestTimeout = std::chrono::hours(24 * 365 * 50);

inline std::chrono::steady_clock::time_point deadlineAfter(
    std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout) {
  return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::min(timeout, kLongestTimeout));
}

}  // namespace parley::detail
