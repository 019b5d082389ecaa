#include "service/event_feeds.hpp"

#include <algorithm>
#include <span>
#include <thread>

#include "http/server.hpp"
#include "parley/errors.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

// How long the dispatcher waits at most in one wait for a wake-up: also how long stop() may
// wait for it.
constexpr std::chrono::milliseconds kWaitSlice{250};
// With NOTIFY (PostgreSQL listening), the followed threads are still polled this often, in case
// a notification was lost.
constexpr std::chrono::milliseconds kPushedRecheck{5'000};
// After a failing poll (the database is down), the next one comes this much later.
constexpr std::chrono::milliseconds kRetryPause{1'000};

std::string oneLine(std::string text) {
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return text;
}

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string formatSseEvent(const StoredEvent& event, size_t maxBytes) {
  json data = toJson(event);
  std::string text = dump(data);
  if (text.size() > maxBytes) {
    data["payload"] = {{"truncated", true}, {"bytes", text.size()}};
    text = dump(data);
  }
  return "id: " + std::to_string(event.seq) + "\nevent: " + oneLine(event.type) +
         "\ndata: " + text + "\n\n";
}

struct EventFeeds::Feed {
  std::string threadId;
  size_t subscribers = 0;  // guarded by EventFeeds::mutex_
  std::mutex mutex;        // the rest
  std::condition_variable changed;
  http::ParkedStreams parked;  // woken with `changed`
  // Every event with base < seq <= last (but expired chunks), oldest first.
  std::deque<std::pair<int64_t, std::shared_ptr<const std::string>>> buffer;
  int64_t base = 0;
  // Written under `mutex`; atomic so that a poll reads them without taking it (10 000 a poll).
  std::atomic<int64_t> last{0};
  std::atomic<bool> ended{false};
};

EventFeeds::EventFeeds(std::shared_ptr<RunStore> runs, size_t maxEventBytes, size_t bufferEvents,
                       std::function<void(const std::string&)> log)
    : runs_(std::move(runs)),
      maxEventBytes_(maxEventBytes),
      bufferEvents_(std::max<size_t>(bufferEvents, 1)),
      log_(std::move(log)) {}

EventFeeds::~EventFeeds() {
  stop();
}

std::shared_ptr<const std::string> EventFeeds::format(const StoredEvent& event) const {
  return std::make_shared<const std::string>(formatSseEvent(event, maxEventBytes_));
}

EventFeeds::Subscription EventFeeds::subscribe(const std::string& threadId, int64_t after) {
  // A new feed starts at the thread's end now: a stream behind it reads the rest from the store
  // (next()), and the dispatcher reads what comes after.
  int64_t head = 0;
  try {
    head = runs_->lastEventSeqs(std::span<const std::string>(&threadId, 1)).front().value_or(0);
  } catch (const std::exception&) {
    head = 0;  // the database is down: the dispatcher catches up once it is back
  }
  std::lock_guard lock(mutex_);
  ++streams_;
  auto& feed = feeds_[threadId];
  if (feed) {
    ++feed->subscribers;
    return feed;
  }
  feed = std::make_shared<Feed>();
  feed->threadId = threadId;
  feed->subscribers = 1;
  followedChanged_ = true;
  feed->base = std::max<int64_t>({after, head, 0});
  feed->last = feed->base;
  if (stopping_) {
    feed->ended = true;
    return feed;
  }
  if (!dispatcher_.joinable()) dispatcher_ = std::thread([this] { dispatch(); });
  return feed;
}

void EventFeeds::unsubscribe(const Subscription& feed) {
  std::lock_guard lock(mutex_);
  --streams_;
  if (--feed->subscribers == 0) followedChanged_ = true;  // dropped at the next poll
  if (streams_ == 0) noStreams_.notify_all();
}

size_t EventFeeds::streams() const {
  std::lock_guard lock(mutex_);
  return streams_;
}

void EventFeeds::dispatch() {
  using Clock = std::chrono::steady_clock;
  auto nextPoll = Clock::now();
  uint64_t seen = 0;
  bool moved = true;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (moved || Clock::now() >= nextPoll) {
      seen = runs_->eventsGeneration();
      bool more = false;
      try {
        more = poll();
        nextPoll =
            Clock::now() + (runs_->eventsPushed() ? kPushedRecheck : runs_->options().pollMax);
      } catch (const std::exception& e) {
        if (log_) log_(std::string("parley serve: reading the event log: ") + e.what());
        nextPoll = Clock::now() + kRetryPause;
      }
      if (more) {
        moved = true;
        continue;
      }
    }
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(nextPoll - Clock::now());
    moved = runs_->waitForEventsChange(seen,
                                       std::clamp(wait, std::chrono::milliseconds(1), kWaitSlice));
  }
}

bool EventFeeds::poll() {
  {
    // The list of followed threads is made again only when it changed: with thousands followed,
    // a poll that found nothing new costs the query and a look at each answer, no more.
    std::lock_guard lock(mutex_);
    if (followedChanged_) {
      followedChanged_ = false;
      followed_.clear();
      followedIds_.clear();
      for (auto it = feeds_.begin(); it != feeds_.end();) {
        if (it->second->subscribers == 0) {
          it = feeds_.erase(it);  // its last stream is gone
          continue;
        }
        followed_.push_back(it->second);
        followedIds_.push_back(it->first);
        ++it;
      }
    }
  }
  const auto& feeds = followed_;
  if (feeds.empty()) return false;
  ++polls_;
  const auto seqs = runs_->lastEventSeqs(followedIds_);
  bool more = false;
  for (size_t i = 0; i < feeds.size(); ++i) {
    Feed& feed = *feeds[i];
    if (feed.ended) continue;
    const int64_t last = feed.last;
    std::vector<StoredEvent> events;
    bool gone = !seqs[i];
    if (!gone && *seqs[i] <= last) continue;
    if (!gone) {
      ++reads_;
      try {
        events = runs_->readEvents(feed.threadId, last);
      } catch (const StoreError&) {
        gone = !runs_->lastEventSeqs(std::span<const std::string>(&feed.threadId, 1)).front();
        if (!gone) throw;
      }
    }
    if (gone) {
      // Deleted: its streams end.
      {
        std::lock_guard lock(mutex_);
        auto found = feeds_.find(feed.threadId);
        if (found != feeds_.end() && found->second == feeds[i]) {
          feeds_.erase(found);
          followedChanged_ = true;
        }
      }
      std::lock_guard lock(feed.mutex);
      feed.ended = true;
      feed.changed.notify_all();
      feed.parked.wakeAll();
      continue;
    }
    if (events.empty()) continue;
    std::vector<std::pair<int64_t, std::shared_ptr<const std::string>>> texts;
    texts.reserve(events.size());
    for (const auto& e : events)
      texts.emplace_back(e.seq, format(e));
    if (events.back().seq < *seqs[i]) more = true;
    std::lock_guard lock(feed.mutex);
    for (auto& t : texts)
      feed.buffer.push_back(std::move(t));
    feed.last = events.back().seq;
    while (feed.buffer.size() > bufferEvents_) {
      feed.base = feed.buffer.front().first;
      feed.buffer.pop_front();
    }
    feed.changed.notify_all();
    feed.parked.wakeAll();
  }
  return more;
}

EventFeeds::Batch EventFeeds::next(const Subscription& feed, int64_t after,
                                   std::chrono::steady_clock::time_point deadline) {
  Batch batch;
  batch.last = after;
  std::unique_lock lock(feed->mutex);
  if (after < feed->base) {
    // Behind the buffer: catch up from the store.
    lock.unlock();
    std::vector<StoredEvent> events;
    try {
      events = runs_->readEvents(feed->threadId, after);
    } catch (const StoreError&) {
      batch.ended = true;  // the thread is gone (or the database is down: the client reconnects)
      return batch;
    }
    if (!events.empty()) {
      for (const auto& e : events)
        batch.texts.push_back(format(e));
      batch.last = events.back().seq;
      return batch;
    }
    lock.lock();
    after = std::max(after, feed->base);
    batch.last = after;
  }
  // A stream served by http::Server also ends when its client goes: the server's loop sees the
  // socket close and wakes this wait, so the stream is released now, not at its next write.
  const std::shared_ptr<http::StreamControl> client = http::currentStream();
  const auto clientGone = [&] { return client && client->gone(); };
  const auto news = [&] { return feed->ended || feed->last > after || clientGone(); };
  if (client && client->parkable()) {
    // Within a turn of the stream: never wait. A turn begun at the last park's deadline answers
    // as the wait that timed out.
    const bool timedOut = client->takeTimedOut();
    if (!news()) {
      const bool due = std::chrono::steady_clock::now() >= deadline;
      // Parked under feed->mutex: the dispatcher's wake comes after it. A wait that timed out
      // is answered (the caller sends its heartbeat) and parked for after it at once, which
      // saves the turn a call.
      if (!due) {
        feed->parked.add(client);
        client->park(deadline);
      }
      batch.parked = !timedOut && !due;
      return batch;
    }
  } else {
    if (client) {
      lock.unlock();
      client->onGone([feed] {
        std::lock_guard woken(feed->mutex);
        feed->changed.notify_all();
      });
      lock.lock();
    }
    feed->changed.wait_until(lock, deadline, news);
    if (client) {
      lock.unlock();
      client->onGone(nullptr);
      lock.lock();
    }
  }
  if (clientGone()) {
    batch.ended = true;
    return batch;
  }
  if (feed->last > after && after >= feed->base) {
    auto from = std::upper_bound(feed->buffer.begin(), feed->buffer.end(), after,
                                 [](int64_t seq, const auto& entry) { return seq < entry.first; });
    for (auto it = from; it != feed->buffer.end(); ++it) {
      batch.texts.push_back(it->second);
      batch.last = it->first;
    }
  }
  batch.ended = feed->ended && batch.texts.empty();
  return batch;
}

void EventFeeds::stop(std::chrono::milliseconds grace) {
  std::vector<std::shared_ptr<Feed>> feeds;
  std::thread dispatcher;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [id, feed] : feeds_)
      feeds.push_back(feed);
    dispatcher = std::move(dispatcher_);
  }
  for (auto& feed : feeds) {
    std::lock_guard lock(feed->mutex);
    feed->ended = true;
    feed->changed.notify_all();
    feed->parked.wakeAll();
  }
  if (dispatcher.joinable()) dispatcher.join();
  std::unique_lock lock(mutex_);
  noStreams_.wait_for(lock, grace, [&] { return streams_ == 0; });
}

}  // namespace parley::service
