#include "terminal.hpp"

#include <unistd.h>

#include <cstdio>

namespace parley::cli {

namespace {

// A sequence longer than this is not one a terminal would act on as a whole; stop skipping so
// that a stray ESC cannot swallow the rest of a reply.
constexpr std::size_t kMaxSequenceBytes = 4096;

}  // namespace

TerminalFilter::TerminalFilter(int fd) : active_(::isatty(fd) == 1) {}

std::string TerminalFilter::operator()(std::string_view text) {
  if (!active_) return std::string(text);
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (state_ != State::Text && state_ != State::C1Lead && ++sequenceBytes_ > kMaxSequenceBytes) {
      state_ = State::Text;
    }
    switch (state_) {
      case State::C1Lead:
        state_ = State::Text;
        if (c >= 0x80 && c <= 0x9F) continue;  // U+0080..U+009F: dropped with its lead byte
        out.push_back('\xC2');
        [[fallthrough]];
      case State::Text:
        if (c == 0x1B) {
          state_ = State::Escape;
          sequenceBytes_ = 0;
        } else if (c == 0xC2) {
          state_ = State::C1Lead;
        } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
          // dropped
        } else {
          out.push_back(ch);
        }
        break;
      case State::Escape:
        if (c == '[') {
          state_ = State::Csi;
        } else if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') {
          state_ = State::String;  // OSC, DCS, SOS, PM, APC: up to BEL or ESC backslash
        } else if (c < 0x20 || c > 0x2F) {
          state_ = State::Text;  // a final byte: a two-byte sequence (ESC 7, ESC c...)
        }
        break;  // 0x20..0x2F: intermediate bytes, the sequence goes on
      case State::Csi:
        if (c >= 0x40 && c <= 0x7E) state_ = State::Text;
        break;
      case State::String:
        if (c == 0x07) {
          state_ = State::Text;
        } else if (c == 0x1B) {
          state_ = State::StringEscape;
        }
        break;
      case State::StringEscape:
        state_ = c == '\\' ? State::Text : State::String;
        break;
    }
  }
  return out;
}

std::string forTerminal(std::string_view text, int fd) {
  return TerminalFilter(fd)(text);
}

std::string preview(std::string_view text, std::size_t maxBytes) {
  std::string line;
  std::size_t keep = text.size();
  if (keep > maxBytes) {
    keep = maxBytes;
    while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80)
      --keep;
  }
  line.reserve(keep + 32);
  for (std::size_t i = 0; i < keep; ++i)
    line.push_back(text[i] == '\n' || text[i] == '\r' ? ' ' : text[i]);
  if (keep < text.size()) line += "... (" + std::to_string(text.size()) + " bytes)";
  return line;
}

std::string toolCallLine(const ToolCall& call, int fd) {
  return forTerminal(
      "[tool] " + call.name + " " + preview(call.arguments.empty() ? "{}" : call.arguments), fd);
}

std::string toolResultLine(const ToolResult& result, int fd) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1f", static_cast<double>(result.executionTime.count()) / 1000.0);
  return forTerminal(
      "[tool] " + result.name + " -> " + preview(result.content()) + " (" + ms + " ms)", fd);
}

std::string toolProgressLine(const ToolContext& call, const std::string& message, int fd) {
  return forTerminal("[tool] " + call.name + " ... " + preview(message), fd);
}

void showToolProgress(ConversationOptions& options, std::ostream& out, int fd, std::mutex& mutex) {
  if (!options.tools || options.toolExecutor) return;
  ToolExecutorOptions executorOptions;
  executorOptions.maxConcurrent = options.maxToolConcurrency;
  executorOptions.progress = [&out, fd, &mutex](const ToolContext& call, const std::string& message,
                                                const nlohmann::json&) {
    if (message.empty()) return;
    const std::string line = toolProgressLine(call, message, fd);
    std::lock_guard lock(mutex);
    out << line << "\n" << std::flush;
  };
  options.toolExecutor = std::make_shared<ToolExecutor>(options.tools, executorOptions);
}

}  // namespace parley::cli
