// ConversationManager: the history (over the message store), token accounting, snapshots, and
// the tool loop every runner shares. Over 600 lines because these share one state and one lock:
// a turn appends, counts and saves under the same rules.
#include "parley/conversation_manager.hpp"
#include "parley/server_tools.hpp"
#include "parley/tool_tape.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <stop_token>
#include <thread>
#include <unordered_set>
#include <utility>

#include "core/call_shape.hpp"
#include "core/context_snapshot_state.hpp"
#include "core/gen_ai_telemetry.hpp"
#include "core/turn_deadline.hpp"
#include "parley/context_ops.hpp"
#include "parley/errors.hpp"
#include "parley/logger.hpp"
#include "parley/telemetry.hpp"

namespace parley {

namespace {

constexpr uint64_t kNoEpoch = std::numeric_limits<uint64_t>::max();

// Revisions come from one counter for the whole process, so a revision names one state of one
// conversation: two managers show the same revision only when one is an unchanged clone of the
// other (StoredThread::save relies on it to skip a save with nothing new).
uint64_t nextRevision() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

struct ConversationManager::State {
  mutable std::shared_mutex mutex;
  MessageStore store;
  uint64_t revision = nextRevision();

  // Set at construction, never changed, so clones share them; not part of snapshots.
  std::shared_ptr<const ConversationOptions> options;
  std::shared_ptr<ToolExecutor> executor;
  std::shared_ptr<const TokenCounter> counter;

  // Token accounting (docs/architecture.md, "Tokens"). The last usage was reported for the view
  // usageView (storage indices); it covers the current view while that view begins with it,
  // which an edit can undo and a rollback restore. usageEpoch is the view epoch it was taken at:
  // while the epoch is unchanged only appends happened, so the prefix needs no comparison.
  std::optional<TokenUsage> lastUsage;
  TokenUsage cumulative;
  int64_t requests = 0;
  uint64_t usageEpoch = kNoEpoch;
  MessageStore::IndexList usageView;

  // How many view entries the last usage covers; nullopt when the view no longer begins with
  // the one it was reported for.
  std::optional<size_t> reportCoverage() const {
    if (!lastUsage || usageEpoch == kNoEpoch) return std::nullopt;
    const MessageStore::IndexList& view = store.view();
    if (view.size() < usageView.size()) return std::nullopt;
    if (usageEpoch != store.viewEpoch()) {
      for (size_t i = 0; i < usageView.size(); ++i)
        if (view[i] != usageView[i]) return std::nullopt;
    }
    return usageView.size();
  }
  void coverCurrentView() {
    usageEpoch = store.viewEpoch();
    usageView = store.view();
  }
  // Tool definitions' tokens, per registry revision.
  mutable std::mutex toolTokensMutex;
  mutable uint64_t toolTokensRevision = std::numeric_limits<uint64_t>::max();
  mutable int64_t toolTokens = 0;

  // The tool registry's revision at the last call (this process only: not in snapshots).
  std::optional<uint64_t> lastToolsRevision;
  // The sizes of usageView's first `messages` entries (the previous request: usageView less its
  // reply), for the view epoch `epoch`. While only appends happen the epoch stays and the next
  // request's sizes extend these by its new messages, so diagnoseCache() costs O(new messages).
  struct PrefixSizes {
    uint64_t epoch = kNoEpoch;
    size_t messages = 0;
    int64_t tokens = 0;
    int64_t bytes = 0;
  };
  mutable std::mutex prefixSizesMutex;
  mutable PrefixSizes prefixSizes;

