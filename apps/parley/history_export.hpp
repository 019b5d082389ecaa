// Readable renderings of a conversation for `parley history show/export`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/server_tools.hpp"

namespace parley::cli {

// What a thread's replies used and cost: each reply that carries usage, priced by the model
// it names (Message::model). A reply without a model or with an unpriced one is counted as
// unpriced, never as free.
struct ThreadCost {
  std::optional<double> usd;  // the priced replies' sum; nullopt when none is priced
  int64_t replies = 0;        // replies carrying usage
  int64_t unpriced = 0;       // of those, the ones with no price
  int64_t promptTokens = 0;
  int64_t completionTokens = 0;
};
ThreadCost threadCost(std::span<const Message> messages, const PriceTable& prices);

// A provider-run tool call in one line, what `chat`, the HTML export and the chat page fold it
// to: what it was given (the query, the URL, the code's first line, else its input), cut to
// about 100 bytes, and its status when it did not complete ("failed", "incomplete").
std::string serverToolSummary(const ServerToolCall& call);

// "$0.001200", "unpriced", or "$0.001200 + 2 unpriced replies"; "" when no reply has usage.
std::string formatThreadCost(const ThreadCost& cost);

// Markdown: one section per message, tool calls as code blocks under their message, and under
// each reply its usage, model, time and cost (when priced). With includeHidden, messages a
// context operation hid are included and marked "(hidden)".
std::string renderMarkdown(const std::string& title, const ConversationManager& manager,
                           const PriceTable& prices, bool includeHidden);

// One self-contained HTML page (inline CSS, no scripts, nothing fetched): one <section
// class="turn"> per user message and what followed it (the system prompt before the first
// one in a "preamble" section), each tool call folded under its assistant message with
// <details> holding the arguments and the tool's result (a provider-run tool's likewise, its
// summary line naming it and what it was given), messages a context operation hid
// faded and tagged, and per turn the usage the API reported for its calls as prompt and
// completion bars scaled to the largest turn. Prompts and replies are Markdown rendered safely
// (markdown.hpp, escaped first); each reply shows its model, time and cost (when priced); the
// page is titled `title` (the thread's, else its id) and reads at phone width.
std::string renderHtml(const std::string& title, const std::string& threadId,
                       const ConversationManager& manager, const PriceTable& prices);

}  // namespace parley::cli
