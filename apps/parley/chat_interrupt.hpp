// Ctrl-C (SIGINT) for `parley chat`, taken by one thread of its own and never by a handler that
// interrupts whatever thread the kernel picked: the chat runs other threads (the built-in mock's
// server, HTTP and tool pools), and a handler jumping out of the line editor on one of them
// once ran the chat loop on the wrong stack.
//
// The constructor blocks SIGINT in the calling thread before the session starts any thread, so
// every thread the session starts inherits the block; its own thread then takes each SIGINT
// with sigwait(): during a turn it stops the turn (the stop source given to arm()); at the prompt
// it makes interruptFd() readable, which the line editor watches (bracketed_paste.hpp), or, when
// stdin is not a terminal, it ends the process with exit code 130 (everything is saved by then).
//
// Thread-safety: arm(), disarm() and takePromptInterrupt() are for the chat's thread; the rest
// is internal.
#pragma once

#include <mutex>
#include <stop_token>
#include <thread>

#include <signal.h>

namespace parley::cli {

class ChatInterrupts {
 public:
  // `atPromptEnds`: a Ctrl-C with no turn under way ends the process (stdin is not a terminal).
  explicit ChatInterrupts(bool atPromptEnds);
  ~ChatInterrupts();
  ChatInterrupts(const ChatInterrupts&) = delete;
  ChatInterrupts& operator=(const ChatInterrupts&) = delete;

  // Readable after a Ctrl-C that came with no turn under way.
  int interruptFd() const noexcept { return pipe_[0]; }
  // Whether a Ctrl-C came at the prompt since the last call; empties interruptFd().
  bool takePromptInterrupt();

  // A turn starts: a Ctrl-C from now on requests `stop` (which must outlive disarm()).
  void arm(std::stop_source& stop);
  // The turn ended; returns whether a Ctrl-C came during it.
  bool disarm();

 private:
  void loop();

  int pipe_[2] = {-1, -1};
  sigset_t previousMask_{};
  bool atPromptEnds_;
  std::mutex mutex_;
  std::stop_source* armed_ = nullptr;  // guarded by mutex_
  bool turnInterrupted_ = false;       // guarded by mutex_
  bool stopping_ = false;              // guarded by mutex_
  std::thread thread_;
};

}  // namespace parley::cli
