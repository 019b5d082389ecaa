#include "store/writer_queue.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

namespace parley::detail {

std::shared_ptr<WriterQueue> WriterQueue::forFile(const std::string& path) {
  if (path.empty() || path == ":memory:" || path.rfind("file:", 0) == 0) return nullptr;
  std::error_code error;
  auto canonical = std::filesystem::weakly_canonical(path, error);
  const std::string key = error ? path : canonical.string();
  static std::mutex registryMutex;
  static std::map<std::string, std::weak_ptr<WriterQueue>> registry;
  std::lock_guard lock(registryMutex);
  for (auto it = registry.begin(); it != registry.end();)
    it = it->second.expired() ? registry.erase(it) : std::next(it);
  auto& entry = registry[key];
  auto queue = entry.lock();
  if (!queue) {
    queue = std::make_shared<WriterQueue>();
    entry = queue;
  }
  return queue;
}

bool WriterQueue::lock(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!held_) {
    held_ = true;
    return true;
  }
  Waiter self;
  waiters_.push_back(&self);
  if (self.turn.wait_for(lock, timeout, [&] { return self.granted; })) return true;
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &self));
  return false;
}

void WriterQueue::unlock() {
  std::lock_guard lock(mutex_);
  if (waiters_.empty()) {
    held_ = false;
    return;
  }
  Waiter* next = waiters_.front();
  waiters_.pop_front();
  next->granted = true;
  next->turn.notify_one();
}

size_t WriterQueue::waiting() {
  std::lock_guard lock(mutex_);
  return waiters_.size();
}

}  // namespace parley::detail