  void copyAccountingFrom(const State& other) {
    lastToolsRevision = other.lastToolsRevision;
    lastUsage = other.lastUsage;
    cumulative = other.cumulative;
    requests = other.requests;
    usageEpoch = other.usageEpoch;
    usageView = other.usageView;
  }
};

namespace {

std::vector<Message> copyOut(const MessageStore& store, const MessageStore::IndexList& indices,
                             size_t begin, size_t end) {
  std::vector<Message> out;
  out.reserve(end - begin);
  indices.forEach(begin, end, [&](MessageStore::Index i) { out.push_back(store.stored(i)); });
  return out;
}

}  // namespace

namespace {

void logLine(const ConversationOptions& options, const std::string& line) {
  writeLog(options.log, options.log ? line : "parley: " + line);
}

// The request JSON text of a stored message, written once per way of writing empty content.
std::shared_ptr<const std::string> encoded(const MessageRecord& record,
                                           const MessageJsonOptions& options) {
  const auto slot = static_cast<size_t>(options.emptyToolCallContent);
  std::call_once(record.encodedOnce[slot], [&] {
    record.encoded[slot] =
        std::make_shared<const std::string>(encodeMessage(record.message, options));
  });
  return record.encoded[slot];
}

uint64_t counterTag(const TokenCounter& counter) {
  // Never 0 (0 marks an empty cache); distinguishes exact counts from estimates.
  return 0x80 | (counter.exact() ? 0x40 : 0) |
         ((std::hash<std::string>{}(counter.encodingName()) +
           static_cast<size_t>(counter.imageRule())) &
          0x3f);
}

int64_t messageTokens(const MessageRecord& record, const TokenCounter& counter) {
  constexpr uint64_t kValueMask = (uint64_t{1} << 56) - 1;
  const uint64_t tag = counterTag(counter);
  const uint64_t cached = record.tokenCache.load(std::memory_order_relaxed);
  if ((cached >> 56) == tag) return static_cast<int64_t>(cached & kValueMask);
  const auto tokens = countMessageTokens(record.message, counter).tokens;
  record.tokenCache.store((tag << 56) | (static_cast<uint64_t>(tokens) & kValueMask),
                          std::memory_order_relaxed);
  return tokens;
}

// The counter of a manager built without options (loaded once, on first use).
const TokenCounter& defaultCounter() {
  static const TokenCounter counter;
  return counter;
}

json usageJson(const std::optional<TokenUsage>& usage) {
  return usage ? toJson(*usage) : json(nullptr);
}

}  // namespace

ConversationManager::ConversationManager() : state_(std::make_unique<State>()) {
  static const auto kNoOptions = std::make_shared<const ConversationOptions>();
  state_->options = kNoOptions;
}

ConversationManager::ConversationManager(ConversationOptions options)
    : state_(std::make_unique<State>()) {
  if (options.maxIterations < 1) {
    throw ValidationError("options.maxIterations", "must be at least 1");
  }
  if (options.maxToolCallsPerReply < 1) {
    throw ValidationError("options.maxToolCallsPerReply", "must be at least 1");
  }
  if (options.maxToolConcurrency < 1) {
    throw ValidationError("options.maxToolConcurrency", "must be at least 1");
  }
  if (options.tokenLimit < 0) throw ValidationError("options.tokenLimit", "must not be negative");
  State& st = *state_;
  // Null: the process-wide default counter, whose vocabulary loads at the first count (a manager
  // that never counts, as `history import` or `apply`, never pays for it).
  st.counter = options.tokenCounter;
  st.executor = options.toolExecutor;
  if (!st.executor) {
    std::shared_ptr<const ToolRegistry> registry = options.tools;
    if (!registry) registry = std::make_shared<const ToolRegistry>();
    ToolExecutorOptions executorOptions;
    executorOptions.maxConcurrent = options.maxToolConcurrency;
    st.executor = std::make_shared<ToolExecutor>(registry, executorOptions);
  }
  if (!options.systemPrompt.empty()) st.store.append(Message::system(options.systemPrompt));
  st.options = std::make_shared<const ConversationOptions>(std::move(options));
}
ConversationManager::~ConversationManager() = default;
ConversationManager::ConversationManager(ConversationManager&&) noexcept = default;
ConversationManager& ConversationManager::operator=(ConversationManager&&) noexcept = default;

size_t ConversationManager::addMessage(Message message) {
  std::unique_lock lock(state_->mutex);
  size_t size = state_->store.append(std::move(message));
  state_->revision = nextRevision();
  return size;
}

size_t ConversationManager::addMessages(std::vector<Message> messages) {
  std::unique_lock lock(state_->mutex);
  size_t size = state_->store.appendAll(std::move(messages));
  state_->revision = nextRevision();
  return size;
}

std::vector<Message> ConversationManager::getMessages() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  return copyOut(s, s.view(), 0, s.viewSize());
}

size_t ConversationManager::getMessageCount() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.viewSize();
}

std::vector<Message> ConversationManager::getAllMessages() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  std::vector<Message> out;
  out.reserve(s.storageSize());
  for (size_t i = 0; i < s.storageSize(); ++i)
    out.push_back(s.stored(i));
  return out;
}

size_t ConversationManager::storageSize() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.storageSize();
}

std::vector<Message> ConversationManager::getRecentMessages(size_t n) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  const size_t size = s.viewSize();
  return copyOut(s, s.view(), n >= size ? 0 : size - n, size);
}

std::vector<Message> ConversationManager::getMessagesByRange(size_t start, size_t end) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  end = std::min(end, s.viewSize());
  if (start >= end) return {};
  return copyOut(s, s.view(), start, end);
}

std::vector<Message> ConversationManager::filterMessagesByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  std::vector<Message> out;
  s.view().forEach(0, s.viewSize(), [&](MessageStore::Index i) {
    if (s.stored(i).role == role) out.push_back(s.stored(i));
  });
  return out;
}

std::vector<Message> ConversationManager::getMessagesByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  return copyOut(s, s.roleIndex(role), 0, s.roleIndex(role).size());
}

std::vector<Message> ConversationManager::getRecentMessagesByRole(Role role, size_t n) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  const size_t size = s.roleIndex(role).size();
  return copyOut(s, s.roleIndex(role), n >= size ? 0 : size - n, size);
}

std::vector<Message> ConversationManager::getMessagesByRoleRange(Role role, size_t start,
                                                                 size_t end) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  end = std::min(end, s.roleIndex(role).size());
  if (start >= end) return {};
  return copyOut(s, s.roleIndex(role), start, end);
}

size_t ConversationManager::getMessageCountByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.roleIndex(role).size();
}

std::vector<Message> ConversationManager::getRecentMessages(size_t n, Role role) const {
  return getRecentMessagesByRole(role, n);
}

std::vector<size_t> ConversationManager::getIndicesByRole(Role role) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.indicesByRole(role);
}

std::vector<size_t> ConversationManager::getRecentIndicesByRole(Role role, size_t n) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.recentIndicesByRole(role, n);
}

std::vector<size_t> ConversationManager::getIndicesByRoleRange(Role role, size_t start,
                                                               size_t end) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.indicesByRoleRange(role, start, end);
}

void ConversationManager::clearMessages(bool keepSystem) {
  ClearOp op;
  op.keepSystemMessage = keepSystem;
  applyContextOperation(*this, op);
}

MessageMarkMap ConversationManager::getMarkMap() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.markMap();
}

void ConversationManager::startNewBatch(size_t boundary) {
  modifyStore([&](MessageStore& s) { s.startNewBatch(boundary); });
}

void ConversationManager::rollbackToBatch(size_t batch) {
  modifyStore([&](MessageStore& s) { s.rollbackToBatch(batch); });
}

