// Ready compression triggers for ConversationOptions::onTokenLimitExceeded
// (the conversation only detects and triggers; what compression does is the caller's choice).
//
// Thread-safety: the returned handler may be shared by several conversations; it uses only the
// conversation it is called with.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"

namespace parley {

struct SummaryOptions {
  // The instruction appended (as a user message) to the view when asking for the summary.
  std::string instructions =
      "Summarize the conversation so far for your own later use. Keep every fact, name, number, "
      "decision, constraint and open question that later turns may need; drop greetings and "
      "repetition. Write plain text, no preamble.";
  // How the summary enters the view (a system message, after the existing system messages).
  std::string summaryPrefix = "Summary of the earlier conversation:\n";
  std::optional<int64_t> maxTokens;                  // for the summary call
  std::optional<std::chrono::milliseconds> timeout;  // for the summary call
};

// A trigger that asks the conversation's model for a summary of the visible view, then starts a
// new batch whose view is: the system messages, the summary, and the last turn (from the last
// user message to the end), so rollbackToBatch() can undo it. The summary call's usage is added
// to the cumulative counters (addSideUsage). A failure (the model errors, returns nothing)
// throws, which the conversation logs before going on with the view unchanged.
TokenLimitHandler summarizeAndTruncate(SummaryOptions options = {});

// How trimOldestTurns() trims (docs/cost.md, "Compression and the prompt cache").
struct TrimOptions {
  // Hysteresis: over the limit, trim down to this fraction of it, then leave the prefix alone
  // until the limit is reached again. Each trim rewrites the prompt's beginning and so throws
  // away the provider's prompt cache; trimming well below the limit makes that rare (over 30
  // turns a few trims instead of one every turn). 1.0: trim just under the limit (no hysteresis).
  // In (0, 1].
  double lowWater = 0.6;
  // Cache-preserving mode: the view's leading messages holding at least this many tokens (whole
  // messages) are never trimmed, so a prompt cache of that prefix survives every trim; turns
  // are taken from just after it. 0: only the leading system messages are kept.
  int64_t keepFirstTokens = 0;
  // Cache-preserving mode: never trim up to and including the last message marked as an
  // explicit prompt-cache breakpoint (its extra holds "cache_control", the messages
  // PromptCachePolicy::Mode::Explicit sends with a breakpoint).
  bool keepThroughLastBreakpoint = false;
};

// A trigger that drops the oldest whole turns (a user message and what answers it, tool calls
// and results included) after the kept prefix (the leading system messages, and what the
// cache-preserving options keep), as one truncate (a new batch: rollbackToBatch() undoes it),
// until the request is at most lowWater x the limit. The last turn always stays; a view with
// nothing it may drop is left as it is (the call goes on over the limit).
// ValidationError for options out of range.
TokenLimitHandler trimOldestTurns(TrimOptions options = {});

// Dry run of summarizeAndTruncate(options) without calling the model: the view it would leave,
// with an empty summary standing in for the model's (so savedTokens is before the summary's own
// tokens, at most options.maxTokens), and the cached prefix it would destroy.
ContextOperationPreview previewSummary(const ConversationManager& conversation,
                                       const SummaryOptions& options = {},
                                       const std::vector<Message>& pending = {});

}  // namespace parley
