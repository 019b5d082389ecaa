#include "parley/iso_time.hpp"

#include <cstdio>
#include <ctime>

namespace parley {

std::string isoTime(std::chrono::system_clock::time_point at) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(at.time_since_epoch()).count();
  const auto seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", text,
                static_cast<int>(ms - static_cast<int64_t>(seconds) * 1000));
  return out;
}

namespace {

// Reads exactly `width` digits at text[at...].
bool digits(std::string_view text, size_t at, size_t width, int& value) {
  if (at + width > text.size()) return false;
  value = 0;
  for (size_t i = at; i < at + width; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    value = value * 10 + (text[i] - '0');
  }
  return true;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parseIsoTime(std::string_view text) {
  using namespace std::chrono;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, millis = 0;
  if (!digits(text, 0, 4, year) || text.size() < 10 || text[4] != '-' ||
      !digits(text, 5, 2, month) || text[7] != '-' || !digits(text, 8, 2, day)) {
    return std::nullopt;
  }
  if (text.size() > 10) {
    if ((text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !digits(text, 11, 2, hour) ||
        text.size() < 19 || text[13] != ':' || !digits(text, 14, 2, minute) || text[16] != ':' ||
        !digits(text, 17, 2, second)) {
      return std::nullopt;
    }
    size_t at = 19;
    if (at < text.size() && text[at] == '.') {
      ++at;
      size_t count = 0;
      while (at < text.size() && text[at] >= '0' && text[at] <= '9' && count < 9) {
        if (count < 3) millis = millis * 10 + (text[at] - '0');
        ++at;
        ++count;
      }
      if (count == 0) return std::nullopt;
      for (size_t i = count; i < 3; ++i)
        millis *= 10;
    }
    if (at + 1 != text.size() || (text[at] != 'Z' && text[at] != 'z')) return std::nullopt;
  }
  const year_month_day date{std::chrono::year(year),
                            std::chrono::month(static_cast<unsigned>(month)),
                            std::chrono::day(static_cast<unsigned>(day))};
  // The clock's nanoseconds reach 2262: later years (and years before 1900) are refused.
  if (!date.ok() || year < 1900 || year > 2200 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  return sys_days(date) + hours(hour) + minutes(minute) + seconds(second) + milliseconds(millis);
}

}  // namespace parley
