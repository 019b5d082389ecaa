// EventLog: writes every executor event of a bus as one JSON object per line (JSON Lines), keys
// in snake_case as everywhere (event_types.hpp): the header (type, time, workflow_id, thread_id,
// trace_id, span_id when the event has one), node_id and each
// event's key parameters (profile, tool names, finish reason, usage, errors, sizes of prompts and
// replies; a structured attempt's rung, validity and capped validation errors). Message texts and
// tool arguments are not written, only their sizes; request parameters whose names look like
// credentials (api_key, authorization, secret, password, token but not
// *_tokens) are replaced by "[redacted]". API keys never reach events in the first place: they live
// in ClientOptions, which no event carries.
//
// Ownership: the caller owns the log; the bus and the stream must outlive it. Subscribes in the
// constructor, unsubscribes in the destructor. Thread-safety: lines from concurrent events are
// written whole, one at a time.
#pragma once

#include <memory>
#include <mutex>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/events.hpp"

namespace parley {

struct EventLogOptions {
  bool streamChunks = false;  // LlmStreamChunk events are many: off by default
};

// The line the log writes for an event, for callers with their own sink.
nlohmann::json describeEvent(const LlmExecutionRequest& event);
nlohmann::json describeEvent(const LlmExecutionCompleted& event);
nlohmann::json describeEvent(const LlmExecutionFailed& event);
nlohmann::json describeEvent(const LlmStreamChunk& event);
nlohmann::json describeEvent(const StructuredOutputAttempt& event);
nlohmann::json describeEvent(const TokenLimitExceeded& event);
nlohmann::json describeEvent(const MessageAdded& event);
nlohmann::json describeEvent(const ToolExecutionRequest& event);
nlohmann::json describeEvent(const ToolExecutionCompleted& event);
nlohmann::json describeEvent(const ToolExecutionFailed& event);
nlohmann::json describeEvent(const ToolExecutionProgress& event);
nlohmann::json describeEvent(const UserInteractionRequested& event);
nlohmann::json describeEvent(const UserInteractionResponded& event);

class EventLog {
 public:
  EventLog(EventBus& bus, std::ostream& out, EventLogOptions options = {});
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

 private:
  void write(const nlohmann::json& line);
  std::ostream& out_;
  std::mutex mutex_;
  std::vector<Subscription> subscriptions_;
};

}  // namespace parley
