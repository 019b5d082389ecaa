// The turns of an http::Server's streamed responses (server.hpp, StreamControl). A long-lived
// request has a LongLivedStream; once its handler has returned a chunked provider, StreamTurns'
// few threads call that provider whenever there is reason to (its start, a wake(), the client's
// going, the deadline of a park) instead of a thread blocking in it for the stream's whole life.
// What a turn writes is sent at once without blocking; what the socket does not take waits in
// the stream's buffer, which the server's loop sends when the socket has room. Internal to
// src/http/.
//
// Pacing: a turn calls the provider again (it may have more: a client resuming from far behind)
// only while less than a quarter of `maxBuffer` waits unsent; past that the stream waits for the
// loop to send it down, so a slow reader falls behind in what it is sent, not in memory. A
// write that would hold more than `maxBuffer` cuts the stream, and so does a reader that takes
// nothing for the server's writeTimeout (the loop's check).
//
// Ownership: the Server's front owns StreamTurns (shared: streams reach it weakly) and each
// connection its LongLivedStream. Thread-safety: every member may be called from any thread,
// but for those said to be one thread's.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "http/server.hpp"

namespace parley::http::detail {

using Clock = std::chrono::steady_clock;

class StreamTurns;

class LongLivedStream final : public StreamControl,
                              public std::enable_shared_from_this<LongLivedStream> {
 public:
  // `turns`: where its response is streamed in turns (empty: it keeps its thread).
  LongLivedStream(int fd, std::weak_ptr<StreamTurns> turns) : fd_(fd), turns_(std::move(turns)) {}
  ~LongLivedStream() override;

  bool gone() const noexcept override { return gone_.load(); }
  void onGone(std::function<void()> wake) override;
  bool parkable() const noexcept override;
  void park(Clock::time_point deadline) override;
  bool takeTimedOut() noexcept override;
  void wake() override;

  // The loop's: the client closed or reset the socket.
  void markGone();

  // The handler thread's (the post-routing handler): takes a streamed response's provider, so
  // that httplib writes the head only and turns write the body. False for any other response.
  bool takeProvider(const httplib::Request& req, httplib::Response& res);
  bool tookProvider() const noexcept { return took_; }
  // The head of the response taken was written (httplib reached its body).
  bool headWritten() const noexcept { return headWritten_; }
  // Ends the provider taken: its releaser is called (once) with `success`.
  void dropProvider(bool success = false);

  // The loop's, when the socket has room: sends what waits; true when nothing is left to send
  // (or the stream broke). Resumes a stream that waited for room.
  bool flush();
  // The loop's: cuts the stream (true) when output has waited unsent for `timeout`.
  bool cutIfStalled(Clock::time_point now, std::chrono::milliseconds timeout);

  std::shared_ptr<void> connection;  // the server's connection, handed back at the end

 private:
  friend class StreamTurns;
  friend class http::ParkedStreams;
  enum class Sched { Handler, Due, Running, Parked, Draining, Finished };

  // The turn's writes (httplib::DataSink): a chunk of the body, the body's end.
  bool writeChunk(const char* data, size_t size);
  void endChunks();
  bool writable();
  size_t pending();
  // Sends `pieces`, in order, after what waits; false if the stream broke or would pass its
  // buffer's cap.
  bool send(std::initializer_list<std::string_view> pieces);
  // Sends what waits, as far as the socket takes it (under outMutex_).
  void sendWaiting();

  const int fd_;
  const std::weak_ptr<StreamTurns> turns_;
  std::atomic<bool> gone_{false};
  std::mutex goneMutex_;  // held while calling goneWake_: onGone() cannot swap it away meanwhile
  std::function<void()> goneWake_;

  // The handler thread's, then the turns' (one at a time; handed over under StreamTurns' lock).
  httplib::ContentProvider provider_;
  httplib::ContentProviderResourceReleaser releaser_;
  bool took_ = false;
  bool headWritten_ = false;
  bool keepAlive_ = true;
  size_t maxBuffer_ = 0;
  size_t offset_ = 0;
  bool done_ = false;  // the provider ended the body
  bool parkRequested_ = false;
  Clock::time_point parkDeadline_{};
  bool timedOut_ = false;  // this turn began at a park's deadline

  // Guarded by outMutex_: the output that waits for room.
  std::mutex outMutex_;
  std::string out_;
  Clock::time_point waitingSince_{};  // since when out_ has made no progress
  bool broken_ = false;               // a send failed or the stream was cut: no more writes
  bool roomWatched_ = false;          // the loop was asked to send out_

  // Guarded by StreamTurns::mutex_. A stream keeps one timer while it goes from park to park
  // (a wake leaves it): a timer that fires before the deadline of the park at hand is set again
  // for it, so a stream busy with events costs the timers nothing.
  Sched sched_ = Sched::Handler;
  bool woken_ = false;            // woken while running: one more turn
  Clock::time_point deadline_{};  // of the park at hand
  bool timed_ = false;            // timer_ is valid
  std::multimap<Clock::time_point, std::shared_ptr<LongLivedStream>>::iterator timer_{};
};

class StreamTurns : public std::enable_shared_from_this<StreamTurns> {
 public:
  friend class http::ParkedStreams;  // wakes the streams of one feed together
  struct Hooks {
    // The socket of `stream` is full: the loop watches it for room and calls stream->flush().
    std::function<void(const std::shared_ptr<LongLivedStream>&)> watchRoom;
    // The response of `stream` has ended: its connection goes back to the loop, kept for the
    // next request once what waits is sent (`keep`), else closed.
    std::function<void(const std::shared_ptr<LongLivedStream>&, bool keep)> ended;
  };
  StreamTurns(size_t threads, size_t maxBuffer, Hooks hooks);
  ~StreamTurns();
  StreamTurns(const StreamTurns&) = delete;
  StreamTurns& operator=(const StreamTurns&) = delete;

  // Streams the body of `stream`'s response (its provider taken) in turns from now; keepAlive:
  // the connection may serve another request after it. False once stop() has begun.
  bool serve(const std::shared_ptr<LongLivedStream>& stream, bool keepAlive);
  // Ends every stream as if its client had gone, waits for their ends, joins the threads.
  // Idempotent.
  void stop();
  size_t streams() const;  // served now
  size_t lowWater() const noexcept { return maxBuffer_ / 4; }

 private:
  friend class LongLivedStream;
  using StreamPtr = std::shared_ptr<LongLivedStream>;

  void wake(const StreamPtr& stream, bool evenIfWaitingForRoom);
  void wakeMany(const std::vector<StreamPtr>& streams);
  // Under mutex_: true when the stream became due.
  bool wakeLocked(const StreamPtr& stream, bool evenIfWaitingForRoom, bool notify);
  void schedule(const StreamPtr& stream, bool notify = true);  // under mutex_
  void run();
  void turn(const StreamPtr& stream, httplib::DataSink& sink);
  void setTimer(const StreamPtr& stream, Clock::time_point at);  // under mutex_
  void finish(const StreamPtr& stream, bool success);

  const size_t maxBuffer_;
  const Hooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable allEnded_;
  std::deque<StreamPtr> due_;
  std::multimap<Clock::time_point, StreamPtr> timers_;  // parked streams, by deadline
  std::unordered_set<StreamPtr> live_;                  // served, not ended
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Sets currentStream() (server.hpp) for the scope of a handler or a turn.
class ServingScope {
 public:
  ServingScope(std::shared_ptr<LongLivedStream> stream, bool turn);
  ~ServingScope();
  ServingScope(const ServingScope&) = delete;
  ServingScope& operator=(const ServingScope&) = delete;
};

}  // namespace parley::http::detail
