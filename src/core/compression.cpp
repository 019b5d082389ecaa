#include "parley/compression.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "parley/errors.hpp"

namespace parley {

namespace {

// The view a summary leaves: the system messages, the summary, the last turn (from the last
// user message on), committed as a new batch.
void commitSummaryView(MessageStore& store, const std::string& summary) {
  std::vector<MessageStore::Index> view;
  store.view().forEach(0, store.viewSize(), [&](MessageStore::Index i) {
    if (store.stored(i).role == Role::System) view.push_back(i);
  });
  view.push_back(store.appendHidden(Message::system(summary)));
  const auto& users = store.roleIndex(Role::User);
  if (!users.empty()) {
    const MessageStore::Index lastUser = users.back();
    bool inTurn = false;
    store.view().forEach(0, store.viewSize(), [&](MessageStore::Index i) {
      inTurn = inTurn || i == lastUser;
      if (inTurn && store.stored(i).role != Role::System) view.push_back(i);
    });
  }
  store.commitView(view);
}

}  // namespace

ContextOperationPreview previewSummary(const ConversationManager& conversation,
                                       const SummaryOptions& options,
                                       const std::vector<Message>& pending) {
  return previewContextEdit(
      conversation, "summarize",
      [&](ConversationManager& copy) {
        copy.modifyStore(
            [&](MessageStore& store) { commitSummaryView(store, options.summaryPrefix); });
      },
      pending);
}

TokenLimitHandler trimOldestTurns(TrimOptions options) {
  if (!(options.lowWater > 0 && options.lowWater <= 1)) {
    throw ValidationError("lowWater", "must be in (0, 1]");
  }
  if (options.keepFirstTokens < 0) {
    throw ValidationError("keepFirstTokens", "must not be negative");
  }
  return [options](ConversationManager& conversation, const TokenCheck& check) {
    if (check.tokenLimit <= 0) return;
    const auto target =
        static_cast<int64_t>(static_cast<double>(check.tokenLimit) * options.lowWater);
    const int64_t excess = check.contextTokens - target;
    if (excess <= 0) return;
    const std::vector<Message> view = conversation.getMessages();
    const ConversationOptions& config = conversation.options();
    const TokenCounter counter = config.tokenCounter ? *config.tokenCounter : TokenCounter();

    // The kept prefix: the leading system messages, then what the cache-preserving options keep.
    size_t keep = 0;
    while (keep < view.size() && view[keep].role == Role::System)
      ++keep;
    if (options.keepFirstTokens > 0) {
      int64_t tokens = 0;
      size_t i = 0;
      for (; i < view.size() && tokens < options.keepFirstTokens; ++i)
        tokens += countMessageTokens(view[i], counter).tokens;
      keep = std::max(keep, i);
    }
    if (options.keepThroughLastBreakpoint) {
      for (size_t i = view.size(); i-- > 0;) {
        if (view[i].extra.is_object() && view[i].extra.contains("cache_control")) {
          keep = std::max(keep, i + 1);
          break;
        }
      }
    }
    // Turns start at user messages; the first one at or after `keep` is where trimming starts
    // (a partial turn before it stays whole). The last turn stays.
    size_t start = keep;
    while (start < view.size() && view[start].role != Role::User)
      ++start;
    size_t lastTurn = view.size();
    while (lastTurn > start && view[lastTurn - 1].role != Role::User)
      --lastTurn;
    if (lastTurn > start) --lastTurn;  // the last user message begins the last turn
    size_t end = start;
    int64_t dropped = 0;
    while (end < lastTurn && dropped < excess) {
      // One whole turn: the user message and everything up to the next user message.
      size_t next = end + 1;
      while (next < lastTurn && view[next].role != Role::User)
        ++next;
      for (size_t i = end; i < next; ++i)
        dropped += countMessageTokens(view[i], counter).tokens;
      end = next;
    }
    if (end == start) return;
    // The view less [start, end), as one batch (turn boundaries keep tool calls paired).
    conversation.modifyStore([&](MessageStore& store) {
      if (store.viewSize() != view.size()) throw Error("the conversation changed while trimming");
      std::vector<MessageStore::Index> kept;
      kept.reserve(view.size() - (end - start));
      store.view().forEach(0, store.viewSize(),
                           [&, position = size_t{0}](MessageStore::Index i) mutable {
                             if (position < start || position >= end) kept.push_back(i);
                             ++position;
                           });
      store.commitView(kept);
    });
  };
}

TokenLimitHandler summarizeAndTruncate(SummaryOptions options) {
  return [options = std::move(options)](ConversationManager& conversation, const TokenCheck&) {
    const ConversationOptions& config = conversation.options();
    if (!config.llm) throw ValidationError("options.llm", "summarizing needs a model");

    const MessageStore before = conversation.store();
    ChatRequest request = config.request;
    request.messages = conversation.getMessages();
    request.messages.push_back(Message::user(options.instructions));
    request.tools = nlohmann::json::array();
    request.stream = false;
    if (options.maxTokens) request.maxTokens = options.maxTokens;
    if (options.timeout) request.timeout = options.timeout;
    ChatResult result = config.llm->generate(request);
    if (result.usage) conversation.addSideUsage(*result.usage);
    if (result.message.content.empty()) {
      throw ProtocolError("the model returned an empty summary");
    }

    conversation.modifyStore([&](MessageStore& store) {
      if (store.viewEpoch() != before.viewEpoch() || store.viewSize() != before.viewSize()) {
        throw Error("the conversation changed while it was being summarized");
      }
      commitSummaryView(store, options.summaryPrefix + result.message.content);
    });
  };
}

}  // namespace parley
