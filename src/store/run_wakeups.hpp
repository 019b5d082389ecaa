// RunStore::Wakeups: how waiters learn of writes (RunStore::waitForRuns, waitForEvents, the
// service's event feeds). Internal to src/store/; RunStore owns one.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "parley/run_store.hpp"
#include "store/sql_store.hpp"

namespace parley {

// Generations that writers bump and waiters watch: the runs channel, and each thread's events
// (hashed into buckets: two threads sharing one only cost a spurious re-read). Writes of this
// process bump them directly; with PostgreSQL a listener thread on its own connection bumps them
// on every NOTIFY of another process, and while it is not listening waiters poll.
class RunStore::Wakeups {
 public:
  Wakeups(detail::SqlStoreEngine& engine, bool listen)
      : engine_(engine), listen_(listen && engine.dialect() == detail::SqlDialect::Postgres) {}
  ~Wakeups();

  static size_t bucketOf(const std::string& threadId) {
    return 1 + std::hash<std::string>{}(threadId) % (kBuckets - 1);
  }
  static constexpr size_t kRuns = 0;

  uint64_t generation(size_t bucket) {
    std::lock_guard lock(mutex_);
    return generations_[bucket];
  }
  void bump(size_t bucket) {
    {
      std::lock_guard lock(mutex_);
      ++generations_[bucket];
      if (bucket != kRuns) ++anyEvents_;
    }
    changed_.notify_all();
  }
  uint64_t anyEvents() {
    std::lock_guard lock(mutex_);
    return anyEvents_;
  }
  bool waitAnyEvents(uint64_t seen, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] { return anyEvents_ != seen || stopping_; }) &&
           anyEvents_ != seen;
  }
  // The runs generation as this thread's last claim began: waitForRuns waits for it to change,
  // so that a run announced between that claim's read and the wait is not slept through.
  void noteClaim() {
    std::lock_guard lock(mutex_);
    claimedAt_[std::this_thread::get_id()] = generations_[kRuns];
  }
  uint64_t seenAtClaim() {
    std::lock_guard lock(mutex_);
    auto found = claimedAt_.find(std::this_thread::get_id());
    return found != claimedAt_.end() ? found->second : generations_[kRuns];
  }
  // Waits until the bucket's generation is no longer `seen` or `deadline`; true if it changed.
  bool waitChange(size_t bucket, uint64_t seen, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] {
      return generations_[bucket] != seen || stopping_;
    }) && generations_[bucket] != seen;
  }

  // PostgreSQL: starts the listener on first use. True while it is listening.
  bool listening() {
    if (!listen_) return false;
    std::call_once(started_, [&] {
      wakeFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (wakeFd_ < 0) throw StoreError("store: eventfd failed");
      listener_ = std::thread([this] { listen(); });
    });
    return listening_.load();
  }

 private:
  static constexpr size_t kBuckets = 256;

  void bumpAll() {
    {
      std::lock_guard lock(mutex_);
      for (auto& generation : generations_)
        ++generation;
      ++anyEvents_;
    }
    changed_.notify_all();
  }

  // The listener thread: LISTEN on a dedicated connection, reconnecting with backoff.
  void listen();

  detail::SqlStoreEngine& engine_;
  const bool listen_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::array<uint64_t, kBuckets> generations_{};
  uint64_t anyEvents_ = 0;                                   // moves with every events bucket
  std::unordered_map<std::thread::id, uint64_t> claimedAt_;  // one entry per claiming thread
  bool stopping_ = false;
  std::once_flag started_;
  std::thread listener_;
  std::atomic<bool> listening_{false};
  int wakeFd_ = -1;
};

}  // namespace parley
