#include "stop_signals.hpp"

#include <pthread.h>

#include <csignal>

namespace parley::cli {
namespace {

sigset_t stopSet() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

}  // namespace

StopSignals::StopSignals() {
  const sigset_t signals = stopSet();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int StopSignals::wait() {
  const sigset_t signals = stopSet();
  int received = 0;
  sigwait(&signals, &received);
  return received;
}

bool StopSignals::pending() const {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM);
}

}  // namespace parley::cli
