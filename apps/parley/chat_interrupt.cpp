#include "chat_interrupt.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include "commands.hpp"

namespace parley::cli {
namespace {

sigset_t interruptSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

ChatInterrupts::ChatInterrupts(bool atPromptEnds) : atPromptEnds_(atPromptEnds) {
  const sigset_t set = interruptSet();
  pthread_sigmask(SIG_BLOCK, &set, &previousMask_);
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    pthread_sigmask(SIG_SETMASK, &previousMask_, nullptr);
    throw std::system_error(errno, std::generic_category(), "pipe");
  }
  thread_ = std::thread([this] { loop(); });
}

ChatInterrupts::~ChatInterrupts() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  // SIGINT is blocked in that thread, so this one waits for its sigwait() to take it.
  pthread_kill(thread_.native_handle(), SIGINT);
  thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
  // A Ctrl-C still pending is dropped, not delivered when the mask is lifted.
  const sigset_t set = interruptSet();
  sigset_t pending;
  sigpending(&pending);
  if (sigismember(&pending, SIGINT) == 1) {
    int taken = 0;
    sigwait(&set, &taken);
  }
  pthread_sigmask(SIG_SETMASK, &previousMask_, nullptr);
}

void ChatInterrupts::loop() {
  const sigset_t set = interruptSet();
  for (;;) {
    int received = 0;
    if (sigwait(&set, &received) != 0) continue;
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    if (armed_) {
      turnInterrupted_ = true;
      armed_->request_stop();
    } else if (atPromptEnds_) {
      std::_Exit(kExitInterrupted);
    } else {
      const char byte = 1;
      (void)!::write(pipe_[1], &byte, 1);  // a full pipe already says it
    }
  }
}

bool ChatInterrupts::takePromptInterrupt() {
  bool any = false;
  char buffer[64];
  while (::read(pipe_[0], buffer, sizeof buffer) > 0)
    any = true;
  return any;
}

void ChatInterrupts::arm(std::stop_source& stop) {
  std::lock_guard lock(mutex_);
  // A Ctrl-C still pending was pressed before the turn began (at the prompt): not for it.
  const sigset_t set = interruptSet();
  const timespec now{0, 0};
  while (sigtimedwait(&set, nullptr, &now) == SIGINT) {
  }
  armed_ = &stop;
  turnInterrupted_ = false;
}

bool ChatInterrupts::disarm() {
  std::lock_guard lock(mutex_);
  armed_ = nullptr;
  return turnInterrupted_;
}

}  // namespace parley::cli
