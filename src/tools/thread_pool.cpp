#include "parley/thread_pool.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace parley {

struct ThreadPool::State {
  explicit State(Options o) : options(o) {}

  const Options options;
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  std::size_t threads = 0;
  std::size_t busy = 0;
  std::size_t idle = 0;  // workers waiting for a task and not yet woken for one
  bool closing = false;
};

ThreadPool::ThreadPool() : ThreadPool(Options{}) {}

ThreadPool::ThreadPool(Options options) : state_(std::make_shared<State>(options)) {}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(state_->mutex);
    state_->closing = true;
  }
  state_->wake.notify_all();
}

void ThreadPool::submit(std::function<void()> task) {
  std::unique_lock lock(state_->mutex);
  state_->queue.push_back(std::move(task));
  // Each queued task needs a worker of its own: wake an idle one if there are enough idle
  // workers for everything queued, otherwise start a thread.
  if (state_->idle >= state_->queue.size()) {
    lock.unlock();
    state_->wake.notify_one();
    return;
  }
  ++state_->threads;
  try {
    std::thread(workerLoop, state_).detach();
  } catch (...) {
    --state_->threads;
    state_->queue.pop_back();
    throw;
  }
}

std::size_t ThreadPool::threadCount() const {
  std::lock_guard lock(state_->mutex);
  return state_->threads;
}

std::size_t ThreadPool::busyCount() const {
  std::lock_guard lock(state_->mutex);
  return state_->busy;
}

std::shared_ptr<ThreadPool> ThreadPool::shared() {
  // Leaked on purpose: workers may still run at exit, and static destruction order must not
  // matter to them (they hold the state, not the pool).
  static auto* pool = new std::shared_ptr<ThreadPool>(std::make_shared<ThreadPool>());
  return *pool;
}

void ThreadPool::workerLoop(std::shared_ptr<State> state) {
  std::unique_lock lock(state->mutex);
  for (;;) {
    if (!state->queue.empty()) {
      std::function<void()> task = std::move(state->queue.front());
      state->queue.pop_front();
      ++state->busy;
      lock.unlock();
      try {
        task();
      } catch (...) {
        // Tasks report their own failures; one that throws must not take the worker down.
      }
      task = nullptr;  // destroy captures outside the lock
      lock.lock();
      --state->busy;
      continue;
    }
    if (state->closing || state->idle >= state->options.maxIdle) break;
    ++state->idle;
    bool woken = state->wake.wait_for(lock, state->options.idleTimeout,
                                      [&] { return !state->queue.empty() || state->closing; });
    --state->idle;
    if (!woken) break;
  }
  --state->threads;
}

}  // namespace parley