bool ConversationManager::isModified(size_t storageIndex) const {
  std::shared_lock lock(state_->mutex);
  return state_->store.isModified(storageIndex);
}

std::string ConversationManager::checkConsistency() const {
  std::shared_lock lock(state_->mutex);
  return state_->store.checkConsistency();
}

nlohmann::json ConversationManager::createStateSnapshot() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  return {{"format", kSnapshotFormat},
          {"storageSize", s.storageSize()},
          {"markMap", s.markMapJson()},
          {"tokenUsage", tokenUsageJson()}};
}

nlohmann::json ConversationManager::createSnapshot() const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  json messages = json::array();
  for (size_t i = 0; i < s.storageSize(); ++i)
    messages.push_back(toJson(s.stored(i)));
  return {{"format", kSnapshotFormat},
          {"storageSize", s.storageSize()},
          {"messages", std::move(messages)},
          {"markMap", s.markMapJson()},
          {"tokenUsage", tokenUsageJson()}};
}

void ConversationManager::restoreFromSnapshot(const nlohmann::json& snapshot) {
  if (!snapshot.is_object()) throw ValidationError("snapshot", "must be a JSON object");
  auto format = snapshot.find("format");
  if (format == snapshot.end() || !format->is_string()) {
    throw ValidationError("snapshot.format",
                          std::string("is required (expected \"") + kSnapshotFormat + "\")");
  }
  if (*format != kSnapshotFormat) {
    throw ValidationError("snapshot.format", "unsupported format \"" + format->get<std::string>() +
                                                 "\"; this parley reads \"" + kSnapshotFormat +
                                                 "\"");
  }
  auto messagesJson = snapshot.find("messages");
  if (messagesJson == snapshot.end()) throw ValidationError("snapshot.messages", "is required");
  std::vector<Message> messages;
  try {
    messages = messagesFromJson(*messagesJson);
  } catch (const ValidationError& e) {
    throw ValidationError("snapshot." + e.field(), e.reason());
  }
  if (auto size = snapshot.find("storageSize"); size != snapshot.end()) {
    if (!size->is_number_unsigned() || size->get<size_t>() != messages.size()) {
      throw ValidationError("snapshot.storageSize", "does not match the number of messages (" +
                                                        std::to_string(messages.size()) + ")");
    }
  }
  auto markMap = snapshot.find("markMap");
  if (markMap == snapshot.end()) throw ValidationError("snapshot.markMap", "is required");
  MessageStore restored;
  try {
    restored = MessageStore::fromJson(std::move(messages), *markMap);
  } catch (const ValidationError& e) {
    throw ValidationError("snapshot." + e.field(), e.reason());
  }
  // Token usage is optional (a document written by hand may leave it out).
  std::optional<TokenUsage> lastUsage;
  TokenUsage cumulative;
  int64_t requests = 0;
  bool covers = false;
  size_t coveredViewSize = 0;
  if (auto usage = snapshot.find("tokenUsage"); usage != snapshot.end() && !usage->is_null()) {
    if (!usage->is_object()) throw ValidationError("snapshot.tokenUsage", "must be an object");
    if (auto last = usage->find("lastRequest"); last != usage->end() && !last->is_null()) {
      lastUsage = usageFromJson(*last);
      if (!lastUsage) throw ValidationError("snapshot.tokenUsage.lastRequest", "must be an object");
    }
    if (auto sum = usage->find("cumulative"); sum != usage->end() && !sum->is_null()) {
      auto parsed = usageFromJson(*sum);
      if (!parsed) throw ValidationError("snapshot.tokenUsage.cumulative", "must be an object");
      addUsage(cumulative, *parsed);  // total = prompt + completion, whatever the file says
    }
    auto count = [&](const char* key) -> int64_t {
      auto it = usage->find(key);
      if (it == usage->end() || it->is_null()) return 0;
      if (!it->is_number_integer() || it->get<int64_t>() < 0) {
        throw ValidationError(std::string("snapshot.tokenUsage.") + key,
                              "must be a non-negative integer");
      }
      return it->get<int64_t>();
    };
    requests = count("requests");
    if (auto size = usage->find("coveredViewSize"); size != usage->end() && !size->is_null()) {
      covers = true;
      coveredViewSize = static_cast<size_t>(count("coveredViewSize"));
    }
  }
  std::unique_lock lock(state_->mutex);
  state_->store = std::move(restored);
  state_->lastUsage = std::move(lastUsage);
  state_->cumulative = cumulative;
  state_->requests = requests;
  state_->usageEpoch = kNoEpoch;
  if (covers && coveredViewSize <= state_->store.viewSize()) {
    state_->usageEpoch = state_->store.viewEpoch();
    MessageStore::IndexList covered;
    state_->store.view().forEach(0, coveredViewSize,
                                 [&](MessageStore::Index i) { covered.push_back(i); });
    state_->usageView = std::move(covered);
  }
  state_->revision = nextRevision();
}

ContextSnapshot ConversationManager::snapshot() const {
  auto frozen = std::make_shared<ContextSnapshot::Frozen>();
  frozen->conversation.emplace(clone());
  return ContextSnapshot(std::shared_ptr<const ContextSnapshot::Frozen>(std::move(frozen)));
}

void ConversationManager::restoreFromSnapshot(const ContextSnapshot& snapshot) {
  if (snapshot.isNull()) throw ValidationError("snapshot", "must be a snapshot, not null");
  const ConversationManager* frozen = snapshot.conversation();
  if (!frozen) return restoreFromSnapshot(snapshot.json());
  if (frozen == this) return;
  const State& from = *frozen->state_;
  std::shared_lock fromLock(from.mutex);  // never written: only readers meet here
  std::unique_lock lock(state_->mutex);
  state_->store = from.store;
  state_->copyAccountingFrom(from);
  ++state_->revision;
}

