#include "service/event_feeds.hpp"

#include <algorithm>
#include <thread>

#include "parley/errors.hpp"
#include "parley/logger.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

// How long a reader waits in one waitForEvents call: also how long it may outlive its last
// stream, and how long stop() may wait for it.
constexpr std::chrono::milliseconds kReadSlice{250};
// After a failing read (the database is down), the reader tries again this much later.
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
  // Every event with base < seq <= last (but expired chunks), oldest first.
  std::deque<std::pair<int64_t, std::shared_ptr<const std::string>>> buffer;
  int64_t base = 0;
  int64_t last = 0;
  bool ended = false;
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
  feed->base = feed->last = std::max<int64_t>(after, 0);
  if (stopping_) {
    feed->ended = true;
    return feed;
  }
  ++readers_;
  std::thread([this, feed] { read(feed); }).detach();
  return feed;
}

void EventFeeds::unsubscribe(const Subscription& feed) {
  std::lock_guard lock(mutex_);
  --streams_;
  --feed->subscribers;  // the reader sees 0 and ends
}

size_t EventFeeds::streams() const {
  std::lock_guard lock(mutex_);
  return streams_;
}

void EventFeeds::read(std::shared_ptr<Feed> feed) {
  int64_t last = feed->last;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || feed->subscribers == 0) {
        if (feeds_.count(feed->threadId) && feeds_[feed->threadId] == feed) {
          feeds_.erase(feed->threadId);
        }
        break;
      }
    }
    std::vector<StoredEvent> events;
    try {
      events = runs_->waitForEvents(feed->threadId, last, kReadSlice);
    } catch (const std::exception& e) {
      bool gone = false;
      try {
        gone = !runs_->threads().threadInfo(feed->threadId);
      } catch (const std::exception&) {
        // the database is down: try again below
      }
      if (gone) {
        std::lock_guard lock(mutex_);
        if (feeds_.count(feed->threadId) && feeds_[feed->threadId] == feed) {
          feeds_.erase(feed->threadId);
        }
        break;  // its streams see `ended` below
      }
      writeLog(log_, std::string("parley serve: reading events of a thread: ") + e.what());
      std::unique_lock lock(mutex_);
      readersDone_.wait_for(lock, kRetryPause, [&] { return stopping_; });
      continue;
    }
    if (events.empty()) continue;
    std::vector<std::pair<int64_t, std::shared_ptr<const std::string>>> texts;
    texts.reserve(events.size());
    for (const auto& e : events)
      texts.emplace_back(e.seq, format(e));
    last = events.back().seq;
    std::lock_guard lock(feed->mutex);
    for (auto& t : texts)
      feed->buffer.push_back(std::move(t));
    feed->last = last;
    while (feed->buffer.size() > bufferEvents_) {
      feed->base = feed->buffer.front().first;
      feed->buffer.pop_front();
    }
    feed->changed.notify_all();
  }
  {
    std::lock_guard lock(feed->mutex);
    feed->ended = true;
    feed->changed.notify_all();
  }
  std::lock_guard lock(mutex_);
  --readers_;
  readersDone_.notify_all();
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
  feed->changed.wait_until(lock, deadline, [&] { return feed->ended || feed->last > after; });
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

void EventFeeds::stop() {
  std::vector<std::shared_ptr<Feed>> feeds;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [id, feed] : feeds_)
      feeds.push_back(feed);
  }
  readersDone_.notify_all();
  for (auto& feed : feeds) {
    std::lock_guard lock(feed->mutex);
    feed->ended = true;
    feed->changed.notify_all();
  }
  std::unique_lock lock(mutex_);
  readersDone_.wait(lock, [&] { return readers_ == 0; });
}

}  // namespace parley::service
