#include "executor/interactions.hpp"

#include <condition_variable>

#include "executor/request_context.hpp"
#include "parley/errors.hpp"
#include "parley/turn_defaults.hpp"

namespace parley::detail {

struct Interactions::Pending {
  std::mutex mutex;
  std::condition_variable_any answered;
  std::optional<std::string> response;
};

std::optional<std::string> Interactions::ask(const LlmExecutionRequest& request,
                                             const std::string& id, const std::string& prompt,
                                             std::chrono::milliseconds timeout,
                                             std::stop_token stop, const std::string& spanId,
                                             const std::string& kind) {
  auto wait = std::make_shared<Pending>();
  {
    std::lock_guard lock(mutex_);
    pending_[id] = wait;
  }
  auto event = causedBy<UserInteractionRequested>(request, spanId);
  event.nodeId = request.nodeId;
  event.interactionId = id;
  event.prompt = prompt;
  event.timeout = timeout;
  event.kind = kind;
  bus_.publish(event);
  std::optional<std::string> response;
  {
    std::unique_lock lock(wait->mutex);
    wait->answered.wait_for(lock, stop, timeout, [&] { return wait->response.has_value(); });
    response = wait->response;
  }
  {
    std::lock_guard lock(mutex_);
    pending_.erase(id);
  }
  return response;
}

std::optional<ToolResult> Interactions::approval(const LlmExecutionRequest& request,
                                                 const std::string& spanId, const ToolCall& call,
                                                 std::stop_token stop) {
  if (!options_.tools) return std::nullopt;
  auto info = options_.tools->find(call.name);
  if (!info || !info->options.requiresApproval) return std::nullopt;
  const std::string id = "approve-" + call.id;
  auto answer = ask(request, id,
                    "Approve the call of tool \"" + call.name + "\" with arguments " +
                        (call.arguments.empty() ? "{}" : call.arguments) + "? (yes/no)",
                    options_.toolCallTimeout, stop, spanId, "approval");
  if (!answer && stop.stop_requested()) {
    throw CancelledError("the thread was cleaned up while a tool call awaited approval");
  }
  if (answer && isApproval(*answer)) return std::nullopt;
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.errorKind = ToolErrorKind::Cancelled;
  r.error = answer ? "the user rejected this call of \"" + call.name + "\""
                   : "no approval for this call of \"" + call.name + "\" arrived in time";
  return r;
}

void Interactions::onResponded(const UserInteractionResponded& event) {
  std::shared_ptr<Pending> wait;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(event.interactionId);
    if (it == pending_.end()) {
      logLine(options_,
              "parley: user_interaction_responded for unknown or finished interaction \"" +
                  event.interactionId + "\" ignored");
      return;
    }
    wait = it->second;
    pending_.erase(it);
  }
  {
    std::lock_guard lock(wait->mutex);
    wait->response = event.response;
  }
  wait->answered.notify_all();
}

}  // namespace parley::detail