ConversationManager ConversationManager::clone() const {
  return clone(nullptr);
}

ConversationManager ConversationManager::clone(std::shared_ptr<TurnSink> persist) const {
  ConversationManager copy;
  std::shared_lock lock(state_->mutex);
  State& to = *copy.state_;
  to.store = state_->store;
  to.revision = state_->revision;
  to.options = state_->options;
  if (to.options->persist != persist) {
    auto options = std::make_shared<ConversationOptions>(*to.options);
    options->persist = std::move(persist);
    to.options = std::move(options);
  }
  to.executor = state_->executor;
  to.counter = state_->counter;
  to.copyAccountingFrom(*state_);
  return copy;
}

uint64_t ConversationManager::revision() const {
  std::shared_lock lock(state_->mutex);
  return state_->revision;
}

MessageStore ConversationManager::store() const {
  std::shared_lock lock(state_->mutex);
  return state_->store;
}

void ConversationManager::modifyStore(const std::function<void(MessageStore&)>& edit) {
  std::unique_lock lock(state_->mutex);
  MessageStore copy = state_->store;
  edit(copy);
  state_->store = std::move(copy);
  state_->revision = nextRevision();
}

// --- tokens ---------------------------------------------------------------------------------

nlohmann::json ConversationManager::tokenUsageJson() const {
  const State& st = *state_;
  json out = {{"lastRequest", usageJson(st.lastUsage)},
              {"cumulative",
               {{"prompt_tokens", st.cumulative.promptTokens},
                {"completion_tokens", st.cumulative.completionTokens},
                {"total_tokens", st.cumulative.totalTokens}}},
              {"requests", st.requests}};
  if (auto covered = st.reportCoverage()) out["coveredViewSize"] = *covered;
  return out;
}

TokenCheck ConversationManager::contextTokens() const {
  const State& st = *state_;
  const MessageStore& s = st.store;
  const TokenCounter& counter = st.counter ? *st.counter : defaultCounter();
  TokenCheck check;
  check.tokenLimit = st.options->tokenLimit;
  size_t from = 0;
  int64_t local = 0;  // counted here, not reported: what a calibration scales
  if (auto covered = st.reportCoverage()) {
    // The API's numbers cover the view up to `covered`; count only what came after.
    check.contextTokens = st.lastUsage->promptTokens + st.lastUsage->completionTokens;
    from = *covered;
    check.estimated = from < s.viewSize();
  } else {
    local = kReplyPrimingTokens + toolTokens();
    check.estimated = true;
  }
  s.view().forEach(from, s.viewSize(),
                   [&](MessageStore::Index i) { local += messageTokens(s.record(i), counter); });
  check.contextTokens += calibrated(local);
  check.overLimit = check.tokenLimit > 0 && check.contextTokens > check.tokenLimit;
  return check;
}

int64_t ConversationManager::calibrated(int64_t localTokens) const {
  const auto& calibration = state_->options->calibration;
  return calibration ? calibration->calibrate(localTokens) : localTokens;
}

int64_t ConversationManager::toolTokens() const {
  const State& st = *state_;
  if (!st.options->tools || st.options->tools->size() == 0) return 0;
  const TokenCounter& counter = st.counter ? *st.counter : defaultCounter();
  std::lock_guard lock(st.toolTokensMutex);
  auto definitions = st.options->tools->definitions();
  if (st.toolTokensRevision != definitions->revision) {
    st.toolTokens = countToolTokens(definitions->tools, counter).tokens;
    st.toolTokensRevision = definitions->revision;
  }
  return st.toolTokens;
}

TokenCount ConversationManager::countPromptTokens(const std::vector<Message>& pending) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  const TokenCounter& counter = state_->counter ? *state_->counter : defaultCounter();
  TokenCount total{kReplyPrimingTokens + toolTokens(), !counter.exact()};
  s.view().forEach(0, s.viewSize(), [&](MessageStore::Index i) {
    total.tokens += messageTokens(s.record(i), counter);
  });
  for (const Message& m : pending)
    total += countMessageTokens(m, counter);
  return total;
}

ChatRequest ConversationManager::requestFor(
    const std::vector<Message>& pending, const ChatRequest& base,
    std::shared_ptr<const ToolDefinitions>* definitionsOut) const {
  const ConversationOptions& config = *state_->options;
  ChatRequest request = base;
  request.messages = pending;
  const MessageJsonOptions jsonOptions =
      config.llm ? config.llm->messageJsonOptions() : MessageJsonOptions{};
  {
    std::shared_lock lock(state_->mutex);
    const MessageStore& s = state_->store;
    request.encodedMessages.clear();
    request.encodedMessages.reserve(s.viewSize());
    s.view().forEach(0, s.viewSize(), [&](MessageStore::Index i) {
      request.encodedMessages.push_back(encoded(s.record(i), jsonOptions));
    });
  }
  std::shared_ptr<const ToolDefinitions> definitions =
      config.tools ? config.tools->definitions() : nullptr;
  request.tools = definitions ? definitions->tools : json::array();
  if (definitionsOut) *definitionsOut = std::move(definitions);
  return request;
}

PromptCount ConversationManager::countWithCounter(const ChatRequest& request) const {
  PromptCount count = state_->options->promptCounter->count(request);
  if (!count.remote) count.tokens = calibrated(count.tokens);  // a local count or a fallback
  return count;
}

PromptCount ConversationManager::countRequestPrompt(const std::vector<Message>& pending) const {
  if (state_->options->promptCounter) {
    return countWithCounter(requestFor(pending, state_->options->request));
  }
  const TokenCount local = countPromptTokens(pending);
  PromptCount count;
  count.tokens = local.tokens;
  count.estimate = local.estimate;
  return count;
}

