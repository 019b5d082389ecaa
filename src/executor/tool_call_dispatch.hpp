// The executor's tool-call round trip: the calls of one reply go out as ToolExecutionRequest
// events, at most turn.maxToolConcurrency unanswered at once, and their answers
// (ToolExecutionCompleted / ToolExecutionFailed of the same thread and toolCallId) or their
// timeouts come back as results in call order. Internal to src/executor/.
//
// Calls are keyed by thread and tool-call id: two threads whose models use the same id (some
// servers number calls "functions.search:0" in every reply) do not collide.
//
// Ownership: one per LlmExecutor, which routes the answer events to onCompleted()/onFailed()
// and outlives every call. Thread-safety: every member may be called from any thread; run()
// blocks its caller (a thread's runner) until every call is settled or `stop` is requested.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "executor/tool_stats_table.hpp"
#include "parley/events.hpp"
#include "parley/executor.hpp"
#include "parley/tools.hpp"

namespace parley::detail {

class ToolCallDispatch {
 public:
  // Decides a call before it is sent: a result settles it (a refused approval), nullopt sends it.
  using Precheck = std::function<std::optional<ToolResult>(const ToolCall&)>;

  ToolCallDispatch(EventBus& bus, const ExecutorOptions& options, ToolStatsTable& stats)
      : bus_(bus), options_(options), stats_(stats) {}

  // Sends the calls out and returns their results in call order. A call whose id repeats within
  // the reply, or is still pending for the same thread, gets an error result and is not sent;
  // so does a call `precheck` settles. Each call's timeout runs from the moment it was sent.
  // CancelledError when `stop` is requested (the calls still pending are forgotten: a late
  // answer is ignored). The ToolExecutionRequest events carry `spanId` (the model call whose
  // reply made the calls); each settled call is counted in the executor's ToolStatsTable.
  std::vector<ToolResult> run(const LlmExecutionRequest& request, const std::string& spanId,
                              const std::vector<ToolCall>& calls, std::stop_token stop,
                              const Precheck& precheck);
  void onCompleted(const ToolExecutionCompleted& event);
  void onFailed(const ToolExecutionFailed& event);

 private:
  struct Batch;
  struct Pending {
    std::shared_ptr<Batch> batch;
    size_t index = 0;
    std::string name;
  };
  using Key = std::pair<std::string, std::string>;  // thread id, tool-call id

  void publishRequest(const LlmExecutionRequest& request, const std::string& spanId,
                      const ToolCall& call);
  void resolve(const std::string& threadId, const std::string& toolCallId, ToolResult result,
               bool timedOut, EventType eventType);

  EventBus& bus_;
  const ExecutorOptions& options_;
  ToolStatsTable& stats_;
  std::mutex mutex_;
  std::map<Key, Pending> pending_;
};

}  // namespace parley::detail
