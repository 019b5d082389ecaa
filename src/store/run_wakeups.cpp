#include "store/run_wakeups.hpp"

#include "store/run_queries.hpp"

namespace parley {

using detail::kEventsChannel;
using detail::kRunsChannel;
using detail::SqlConnection;

RunStore::Wakeups::~Wakeups() {
  if (!listener_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wakeFd_, &one, sizeof one);
  changed_.notify_all();
  listener_.join();
  ::close(wakeFd_);
}

void RunStore::Wakeups::listen() {
  std::chrono::milliseconds backoff{50};
  std::unique_ptr<SqlConnection> connection;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    try {
      if (!connection) {
        connection = engine_.connectDedicated();
        connection->listen({kRunsChannel, kEventsChannel});
        listening_ = true;
        backoff = std::chrono::milliseconds(50);
        bumpAll();  // whatever happened while not listening: everyone re-reads
      }
      for (const auto& [channel, payload] :
           connection->awaitNotifications(std::chrono::seconds(10), wakeFd_)) {
        bump(channel == kRunsChannel ? kRuns : bucketOf(payload));
      }
    } catch (const std::exception&) {
      // The server went away or refused: poll meanwhile, reconnect with a growing pause.
      listening_ = false;
      connection.reset();
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, backoff, [&] { return stopping_; });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5'000));
    }
  }
}

}  // namespace parley
