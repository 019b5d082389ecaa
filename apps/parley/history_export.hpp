// Readable renderings of a conversation for `parley history show/export`.
#pragma once

#include <string>

#include "parley/conversation_manager.hpp"

namespace parley::cli {

// Markdown: one section per message, tool calls as code blocks under their message. With
// includeHidden, messages a context operation hid are included and marked "(hidden)".
std::string renderMarkdown(const std::string& title, const ConversationManager& manager,
                           bool includeHidden);

// One self-contained HTML page (inline CSS, no scripts, nothing fetched): one <section
// class="turn"> per user message and what followed it (the system prompt before the first
// one in a "preamble" section), each tool call folded under its assistant message with
// <details> holding the arguments and the tool's result, messages a context operation hid
// faded and tagged, and per turn the usage the API reported for its calls as prompt and
// completion bars scaled to the largest turn.
std::string renderHtml(const std::string& title, const ConversationManager& manager);

// Escapes & < > " ' for HTML text and attributes.
std::string escapeHtml(const std::string& text);

}  // namespace parley::cli
