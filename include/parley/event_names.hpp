// The one event vocabulary's names: every event any host writes (the executor's bus and its
// EventLog, a durable run's event log, the service's streams) has one of these types, one name
// each (docs/architecture.md, "Events"). The payloads and their JSON are in event_types.hpp; the
// run store, below it, writes the run_* events by these names.
//
// Thread-safety: pure functions over a constant table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace parley {

enum class EventType : uint8_t {
  // a request of the executor, or a durable run, as a whole
  LlmExecutionRequest,
  LlmExecutionCompleted,
  LlmExecutionFailed,
  // one model call
  LlmStreamChunk,
  StructuredOutputAttempt,
  TokenLimitExceeded,
  MessageAdded,
  // tool calls
  ToolExecutionRequest,
  ToolExecutionCompleted,
  ToolExecutionFailed,
  ToolExecutionProgress,
  // a person
  UserInteractionRequested,
  UserInteractionResponded,
  // a durable run's life, written by the run store
  RunQueued,
  RunRejected,
  RunStarted,
  RunCancelRequested,
  RunWaiting,
  RunResponded,
  RunReleased,
  RunCompleted,
  RunFailed,
  RunCancelled,
};

inline constexpr std::size_t kEventTypeCount = 23;

namespace detail {
// The one table of names, in the enum's order.
inline constexpr std::array<std::string_view, kEventTypeCount> kEventNames = {
    "llm_execution_request",
    "llm_execution_completed",
    "llm_execution_failed",
    "llm_stream_chunk",
    "structured_output_attempt",
    "token_limit_exceeded",
    "message_added",
    "tool_execution_request",
    "tool_execution_completed",
    "tool_execution_failed",
    "tool_execution_progress",
    "user_interaction_requested",
    "user_interaction_responded",
    "run_queued",
    "run_rejected",
    "run_started",
    "run_cancel_requested",
    "run_waiting",
    "run_responded",
    "run_released",
    "run_completed",
    "run_failed",
    "run_cancelled",
};
}  // namespace detail

// "llm_execution_request", "run_queued", ...: snake_case, as on every wire.
constexpr std::string_view eventName(EventType type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  return i < kEventTypeCount ? detail::kEventNames[i] : std::string_view("unknown");
}
// The type of a name; nullopt for a name outside the vocabulary.
std::optional<EventType> eventTypeFromName(std::string_view name) noexcept;
// Every type, in the enum's order.
const std::array<EventType, kEventTypeCount>& allEventTypes() noexcept;

}  // namespace parley
