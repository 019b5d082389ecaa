#include "history_export.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "parley/iso_time.hpp"
#include "parley/server_tools.hpp"

#include "markdown.hpp"
#include "parley/json.hpp"

namespace parley::cli {
namespace {

std::string heading(Role role) {
  std::string name(toString(role));
  if (!name.empty()) name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  return name;
}

std::string prettyArguments(const std::string& arguments) {
  auto parsed = parseJson(arguments, {}, /*allowExceptions=*/false);
  return parsed.is_discarded() ? arguments : parsed.dump(2);
}

}  // namespace

std::string serverToolSummary(const ServerToolCall& call) {
  const nlohmann::json input = parseJson(call.input, {}, /*allowExceptions=*/false);
  std::string what;
  if (input.is_object()) {
    for (const char* key : {"query", "url", "pattern", "command", "code", "queries"}) {
      auto it = input.find(key);
      if (it == input.end()) continue;
      what = it->is_string() ? it->get<std::string>() : it->dump();
      break;
    }
    // Responses' web_search_call keeps its query under action.
    if (what.empty() && input.contains("action") && input["action"].is_object()) {
      const auto& action = input["action"];
      if (action.contains("query") && action["query"].is_string())
        what = action["query"];
      else if (action.contains("url") && action["url"].is_string())
        what = action["url"];
    }
  }
  if (what.empty()) what = call.input == "{}" ? "" : call.input;
  if (const size_t nl = what.find('\n'); nl != std::string::npos)
    what = what.substr(0, nl) + " ...";
  if (what.size() > 100) {
    size_t cut = 100;
    while (cut > 0 && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80)
      --cut;  // not inside a UTF-8 sequence
    what = what.substr(0, cut) + "...";
  }
  if (!call.status.empty() && call.status != "completed") what += " (" + call.status + ")";
  return what;
}

ThreadCost threadCost(std::span<const Message> messages, const PriceTable& prices) {
  ThreadCost total;
  for (const Message& m : messages) {
    if (m.role != Role::Assistant || !m.usage) continue;
    ++total.replies;
    total.promptTokens += m.usage->promptTokens;
    total.completionTokens += m.usage->completionTokens;
    const std::optional<double> cost = m.model.empty() ? std::nullopt : prices.cost(m.model, m);
    if (cost) {
      total.usd = total.usd.value_or(0) + *cost;
    } else {
      ++total.unpriced;
    }
  }
  return total;
}

std::string formatThreadCost(const ThreadCost& cost) {
  if (cost.replies == 0) return "";
  if (!cost.usd) return formatUsd(std::nullopt);
  std::string text = formatUsd(cost.usd);
  if (cost.unpriced > 0) {
    text += " + " + std::to_string(cost.unpriced) + " unpriced repl" +
            (cost.unpriced == 1 ? "y" : "ies");
  }
  return text;
}

std::string renderMarkdown(const std::string& title, const ConversationManager& manager,
                           const PriceTable& prices, bool includeHidden) {
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
    if (m.usage || !m.model.empty() || m.receivedAt) {
      std::vector<std::string> parts;
      if (m.usage) {
        parts.push_back(std::to_string(m.usage->promptTokens) + " prompt + " +
                        std::to_string(m.usage->completionTokens) + " completion tokens");
      }
      if (!m.model.empty()) parts.push_back(m.model);
      if (m.receivedAt) {
        const std::string iso = isoTime(*m.receivedAt);
        parts.push_back(iso.substr(0, 10) + " " + iso.substr(11, 5) + " UTC");
      }
      if (m.usage && !m.model.empty()) parts.push_back(formatUsd(prices.cost(m.model, m)));
      out << "\n*";
      for (size_t p = 0; p < parts.size(); ++p)
        out << (p ? " \u00b7 " : "") << parts[p];
      out << "*\n";
    }
  }
  const TokenUsageStats usage = manager.getTokenUsage();
  if (usage.requests > 0) {
    out << "\n---\n\nTokens: " << usage.cumulative.promptTokens << " prompt, "
        << usage.cumulative.completionTokens << " completion, " << usage.cumulative.totalTokens
        << " total over " << usage.requests << " calls\n";
  }
  if (const ThreadCost cost = threadCost(all, prices); cost.replies > 0) {
    out << "\nCost: " << formatThreadCost(cost) << "\n";
  }
  return out.str();
}

namespace {

struct TurnUsage {
  int64_t prompt = 0;
  int64_t completion = 0;
  int64_t total = 0;
  int calls = 0;  // replies that carried usage
};

// A turn: a user message and what followed it up to the next user message. Messages before
// the first user message (the system prompt) form turn 0, the preamble.
std::vector<size_t> turnStarts(const std::vector<Message>& all) {
  std::vector<size_t> starts = {0};
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].role == Role::User && i != 0) starts.push_back(i);
  }
  starts.push_back(all.size());
  return starts;
}

