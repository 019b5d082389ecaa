#include "parley/message_store.hpp"

#include <algorithm>
#include <limits>
#include <unordered_set>
#include <utility>

#include "parley/errors.hpp"

namespace parley {

namespace {

std::shared_ptr<const MessageRecord> makeRecord(Message message) {
  auto record = std::make_shared<MessageRecord>();
  record->message = std::move(message);
  return record;
}

size_t roleSlot(Role role) {
  return static_cast<size_t>(role);
}

std::vector<size_t> toSizes(const MessageStore::IndexList& list) {
  std::vector<size_t> out;
  out.reserve(list.size());
  list.forEach(0, list.size(), [&](MessageStore::Index i) { out.push_back(i); });
  return out;
}

std::vector<MessageStore::Index> indicesFromRuns(const json& runs, const std::string& field,
                                                 size_t storageSize) {
  if (!runs.is_array()) throw ValidationError(field, "must be an array of [start, count] runs");
  std::vector<MessageStore::Index> out;
  for (size_t r = 0; r < runs.size(); ++r) {
    const json& run = runs[r];
    const std::string runField = field + "[" + std::to_string(r) + "]";
    if (!run.is_array() || run.size() != 2 || !run[0].is_number_unsigned() ||
        !run[1].is_number_unsigned()) {
      throw ValidationError(runField, "must be a [start, count] pair of non-negative integers");
    }
    const size_t start = run[0].get<size_t>();
    const size_t count = run[1].get<size_t>();
    if (count == 0 || start > storageSize || count > storageSize - start) {
      throw ValidationError(runField, "run [" + std::to_string(start) + ", " +
                                          std::to_string(count) + "] is outside storage of " +
                                          std::to_string(storageSize) + " messages");
    }
    for (size_t i = start; i < start + count; ++i)
      out.push_back(static_cast<MessageStore::Index>(i));
  }
  return out;
}

}  // namespace

MessageStore::MessageStore() : boundaries_{0} {}

size_t MessageStore::append(Message message) {
  validate(message);
  normalize(message);
  if (storage_.size() >= std::numeric_limits<Index>::max()) {
    throw ValidationError("message", "the history is full (2^32 - 1 messages)");
  }
  const auto index = static_cast<Index>(storage_.size());
  const Role role = message.role;
  storage_.push_back(makeRecord(std::move(message)));
  view_.push_back(index);
  extendRuns(viewRuns_, index);
  roleIndex_[roleSlot(role)].push_back(index);
  return view_.size();
}

size_t MessageStore::appendAll(std::vector<Message> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    try {
      validate(messages[i]);
    } catch (const ValidationError& e) {
      std::string field = e.field();
      field = "messages[" + std::to_string(i) + "]" +
              (field.rfind("message", 0) == 0 ? field.substr(7) : "." + field);
      throw ValidationError(field, e.reason());
    }
  }
  for (Message& m : messages)
    append(std::move(m));
  return view_.size();
}

MessageStore::Index MessageStore::appendHidden(Message message) {
  validate(message);
  normalize(message);
  const auto index = static_cast<Index>(storage_.size());
  storage_.push_back(makeRecord(std::move(message)));
  return index;
}

void MessageStore::setView(IndexList view) {
  saved_.push_back(SavedView{std::move(view_), std::move(viewRuns_), roleIndex_});
  view_ = std::move(view);
  rebuildRoleIndexes();
  rebuildRuns();
  ++viewEpoch_;
}

void MessageStore::extendRuns(RunList& runs, Index index) {
  if (!runs.empty()) {
    Run last = runs.back();
    if (last.start + last.count == index) {
      ++last.count;
      runs.set(runs.size() - 1, last);
      return;
    }
  }
  runs.push_back(Run{index, 1});
}

void MessageStore::rebuildRuns() {
  viewRuns_.clear();
  view_.forEach(0, view_.size(), [&](Index i) { extendRuns(viewRuns_, i); });
}

void MessageStore::rebuildRoleIndexes() {
  for (auto& list : roleIndex_)
    list.clear();
  view_.forEach(0, view_.size(),
                [&](Index i) { roleIndex_[roleSlot(storage_[i]->message.role)].push_back(i); });
}

void MessageStore::startNewBatch(size_t boundary) {
  if (boundary < currentBoundary() || boundary > storage_.size()) {
    throw ValidationError(
        "boundary", "must be between the current boundary " + std::to_string(currentBoundary()) +
                        " and the storage size " + std::to_string(storage_.size()) + ", got " +
                        std::to_string(boundary));
  }
  IndexList kept;
  view_.forEach(0, view_.size(), [&](Index i) {
    if (i >= boundary) kept.push_back(i);
  });
  setView(std::move(kept));
  boundaries_.push_back(boundary);
}

