// MessageStore: append-only message storage, the visible view with its batches, and per-role
// indexes (docs/architecture.md, "History").
//
// Storage only grows. What a model sees is the visible view: storage indices in view order
// (MessageMarkMap::originalIndices). A context operation never deletes: it starts a new batch
// whose view replaces the old one, and the batch remembers the view it replaced, so
// rollbackToBatch() restores that earlier view exactly (messages appended after the batch
// started stay in storage but leave the view).
//
// Copying a MessageStore is cheap and copies share their common prefix: storage, the view and
// the role indexes are persistent vectors, so a copy costs O(number of batches), whatever the
// length of the history, and each copy then evolves alone. ConversationManager::clone() and
// the facade's duplicate() are such copies.
//
// Costs: append O(1) amortised; getRecentMessagesByRole(role, k) O(k); getMessageCountByRole
// O(1); a context operation O(view) (it rebuilds the role indexes from the new view).
//
// Thread-safety: a value type, like std::vector: distinct copies may be used from distinct
// threads; one store needs external locking when written while read (ConversationManager
// provides it).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parley/detail/persistent_vector.hpp"
#include "parley/message.hpp"

namespace parley {

// The mark map, as plain data (a copy of the store's state).
struct MessageMarkMap {
  std::vector<size_t> originalIndices;             // storage indices of the view, in view order
  std::array<std::vector<size_t>, 4> typeIndices;  // per Role: storage indices, in view order
  std::vector<size_t> batchBoundaries;             // storage index where each batch starts
  std::vector<size_t> boundaryToBatch;             // the batch number of each boundary
  size_t currentBatch = 0;

  const std::vector<size_t>& indicesFor(Role role) const {
    return typeIndices[static_cast<size_t>(role)];
  }
  bool operator==(const MessageMarkMap&) const = default;
};

// One stored message. Immutable once stored and shared between copies of the store, so what
// is derived from it is computed once and cached here: its request JSON text per way of
// writing empty content (EmptyContent), and its token count for one counter.
struct MessageRecord {
  Message message;
  mutable std::array<std::once_flag, 3> encodedOnce;
  mutable std::array<std::shared_ptr<const std::string>, 3> encoded;
  // (counter tag << 56) | tokens; 0 = not computed. Races only recompute the same value.
  mutable std::atomic<uint64_t> tokenCache{0};
};

class MessageStore {
 public:
  using Index = uint32_t;  // a storage index
  using IndexList = detail::PersistentVector<Index>;

  MessageStore();

  // Validates and appends to storage and to the end of the view. Returns the view size.
  size_t append(Message message);
  // Validates every message first; appends all or none.
  size_t appendAll(std::vector<Message> messages);
  // Validates and appends to storage only (not visible); returns its storage index. Context
  // operations use it for inserted and replacing messages.
  Index appendHidden(Message message);

  size_t storageSize() const noexcept { return storage_.size(); }
  size_t viewSize() const noexcept { return view_.size(); }
  const Message& stored(size_t storageIndex) const { return storage_[storageIndex]->message; }
  const MessageRecord& record(size_t storageIndex) const { return *storage_[storageIndex]; }
  const Message& visible(size_t viewPosition) const { return stored(view_[viewPosition]); }
  const IndexList& view() const noexcept { return view_; }
  const IndexList& roleIndex(Role role) const { return roleIndex_[static_cast<size_t>(role)]; }

  // The type-index queries: storage indices of the visible messages of `role`, in view order
  // (usable with stored() and isModified(), like the mark map's typeIndices). All of them; the
  // last n (all when n exceeds the count); positions [start, end) among them (end clamped,
  // start >= end gives none). O(k) for k results.
  std::vector<size_t> indicesByRole(Role role) const;
  std::vector<size_t> recentIndicesByRole(Role role, size_t n) const;
  std::vector<size_t> indicesByRoleRange(Role role, size_t start, size_t end) const;

  // The current batch starts at this storage index; every view entry is at or above it.
  size_t currentBoundary() const noexcept { return boundaries_.back(); }
  size_t currentBatch() const noexcept { return boundaries_.size() - 1; }
  size_t batchCount() const noexcept { return boundaries_.size(); }

  // Starts a batch at storage index `boundary`: the view keeps its entries at or above it.
  // REQUIRES currentBoundary() <= boundary <= storageSize(), else ValidationError.
  void startNewBatch(size_t boundary);
  // Starts a batch whose view is `view` (storage indices, in view order); its boundary is the
  // smallest index in it (storageSize() when empty). Entries must be in storage, unique, and
  // at or above currentBoundary(), else ValidationError.
  void commitView(const std::vector<Index>& view);
  // Restores the view that was current while `batch` was the current batch.
  // REQUIRES batch <= currentBatch(), else ValidationError.
  void rollbackToBatch(size_t batch);

  // True when the stored message is not in the visible view. Out of range: ValidationError.
  bool isModified(size_t storageIndex) const;

  MessageMarkMap markMap() const;

  // Bumps whenever the view changes other than by appending (a batch, a rollback), so a
  // token estimate computed for the view knows when it is stale.
  uint64_t viewEpoch() const noexcept { return viewEpoch_; }

  // Checks every invariant (view entries in storage, unique, at or above the boundary; role
  // indexes equal to the view filtered by role; batch bookkeeping). Empty when consistent,
  // else a description of the first violation.
  std::string checkConsistency() const;

  // The snapshot's "markMap" member: the view and saved views as runs of consecutive storage
  // indices [[start, count], ...], so its size is O(batches + runs), not O(messages).
  nlohmann::json markMapJson() const;
  // Rebuilds a store from stored messages and a markMapJson() document. Throws
  // ValidationError naming the field on any inconsistency.
  static MessageStore fromJson(std::vector<Message> messages, const nlohmann::json& markMap);

 private:
  // A view as runs of consecutive storage indices, kept beside it so the snapshot's markMap
  // and isModified() cost O(runs), not O(messages): a history no context operation touched
  // is one run however long it is.
  struct Run {
    Index start = 0;
    Index count = 0;
  };
  using RunList = detail::PersistentVector<Run>;
  struct SavedView {
    IndexList view;
    RunList runs;
    std::array<IndexList, 4> roleIndex;
  };

  void setView(IndexList view);
  void rebuildRoleIndexes();
  void rebuildRuns();
  static void extendRuns(RunList& runs, Index index);

  detail::PersistentVector<std::shared_ptr<const MessageRecord>> storage_;
  IndexList view_;
  RunList viewRuns_;  // view_ as runs
  std::array<IndexList, 4> roleIndex_;
  std::vector<size_t> boundaries_;  // boundaries_[b] = boundary of batch b; never empty
  std::vector<SavedView> saved_;    // saved_[b] = the view while batch b was current
  uint64_t viewEpoch_ = 0;
};

}  // namespace parley
