// ThreadCache: the state of threads whose runs completed in this worker (WorkerOptions::
// threadCache), so that the thread's next run here restores it instead of reading the thread
// back from the store; valid only at the version that run committed. Least recently used goes
// first. Internal to src/runs/.
//
// Ownership: one per worker. Thread-safety: every member may be called from any slot.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "parley/context_snapshot.hpp"
#include "parley/run_store.hpp"

namespace parley::detail {

class ThreadCache {
 public:
  explicit ThreadCache(size_t capacity) : capacity_(capacity) {}

  // The cached state of `threadId` if it is at `version`. The entry goes either way: the run
  // that asks makes a new one.
  std::optional<ContextSnapshot> take(const std::string& threadId, RunStore::Version version);
  // Keeps the state a run committed at `version` (nothing when the capacity is 0).
  void remember(const std::string& threadId, RunStore::Version version, ContextSnapshot snapshot);

 private:
  struct Entry {
    RunStore::Version version = 0;
    ContextSnapshot snapshot;
  };
  const size_t capacity_;
  std::mutex mutex_;
  std::list<std::pair<std::string, Entry>> entries_;  // most recently used first
  std::unordered_map<std::string, decltype(entries_)::iterator> byThread_;
};

}  // namespace parley::detail