void MessageStore::commitView(const std::vector<Index>& view) {
  std::unordered_set<Index> seen;
  seen.reserve(view.size());
  size_t boundary = storage_.size();
  for (size_t p = 0; p < view.size(); ++p) {
    const Index i = view[p];
    const std::string field = "view[" + std::to_string(p) + "]";
    if (i >= storage_.size()) throw ValidationError(field, "is not a stored message");
    if (i < currentBoundary()) {
      throw ValidationError(
          field, "is below the current batch boundary " + std::to_string(currentBoundary()));
    }
    if (!seen.insert(i).second) throw ValidationError(field, "appears twice in the view");
    boundary = std::min<size_t>(boundary, i);
  }
  IndexList list;
  for (Index i : view)
    list.push_back(i);
  setView(std::move(list));
  boundaries_.push_back(boundary);
}

void MessageStore::rollbackToBatch(size_t batch) {
  if (batch > currentBatch()) {
    throw ValidationError("batch", "must be at most the current batch " +
                                       std::to_string(currentBatch()) + ", got " +
                                       std::to_string(batch));
  }
  if (batch == currentBatch()) return;
  SavedView restored = std::move(saved_[batch]);
  saved_.resize(batch);
  boundaries_.resize(batch + 1);
  view_ = std::move(restored.view);
  viewRuns_ = std::move(restored.runs);
  roleIndex_ = std::move(restored.roleIndex);
  ++viewEpoch_;
}

std::vector<size_t> MessageStore::indicesByRole(Role role) const {
  return toSizes(roleIndex(role));
}

std::vector<size_t> MessageStore::recentIndicesByRole(Role role, size_t n) const {
  const size_t size = roleIndex(role).size();
  return indicesByRoleRange(role, n >= size ? 0 : size - n, size);
}

std::vector<size_t> MessageStore::indicesByRoleRange(Role role, size_t start, size_t end) const {
  const IndexList& list = roleIndex(role);
  end = std::min(end, list.size());
  std::vector<size_t> out;
  if (start >= end) return out;
  out.reserve(end - start);
  list.forEach(start, end, [&](Index i) { out.push_back(i); });
  return out;
}

bool MessageStore::isModified(size_t storageIndex) const {
  if (storageIndex >= storage_.size()) {
    throw ValidationError("storageIndex", std::to_string(storageIndex) + " is outside storage of " +
                                              std::to_string(storage_.size()) + " messages");
  }
  if (storageIndex < currentBoundary()) return true;
  bool found = false;
  viewRuns_.forEach(0, viewRuns_.size(), [&](const Run& run) {
    found = found || (storageIndex >= run.start && storageIndex - run.start < run.count);
  });
  return !found;
}

MessageMarkMap MessageStore::markMap() const {
  MessageMarkMap map;
  map.originalIndices = toSizes(view_);
  for (Role role : kAllRoles)
    map.typeIndices[roleSlot(role)] = toSizes(roleIndex_[roleSlot(role)]);
  map.batchBoundaries = boundaries_;
  map.boundaryToBatch.resize(boundaries_.size());
  for (size_t b = 0; b < boundaries_.size(); ++b)
    map.boundaryToBatch[b] = b;
  map.currentBatch = currentBatch();
  return map;
}

std::string MessageStore::checkConsistency() const {
  if (boundaries_.empty() || boundaries_.front() != 0) return "the first boundary is not 0";
  if (saved_.size() + 1 != boundaries_.size()) return "saved views do not match the batches";
  for (size_t b = 1; b < boundaries_.size(); ++b) {
    if (boundaries_[b] < boundaries_[b - 1])
      return "boundaries decrease at batch " + std::to_string(b);
    if (boundaries_[b] > storage_.size())
      return "boundary " + std::to_string(b) + " is past storage";
  }
  std::unordered_set<Index> seen;
  std::array<std::vector<size_t>, 4> expected;
  std::string problem;
  view_.forEach(0, view_.size(), [&](Index i) {
    if (!problem.empty()) return;
    if (i >= storage_.size()) {
      problem = "view entry " + std::to_string(i) + " is past storage";
    } else if (i < currentBoundary()) {
      problem = "view entry " + std::to_string(i) + " is below the boundary";
    } else if (!seen.insert(i).second) {
      problem = "view entry " + std::to_string(i) + " appears twice";
    } else {
      expected[roleSlot(storage_[i]->message.role)].push_back(i);
    }
  });
  if (!problem.empty()) return problem;
  for (Role role : kAllRoles) {
    if (toSizes(roleIndex_[roleSlot(role)]) != expected[roleSlot(role)]) {
      return "the " + std::string(toString(role)) + " index does not match the view";
    }
  }
  // The runs kept beside each view expand to exactly that view.
  const auto expands = [](const RunList& runs, const IndexList& view) {
    std::vector<size_t> expanded;
    runs.forEach(0, runs.size(), [&](const Run& run) {
      for (Index k = 0; k < run.count; ++k)
        expanded.push_back(run.start + k);
    });
    return expanded == toSizes(view);
  };
  if (!expands(viewRuns_, view_)) return "the view's runs do not match the view";
  for (size_t b = 0; b < saved_.size(); ++b) {
    if (!expands(saved_[b].runs, saved_[b].view)) {
      return "the runs of saved view " + std::to_string(b) + " do not match it";
    }
  }
  return {};
}

