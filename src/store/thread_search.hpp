// A page of threads in the order and with the filter a thread list shows them (the chat page and
// GET /v1/threads?order=newest&q=: docs/service.md), read by the database rather than by the
// client. Internal (the service's); on the stores built on parley's SQL engine (SQLite,
// PostgreSQL).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "parley/store.hpp"

namespace parley::detail {

// The longest text ThreadSearch::contains takes.
inline constexpr size_t kMaxThreadSearchBytes = 256;

struct ThreadSearch {
  size_t limit = 20;  // 1 or more
  size_t offset = 0;
  // The most recently changed first (updated_at, then id, descending); else the oldest created
  // first, as listThreads.
  bool newestFirst = true;
  // Only threads whose title or id holds this text, ignoring ASCII case; "": every one.
  std::string contains{};
};

// The threads (not deleted) of that page. ValidationError for a `contains` over
// kMaxThreadSearchBytes, a limit of 0, or a store not built on parley's SQL engine.
std::vector<ThreadInfo> searchThreadList(ConversationStore& store, const ThreadSearch& search);

}  // namespace parley::detail
