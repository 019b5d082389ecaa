// EventFeeds: every watched thread's event log, read by one dispatcher thread and fanned out to
// every event stream of that thread. Internal to src/service/.
//
// The dispatcher has one wake-up source for all the threads followed (RunStore's
// eventsGeneration(): this process's writes, NOTIFY on PostgreSQL): at each wake-up, and every
// pollMax when other processes' writes wake no one (SQLite), it asks the last sequence number of
// every followed thread in one query (RunStore::lastEventSeqs) and reads the events of those that
// moved. Idle streams thus cost one query per wake-up for all of them, not a poll each. A feed
// keeps the last `bufferEvents` events, formatted once as Server-Sent Events; a stream that asks
// for events the buffer no longer holds (a client resuming from far behind) reads them from the
// store itself, then joins the buffer. A thousand clients of one thread cost one buffer.
//
// A stream whose response the HTTP front serves in turns (http::StreamControl) does not block in
// next(): with nothing to send yet it is parked on its feed and woken by the feed's next events
// (or its end), so a waiting stream holds no thread.
//
// Ownership: the Service owns its EventFeeds; a feed ends when its last stream does (or at
// stop()); the dispatcher runs from the first subscribe() until stop().
// Thread-safety: every member may be called from any thread.
#pragma once

#include <atomic>
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
#include <thread>
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
    // Nothing yet: the stream was parked (see above); its provider returns writing nothing and
    // is called again when there is news or at `deadline` (then next() answers as a wait that
    // timed out: no texts).
    bool parked = false;
  };
  // The events after `after`, waiting for some until `deadline`. On a thread serving a
  // long-lived request of http::Server, the wait also ends, with `ended`, when that request's
  // client goes (http::currentStream()); within a turn of its stream, it parks instead of
  // waiting.
  Batch next(const Subscription& feed, int64_t after,
             std::chrono::steady_clock::time_point deadline);

  // Ends every feed (their streams see `ended`), joins the dispatcher, then waits up to `grace`
  // for the streams to close (each writes its last bytes before it unsubscribes), so that a
  // server shut down next does not cut them mid-response. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  size_t streams() const;  // subscriptions now

  // What the dispatcher did (for /metrics and tests): its polls (one lastEventSeqs() query for
  // every followed thread each) and the event reads those led to.
  uint64_t polls() const { return polls_.load(); }
  uint64_t reads() const { return reads_.load(); }

 private:
  void dispatch();
  // One poll: the followed threads' last sequence numbers, then the events of those that moved.
  // True if a thread has more events than one read took (poll again at once).
  bool poll();
  std::shared_ptr<const std::string> format(const StoredEvent& event) const;

  std::shared_ptr<RunStore> runs_;
  size_t maxEventBytes_;
  size_t bufferEvents_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mutex_;  // feeds_, subscribers counts, stopping_, dispatcher_
  std::map<std::string, std::shared_ptr<Feed>> feeds_;
  bool followedChanged_ = false;  // feeds_ gained a feed or one lost its last stream
  size_t streams_ = 0;
  std::condition_variable noStreams_;  // streams_ reached 0
  bool stopping_ = false;
  std::thread dispatcher_;
  // The dispatcher's: the feeds it polls and their threads' ids, made from feeds_ when it changed.
  std::vector<std::shared_ptr<Feed>> followed_;
  std::vector<std::string> followedIds_;
  std::atomic<uint64_t> polls_{0};
  std::atomic<uint64_t> reads_{0};
};

}  // namespace parley::service
