#include "executor/tool_stats_table.hpp"

namespace parley::detail {

void ToolStatsTable::add(PerTool& table, const std::string& name, const ToolResult& result,
                         std::chrono::microseconds elapsed, bool timedOut) {
  auto it = table.find(name);
  if (it == table.end()) {
    const bool full = table.size() >= LlmExecutor::kMaxToolStatNames - 1 && name != "(other)";
    it = table.try_emplace(full ? std::string("(other)") : name).first;
  }
  ToolStats& s = it->second;
  ++s.calls;
  if (!result.success) ++s.failures;
  if (timedOut) ++s.timeouts;
  s.totalTime += elapsed;
}

void ToolStatsTable::record(const std::string& threadId, const ToolResult& result,
                            std::chrono::microseconds elapsed, bool timedOut) {
  std::lock_guard lock(mutex_);
  add(byThread_[threadId], result.name, result, elapsed, timedOut);
  add(total_, result.name, result, elapsed, timedOut);
}

std::map<std::string, ToolStats> ToolStatsTable::stats(const std::string& threadId) const {
  std::lock_guard lock(mutex_);
  if (threadId.empty()) return total_;
  auto it = byThread_.find(threadId);
  return it == byThread_.end() ? PerTool{} : it->second;
}

void ToolStatsTable::forget(const std::string& threadId) {
  std::lock_guard lock(mutex_);
  byThread_.erase(threadId);
}

}  // namespace parley::detail
