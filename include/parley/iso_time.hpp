// Times as text: ISO 8601 in UTC with milliseconds ("2025-01-31T12:00:00.000Z"), the form the
// stores, the event log and the JSON documents write.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace parley {

// "2025-01-31T12:00:00.000Z" (milliseconds, truncated).
std::string isoTime(std::chrono::system_clock::time_point at);

// Reads "YYYY-MM-DDTHH:MM:SS" with an optional fraction (up to nanoseconds; kept to the
// millisecond) and "Z", or the date alone ("YYYY-MM-DD", midnight UTC), years 1900 to 2200.
// nullopt for anything else, including out-of-range fields.
std::optional<std::chrono::system_clock::time_point> parseIsoTime(std::string_view text);

}  // namespace parley