json MessageStore::markMapJson() const {
  const auto runsJson = [](const RunList& runs) {
    json out = json::array();
    runs.forEach(0, runs.size(), [&](const Run& run) { out.push_back({run.start, run.count}); });
    return out;
  };
  json saved = json::array();
  for (const SavedView& s : saved_)
    saved.push_back(runsJson(s.runs));
  return {{"view", runsJson(viewRuns_)},
          {"batchBoundaries", boundaries_},
          {"currentBatch", currentBatch()},
          {"savedViews", std::move(saved)}};
}

MessageStore MessageStore::fromJson(std::vector<Message> messages, const json& markMap) {
  if (!markMap.is_object()) throw ValidationError("markMap", "must be an object");
  MessageStore store;
  for (Message& m : messages)
    store.appendHidden(std::move(m));
  const size_t size = store.storage_.size();

  auto member = [&](const char* key) -> const json& {
    auto it = markMap.find(key);
    if (it == markMap.end()) throw ValidationError(std::string("markMap.") + key, "is required");
    return *it;
  };
  const json& boundaries = member("batchBoundaries");
  if (!boundaries.is_array() || boundaries.empty()) {
    throw ValidationError("markMap.batchBoundaries", "must be a non-empty array");
  }
  std::vector<size_t> parsed;
  for (size_t b = 0; b < boundaries.size(); ++b) {
    const std::string field = "markMap.batchBoundaries[" + std::to_string(b) + "]";
    if (!boundaries[b].is_number_unsigned()) throw ValidationError(field, "must be an index");
    const size_t value = boundaries[b].get<size_t>();
    if (value > size) throw ValidationError(field, "is past the end of storage");
    if (b == 0 && value != 0) throw ValidationError(field, "must be 0");
    if (b > 0 && value < parsed.back()) throw ValidationError(field, "must not decrease");
    parsed.push_back(value);
  }
  const json& current = member("currentBatch");
  if (!current.is_number_unsigned() || current.get<size_t>() + 1 != parsed.size()) {
    throw ValidationError("markMap.currentBatch", "must be the number of boundaries minus one");
  }
  const json& saved = member("savedViews");
  if (!saved.is_array() || saved.size() + 1 != parsed.size()) {
    throw ValidationError("markMap.savedViews", "must hold one view per earlier batch");
  }

  // Replays the batches so each saved view is checked against its own boundary.
  auto checkedList = [&](const std::vector<Index>& indices, size_t boundary,
                         const std::string& field) {
    std::unordered_set<Index> seen;
    IndexList list;
    for (size_t p = 0; p < indices.size(); ++p) {
      if (indices[p] < boundary) {
        throw ValidationError(field, "holds storage index " + std::to_string(indices[p]) +
                                         ", below its batch boundary " + std::to_string(boundary));
      }
      if (!seen.insert(indices[p]).second) {
        throw ValidationError(field,
                              "holds storage index " + std::to_string(indices[p]) + " twice");
      }
      list.push_back(indices[p]);
    }
    return list;
  };
  for (size_t b = 0; b < saved.size(); ++b) {
    const std::string field = "markMap.savedViews[" + std::to_string(b) + "]";
    store.view_ = checkedList(indicesFromRuns(saved[b], field, size), parsed[b], field);
    store.rebuildRoleIndexes();
    store.rebuildRuns();
    store.saved_.push_back(SavedView{store.view_, store.viewRuns_, store.roleIndex_});
  }
  store.view_ = checkedList(indicesFromRuns(member("view"), "markMap.view", size), parsed.back(),
                            "markMap.view");
  store.rebuildRoleIndexes();
  store.rebuildRuns();
  store.boundaries_ = std::move(parsed);
  store.viewEpoch_ = 0;
  return store;
}

}  // namespace parley
