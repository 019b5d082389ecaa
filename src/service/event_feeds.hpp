// EventFeeds: one reader per watched thread's event log, fanned out to every event stream of
// that thread. Internal to src/service/.
//
// A feed reads its thread's log with RunStore::waitForEvents (so it wakes on the store's
// wake-ups: NOTIFY on PostgreSQL, this process's writes or polling on SQLite) and keeps the last
// `bufferEvents` events, formatted once as Server-Sent Events. A stream that asks for events the
// buffer no longer holds (a client resuming from far behind) reads them from the store itself,
// then joins the buffer. A thousand clients of one thread cost one reader, not a thousand.
//
// Ownership: the Service owns its EventFeeds; each feed's reader thread ends when its last
// stream does (or at stop()).
// Thread-safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parley/run_store.hpp"

namespace parley::service {

// `id: SEQ`, `event: TYPE`, `data: JSON` (toJson(StoredEvent)); a payload whose JSON would pass
// `maxBytes` is replaced by {"truncated": true, "bytes": n}.
std::string formatSseEvent(const StoredEvent& event, size_t maxBytes);

class EventFeeds {
 public:
  EventFeeds(std::shared_ptr<RunStore> runs, size_t maxEventBytes, size_t bufferEvents,
             std::function<void(const std::string&)> log);
  ~EventFeeds();

  struct Feed;
  // A stream's hold on its thread's feed; the feed ends when the last one is dropped.
  using Subscription = std::shared_ptr<Feed>;
  Subscription subscribe(const std::string& threadId, int64_t after);
  void unsubscribe(const Subscription& feed);

  struct Batch {
    std::vector<std::shared_ptr<const std::string>> texts;  // formatted events, in order
    int64_t last = 0;    // the sequence number of the last one (`after` when there is none)
    bool ended = false;  // the thread was deleted, or the service stops: end the stream
  };
  // The events after `after`, waiting for some until `deadline`.
  Batch next(const Subscription& feed, int64_t after,
             std::chrono::steady_clock::time_point deadline);

  // Ends every feed (their streams see `ended`) and waits for the readers. Idempotent.
  void stop();
  size_t streams() const;  // subscriptions now

 private:
  void read(std::shared_ptr<Feed> feed);
  std::shared_ptr<const std::string> format(const StoredEvent& event) const;

  std::shared_ptr<RunStore> runs_;
  size_t maxEventBytes_;
  size_t bufferEvents_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mutex_;  // feeds_, subscribers counts, readers_, stopping_
  std::condition_variable readersDone_;
  std::map<std::string, std::shared_ptr<Feed>> feeds_;
  size_t readers_ = 0;
  size_t streams_ = 0;
  bool stopping_ = false;
};

}  // namespace parley::service