// Text a person or a model wrote, as HTML: Markdown rendered (escaped first) for prompts and
// replies, as typed in a <pre> for system prompts and tool results.
std::string contentHtml(const Message& m) {
  if (m.role == Role::System || m.role == Role::Tool)
    return "<pre>" + escapeHtml(m.content) + "</pre>\n";
  MarkdownRenderer renderer(MarkdownStyle{.html = true});
  std::string html = renderer.feed(m.content);
  html += renderer.finish();
  return "<div class=\"content\">\n" + html + "</div>\n";
}

// "2026-11-20 09:30 UTC" in a <time> element carrying the exact time.
std::string timeHtml(std::chrono::system_clock::time_point at) {
  const std::string iso = isoTime(at);
  return "<time datetime=\"" + iso + "\">" + iso.substr(0, 10) + " " + iso.substr(11, 5) +
         " UTC</time>";
}

// A reply's model, time and cost (when its model is priced), as far as they were kept.
std::string replyMetaHtml(const Message& m, const PriceTable& prices) {
  std::vector<std::string> parts;
  if (!m.model.empty()) parts.push_back("<span class=\"model\">" + escapeHtml(m.model) + "</span>");
  if (m.receivedAt) parts.push_back(timeHtml(*m.receivedAt));
  if (m.usage && !m.model.empty()) {
    const std::optional<double> cost = prices.cost(m.model, m);
    parts.push_back(std::string("<span class=\"cost") + (cost ? "" : " unpriced") + "\">" +
                    escapeHtml(formatUsd(cost)) + "</span>");
  }
  if (parts.empty()) return "";
  std::string out = "<div class=\"meta\">";
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i ? " \u00b7 " : "") + parts[i];
  return out + "</div>\n";
}

void renderMessage(std::ostringstream& out, const ConversationManager& manager,
                   const PriceTable& prices, const std::vector<Message>& all, size_t i,
                   size_t turnEnd, std::vector<bool>& rendered) {
  const Message& m = all[i];
  const bool hidden = manager.isModified(i);
  out << "<div class=\"msg " << toString(m.role) << (hidden ? " hidden" : "") << "\">\n"
      << "<div class=\"role\">" << heading(m.role);
  if (m.role == Role::Tool) out << " <code>" << escapeHtml(m.toolCallId) << "</code>";
  if (hidden) out << " <span class=\"tag\">hidden by a context operation</span>";
  out << "</div>\n";
  if (m.role == Role::Assistant) out << replyMetaHtml(m, prices);
  if (!m.content.empty()) out << contentHtml(m);
  // The model's reasoning, folded under the reply.
  if (auto r = m.extra.find("reasoning_content"); r != m.extra.end() && r->is_string()) {
    out << "<details class=\"reasoning\"><summary>reasoning</summary><pre>"
        << escapeHtml(r->get<std::string>()) << "</pre></details>\n";
  }
  // Tools the provider ran (web search, code execution, ...): folded to a line naming the tool
  // and what it was given; opened, the whole input and result.
  for (const ServerToolCall& call : serverToolCallsOf(m)) {
    out << "<details class=\"server-tool\"><summary>provider tool <code>" << escapeHtml(call.name)
        << "</code> " << escapeHtml(serverToolSummary(call)) << "</summary>\n<pre class=\"args\">"
        << escapeHtml(prettyArguments(call.input)) << "</pre>\n";
    if (!call.result.is_null()) {
      out << "<div class=\"result\">result<pre>" << escapeHtml(call.result.dump(2))
          << "</pre></div>\n";
    }
    out << "</details>\n";
  }
  for (const ToolCall& call : m.toolCalls) {
    out << "<details><summary>tool call <code>" << escapeHtml(call.name) << "</code> "
        << escapeHtml(call.id) << "</summary>\n<pre class=\"args\">"
        << escapeHtml(prettyArguments(call.arguments)) << "</pre>\n";
    // The tool message answering this call, folded here instead of standing alone.
    for (size_t j = i + 1; j < turnEnd; ++j) {
      if (rendered[j] || all[j].role != Role::Tool || all[j].toolCallId != call.id) continue;
      rendered[j] = true;
      const bool resultHidden = manager.isModified(j);
      out << "<div class=\"result" << (resultHidden ? " hidden" : "") << "\">result"
          << (resultHidden ? " <span class=\"tag\">hidden by a context operation</span>" : "")
          << "<pre>" << escapeHtml(all[j].content) << "</pre></div>\n";
      break;
    }
    out << "</details>\n";
  }
  if (m.usage) {
    out << "<div class=\"call-usage\">" << m.usage->promptTokens << " prompt + "
        << m.usage->completionTokens << " completion tokens</div>\n";
  }
  out << "</div>\n";
}

}  // namespace

