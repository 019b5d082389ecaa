#include "http/stream_turns.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

namespace parley::http {

namespace {

// Provider calls in one turn at most, so that a stream with much to send (a client resuming
// from far behind) takes its turn in rounds with the others.
constexpr size_t kCallsPerTurn = 16;

thread_local std::shared_ptr<StreamControl> servingStream;
thread_local const StreamControl* turnOf = nullptr;

}  // namespace

std::shared_ptr<StreamControl> currentStream() {
  return servingStream;
}

ParkedStreams::~ParkedStreams() {
  for (auto& weak : streams_) {
    if (auto stream = weak.lock()) {
      const void* me = this;
      stream->parkedOn_.compare_exchange_strong(me, nullptr);
    }
  }
}

void ParkedStreams::add(const std::shared_ptr<StreamControl>& stream) {
  if (stream->parkedOn_.exchange(this) == this) return;  // listed already
  if (streams_.size() >= pruneAt_) {
    std::erase_if(streams_, [](const auto& weak) { return weak.expired(); });
    pruneAt_ = std::max<size_t>(16, streams_.size() * 2);
  }
  streams_.push_back(stream);
}

void ParkedStreams::wakeAll() {
  auto streams = std::exchange(streams_, {});
  pruneAt_ = 16;
  // The streams of one server are woken together: one lock and one notification for all.
  std::shared_ptr<detail::StreamTurns> turns;
  std::vector<std::shared_ptr<detail::LongLivedStream>> together;
  for (auto& weak : streams) {
    auto stream = weak.lock();
    if (!stream) continue;
    const void* me = this;
    stream->parkedOn_.compare_exchange_strong(me, nullptr);
    auto served = std::dynamic_pointer_cast<detail::LongLivedStream>(stream);
    auto itsTurns = served ? served->turns_.lock() : nullptr;
    if (!itsTurns || (turns && itsTurns != turns)) {
      stream->wake();
      continue;
    }
    turns = std::move(itsTurns);
    together.push_back(std::move(served));
  }
  if (turns) turns->wakeMany(together);
}

namespace detail {

ServingScope::ServingScope(std::shared_ptr<LongLivedStream> stream, bool turn) {
  turnOf = turn ? stream.get() : nullptr;
  servingStream = std::move(stream);
}

ServingScope::~ServingScope() {
  turnOf = nullptr;
  servingStream.reset();
}

// --- LongLivedStream -------------------------------------------------------------------------

LongLivedStream::~LongLivedStream() {
  dropProvider();
}

void LongLivedStream::onGone(std::function<void()> wake) {
  std::unique_lock lock(goneMutex_);
  goneWake_ = std::move(wake);
  if (gone_.load() && goneWake_) {
    auto call = goneWake_;
    lock.unlock();
    call();
  }
}

void LongLivedStream::markGone() {
  {
    std::lock_guard lock(goneMutex_);
    gone_.store(true);
    if (goneWake_) goneWake_();
  }
  if (auto turns = turns_.lock()) turns->wake(shared_from_this(), true);
}

bool LongLivedStream::parkable() const noexcept {
  return turnOf == this;
}

void LongLivedStream::park(Clock::time_point deadline) {
  if (turnOf != this) return;
  parkRequested_ = true;
  parkDeadline_ = deadline;
}

bool LongLivedStream::takeTimedOut() noexcept {
  return turnOf == this && std::exchange(timedOut_, false);
}

void LongLivedStream::wake() {
  if (auto turns = turns_.lock()) turns->wake(shared_from_this(), false);
}

bool LongLivedStream::takeProvider(const httplib::Request& req, httplib::Response& res) {
  if (turns_.expired() || took_ || req.method == "HEAD" || !res.body.empty() ||
      !res.content_provider_ || !res.is_chunked_content_provider_ ||
      res.has_header("Content-Encoding")) {
    return false;
  }
  provider_ = std::move(res.content_provider_);
  releaser_ = std::move(res.content_provider_resource_releaser_);
  res.content_provider_resource_releaser_ = nullptr;
  took_ = true;
  // httplib calls this once the head is written; false ends its writing there.
  res.content_provider_ = [this](size_t, size_t, httplib::DataSink&) {
    headWritten_ = true;
    return false;
  };
  return true;
}

void LongLivedStream::dropProvider(bool success) {
  provider_ = nullptr;
  if (auto releaser = std::exchange(releaser_, nullptr)) {
    try {
      releaser(success);
    } catch (const std::exception&) {
      // a releaser's failure has no one to go to
    }
  }
}

bool LongLivedStream::writeChunk(const char* data, size_t size) {
  if (size == 0) return true;  // httplib would end the body on it; nothing to send
  char head[24];
  const int headSize = std::snprintf(head, sizeof head, "%zx\r\n", size);
  offset_ += size;
  return send({std::string_view(head, static_cast<size_t>(headSize)), std::string_view(data, size),
               "\r\n"});
}

void LongLivedStream::endChunks() {
  done_ = true;
  send({"0\r\n\r\n"});
}

bool LongLivedStream::writable() {
  std::lock_guard lock(outMutex_);
  return !broken_ && !gone();
}

size_t LongLivedStream::pending() {
  std::lock_guard lock(outMutex_);
  return out_.size();
}

bool LongLivedStream::send(std::initializer_list<std::string_view> pieces) {
  std::lock_guard lock(outMutex_);
  if (broken_ || gone()) return false;
  size_t total = 0;
  for (auto piece : pieces)
    total += piece.size();
  size_t sent = 0;  // of the pieces, in order
  if (out_.empty()) {
    // Straight to the socket, the pieces as they are (no copy into one frame).
    while (sent < total) {
      iovec parts[4];
      int count = 0;
      size_t skip = sent;
      for (auto piece : pieces) {
        if (skip >= piece.size()) {
          skip -= piece.size();
          continue;
        }
        parts[count++] = {const_cast<char*>(piece.data() + skip), piece.size() - skip};
        skip = 0;
      }
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      broken_ = true;
      return false;
    }
    if (sent == total) return true;
    waitingSince_ = Clock::now();
  }
  if (out_.size() + total - sent > maxBuffer_) {
    broken_ = true;  // the reader is too far behind: cut
    return false;
  }
  for (auto piece : pieces) {
    const size_t skip = std::min(sent, piece.size());
    out_.append(piece.substr(skip));
    sent -= skip;
  }
  return true;
}

void LongLivedStream::sendWaiting() {
  size_t sent = 0;
  while (sent < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + sent, out_.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) broken_ = true;
    break;
  }
  if (sent > 0) {
    out_.erase(0, sent);
    waitingSince_ = Clock::now();
  }
  if (out_.empty() || broken_) std::string().swap(out_);  // an idle stream keeps no buffer
}

bool LongLivedStream::flush() {
  auto turns = turns_.lock();
  bool ended;
  bool broke;
  {
    std::lock_guard lock(outMutex_);
    sendWaiting();
    broke = broken_;
    ended = out_.empty() || broken_;
    if (ended) roomWatched_ = false;
    if (turns && out_.size() <= turns->lowWater()) {
      std::lock_guard schedule(turns->mutex_);
      if (sched_ == Sched::Draining) turns->schedule(shared_from_this());
    }
  }
  if (broke && turns) turns->wake(shared_from_this(), true);  // the turn ends it
  return ended;
}

bool LongLivedStream::cutIfStalled(Clock::time_point now, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(outMutex_);
    if (out_.empty() || broken_ || now - waitingSince_ < timeout) return false;
    broken_ = true;
    roomWatched_ = false;
    std::string().swap(out_);
  }
  if (auto turns = turns_.lock()) turns->wake(shared_from_this(), true);
  return true;
}

