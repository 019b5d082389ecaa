// DeadlineTimer: one thread that calls back at deadlines, for every deadline the process keeps
// (a turn's timeout, core/turn_deadline.hpp). A thread of its own per deadline cost every turn a
// thread's start and join. Internal to parley.
//
// Ownership: one per process (shared()), started at its first use and never destroyed.
// Thread-safety: every member may be called from any thread. Callbacks run on the timer's
// thread, one at a time: they must be quick (request a stop, set a flag) and must not call the
// timer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace parley::detail {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;

  static DeadlineTimer& shared();

  // Calls `fire` once at `at` (at once if it has passed), unless cancelled first.
  Id schedule(Clock::time_point at, std::function<void()> fire);
  // Cancels `id`: once this returns its callback is not running and will not run (a callback
  // under way is waited for). An id that fired or was cancelled already is ignored.
  void cancel(Id id);

 private:
  DeadlineTimer() = default;
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  // By deadline, then by id (ids grow, so that two equal deadlines fire in schedule order).
  std::map<std::pair<Clock::time_point, Id>, std::function<void()>> due_;
  std::map<Id, Clock::time_point> deadlines_;  // the scheduled ids
  Id next_ = 1;
  Id firing_ = 0;  // the id whose callback runs now, 0 for none
  std::thread thread_;
};

}  // namespace parley::detail
