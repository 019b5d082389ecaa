// The events one durable run writes to its thread's log (docs/scale-out.md, "Events"), with
// stream chunks coalesced. Internal to src/runs/.
//
// Two kinds: live events (stream chunks, tool calls, interactions), written whenever a write
// happens anyway and at least when flush() is called; and the turn's events (message_added),
// written only in the transaction that commits the turn (takeForTurn), so a message's event
// exists exactly when the message does.
//
// Ownership: one per run being worked on, owned by the worker's slot.
// Thread-safety: every member takes an internal lock (the model's chunk callback, the tool
// runner and the turn sink may be on different threads).
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "parley/event_types.hpp"
#include "parley/run_store.hpp"

namespace parley::detail {

// An event of the vocabulary (event_types.hpp) as the run store writes it.
template <class E>
EventInput eventInput(const E& event) {
  return {std::string(eventName(E::kEventType)), eventToJson(event)};
}

class RunEvents {
 public:
  RunEvents(RunStore& runs, Lease lease, std::chrono::milliseconds chunkInterval,
            std::size_t chunkBytes);

  // Adds streamed text; writes the chunks gathered so far when chunkBytes of text wait or
  // chunkInterval passed since the last chunk write.
  void chunk(const std::string& text);
  // A live event, written with the next write.
  void add(EventInput event);
  // An event of the turn being built, written with it.
  void addToTurn(EventInput event);
  // Writes the live events (fenced: LeaseLost if the lease is stale).
  void flush();
  // The live events, then the turn's, for the transaction that commits the turn.
  std::vector<EventInput> takeForTurn();
  // The live events only (for wait and finish, which carry them in their transaction); the
  // turn's are dropped: their turn was not committed.
  std::vector<EventInput> takeLive();

 private:
  void closeChunk();  // REQUIRES mutex_: the gathered text becomes an event

  RunStore& runs_;
  Lease lease_;
  std::chrono::milliseconds chunkInterval_;
  std::size_t chunkBytes_;
  std::mutex mutex_;
  std::string text_;  // streamed text not yet an event
  std::vector<EventInput> live_;
  std::vector<EventInput> turn_;
  std::chrono::steady_clock::time_point lastChunkWrite_{};
};

}  // namespace parley::detail
