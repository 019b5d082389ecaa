// What the command line shows on a terminal of text that came from outside: a server's reply
// and errors, a tool's output, stored messages. A terminal obeys the escape sequences in it
// (move the cursor, retitle the window, rewrite what was printed, even answer back), so text a
// server chose never reaches one with them; the bytes themselves are kept as they came in the
// stores and in --json output. Also: the short one-line previews of tool calls and results.
#pragma once

#include <cstddef>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>

#include "parley/conversation_manager.hpp"
#include "parley/tools.hpp"

namespace parley::cli {

// Removes control sequences from text bound for a terminal: ESC sequences (CSI such as colours
// and cursor moves, OSC such as window titles and hyperlinks, DCS/APC/PM/SOS strings), the C0
// controls other than newline and tab (carriage return, backspace, bell...), DEL, and the C1
// controls U+0080..U+009F. Keeps state between calls, so a sequence split across two chunks of
// a stream is removed whole. Passes everything through when its stream is not a terminal.
class TerminalFilter {
 public:
  // `fd`: the descriptor the text goes to (STDOUT_FILENO, STDERR_FILENO); filters when it is a
  // terminal.
  explicit TerminalFilter(int fd);
  // Always filters.
  TerminalFilter() = default;

  std::string operator()(std::string_view text);

 private:
  enum class State { Text, Escape, Csi, String, StringEscape, C1Lead };
  bool active_ = true;
  State state_ = State::Text;
  std::size_t sequenceBytes_ = 0;  // of the sequence being skipped
};

// `text` for a terminal, on its own: TerminalFilter(fd)(text).
std::string forTerminal(std::string_view text, int fd);

// One line of at most about `maxBytes`: line breaks become spaces, and a longer text is cut at
// a character boundary and ends in "... (N bytes)".
std::string preview(std::string_view text, std::size_t maxBytes = 200);

// "[tool] NAME ARGS" and "[tool] NAME -> RESULT (T ms)" as `parley ask` and `parley chat` show
// them: previews, filtered for a terminal on `fd`.
std::string toolCallLine(const ToolCall& call, int fd);
std::string toolResultLine(const ToolResult& result, int fd);
// "[tool] NAME ... MESSAGE": a running call's report (ToolContext::progress: a remote agent's
// status, an artifact's chunk), a preview.
std::string toolProgressLine(const ToolContext& call, const std::string& message, int fd);
// Gives the conversation a tool executor (its concurrency kept) whose calls' reports are shown on
// `out` as toolProgressLine()s, each written whole under `mutex` (calls run on other threads).
// Reports without a message are not shown. A conversation without tools is left as it is.
void showToolProgress(ConversationOptions& options, std::ostream& out, int fd, std::mutex& mutex);

}  // namespace parley::cli
