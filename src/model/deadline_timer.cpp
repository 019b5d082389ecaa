#include "model/deadline_timer.hpp"

namespace parley::detail {

DeadlineTimer& DeadlineTimer::shared() {
  // Never destroyed: a turn may end in another static's destructor, after this one's would run.
  static DeadlineTimer* timer = new DeadlineTimer();
  return *timer;
}

DeadlineTimer::Id DeadlineTimer::schedule(Clock::time_point at, std::function<void()> fire) {
  std::lock_guard lock(mutex_);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  const Id id = next_++;
  const bool first = due_.empty() || at < due_.begin()->first.first;
  due_.emplace(std::make_pair(at, id), std::move(fire));
  deadlines_.emplace(id, at);
  if (first) changed_.notify_all();  // an earlier deadline than the one the thread waits for
  return id;
}

void DeadlineTimer::cancel(Id id) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return firing_ != id; });
  auto found = deadlines_.find(id);
  if (found == deadlines_.end()) return;
  due_.erase(std::make_pair(found->second, id));
  deadlines_.erase(found);
}

void DeadlineTimer::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (due_.empty()) {
      changed_.wait(lock);
      continue;
    }
    auto first = due_.begin();
    if (const auto at = first->first.first; Clock::now() < at) {
      // A copy: a cancel during the wait frees the entry, and wait_until reads its deadline
      // again when it wakes.
      changed_.wait_until(lock, at);
      continue;
    }
    const Id id = first->first.second;
    std::function<void()> fire = std::move(first->second);
    due_.erase(first);
    deadlines_.erase(id);
    firing_ = id;
    lock.unlock();
    fire();
    lock.lock();
    firing_ = 0;
    changed_.notify_all();  // a cancel() waiting for this callback
  }
}

}  // namespace parley::detail
