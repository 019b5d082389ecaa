// SIGINT and SIGTERM as a request to stop, for the commands that serve until told to (mock,
// serve, worker, runs events --follow): blocked in every thread, then taken by one thread.
#pragma once

namespace parley::cli {

// Blocks SIGINT and SIGTERM in the calling thread. Construct it before any thread starts, so
// that every thread inherits the mask and only wait() or pending() sees the signals. Owned by
// the command's main thread; not for use from several threads.
class StopSignals {
 public:
  StopSignals();
  // Waits for SIGINT or SIGTERM; returns the signal's number.
  int wait();
  // Whether one of them arrived (it stays pending).
  bool pending() const;
};

}  // namespace parley::cli
