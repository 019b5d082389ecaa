#include "executor/tool_call_dispatch.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <unordered_set>

#include "executor/request_context.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

// The tool calls of one reply, waiting for their results.
struct ToolCallDispatch::Batch {
  std::mutex mutex;
  std::condition_variable_any resolved;
  std::vector<std::optional<ToolResult>> results;
  std::vector<std::chrono::steady_clock::time_point> settledAt;  // of the results sent out
  std::vector<char> timedOut;
  size_t answers = 0;  // answers received: the runner wakes when it changes
};

namespace {

ToolResult errorResult(const ToolCall& call, std::string error, ToolErrorKind kind) {
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.error = std::move(error);
  r.errorKind = kind;
  return r;
}

}  // namespace

void ToolCallDispatch::publishRequest(const LlmExecutionRequest& request, const std::string& spanId,
                                      const ToolCall& call) {
  auto event = causedBy<ToolExecutionRequest>(request, spanId);
  event.nodeId = request.nodeId;
  event.toolCall = call;
  event.executionOptions.timeout = options_.toolCallTimeout;
  if (options_.tools) {
    if (auto info = options_.tools->find(call.name)) {
      event.executionOptions.retries = info->options.retries;
      event.executionOptions.retryDelay = info->options.retryDelay;
    }
  }
  bus_.publish(event);
}

std::vector<ToolResult> ToolCallDispatch::run(const LlmExecutionRequest& request,
                                              const std::string& spanId,
                                              const std::vector<ToolCall>& calls,
                                              std::stop_token stop, const Precheck& precheck) {
  using Clock = std::chrono::steady_clock;
  auto batch = std::make_shared<Batch>();
  batch->results.resize(calls.size());
  batch->settledAt.resize(calls.size());
  batch->timedOut.resize(calls.size(), 0);
  std::vector<std::optional<Clock::time_point>> sentAt(calls.size());
  std::vector<std::optional<ToolResult>> settled(calls.size());  // known without sending
  std::unordered_set<std::string> ids;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!ids.insert(calls[i].id).second) {
      logLine(options_, "parley: tool call id \"" + calls[i].id +
                            "\" repeats within one reply; the repeated call gets an error result");
      settled[i] = errorResult(calls[i], "duplicate tool call id \"" + calls[i].id + "\"",
                               ToolErrorKind::HandlerFailed);
    }
  }
  if (precheck) {
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!settled[i]) settled[i] = precheck(calls[i]);
    }
  }

  struct InFlight {
    size_t index;
    Clock::time_point deadline;
  };
  std::vector<InFlight> inFlight;  // in send order, so deadlines never decrease
  const size_t cap = static_cast<size_t>(options_.turn.maxToolConcurrency);
  size_t next = 0;
  size_t seenAnswers = 0;
  // Forgets calls still waiting: a late answer is then an unknown id.
  auto forget = [&](const std::vector<InFlight>& gone) {
    std::lock_guard lock(mutex_);
    for (const InFlight& f : gone) {
      auto it = pending_.find({request.threadId, calls[f.index].id});
      if (it != pending_.end() && it->second.batch == batch) pending_.erase(it);
    }
  };
  for (;;) {
    while (inFlight.size() < cap && next < calls.size()) {
      const size_t i = next++;
      if (!settled[i]) {
        std::lock_guard lock(mutex_);
        if (!pending_.emplace(Key{request.threadId, calls[i].id}, Pending{batch, i, calls[i].name})
                 .second) {
          logLine(options_, "parley: tool call id \"" + calls[i].id +
                                "\" is already pending in thread \"" + request.threadId +
                                "\"; the call gets an error result");
          settled[i] = errorResult(calls[i], "duplicate tool call id \"" + calls[i].id + "\"",
                                   ToolErrorKind::HandlerFailed);
        }
      }
      if (settled[i]) {
        std::lock_guard lock(batch->mutex);
        batch->results[i] = std::move(*settled[i]);
        continue;
      }
      sentAt[i] = Clock::now();
      inFlight.push_back({i, *sentAt[i] + options_.toolCallTimeout});
      // Not under a lock: a worker may answer inline, from within publish().
      publishRequest(request, spanId, calls[i]);
    }
    if (inFlight.empty()) break;

    {
      std::unique_lock lock(batch->mutex);
      batch->resolved.wait_until(lock, stop, inFlight.front().deadline,
                                 [&] { return batch->answers != seenAnswers; });
      seenAnswers = batch->answers;
    }
    if (stop.stop_requested()) {
      forget(inFlight);
      throw CancelledError("the thread was cleaned up while tool calls were pending");
    }
    // Drop the answered calls, then time out the overdue ones.
    const auto now = Clock::now();
    std::vector<InFlight> overdue;
    {
      std::lock_guard lock(batch->mutex);
      std::erase_if(inFlight, [&](const InFlight& f) {
        if (batch->results[f.index]) return true;
        if (f.deadline > now) return false;
        overdue.push_back(f);
        return true;
      });
    }
    if (overdue.empty()) continue;
    forget(overdue);
    std::lock_guard lock(batch->mutex);
    for (const InFlight& f : overdue) {
      if (batch->results[f.index]) continue;  // answered just before it was forgotten
      ToolResult r = errorResult(calls[f.index],
                                 "tool \"" + calls[f.index].name + "\" did not answer within " +
                                     std::to_string(options_.toolCallTimeout.count()) + " ms",
                                 ToolErrorKind::Timeout);
      logLine(options_, "parley: " + r.error + " (tool call " + r.toolCallId + ", trace " +
                            request.traceId + ")");
      batch->results[f.index] = std::move(r);
      batch->settledAt[f.index] = now;
      batch->timedOut[f.index] = 1;
    }
  }
  std::vector<ToolResult> results;
  results.reserve(calls.size());
  std::lock_guard lock(batch->mutex);
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto elapsed = sentAt[i] ? std::chrono::duration_cast<std::chrono::microseconds>(
                                         batch->settledAt[i] - *sentAt[i])
                                   : std::chrono::microseconds(0);
    results.push_back(std::move(*batch->results[i]));
    stats_.record(request.threadId, results.back(), elapsed, batch->timedOut[i] != 0);
  }
  return results;
}

