// For tests of cancellation and timeouts: a tool body that ends only when its call is stopped.
#pragma once

#include <condition_variable>
#include <mutex>

#include "parley/tools.hpp"

namespace parley::testing {

// Blocks until the call's stop token is triggered (a timeout, a cancel, a worker stopping).
inline void waitForStop(ToolContext& context) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait(lock, context.stopToken, [] { return false; });
}

}  // namespace parley::testing
