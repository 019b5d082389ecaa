// Context operations: truncate, insert, replace, clear and filter the visible view.
//
// Every operation works on the visible view, never deletes from storage, and commits its
// result as a new batch, so ConversationManager::rollbackToBatch() undoes it. Positions are
// view positions. An operation that throws leaves the conversation as it was.
//
// Tool-call pairing. A model API rejects a tool message that does not answer the assistant
// tool-call message just before its group, and an assistant tool-call message that is not
// followed by the results of all its calls. So after every operation the view is checked:
// - truncate, clear and filter REPAIR: they select messages in bulk, so a tool-call group
//   they cut in two is dropped whole (the assistant tool-call message and whatever results of
//   it were kept), as is any tool message whose call is not in the view;
// - insert and replace REFUSE (ValidationError, nothing changed) when they would break a
//   group that was whole before: they are precise edits, and silently dropping other
//   messages would surprise.
//
// Thread-safety: the operation types are values; applyContextOperation() takes the
// manager's write lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "parley/cache_diagnostic.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/message.hpp"

namespace parley {

// Applied in this order on the view: keepFirst, keepLast, removeFirst, removeLast, range.
// keepFirst/keepLast 0 keep nothing; removeFirst/removeLast 0 do nothing; counts larger than
// the view are clamped. Negative counts, and a range outside 0 <= start <= end <= size of the
// view at that step, are a ValidationError.
// With `role`: the view becomes that role's messages only, truncated (the reference
// behaviour); with `keepOtherRoles` the truncation applies within that role and the other
// roles' messages stay where they are.
struct TruncateOp {
  struct Range {
    int64_t start = 0;
    int64_t end = 0;
  };
  std::optional<int64_t> keepFirst{};
  std::optional<int64_t> keepLast{};
  std::optional<int64_t> removeFirst{};
  std::optional<int64_t> removeLast{};
  std::optional<Range> range{};
  std::optional<Role> role{};
  bool keepOtherRoles = false;
};

// Inserts `messages` at view position `position` (0..size; -1 appends). The messages are
// validated and appended to storage; the view places them at the position.
struct InsertOp {
  int64_t position = -1;
  std::vector<Message> messages;
};

// Replaces the message at view position `index` (0..size-1). The new message is appended to
// storage; the old one stays in storage, hidden. Role indexes follow.
struct ReplaceOp {
  int64_t index = 0;
  Message message;
};

// Clears the view; keeps every system message unless keepSystemMessage is false.
struct ClearOp {
  bool keepSystemMessage = true;
};

// Keeps the messages that pass every given criterion: role any-of `roles`, content containing
// any of `contentContains`, content containing none of `contentExcludes`. An empty list is the
// same as no criterion.
struct FilterOp {
  std::vector<Role> roles;
  std::vector<std::string> contentContains;
  std::vector<std::string> contentExcludes;
};

using ContextOperation = std::variant<TruncateOp, InsertOp, ReplaceOp, ClearOp, FilterOp>;

struct ContextOperationResult {
  std::string operation;         // "truncate", "insert", ...
  size_t messageCount = 0;       // visible messages after the operation
  size_t removedForPairing = 0;  // messages a repair dropped (see above)
  std::chrono::microseconds executionTime{0};
};

// What an operation would do, found by applying it to a clone() of the conversation (O(1) to
// take; the conversation itself is untouched): how much of the provider's prompt cache it would
// throw away, and how many prompt tokens it would save (docs/cost.md, "Dry runs").
struct ContextOperationPreview {
  std::string operation;  // "truncate", ..., "summarize"
  size_t messagesBefore = 0;
  size_t messagesAfter = 0;
  size_t removedForPairing = 0;
  // The first view position whose message the operation changes (removes, replaces, or puts
  // something before); nullopt when the view is left as it was or only grows at its end.
  std::optional<size_t> firstChangedMessage;
  // The next request against the previous one (diagnoseCache), without and with the operation;
  // nullopt when the previous request is not known (no call yet).
  std::optional<CacheDiagnostic> cacheWithout;
  std::optional<CacheDiagnostic> cacheWith;
  // The cached prefix the operation destroys: cacheWithout's reusable prefix less cacheWith's;
  // without a previous request, the current view's messages from firstChangedMessage on (what a
  // cache of the view as it stands would lose). Exact tokens with a vocabulary; JSON bytes.
  int64_t destroyedPrefixTokens = 0;
  int64_t destroyedPrefixBytes = 0;
  // The next request's prompt tokens (countPromptTokens) without and with the operation, and the
  // difference (negative when the operation adds, as insert does).
  int64_t promptTokensBefore = 0;
  int64_t promptTokensAfter = 0;
  int64_t savedTokens = 0;
};

// Dry run of `op`: the preview of applying it to `manager`, whose history is left unchanged.
// `pending`: messages the next request sends after the view (a prompt). Throws what the
// operation would throw (ValidationError). O(messages) for the counts of a changed view.
ContextOperationPreview previewContextOperation(const ConversationManager& manager,
                                                const ContextOperation& op,
                                                const std::vector<Message>& pending = {});
// The same for any edit of a conversation (a compression trigger's): `edit` runs on a clone.
ContextOperationPreview previewContextEdit(const ConversationManager& manager,
                                           std::string operation,
                                           const std::function<void(ConversationManager&)>& edit,
                                           const std::vector<Message>& pending = {});
// {"operation", "messagesBefore", "messagesAfter", "removedForPairing", "firstChangedMessage"
//  (or null), "destroyedPrefixTokens", "destroyedPrefixBytes", "promptTokensBefore",
//  "promptTokensAfter", "savedTokens", "cacheWithout", "cacheWith" (toJson(CacheDiagnostic) or
//  null)}
nlohmann::json toJson(const ContextOperationPreview& preview);

// Reads a context-processor node's config, e.g.
//   {"operation": "truncate", "truncate": {"role": "user", "keepLast": 5}}
// with an optional "dryRun": true (isDryRun(): report previewContextOperation() instead of
// applying). Unknown operations, missing or malformed configs and unknown keys are a
// ValidationError naming the field ("truncate.keepLast: must be a non-negative integer").
ContextOperation parseContextOperation(const nlohmann::json& config);
// True when a context-processor config asks for a dry run ("dryRun": true); a "dryRun" that is
// not a boolean is a ValidationError.
bool isDryRun(const nlohmann::json& config);
nlohmann::json toJson(const ContextOperation& operation);

// Applies one operation to the store's view as a new batch (the pure form).
ContextOperationResult applyContextOperation(MessageStore& store, const ContextOperation& op);
// Applies one operation to a conversation, atomically.
ContextOperationResult applyContextOperation(ConversationManager& manager,
                                             const ContextOperation& op);

// The operation that makes `prompt` the view's leading system message: a replace of the system
// message that opens the view, else an insert at the front; for an empty prompt, a truncate
// that removes the system message opening the view. nullopt when the view already begins so.
std::optional<ContextOperation> systemPromptOperation(const ConversationManager& manager,
                                                      const std::string& prompt);

// The read half of a context-processor node: which visible messages to read, and where to.
// With `role` the role's type index answers (all of them, the last `last`, or positions
// [range.start, range.end) among them); without, the view does (all, the last `last`, or view
// positions [start, end)). `last` and `range` exclude each other; counts past the end clamp.
struct ContextRead {
  struct Range {
    int64_t start = 0;
    int64_t end = 0;
  };
  enum class Into {
    Result,  // the node's result holds the messages; nothing else happens
    Prompt,  // the messages, as text, become part of the node's prompt for a model call
  };
  std::optional<Role> role{};
  std::optional<int64_t> last{};
  std::optional<Range> range{};
  Into into = Into::Result;
};

// True when a context-processor config reads instead of editing ({"operation": "read"}).
bool isContextRead(const nlohmann::json& config);
// Reads {"operation": "read", "read": {"role": "user", "last": 3, "range": {"start": 0,
// "end": 2}, "into": "result" | "prompt"}} ("read" may be omitted: everything, into the
// result). ValidationError naming the field ("read.last: must be a non-negative integer").
ContextRead parseContextRead(const nlohmann::json& config);
// The messages `read` selects, in view order.
std::vector<Message> readContext(const ConversationManager& manager, const ContextRead& read);
// The messages as prompt text, one "role: content" line each (a tool call as
// "[call name(arguments)]" after the content).
std::string contextText(const std::vector<Message>& messages);
// `prompt` with every "{{context}}" replaced by `text`, or, without one, `text` after a blank
// line.
std::string promptWithContext(const std::string& prompt, const std::string& text);

// Storage indices of the view entries that break tool-call pairing (see above), in view order.
std::vector<MessageStore::Index> pairingViolations(const MessageStore& store,
                                                   const std::vector<MessageStore::Index>& view);

}  // namespace parley
