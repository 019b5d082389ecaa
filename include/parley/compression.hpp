// Ready compression triggers for ConversationOptions::onTokenLimitExceeded
// (the conversation only detects and triggers; what compression does is the caller's choice).
//
// Thread-safety: the returned handler may be shared by several conversations; it uses only the
// conversation it is called with.
#pragma once

#include <chrono>
#include <optional>
#include <string>

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

}  // namespace parley
