#include "history_export.hpp"

#include <algorithm>
#include <sstream>

namespace parley::cli {
namespace {

std::string heading(Role role) {
  std::string name(toString(role));
  if (!name.empty()) name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  return name;
}

std::string prettyArguments(const std::string& arguments) {
  auto parsed = nlohmann::json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? arguments : parsed.dump(2);
}

}  // namespace

std::string escapeHtml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string renderMarkdown(const std::string& title, const ConversationManager& manager,
                           bool includeHidden) {
  std::ostringstream out;
  out << "# " << title << "\n";
  const std::vector<Message> all = manager.getAllMessages();
  for (size_t i = 0; i < all.size(); ++i) {
    const bool hidden = manager.isModified(i);
    if (hidden && !includeHidden) continue;
    const Message& m = all[i];
    out << "\n## " << heading(m.role);
    if (m.role == Role::Tool) out << " (" << m.toolCallId << ")";
    if (hidden) out << " (hidden)";
    out << "\n\n";
    if (!m.content.empty()) out << m.content << "\n";
    for (const ToolCall& call : m.toolCalls) {
      out << "\nTool call `" << call.name << "` [" << call.id << "]:\n\n```json\n"
          << prettyArguments(call.arguments) << "\n```\n";
    }
  }
  const TokenUsageStats usage = manager.getTokenUsage();
  if (usage.requests > 0) {
    out << "\n---\n\nTokens: " << usage.cumulative.promptTokens << " prompt, "
        << usage.cumulative.completionTokens << " completion, " << usage.cumulative.totalTokens
        << " total over " << usage.requests << " calls\n";
  }
  return out.str();
}

std::string renderHtml(const std::string& title, const ConversationManager& manager) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
      << escapeHtml(title) << "</title>\n<style>\n"
      << "body{font-family:system-ui,sans-serif;max-width:50rem;margin:2rem auto;padding:0 1rem;"
         "color:#222}\n"
      << ".msg{border-left:4px solid #999;margin:1rem 0;padding:.5rem 1rem;background:#f7f7f7}\n"
      << ".user{border-color:#2a6fdb}.assistant{border-color:#2a9d5b}"
         ".system{border-color:#888}.tool{border-color:#c07a00}\n"
      << ".hidden{opacity:.5}.role{font-weight:bold}.tag{font-size:.8em;color:#a33}\n"
      << "pre{white-space:pre-wrap;margin:.3rem 0}.bar{background:#2a6fdb;height:.8rem}\n"
      << "</style>\n</head>\n<body>\n<h1>" << escapeHtml(title) << "</h1>\n";
  const std::vector<Message> all = manager.getAllMessages();
  for (size_t i = 0; i < all.size(); ++i) {
    const Message& m = all[i];
    const bool hidden = manager.isModified(i);
    out << "<div class=\"msg " << toString(m.role) << (hidden ? " hidden" : "") << "\">\n"
        << "<div class=\"role\">" << heading(m.role);
    if (m.role == Role::Tool) out << " <code>" << escapeHtml(m.toolCallId) << "</code>";
    if (hidden) out << " <span class=\"tag\">hidden by a context operation</span>";
    out << "</div>\n";
    if (!m.content.empty()) out << "<pre>" << escapeHtml(m.content) << "</pre>\n";
    for (const ToolCall& call : m.toolCalls) {
      out << "<details><summary>tool call <code>" << escapeHtml(call.name) << "</code> "
          << escapeHtml(call.id) << "</summary><pre>" << escapeHtml(prettyArguments(call.arguments))
          << "</pre></details>\n";
    }
    out << "</div>\n";
  }
  const TokenUsageStats usage = manager.getTokenUsage();
  if (usage.requests > 0) {
    const int64_t total = std::max<int64_t>(usage.cumulative.totalTokens, 1);
    out << "<h2>Token usage</h2>\n<p>" << usage.cumulative.promptTokens << " prompt, "
        << usage.cumulative.completionTokens << " completion, " << usage.cumulative.totalTokens
        << " total over " << usage.requests << " calls</p>\n"
        << "<div title=\"prompt\" class=\"bar\" style=\"width:"
        << usage.cumulative.promptTokens * 100 / total << "%\"></div>\n"
        << "<div title=\"completion\" class=\"bar\" style=\"background:#2a9d5b;width:"
        << usage.cumulative.completionTokens * 100 / total << "%\"></div>\n";
  }
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace parley::cli