CostSpent ConversationManager::spentCost(const ModelPrice& price) const {
  std::shared_lock lock(state_->mutex);
  const MessageStore& s = state_->store;
  CostSpent spent;
  for (size_t i = 0; i < s.storageSize(); ++i) {
    spent.thread += costOf(s.stored(i), price);
  }
  for (size_t p = s.viewSize(); p-- > 0;) {
    const Message& m = s.visible(p);
    if (m.role == Role::User) break;
    spent.run += costOf(m, price);
  }
  return spent;
}

std::pair<double, std::string> ConversationManager::enforceBudget(
    ChatRequest& request, const std::vector<Message>& pending) const {
  const CostBudget& budget = state_->options->budget;
  BudgetCall call;
  call.model = request.model.empty() ? budget.model : request.model;
  if (state_->options->promptCounter) {
    const PromptCount count = countWithCounter(request);
    call.prompt = TokenCount{count.tokens, count.estimate};
  } else {
    call.prompt = countPromptTokens(pending);
  }
  if (!request.maxTokens) request.maxTokens = budget.defaultMaxTokens;
  call.maxTokens = *request.maxTokens;
  if (auto price = budget.prices ? budget.prices->find(call.model) : std::nullopt) {
    const CostSpent spent = spentCost(*price);
    call.spentThread = spent.thread;
    // A pending user prompt starts a new run.
    const bool newRun = std::any_of(pending.begin(), pending.end(),
                                    [](const Message& m) { return m.role == Role::User; });
    call.spentRun = newRun ? 0 : spent.run;
  }
  const bool shared = budget.maxCostShared && budget.shared;
  if (shared) call.spentShared = budget.shared->committed();
  const double worst = checkBudget(budget, call);  // throws BudgetExceeded; unpriced models too
  if (!shared) return {0.0, call.model};
  // Checked again under the spending's lock: calls of other conversations may have reserved.
  budget.shared->reserve(budget.sharedName, *budget.maxCostShared, worst);
  return {worst, call.model};
}

std::optional<CacheDiagnostic> ConversationManager::diagnoseCache(
    const std::vector<Message>& pending) const {
  std::shared_lock lock(state_->mutex);
  const State& st = *state_;
  // The previous request is the view its usage was reported for, less the reply at its end.
  if (!st.lastUsage || st.usageEpoch == kNoEpoch || st.usageView.size() == 0) return std::nullopt;
  CacheDiagnostic d;
  const ConversationOptions& config = *st.options;
  // definitions(), not revision(): an MCP tool list whose ttl passed is read again first, so a
  // change of a server's tools shows here before the call that will carry it.
  const uint64_t toolsRevision = config.tools ? config.tools->definitions()->revision : 0;
  if (st.lastToolsRevision.value_or(toolsRevision) != toolsRevision) {
    d.firstDifference = CacheDiagnostic::Difference{std::nullopt, "tools"};
    return d;
  }
  const MessageStore& s = st.store;
  const TokenCounter& counter = st.counter ? *st.counter : defaultCounter();
  const MessageJsonOptions jsonOptions =
      config.llm ? config.llm->messageJsonOptions() : MessageJsonOptions{};
  const size_t previous = st.usageView.size() - 1;
  const size_t view = s.viewSize();
  const size_t current = view + pending.size();
  const MessageStore::IndexList& now = s.view();
  if (st.usageEpoch == s.viewEpoch()) {
    // Only appends since the previous request: the view begins with all of it.
    std::lock_guard sizesLock(st.prefixSizesMutex);
    State::PrefixSizes& sizes = st.prefixSizes;
    if (sizes.epoch != st.usageEpoch || sizes.messages > previous) sizes = {st.usageEpoch, 0, 0, 0};
    for (; sizes.messages < previous; ++sizes.messages) {
      const MessageRecord& record = s.record(st.usageView[sizes.messages]);
      sizes.tokens += messageTokens(record, counter);
      sizes.bytes += static_cast<int64_t>(encoded(record, jsonOptions)->size());
    }
    d.reusablePrefixTokens = sizes.tokens;
    d.reusablePrefixBytes = sizes.bytes;
    d.reusableMessages = previous;
    return d;
  }
  size_t i = 0;
  for (; i < previous && i < current; ++i) {
    const MessageRecord& before = s.record(st.usageView[i]);
    const std::shared_ptr<const std::string> beforeBytes = encoded(before, jsonOptions);
    const Message* differs = nullptr;
    if (i < view) {
      // A message kept in storage is the same bytes: compare indices first.
      const MessageRecord& after = s.record(now[i]);
      if (now[i] != st.usageView[i] && *encoded(after, jsonOptions) != *beforeBytes) {
        differs = &after.message;
      }
    } else if (encodeMessage(pending[i - view], jsonOptions) != *beforeBytes) {
      differs = &pending[i - view];
    }
    if (differs) {
      const Message& old = before.message;
      const char* field = old.role != differs->role               ? "role"
                          : old.name != differs->name             ? "name"
                          : old.content != differs->content       ? "content"
                          : old.toolCalls != differs->toolCalls   ? "tool_calls"
                          : old.toolCallId != differs->toolCallId ? "tool_call_id"
                                                                  : "extra";
      d.firstDifference = CacheDiagnostic::Difference{i, field};
      break;
    }
    d.reusablePrefixTokens += messageTokens(before, counter);
    d.reusablePrefixBytes += static_cast<int64_t>(beforeBytes->size());
  }
  d.reusableMessages = i;
  if (!d.firstDifference && i < previous) {
    d.firstDifference = CacheDiagnostic::Difference{i, "removed"};
  }
  return d;
}

