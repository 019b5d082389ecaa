// `parley chat`: one turn, run and shown as it streams (chat_session.hpp).
#include "chat_session.hpp"
#include "history_export.hpp"

namespace parley::cli {
namespace {

// Reasoning is shown folded to one line ("[reasoning] first words... (N chars)"), dimmed on a
// terminal: it is there to glance at, not to read through while the answer streams.
std::string foldedReasoning(const std::string& text, bool dim) {
  // A cut preview already ends in "... (N bytes)".
  std::string line = "[reasoning] " + preview(text, 100);
  if (text.size() <= 100) line += " (" + std::to_string(text.size()) + " chars)";
  return dim ? "\033[2m" + line + "\033[0m" : line;
}

}  // namespace

void ChatSession::turn(const std::string& prompt) {
  Branch& branch = current();
  // The way back if the reply is cancelled or fails: run() keeps complete iterations, but a
  // chat turn is all or nothing.
  ConversationManager before = branch.manager.clone();
  RunOptions run = turnRunOptions(turn_);
  run.toolTape = toolTape_;
  if (settings_.has_value()) run.request = requestWithSettings(branch.manager.options().request);
  const std::string model = run.request.value_or(branch.manager.options().request).model;
  const size_t viewBefore = branch.manager.getMessages().size();
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> firstToken;
  bool waiting = interactive_;
  bool atLineStart = true;
  TerminalFilter toTerminal(STDOUT_FILENO);
  // On a terminal the line in progress shows as it streams, rendered again as it grows.
  std::optional<LiveMarkdown> rendered;
  if (renderReplies_) {
    const size_t width = terminalWidth(STDOUT_FILENO);
    rendered.emplace(MarkdownStyle{.color = colorReplies_, .width = width},
                     ::isatty(STDOUT_FILENO) ? width : 0);
  }
  auto stopWaiting = [&] {
    if (waiting) out_ << "\r   \r";
    waiting = false;
  };
  // The waiting indicator stays until there is something to see.
  auto show = [&](const std::string& text) {
    const std::string shown = rendered ? rendered->feed(toTerminal(text)) : toTerminal(text);
    if (shown.empty()) return;
    stopWaiting();
    out_ << shown;
  };
  auto flush = [&] {
    if (rendered) out_ << rendered->finish();
  };
  // Reasoning of the current model call, shown folded before its text or tool calls.
  std::string reasoning;
  const bool dim = colorReplies_;
  auto showReasoning = [&] {
    if (reasoning.empty()) return;
    stopWaiting();
    if (!atLineStart) out_ << "\n";
    out_ << foldedReasoning(reasoning, dim) << "\n" << std::flush;
    atLineStart = true;
    reasoning.clear();
  };
  run.onChunk = [&](const StreamDelta& delta) {
    reasoning += delta.reasoning;
    if (delta.content.empty()) return true;
    if (!firstToken) firstToken = std::chrono::steady_clock::now();
    showReasoning();
    show(delta.content);
    out_ << std::flush;
    atLineStart = delta.content.back() == '\n';
    return true;
  };
  run.onToolCall = [&](const ToolCall& call) {
    flush();
    showReasoning();
    stopWaiting();
    if (!atLineStart) out_ << "\n";
    atLineStart = true;
    out_ << toolCallLine(call, STDOUT_FILENO) << "\n" << std::flush;
  };
  run.onToolResult = [&](const ToolResult& result) {
    out_ << toolResultLine(result, STDOUT_FILENO) << "\n" << std::flush;
  };

  // Ctrl-C from here to the end of the run cancels the turn, wherever it comes: in the model
  // call, or in a tool call (then the run stops before another model call, and a run that
  // still returned is dropped too): the conversation stays as it was, nothing is saved.
  std::stop_source stop;
  run.stopToken = stop.get_token();
  interrupts_->arm(stop);
  // The waiting indicator, until the first token.
  if (waiting) out_ << "..." << std::flush;
  RunResult result;
  bool cancelled = false;
  try {
    // Attachments (/attach) go with this prompt; they stay pending if the turn fails.
    result =
        attachments_.empty()
            ? branch.manager.run(prompt, run)
            : branch.manager.run(std::vector<Message>{promptMessage(prompt, attachments_)}, run);
    cancelled = interrupts_->disarm();
    if (!cancelled) attachments_.clear();
  } catch (const CancelledError&) {
    interrupts_->disarm();
    cancelled = true;
  } catch (...) {
    interrupts_->disarm();
    stopWaiting();
    flush();
    branch.manager = std::move(before);
    if (!atLineStart) out_ << "\n";
    try {
      throw;
    } catch (const ValidationError&) {
      throw;  // bad input: the script goes on
    } catch (...) {
      turnFailed_ = true;
      throw;
    }
  }
  if (cancelled) {
    stopWaiting();
    flush();
    branch.manager = std::move(before);
    out_ << (atLineStart ? "" : "\n") << "[cancelled; the conversation is as before]\n";
    return;
  }
  stopWaiting();
  if (!args_.stream) {
    if (auto r = result.message.extra.find("reasoning_content");
        r != result.message.extra.end() && r->is_string()) {
      reasoning = r->get<std::string>();
    }
  }
  showReasoning();
  if (!args_.stream) {
    show(result.content);
    atLineStart = result.content.empty() || result.content.back() == '\n';
  }
  flush();
  if (!atLineStart) out_ << "\n";
  save();

  // Tools the provider ran during the turn (web search, code execution, ...), each folded to one
  // line as reasoning is; `/show tools` opens them.
  {
    const std::vector<Message> added = branch.manager.getMessages();
    for (size_t i = std::min(viewBefore, added.size()); i < added.size(); ++i) {
      for (const ServerToolCall& call : serverToolCallsOf(added[i])) {
        const std::string line =
            toTerminal("[provider tool " + call.name + "] " + serverToolSummary(call));
        out_ << (dim ? "\033[2m" + line + "\033[0m" : line) << "\n";
      }
    }
  }
  const auto end = std::chrono::steady_clock::now();
  out_ << "[" << result.usage.promptTokens << " prompt + " << result.usage.completionTokens
       << " completion = " << result.usage.totalTokens << " tokens";
  if (result.iterations > 1) out_ << " over " << result.iterations << " calls";
  if (firstToken && result.usage.completionTokens > 0 && end > *firstToken) {
    const double seconds = std::chrono::duration<double>(end - *firstToken).count();
    out_ << ", " << std::fixed << std::setprecision(0)
         << static_cast<double>(result.usage.completionTokens) / seconds << " tok/s"
         << std::defaultfloat;
  }
  if (result.finishReason == "max_iterations") out_ << "; stopped at --max-iterations";
  out_ << "]\n";
  const std::vector<Message> view = branch.manager.getMessages();
  const std::string priced = model.empty() ? clientModel_ : model;
  const std::optional<double> cost =
      prices_.cost(priced, std::span(view).subspan(std::min(viewBefore, view.size())));
  if (cost) {
    sessionCost_ += *cost;
  } else {
    ++unpricedTurns_;
  }
  // The offline demo costs nothing: no line about it.
  if (!mock_) {
    out_ << "[cost " << formatUsd(cost) << (cost ? "" : " (no price for " + priced + ")") << "]\n";
  }
  (void)start;
}

}  // namespace parley::cli
