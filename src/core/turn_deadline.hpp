// One deadline for a run of model calls (RunOptions::turnTimeout, StructuredOptions::turnTimeout):
// the process's DeadlineTimer stops what is under way through one stop source that also follows
// the caller's token, and the calls' own timeouts are cut to what is left. Internal to parley.
// Thread-safety: made, asked and destroyed by the running call's thread; the timer only requests
// the stop.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>

#include "model/deadline.hpp"
#include "model/deadline_timer.hpp"
#include "parley/errors.hpp"

namespace parley::detail {

class TurnDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  // No deadline when `timeout` is nullopt: token() is then the caller's.
  TurnDeadline(std::optional<std::chrono::milliseconds> timeout, std::stop_token caller)
      : timeout_(timeout), caller_(std::move(caller)) {
    if (!timeout_) return;
    deadline_ = deadlineAfter(Clock::now(), *timeout_);
    followCaller_.emplace(caller_, std::function<void()>([this] { stop_.request_stop(); }));
    timer_ = DeadlineTimer::shared().schedule(*deadline_, [this] {
      expired_ = true;
      stop_.request_stop();
    });
  }
  ~TurnDeadline() {
    if (timer_) DeadlineTimer::shared().cancel(timer_);  // waits for a callback under way
  }
  TurnDeadline(const TurnDeadline&) = delete;
  TurnDeadline& operator=(const TurnDeadline&) = delete;

  bool active() const { return deadline_.has_value(); }
  bool expired() const { return expired_; }

  // What cancels the turn's work: the caller's token, or the deadline's stop.
  std::stop_token token() const { return deadline_ ? stop_.get_token() : caller_; }

  // The next call's timeout: `perCall` cut to what is left. Throws error() when nothing is.
  std::optional<std::chrono::milliseconds> callTimeout(
      std::optional<std::chrono::milliseconds> perCall) const {
    if (!deadline_) return perCall;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now());
    if (left.count() <= 0 || expired_) throw error();
    return perCall ? std::min(*perCall, left) : left;
  }

  TimeoutError error() const {
    return TimeoutError("the turn did not finish within its timeout of " +
                        std::to_string(timeout_->count()) + " ms");
  }

  // Inside a catch block: the turn's timeout when the deadline caused the failure (a call
  // cancelled by the watchdog, or timed out at the deadline), else the error caught.
  [[noreturn]] void rethrow() const {
    try {
      throw;
    } catch (const CancelledError&) {
      if (expired_) throw error();
      throw;
    } catch (const TimeoutError&) {
      if (deadline_ && Clock::now() >= *deadline_) throw error();
      throw;
    }
  }

 private:
  std::optional<std::chrono::milliseconds> timeout_;
  std::stop_token caller_;
  std::optional<Clock::time_point> deadline_;
  std::stop_source stop_;
  std::optional<std::stop_callback<std::function<void()>>> followCaller_;
  std::atomic<bool> expired_{false};
  DeadlineTimer::Id timer_ = 0;
};

}  // namespace parley::detail