void ToolCallDispatch::resolve(const std::string& threadId, const std::string& toolCallId,
                               ToolResult result, bool timedOut, EventType eventType) {
  const auto now = std::chrono::steady_clock::now();
  Pending call;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.end();
    if (!threadId.empty()) {
      it = pending_.find({threadId, toolCallId});
    } else {
      // An answer that names no thread: taken only if exactly one thread waits for the id.
      size_t matches = 0;
      for (auto i = pending_.begin(); i != pending_.end(); ++i) {
        if (i->first.second == toolCallId && ++matches == 1) it = i;
      }
      if (matches > 1) {
        logLine(options_, "parley: " + std::string(eventName(eventType)) + " for tool call \"" + toolCallId +
                              "\" names no thread and " + std::to_string(matches) +
                              " threads wait for that id; ignored");
        return;
      }
    }
    if (it == pending_.end()) {
      logLine(options_, "parley: " + std::string(eventName(eventType)) +
                            " for unknown or already answered tool call \"" + toolCallId + "\"" +
                            (threadId.empty() ? "" : " of thread \"" + threadId + "\"") +
                            " ignored");
      return;
    }
    call = std::move(it->second);
    pending_.erase(it);
  }
  result.toolCallId = toolCallId;
  result.name = call.name;
  {
    std::lock_guard lock(call.batch->mutex);
    call.batch->results[call.index] = std::move(result);
    call.batch->settledAt[call.index] = now;
    call.batch->timedOut[call.index] = timedOut ? 1 : 0;
    ++call.batch->answers;
  }
  call.batch->resolved.notify_all();
}

void ToolCallDispatch::onCompleted(const ToolExecutionCompleted& event) {
  ToolResult r;
  r.success = event.result.success;
  r.result = event.result.result;
  r.error = event.result.error;
  if (!r.success && r.error.empty()) r.error = "the tool failed";
  r.errorKind = r.success ? ToolErrorKind::None : ToolErrorKind::HandlerFailed;
  r.executionTime = event.result.executionTime;
  r.retryCount = event.result.retryCount;
  const bool timedOut = !r.success && event.result.timedOut;
  resolve(event.threadId, event.toolCallId, std::move(r), timedOut, ToolExecutionCompleted::kEventType);
}

void ToolCallDispatch::onFailed(const ToolExecutionFailed& event) {
  ToolResult r;
  const nlohmann::json& details = event.errorDetails;
  const std::string detailed = details.is_object() ? details.value("message", "") : "";
  r.error = !event.error.empty() ? event.error
            : !detailed.empty()  ? detailed
                                 : "the tool could not be run";
  const bool timedOut = details.is_object() && details.value("kind", "") == "timeout";
  r.errorKind = timedOut ? ToolErrorKind::Timeout : ToolErrorKind::HandlerFailed;
  if (options_.logErrors) {
    logLine(options_, "parley: tool call \"" + event.toolCallId + "\" of thread \"" +
                          event.threadId + "\" (trace " + event.traceId +
                          ") could not be run: " + r.error);
  }
  resolve(event.threadId, event.toolCallId, std::move(r), timedOut, ToolExecutionFailed::kEventType);
}

}  // namespace parley::detail
