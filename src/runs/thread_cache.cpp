#include "runs/thread_cache.hpp"

namespace parley::detail {

std::optional<ContextSnapshot> ThreadCache::take(const std::string& threadId,
                                                 RunStore::Version version) {
  std::lock_guard lock(mutex_);
  auto found = byThread_.find(threadId);
  if (found == byThread_.end()) return std::nullopt;
  std::optional<ContextSnapshot> state;
  if (found->second->second.version == version) state = std::move(found->second->second.snapshot);
  entries_.erase(found->second);
  byThread_.erase(found);
  return state;
}

void ThreadCache::remember(const std::string& threadId, RunStore::Version version,
                           ContextSnapshot snapshot) {
  if (capacity_ == 0) return;
  std::lock_guard lock(mutex_);
  if (auto old = byThread_.find(threadId); old != byThread_.end()) {
    entries_.erase(old->second);
    byThread_.erase(old);
  }
  entries_.emplace_front(threadId, Entry{version, std::move(snapshot)});
  byThread_[threadId] = entries_.begin();
  while (entries_.size() > capacity_) {
    byThread_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

}  // namespace parley::detail