// --- StreamTurns -----------------------------------------------------------------------------

StreamTurns::StreamTurns(size_t threads, size_t maxBuffer, Hooks hooks)
    : maxBuffer_(maxBuffer), hooks_(std::move(hooks)) {
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { run(); });
}

StreamTurns::~StreamTurns() {
  stop();
}

bool StreamTurns::serve(const StreamPtr& stream, bool keepAlive) {
  std::lock_guard lock(mutex_);
  if (stopping_ || threads_.empty()) return false;
  stream->keepAlive_ = keepAlive;
  stream->maxBuffer_ = maxBuffer_;
  live_.insert(stream);
  schedule(stream);
  return true;
}

size_t StreamTurns::streams() const {
  std::lock_guard lock(mutex_);
  return live_.size();
}

void StreamTurns::stop() {
  std::vector<StreamPtr> live;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    live.assign(live_.begin(), live_.end());
  }
  for (auto& stream : live)
    stream->markGone();
  {
    std::unique_lock lock(mutex_);
    allEnded_.wait(lock, [&] { return live_.empty(); });
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& thread : threads_)
    thread.join();
}

void StreamTurns::schedule(const StreamPtr& stream, bool notify) {
  stream->sched_ = LongLivedStream::Sched::Due;  // its timer stays (see timed_)
  due_.push_back(stream);
  if (notify) work_.notify_one();
}

void StreamTurns::setTimer(const StreamPtr& stream, Clock::time_point at) {
  if (stream->timed_) timers_.erase(stream->timer_);
  stream->timer_ = timers_.emplace(at, stream);
  stream->timed_ = true;
  if (stream->timer_ == timers_.begin()) work_.notify_one();  // a sooner deadline
}

void StreamTurns::wake(const StreamPtr& stream, bool evenIfWaitingForRoom) {
  std::lock_guard lock(mutex_);
  wakeLocked(stream, evenIfWaitingForRoom, true);
}

void StreamTurns::wakeMany(const std::vector<StreamPtr>& streams) {
  size_t due = 0;
  {
    std::lock_guard lock(mutex_);
    for (const auto& stream : streams)
      due += wakeLocked(stream, false, false) ? 1 : 0;
  }
  if (due == 1) work_.notify_one();
  if (due > 1) work_.notify_all();
}