TokenCheck ConversationManager::estimateContextTokens() const {
  std::shared_lock lock(state_->mutex);
  return contextTokens();
}

TokenCheck ConversationManager::checkTokenUsage(const std::vector<Message>& pending) {
  return checkTokenUsage(pending, options().request);
}

TokenCheck ConversationManager::checkTokenUsage(const std::vector<Message>& pending,
                                                const ChatRequest& base) {
  const ConversationOptions& config = options();
  TokenCheck check;
  const bool byCounter = config.promptCounter && config.tokenLimit > 0;
  if (byCounter) {
    // The request itself, counted as the counter counts it (a remote one asks the server).
    const PromptCount count = countWithCounter(requestFor(pending, base));
    check.tokenLimit = config.tokenLimit;
    check.contextTokens = count.tokens;
    check.estimated = count.estimate;
    check.overLimit = check.contextTokens > check.tokenLimit;
  } else {
    check = estimateContextTokens();
  }
  if (!pending.empty() && !byCounter) {
    const TokenCounter& counter = state_->counter ? *state_->counter : defaultCounter();
    int64_t local = 0;
    for (const Message& m : pending)
      local += countMessageTokens(m, counter).tokens;
    check.contextTokens += calibrated(local);
    check.estimated = true;
    check.overLimit = check.tokenLimit > 0 && check.contextTokens > check.tokenLimit;
  }
  if (!check.overLimit) return check;
  const TokenLimitHandler handler = options().onTokenLimitExceeded;
  if (!handler) return check;
  try {
    handler(*this, check);
  } catch (const std::exception& e) {
    logLine(options(),
            std::string("the token-limit trigger failed: ") + e.what() + "; the call goes on");
  } catch (...) {  // a trigger is user code: whatever it throws must not stop the call
    logLine(options(),
            "the token-limit trigger failed (an exception that is not a "
            "std::exception); the call goes on");
  }
  return check;
}

void ConversationManager::updateTokenUsage(const TokenUsage& usage) {
  std::unique_lock lock(state_->mutex);
  State& st = *state_;
  st.lastUsage = usage;
  addUsage(st.cumulative, usage);
  ++st.requests;
  st.coverCurrentView();
  st.revision = nextRevision();
}

void ConversationManager::addSideUsage(const TokenUsage& usage) {
  std::unique_lock lock(state_->mutex);
  addUsage(state_->cumulative, usage);
  state_->revision = nextRevision();
}

TokenUsageStats ConversationManager::getTokenUsage() const {
  std::shared_lock lock(state_->mutex);
  TokenUsageStats stats;
  stats.lastRequest = state_->lastUsage;
  stats.cumulative = state_->cumulative;
  stats.requests = state_->requests;
  stats.context = contextTokens();
  return stats;
}

const ConversationOptions& ConversationManager::options() const {
  return *state_->options;
}

// --- model and tools ----------------------------------------------------------------------

