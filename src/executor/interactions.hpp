// The executor's questions to a person: a user_interaction node's prompt and a tool's approval,
// each a UserInteractionRequested that waits for the UserInteractionResponded of its
// interactionId. Internal to src/executor/.
//
// Ownership: one per LlmExecutor, which routes UserInteractionResponded to onResponded() and
// outlives every call. Thread-safety: every member may be called from any thread; ask() blocks
// its caller (a thread's runner) until the answer, the timeout or the stop token.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>

#include "parley/events.hpp"
#include "parley/executor.hpp"
#include "parley/tools.hpp"

namespace parley::detail {

class Interactions {
 public:
  Interactions(EventBus& bus, const ExecutorOptions& options) : bus_(bus), options_(options) {}

  // Publishes UserInteractionRequested and waits for its answer; nullopt on timeout or stop.
  // The event carries `spanId` (a tool approval belongs to the model call that made the call).
  std::optional<std::string> ask(const LlmExecutionRequest& request, const std::string& id,
                                 const std::string& prompt, std::chrono::milliseconds timeout,
                                 std::stop_token stop, const std::string& spanId = {},
                                 const std::string& kind = "interaction");
  // For a tool that requiresApproval: asks (interactionId "approve-<toolCallId>") and returns
  // an error result unless approved within toolCallTimeout; nullopt when the call may run.
  // CancelledError if `stop` is requested while it waits.
  std::optional<ToolResult> approval(const LlmExecutionRequest& request, const std::string& spanId,
                                     const ToolCall& call, std::stop_token stop);
  void onResponded(const UserInteractionResponded& event);

 private:
  struct Pending;

  EventBus& bus_;
  const ExecutorOptions& options_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending_;  // by interactionId
};

}  // namespace parley::detail
