// ServiceMetrics: what /metrics reports (Prometheus text format 0.0.4). Internal to
// src/service/.
//
// Thread-safety: every member may be called from any thread. requestStarted() and
// requestDone() pair up per server thread (one request at a time on each).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "parley/run_store.hpp"

namespace parley::service {

class ServiceMetrics {
 public:
  void requestStarted();
  void requestDone(int status);  // not for event streams: their length is the client's choice
  void streamOpened() { streamsOpened_.fetch_add(1, std::memory_order_relaxed); }
  void streamClosed() { streamsClosed_.fetch_add(1, std::memory_order_relaxed); }
  void eventsSent(size_t n) { eventsSent_.fetch_add(n, std::memory_order_relaxed); }

  // The text of /metrics: runs by state and the queue depth (from `runs`), stream clients now,
  // requests by status class and the request latency histogram.
  std::string render(const std::map<RunStatus, int64_t>& runs, size_t streams) const;

  // The histogram's upper bounds, in seconds.
  static constexpr std::array<double, 11> kBuckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,   0.25,   0.5,   1,    2.5};

 private:
  mutable std::mutex mutex_;
  std::array<uint64_t, kBuckets.size() + 1> counts_{};  // the last: +Inf
  double sum_ = 0;
  std::map<int, uint64_t> byStatus_;
  std::atomic<uint64_t> streamsOpened_{0};
  std::atomic<uint64_t> streamsClosed_{0};
  std::atomic<uint64_t> eventsSent_{0};
};

}  // namespace parley::service
