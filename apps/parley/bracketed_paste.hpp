// Bracketed paste for `parley chat`'s line editor: a terminal in bracketed-paste mode
// (ESC[?2004h) wraps pasted text in ESC[200~ ... ESC[201~. libedit knows neither marker (it
// beeps at the first and types the rest) and ends the line at each pasted newline, so a
// three-line paste became three prompts. Installed as libedit's character reader, this takes
// each paste whole: a paste without a line break is typed into the line as if keyed in (it can
// still be edited); a paste with line breaks ends the line being edited and is kept, to be joined
// to it as one prompt (takePaste()). Everything else, UTF-8 decoded, goes to libedit unchanged.
//
// Thread-safety: one terminal per process; call from the thread that runs readline() only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace parley::cli {

// A paste is capped: past this many bytes the rest is read and dropped (and takePaste() says so).
inline constexpr std::size_t kMaxPasteBytes = std::size_t{1} << 20;

// Turns bracketed paste on for the terminal on `fd` (before readline) and off again (after, and
// before the process exits: the shell must not get pastes wrapped in markers).
void enableBracketedPaste(int fd);
void disableBracketedPaste(int fd);

// Makes libedit read characters through the paste reader. libedit takes its reader when it sets
// itself up, on the first readline() or history call: call this before any. While `interruptFd`
// (if not -1) is readable, the reader reports end of input, so readline() returns at once: a
// Ctrl-C at the prompt (chat_interrupt.hpp) ends the line without a signal handler.
void installPasteReader(int interruptFd = -1);

struct Paste {
  std::string text;        // line breaks as "\n"; one trailing line break dropped
  bool truncated = false;  // longer than kMaxPasteBytes: only the start is in text
};

// The multi-line paste that ended the last line read, once; nullopt when the line ended with a
// key press.
std::optional<Paste> takePaste();

}  // namespace parley::cli
