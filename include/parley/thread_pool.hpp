// An elastic pool of worker threads that a stuck task cannot starve.
//
// submit() never queues a task behind a busy worker: it hands the task to an idle worker or
// starts a new thread. Threads are reused while they are idle; idle threads beyond `maxIdle`, or
// idle for longer than `idleTimeout`, exit. The pool therefore bounds nothing by itself: callers
// bound their own concurrency (ToolExecutor does, per executor). What the pool buys is that a
// task which never returns (a tool handler ignoring its stop token) holds exactly one thread and
// never delays another task.
//
// Lifetime: workers are detached and share the pool's state by shared_ptr, so destroying the
// pool never waits for running tasks and never leaves a worker with a dangling pointer. Tasks
// already submitted still run; workers exit once they are idle.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace parley {

class ThreadPool {
 public:
  struct Options {
    std::size_t maxIdle = 8;                        // idle threads kept for reuse
    std::chrono::milliseconds idleTimeout{30'000};  // an idle thread exits after this long
  };

  ThreadPool();
  explicit ThreadPool(Options options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs `task` on a pool thread, now. An exception escaping `task` is swallowed (tasks report
  // their own failures). Throws std::system_error only if no thread could be started; the task
  // then does not run.
  void submit(std::function<void()> task);

  // Threads alive, and of those the ones running a task. For monitoring and tests.
  std::size_t threadCount() const;
  std::size_t busyCount() const;

  // The process-wide pool used when an executor is given none. Never destroyed.
  static std::shared_ptr<ThreadPool> shared();

 private:
  struct State;
  static void workerLoop(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace parley
