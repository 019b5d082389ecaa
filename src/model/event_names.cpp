#include "parley/event_names.hpp"

namespace parley {

static_assert(eventName(EventType::RunCancelled) == "run_cancelled",
              "detail::kEventNames must list the names in the enum's order");

std::optional<EventType> eventTypeFromName(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kEventTypeCount; ++i)
    if (detail::kEventNames[i] == name) return static_cast<EventType>(i);
  return std::nullopt;
}

const std::array<EventType, kEventTypeCount>& allEventTypes() noexcept {
  static const std::array<EventType, kEventTypeCount> kAll = [] {
    std::array<EventType, kEventTypeCount> all{};
    for (std::size_t i = 0; i < kEventTypeCount; ++i)
      all[i] = static_cast<EventType>(i);
    return all;
  }();
  return kAll;
}

}  // namespace parley
