#include "service/metrics.hpp"

#include <chrono>
#include <sstream>

namespace parley::service {

namespace {
thread_local std::chrono::steady_clock::time_point requestStart{};
}

void ServiceMetrics::requestStarted() {
  requestStart = std::chrono::steady_clock::now();
}

void ServiceMetrics::requestDone(int status) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - requestStart).count();
  size_t bucket = 0;
  while (bucket < kBuckets.size() && seconds > kBuckets[bucket])
    ++bucket;
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += seconds;
  ++byStatus_[status];
}

std::string ServiceMetrics::render(const std::map<RunStatus, int64_t>& runs, size_t streams) const {
  std::ostringstream out;
  out << "# HELP parley_runs Runs in the database, by state.\n# TYPE parley_runs gauge\n";
  for (RunStatus status :
       {RunStatus::Queued, RunStatus::Running, RunStatus::Waiting, RunStatus::Completed,
        RunStatus::Failed, RunStatus::Cancelled, RunStatus::Rejected}) {
    auto found = runs.find(status);
    out << "parley_runs{state=\"" << toString(status) << "\"} "
        << (found == runs.end() ? 0 : found->second) << "\n";
  }
  auto queued = runs.find(RunStatus::Queued);
  out << "# HELP parley_queue_depth Runs queued, waiting for a worker.\n"
      << "# TYPE parley_queue_depth gauge\n"
      << "parley_queue_depth " << (queued == runs.end() ? 0 : queued->second) << "\n";
  out << "# HELP parley_stream_clients Event streams open on this process.\n"
      << "# TYPE parley_stream_clients gauge\n"
      << "parley_stream_clients " << streams << "\n";
  out << "# HELP parley_stream_events_sent_total Events sent on event streams.\n"
      << "# TYPE parley_stream_events_sent_total counter\n"
      << "parley_stream_events_sent_total " << eventsSent_.load() << "\n";
  out << "# HELP parley_streams_opened_total Event streams opened.\n"
      << "# TYPE parley_streams_opened_total counter\n"
      << "parley_streams_opened_total " << streamsOpened_.load() << "\n";
  std::lock_guard lock(mutex_);
  out << "# HELP parley_http_requests_total Requests answered (event streams aside), by status.\n"
      << "# TYPE parley_http_requests_total counter\n";
  for (const auto& [status, n] : byStatus_)
    out << "parley_http_requests_total{code=\"" << status << "\"} " << n << "\n";
  out << "# HELP parley_http_request_duration_seconds Request latency (event streams aside).\n"
      << "# TYPE parley_http_request_duration_seconds histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    cumulative += counts_[i];
    out << "parley_http_request_duration_seconds_bucket{le=\"" << kBuckets[i] << "\"} "
        << cumulative << "\n";
  }
  cumulative += counts_.back();
  out << "parley_http_request_duration_seconds_bucket{le=\"+Inf\"} " << cumulative << "\n"
      << "parley_http_request_duration_seconds_sum " << sum_ << "\n"
      << "parley_http_request_duration_seconds_count " << cumulative << "\n";
  return out.str();
}

}  // namespace parley::service