bool StreamTurns::wakeLocked(const StreamPtr& stream, bool evenIfWaitingForRoom, bool notify) {
  using Sched = LongLivedStream::Sched;
  switch (stream->sched_) {
    case Sched::Parked:
      schedule(stream, notify);
      return true;
    case Sched::Draining:
      // Waiting for the reader: only its going (or a cut) is news now.
      if (!evenIfWaitingForRoom) return false;
      schedule(stream, notify);
      return true;
    case Sched::Running:
      stream->woken_ = true;
      return false;
    default:
      return false;
  }
}

void StreamTurns::run() {
  using Sched = LongLivedStream::Sched;
  httplib::DataSink sink;  // the thread's, for every turn it runs
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      StreamPtr stream = timers_.begin()->second;
      timers_.erase(timers_.begin());
      stream->timed_ = false;
      if (stream->sched_ != Sched::Parked) continue;  // its next park sets one again
      if (stream->deadline_ > now) {
        setTimer(stream, stream->deadline_);  // parked again since this one was set
        continue;
      }
      stream->timedOut_ = true;
      schedule(stream);
    }
    if (!due_.empty()) {
      // A share of what is due at once (one lock for many turns when a thread's events wake
      // thousands of streams).
      const size_t take = std::clamp<size_t>(due_.size() / threads_.size(), 1, kCallsPerTurn);
      std::vector<StreamPtr> batch;
      batch.reserve(take);
      for (size_t i = 0; i < take; ++i) {
        StreamPtr stream = std::move(due_.front());
        due_.pop_front();
        stream->sched_ = Sched::Running;
        stream->woken_ = false;
        batch.push_back(std::move(stream));
      }
      lock.unlock();
      for (auto& stream : batch)
        turn(stream, sink);
      batch.clear();
      lock.lock();
      continue;
    }
    if (stopping_) return;
    if (timers_.empty()) {
      work_.wait(lock);
    } else {
      const Clock::time_point until = timers_.begin()->first;  // the node may go meanwhile
      work_.wait_until(lock, until);
    }
  }
}

void StreamTurns::turn(const StreamPtr& stream, httplib::DataSink& sink) {
  using Sched = LongLivedStream::Sched;
  enum class End { Park, Drain, Again, Finish };
  End end = End::Again;
  bool success = false;
  {
    ServingScope serving(stream, true);
    LongLivedStream& s = *stream;
    sink.write = [&s](const char* data, size_t size) { return s.writeChunk(data, size); };
    sink.done = [&s] { s.endChunks(); };
    sink.is_writable = [&s] { return s.writable(); };
    for (size_t calls = 0;; ++calls) {
      if (!s.writable()) {
        end = End::Finish;
        break;
      }
      if (calls == kCallsPerTurn) break;
      s.parkRequested_ = false;
      bool ok = false;
      try {
        ok = s.provider_(s.offset_, 0, sink);
      } catch (const std::exception&) {
        ok = false;  // as httplib: the response ends there
      }
      if (!ok || !s.writable()) {
        end = End::Finish;
        break;
      }
      if (s.done_) {
        end = End::Finish;
        success = true;
        break;
      }
      if (s.parkRequested_) {
        end = End::Park;
        break;
      }
      if (s.pending() > lowWater()) {
        end = End::Drain;
        break;
      }
    }
    s.timedOut_ = false;  // a deadline's news is for the turn it began
  }
  if (end == End::Finish) {
    finish(stream, success);
    return;
  }
  bool watch = false;
  {
    std::lock_guard out(stream->outMutex_);
    std::lock_guard lock(mutex_);
    if (end == End::Park && !stream->woken_) {
      stream->sched_ = Sched::Parked;
      stream->deadline_ = stream->parkDeadline_;
      // A timer due before this deadline stays: when it fires, it is set again for this one.
      if (!stream->timed_ || stream->timer_->first > stream->deadline_)
        setTimer(stream, stream->deadline_);
    } else if (end == End::Drain && stream->out_.size() > lowWater() && !stream->gone()) {
      stream->sched_ = Sched::Draining;
    } else {
      schedule(stream);
    }
    if (!stream->out_.empty() && !stream->roomWatched_) {
      stream->roomWatched_ = true;
      watch = true;
    }
  }
  if (watch) hooks_.watchRoom(stream);
}

void StreamTurns::finish(const StreamPtr& stream, bool success) {
  // The provider's resources first: its releaser may take a while (a store write).
  stream->dropProvider(success);
  bool keep = success && stream->keepAlive_ && !stream->gone();
  {
    std::lock_guard out(stream->outMutex_);
    if (stream->broken_) keep = false;
  }
  {
    std::lock_guard lock(mutex_);
    if (stream->timed_) {
      timers_.erase(stream->timer_);
      stream->timed_ = false;
    }
    stream->sched_ = LongLivedStream::Sched::Finished;
    live_.erase(stream);
    if (live_.empty()) allEnded_.notify_all();
  }
  hooks_.ended(stream, keep);
}

}  // namespace detail
}  // namespace parley::http
