// The executor's counts of tool calls (ToolStats, executor.hpp), per thread and tool and per
// tool over every thread. Internal to src/executor/.
//
// Tool names come from the model, so each map holds at most LlmExecutor::kMaxToolStatNames
// names; further names are counted under "(other)".
//
// Ownership: one per LlmExecutor. Thread-safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "parley/executor.hpp"
#include "parley/tools.hpp"

namespace parley::detail {

class ToolStatsTable {
 public:
  // Counts one settled call of `threadId`; `elapsed` from sending it to its result (0 when it
  // was not sent); `timedOut` when no answer came in time or the worker reported a timeout.
  void record(const std::string& threadId, const ToolResult& result,
              std::chrono::microseconds elapsed, bool timedOut);
  // The thread's counts; every thread's with an empty id.
  std::map<std::string, ToolStats> stats(const std::string& threadId) const;
  // Drops the thread's own counts (the totals keep them).
  void forget(const std::string& threadId);

 private:
  using PerTool = std::map<std::string, ToolStats>;
  static void add(PerTool& table, const std::string& name, const ToolResult& result,
                  std::chrono::microseconds elapsed, bool timedOut);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, PerTool> byThread_;
  PerTool total_;
};

}  // namespace parley::detail