std::string renderHtml(const std::string& title, const std::string& threadId,
                       const ConversationManager& manager, const PriceTable& prices) {
  const std::vector<Message> all = manager.getAllMessages();
  const std::vector<size_t> starts = turnStarts(all);
  std::vector<TurnUsage> usage(starts.size() - 1);
  int64_t widest = 1;
  size_t hiddenCount = 0;
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    for (size_t i = starts[t]; i < starts[t + 1]; ++i) {
      if (manager.isModified(i)) ++hiddenCount;
      if (!all[i].usage) continue;
      usage[t].prompt += all[i].usage->promptTokens;
      usage[t].completion += all[i].usage->completionTokens;
      usage[t].total += all[i].usage->totalTokens;
      ++usage[t].calls;
    }
    widest = std::max(widest, usage[t].prompt + usage[t].completion);
  }

  std::ostringstream out;
  // Phone width: the viewport meta, a fluid column, and nothing wider than the screen (long
  // words and code wrap instead of scrolling sideways).
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>"
      << escapeHtml(title) << "</title>\n<style>\n"
      << "body{font-family:system-ui,sans-serif;max-width:50rem;margin:1rem auto;padding:0 .75rem;"
         "color:#222;line-height:1.45;overflow-wrap:anywhere}\n"
      << "h1{font-size:1.4rem}.thread-id{font-size:.8em;color:#777}\n"
      << ".turn{border-top:1px solid #ddd;margin-top:1.5rem}.turn h2{font-size:1rem;color:#555}\n"
      << ".msg{border-left:4px solid #999;margin:1rem 0;padding:.5rem .75rem;background:#f7f7f7;"
         "min-width:0}\n"
      << ".user{border-color:#2a6fdb}.assistant{border-color:#2a9d5b}"
         ".system{border-color:#888}.tool{border-color:#c07a00}\n"
      << ".hidden{opacity:.5}.role{font-weight:bold}.tag{font-size:.8em;color:#a33}\n"
      << ".meta{font-size:.8em;color:#666}.unpriced{font-style:italic}\n"
      << ".content p,.content ul,.content ol,.content blockquote{margin:.4rem 0}\n"
      << ".content blockquote{border-left:3px solid #ccc;padding-left:.6rem;color:#555}\n"
      << "code{background:#eee;padding:0 .2em}\n"
      << "pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.3rem 0;max-width:100%}\n"
      << ".content pre{background:#eee;padding:.4rem}.content pre code{padding:0}\n"
      << ".result{border-left:3px solid #c07a00;padding-left:.5rem}\n"
      << ".usage{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem;font-size:.85em;"
         "color:#555}\n"
      << ".bars{display:flex;flex:1 1 10rem;max-width:20rem;height:.8rem;background:#eee}\n"
      << ".bar{height:100%}.prompt{background:#2a6fdb}.completion{background:#2a9d5b}\n"
      << ".call-usage{font-size:.8em;color:#777}\n"
      << "</style>\n</head>\n<body>\n<h1>" << escapeHtml(title) << "</h1>\n";
  if (title != threadId) {
    out << "<p class=\"thread-id\">thread <code>" << escapeHtml(threadId) << "</code></p>\n";
  }
  const MessageStore store = manager.store();
  out << "<p class=\"summary\">" << all.size() << " messages, " << store.viewSize()
      << " in the current view (batch " << store.currentBatch() << "); " << hiddenCount
      << " hidden by context operations.</p>\n";

  std::vector<bool> rendered(all.size(), false);
  int turnNumber = 0;
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    const bool preamble = all.empty() || all[starts[t]].role != Role::User;
    if (preamble && starts[t] == starts[t + 1]) continue;
    if (preamble) {
      out << "<section class=\"preamble\">\n";
    } else {
      ++turnNumber;
      out << "<section class=\"turn\" id=\"turn-" << turnNumber << "\">\n<h2>Turn " << turnNumber
          << "</h2>\n";
    }
    if (usage[t].calls > 0) {
      const TurnUsage& u = usage[t];
      out << "<div class=\"usage\"><div class=\"bars\">"
          << "<div class=\"bar prompt\" title=\"prompt\" style=\"width:"
          << static_cast<double>(u.prompt) * 100.0 / static_cast<double>(widest) << "%\"></div>"
          << "<div class=\"bar completion\" title=\"completion\" style=\"width:"
          << static_cast<double>(u.completion) * 100.0 / static_cast<double>(widest)
          << "%\"></div></div>"
          << "<span>" << u.prompt << " prompt + " << u.completion << " completion = " << u.total
          << " tokens over " << u.calls << (u.calls == 1 ? " call" : " calls") << "</span></div>\n";
    }
    for (size_t i = starts[t]; i < starts[t + 1]; ++i) {
      if (rendered[i]) continue;
      rendered[i] = true;
      renderMessage(out, manager, prices, all, i, starts[t + 1], rendered);
    }
    out << "</section>\n";
  }

  const TokenUsageStats stats = manager.getTokenUsage();
  if (stats.requests > 0) {
    out << "<h2>Token usage</h2>\n<p class=\"total\">" << stats.cumulative.promptTokens
        << " prompt, " << stats.cumulative.completionTokens << " completion, "
        << stats.cumulative.totalTokens << " total over " << stats.requests << " calls</p>\n";
  }
  if (const ThreadCost cost = threadCost(all, prices); cost.replies > 0) {
    out << "<p class=\"total-cost\">Cost: " << escapeHtml(formatThreadCost(cost)) << "</p>\n";
  }
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace parley::cli
