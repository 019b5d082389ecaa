// Readable renderings of a conversation for `parley history show/export`.
#pragma once

#include <string>

#include "parley/conversation_manager.hpp"

namespace parley::cli {

// Markdown: one section per message, tool calls as code blocks under their message. With
// includeHidden, messages a context operation hid are included and marked "(hidden)".
std::string renderMarkdown(const std::string& title, const ConversationManager& manager,
                           bool includeHidden);

// One self-contained HTML page (inline CSS, no scripts): the turns, tool calls folded under
// their message with <details>, hidden messages marked, the token usage when known.
std::string renderHtml(const std::string& title, const ConversationManager& manager);

// Escapes & < > " ' for HTML text and attributes.
std::string escapeHtml(const std::string& text);

}  // namespace parley::cli
