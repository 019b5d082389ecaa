// A FIFO turn for the writers of one SQLite file within this process (sqlite_store.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

namespace parley::detail {

// The writers of one database file in this process take turns here, first come first served,
// before BEGIN IMMEDIATE. SQLite's own write lock is polled by a busy handler that sleeps (up to
// 100 ms at a time) and favours no one: under load a writer could lose to newer ones again and
// again and wait a second for its turn. Writers in other processes still meet at SQLite's lock.
// Owned by the connections of the file (shared); every method is safe from any thread.
class WriterQueue {
 public:
  // The queue of the file at `path` (shared by every connection of this process to it); null for
  // an in-memory database, which no other connection shares.
  static std::shared_ptr<WriterQueue> forFile(const std::string& path);

  // False if the turn did not come within `timeout` (the caller reports the database busy).
  bool lock(std::chrono::milliseconds timeout);
  // Hands the turn to the oldest waiter (one thread woken, not all of them).
  void unlock();
  // How many wait for their turn (for tests).
  size_t waiting();

 private:
  struct Waiter {
    std::condition_variable turn;
    bool granted = false;
  };
  std::mutex mutex_;
  bool held_ = false;
  std::deque<Waiter*> waiters_;
};

}  // namespace parley::detail
