// TurnSink: where a conversation saves each whole turn as soon as it is committed
// (docs/architecture.md, "The turn"). StoredThread (stored_thread.hpp) is the sink that
// writes to a ConversationStore; a durable run's sink also checks its lease before it writes.
//
// Ownership: shared (std::shared_ptr) by the conversations that save through it.
// Thread-safety: as the implementation says; StoredThread serialises its calls.
#pragma once

namespace parley {

class ConversationManager;

class TurnSink {
 public:
  virtual ~TurnSink() = default;

  // Called after `conversation` committed a whole turn: a reply without tool calls, or the tool
  // results that complete an iteration. Never with an assistant tool-call message whose results
  // are missing, never after a failed model call. Saves what is new in `conversation` since the
  // last call, all or nothing. May throw (StoreError, StoreConflict, a lost lease): the
  // exception leaves the call that committed the turn (ending a run), the turn stays in
  // memory, and the next saveTurn writes it.
  virtual void saveTurn(const ConversationManager& conversation) = 0;
};

}  // namespace parley