ChatResult ConversationManager::call(const std::vector<Message>& pending,
                                     const LlmCallOptions& options,
                                     const std::function<void(const Message&)>& onMessage,
                                     const Message* given, std::optional<CacheDiagnostic>* cache,
                                     const CallShape* shape) {
  const ConversationOptions& config = *state_->options;
  if (!config.llm) {
    throw ValidationError("options.llm", "this conversation has no model attached");
  }
  for (const Message& m : pending)
    validate(m);
  // The request about to be sent: the view, `pending`, the tools. Without a limit nothing is
  // over it, so nothing is counted (a count loads the vocabulary: half a one-turn process's CPU).
  if (config.tokenLimit > 0)
    checkTokenUsage(pending, options.request ? *options.request : config.request);
  if (cache) *cache = diagnoseCache(pending);  // after the trigger, which may edit the view

  std::shared_ptr<const ToolDefinitions> definitions;
  ChatRequest request =
      requestFor(pending, options.request ? *options.request : config.request, &definitions);
  const MessageJsonOptions jsonOptions = config.llm->messageJsonOptions();
  if (shape && shape->request) shape->request(request, jsonOptions);
  // Before anything is sent; a reply taken from a journal costs nothing more.
  // The local count of what is sent, for the calibration to learn from the reported one.
  const int64_t localPrompt = config.calibration && !given ? countPromptTokens(pending).tokens : 0;
  std::pair<double, std::string> reserved{0.0, ""};
  if (config.budget.limited() && !given) reserved = enforceBudget(request, pending);
  request.stream = options.stream.value_or(config.stream);
  if (options.timeout) request.timeout = options.timeout;
  if (options.stopToken.stop_possible()) request.stopToken = options.stopToken;

  ChatResult result;
  if (given) {
    if (given->role != Role::Assistant) {
      throw ValidationError("firstReply", "must be an assistant message");
    }
    result.message = *given;
    result.usage = given->usage;
    result.finishReason = given->toolCalls.empty() ? "stop" : "tool_calls";
  } else {
    detail::ChatTelemetry chat(*config.llm, request, options.conversationId);
    try {
      const bool streamed = request.stream && options.onChunk;
      if (streamed && chat.recording()) {
        // The time to first chunk, seen where the chunks are.
        result = config.llm->generateStream(request, [&](const StreamDelta& delta) {
          chat.chunk();
          return options.onChunk(delta);
        });
      } else {
        result = streamed ? config.llm->generateStream(request, options.onChunk)
                          : config.llm->generate(request);
      }
    } catch (const std::exception& e) {
      chat.fail(e);
      if (reserved.first > 0) config.budget.shared->settle(reserved.first, 0);
      throw;
    } catch (...) {
      if (reserved.first > 0) config.budget.shared->settle(reserved.first, 0);
      throw;
    }
    chat.finish(result, config.budget.prices.get());
    if (reserved.first > 0) {
      // What the reply cost; without usage, its worst case stays spent.
      const auto price = config.budget.prices->find(reserved.second);
      config.budget.shared->settle(reserved.first, result.usage && price
                                                       ? costOf(*result.usage, *price) +
                                                             webSearchCost(result.message, *price)
                                                       : reserved.first);
    }
  }
  if (shape && shape->reply) shape->reply(result);
  // A refusal is its own outcome, with the provider's explanation; nothing is added.
  if (auto refusal = result.message.extra.find("refusal");
      result.finishReason == "refusal" ||
      (result.message.content.empty() && result.message.toolCalls.empty() &&
       refusal != result.message.extra.end() && refusal->is_string() &&
       !refusal->get_ref<const std::string&>().empty())) {
    std::string why = refusal != result.message.extra.end() && refusal->is_string()
                          ? refusal->get<std::string>()
                          : std::string();
    throw RefusalError(why.empty() ? "the model declined to answer" : why, result.message.content);
  }
  if (result.message.content.empty() && result.message.toolCalls.empty() &&
      !hasProviderContent(result.message)) {
    throw ProtocolError("the model returned an empty reply (finish_reason \"" +
                        result.reportedFinishReason + "\"); nothing was added");
  }
  result.message.role = Role::Assistant;
  result.message.usage = result.usage;
  if (localPrompt > 0 && result.usage) {
    config.calibration->observe(localPrompt, result.usage->promptTokens);
  }
  // Who answered and when, kept with the reply (a journal's reply keeps its own). Milliseconds:
  // what the stores keep, so a reply reads back equal to what was appended.
  if (result.message.model.empty()) {
    result.message.model = !result.model.empty() ? result.model : request.model;
  }
  if (!result.message.receivedAt) {
    result.message.receivedAt =
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  }

  std::unique_lock lock(state_->mutex);
  State& st = *state_;
  std::vector<Message> commit = pending;
  commit.push_back(result.message);
  st.store.appendAll(std::move(commit));  // validates all first: all or nothing
  st.lastToolsRevision =
      definitions ? std::optional<uint64_t>(definitions->revision) : std::nullopt;
  if (result.usage) {
    st.lastUsage = *result.usage;
    addUsage(st.cumulative, *result.usage);
    ++st.requests;
    st.coverCurrentView();
  }
  st.revision = nextRevision();
  lock.unlock();
  if (onMessage) {
    for (const Message& m : pending)
      onMessage(m);
    onMessage(result.message);
  }
  persistIfWhole();
  return result;
}

namespace {

// The ids of the calls of the view's last tool-call message that no tool message after it
// answers yet: while there are any, the turn is not whole.
std::unordered_set<std::string> openCallIds(const MessageStore& s) {
  std::unordered_set<std::string> answered;
  for (size_t i = s.viewSize(); i-- > 0;) {
    const Message& m = s.visible(i);
    if (m.role == Role::Tool) {
      answered.insert(m.toolCallId);
      continue;
    }
    std::unordered_set<std::string> open;
    if (m.role == Role::Assistant) {
      for (const ToolCall& call : m.toolCalls)
        if (!answered.count(call.id)) open.insert(call.id);
    }
    return open;
  }
  return {};
}

}  // namespace

void ConversationManager::persistIfWhole() {
  if (!state_->options->persist) return;
  {
    std::shared_lock lock(state_->mutex);
    if (!openCallIds(state_->store).empty()) return;  // results to come
  }
  state_->options->persist->saveTurn(*this);
}

void ConversationManager::requireOpenCalls(const std::vector<ToolCall>& calls) const {
  std::shared_lock lock(state_->mutex);
  const auto open = openCallIds(state_->store);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!open.count(calls[i].id)) {
      throw ValidationError("calls[" + std::to_string(i) + "].id",
                            "no call \"" + calls[i].id +
                                "\" of the last assistant message waits for a result; a tool "
                                "message must answer a call the model made");
    }
  }
}

ChatResult ConversationManager::executeLlmCall(const LlmCallOptions& options) {
  return call({}, options);
}

ChatResult ConversationManager::executeLlmCall(const std::vector<Message>& pending,
                                               const LlmCallOptions& options) {
  return call(pending, options);
}

std::vector<ToolResult> ConversationManager::runTools(const std::vector<ToolCall>& calls,
                                                      std::stop_token cancel,
                                                      const RunOptions* hooks) {
  if (hooks && hooks->onToolCall) {
    for (const ToolCall& c : calls)
      hooks->onToolCall(c);
  }
  const auto cap = static_cast<size_t>(state_->options->maxToolCallsPerReply);
  const std::vector<ToolCall> capped(
      calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(std::min(cap, calls.size())));
  const std::vector<ToolCall>& toRun = calls.size() > cap ? capped : calls;
  ToolTape* tape = hooks ? hooks->toolTape.get() : nullptr;
  std::vector<ToolResult> results;
  if (tape && tape->replaying()) {
    // The reply asking for the calls is the last message stored.
    const auto reply = static_cast<int64_t>(storageSize()) - 1;
    results = tape->take(hooks->toolTapeThread, reply, toRun);
  } else {
    results = hooks && hooks->runToolCalls ? hooks->runToolCalls(toRun, std::move(cancel))
                                           : state_->executor->executeAll(toRun, std::move(cancel));
  }
  if (results.size() != toRun.size()) {
    throw ProtocolError("the tool-call runner returned " + std::to_string(results.size()) +
                        " results for " + std::to_string(toRun.size()) + " calls");
  }
  if (tape && !tape->replaying()) tape->write(hooks->toolTapeThread, toRun, results);
  for (size_t i = toRun.size(); i < calls.size(); ++i) {
    ToolResult r;
    r.toolCallId = calls[i].id;
    r.name = calls[i].name;
    r.errorKind = ToolErrorKind::NotRun;
    r.error = "not run: the reply asked for " + std::to_string(calls.size()) +
              " tool calls and at most " + std::to_string(cap) +
              " are run per reply; ask for fewer at a time";
    results.push_back(std::move(r));
  }
  std::vector<Message> messages;
  messages.reserve(results.size());
  for (const ToolResult& r : results) {
    Message m = r.toMessage();
    // Chat APIs want text in a tool message; an empty result still says it ran.
    if (m.content.empty()) m.content = "(empty result)";
    messages.push_back(std::move(m));
  }
  {
    std::unique_lock lock(state_->mutex);
    // A copy only when a hook will read the messages after they are appended.
    state_->store.appendAll(hooks && hooks->onMessage ? messages : std::move(messages));
    state_->revision = nextRevision();
  }
  if (hooks && hooks->onMessage) {
    // NOLINTNEXTLINE(bugprone-use-after-move): moved above only when there is no hook
    for (const Message& m : messages)
      hooks->onMessage(m);
  }
  persistIfWhole();
  if (hooks && hooks->onToolResult) {
    for (const ToolResult& r : results)
      hooks->onToolResult(r);
  }
  return results;
}

ToolResult ConversationManager::executeToolCall(const ToolCall& call, std::stop_token cancel) {
  requireOpenCalls({call});
  return runTools({call}, std::move(cancel), nullptr).front();
}

std::vector<ToolResult> ConversationManager::executeToolCalls(const std::vector<ToolCall>& calls,
                                                              std::stop_token cancel) {
  if (calls.empty()) return {};
  requireOpenCalls(calls);
  return runTools(calls, std::move(cancel), nullptr);
}

RunResult ConversationManager::run(const std::string& prompt, const RunOptions& options) {
  return run(std::vector<Message>{Message::user(prompt)}, options);
}

RunResult ConversationManager::run(std::vector<Message> input, const RunOptions& options) {
  const int maxIterations = options.maxIterations.value_or(state_->options->maxIterations);
  if (maxIterations < 1) throw ValidationError("maxIterations", "must be at least 1");
  if (options.turnTimeout && options.turnTimeout->count() <= 0) {
    throw ValidationError("turnTimeout", "must be positive");
  }
  std::vector<Message> pending = std::move(input);
  for (const Message& m : pending)
    validate(m);

  // The turn's deadline: a watchdog stops everything under way (the model call, the tools).
  detail::TurnDeadline deadline(options.turnTimeout, options.stopToken);
  LlmCallOptions bounded;
  if (deadline.active()) {
    bounded = options;
    bounded.stopToken = deadline.token();
  }

  RunResult run;
  // The run's span; each model call and tool call of it is a child (docs/telemetry.md).
  Span agent;
  if (telemetryEnabled()) {
    agent = Span("invoke_agent", "", SpanKind::Internal);
    const ChatRequest& base = options.request ? *options.request : state_->options->request;
    detail::describeAgent(agent, state_->options->llm.get(), base.model, options.conversationId);
  }
  try {
    for (;;) {
      if (run.iterations >= maxIterations) {
        run.finishReason = "max_iterations";
        break;
      }
      const LlmCallOptions* callOptions = &options;
      if (deadline.active()) {
        bounded.timeout = deadline.callTimeout(options.timeout);
        callOptions = &bounded;
      }
      const Message* given =
          run.iterations == 0 && options.firstReply ? &*options.firstReply : nullptr;
      ChatResult result = call(pending, *callOptions, options.onMessage, given,
                               run.iterations == 0 ? &run.cache : nullptr);
      pending.clear();
      ++run.iterations;
      if (result.usage) addUsage(run.usage, *result.usage);
      run.message = result.message;
      run.content = result.message.content;
      run.finishReason = result.finishReason;
      if (result.message.toolCalls.empty()) break;
      run.toolCalls.insert(run.toolCalls.end(), result.message.toolCalls.begin(),
                           result.message.toolCalls.end());
      auto results = runTools(result.message.toolCalls, deadline.token(), &options);
      run.toolResults.insert(run.toolResults.end(), std::make_move_iterator(results.begin()),
                             std::make_move_iterator(results.end()));
      if (deadline.expired()) throw deadline.error();
    }
  } catch (const CancelledError& e) {
    agent.setError(e);
    deadline.rethrow();
  } catch (const TimeoutError& e) {
    agent.setError(e);
    deadline.rethrow();
  } catch (const std::exception& e) {
    agent.setError(e);
    throw;
  }
  if (agent.recording()) {
    detail::describeUsage(agent, run.usage);
    agent.set("gen_ai.response.finish_reasons", std::vector<std::string>{run.finishReason});
    if (!run.message.model.empty()) agent.set("gen_ai.response.model", run.message.model);
    agent.set("parley.iterations", run.iterations);
    const CostBudget& budget = state_->options->budget;
    const ChatRequest& base = options.request ? *options.request : state_->options->request;
    std::string priced = base.model.empty() ? budget.model : base.model;
    if (priced.empty() && state_->options->llm)
      priced = state_->options->llm->endpoint().defaultModel;
    if (auto price = budget.prices ? budget.prices->find(priced) : std::nullopt) {
      agent.set("parley.cost.usd", spentCost(*price).run);
    }
  }
  return run;
}

}  // namespace parley
