// Replies rendered for reading: the Markdown a model writes (headings, emphasis, inline code,
// code blocks, lists, quotes, links, rules) shown with terminal styles, or as plain text with
// the markers taken out, and wrapped at word boundaries. It works line by line, so a streamed
// reply is rendered as its lines complete; the text fed in has already been through
// TerminalFilter (terminal.hpp), and the only escape sequences in the output are its own styles.
//
// Code blocks and tables are never wrapped or changed (but for their colour); a word longer than
// the width gets a line of its own. Widths are counted in characters, East Asian wide characters
// and emoji as two.
//
// Thread-safety: a renderer belongs to one reply; not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace parley::cli {

struct MarkdownStyle {
  bool color = false;  // terminal styles (SGR); false: plain text
  size_t width = 80;   // wrap paragraphs, list items and quotes here; 0: never wrap
  // HTML elements instead of terminal text (color and width are then ignored): every piece of
  // text is escaped before any element is made; headings go two levels down (h3..h6, under a
  // page's h1 and h2); links are made only to http(s) addresses (anything else stays text);
  // tables stay as typed in a <pre class="table">. feed() returns whole lines of HTML and
  // finish() closes whatever element is still open.
  bool html = false;
};

class MarkdownRenderer {
 public:
  // The HTML block a line is in (html only).
  enum class Block { None, Paragraph, Bullets, Numbers, Quote, Table };

  explicit MarkdownRenderer(MarkdownStyle style) : style_(style) {}

  // The rendering of the lines `chunk` completes; the rest is held until its newline.
  std::string feed(std::string_view chunk);
  // The rendering of what is held (the last line, without its newline).
  std::string finish();
  // What finish() would return now, nothing changed.
  std::string preview() const;

 private:
  std::string renderLine(std::string_view line);
  std::string htmlLine(std::string_view line);
  std::string openBlock(Block block);  // closes the open one first; "" if `block` is open
  std::string closeBlock();
  std::string inlineText(std::string_view text) const;
  std::string wrapped(const std::string& text, const std::string& first,
                      const std::string& rest) const;

  MarkdownStyle style_;
  std::string pending_;
  bool inCode_ = false;
  std::string fence_;  // the fence that opened the code block: ``` or ~~~ (and its length)
  Block block_ = Block::None;
  bool started_ = false;   // a line with text was seen
  bool verbatim_ = false;  // the reply is JSON: shown as written (Markdown would eat its \\)
};

// A streamed reply on a terminal: MarkdownRenderer renders whole lines, so a reply that is one
// long paragraph showed nothing until its end. This also shows the line in progress, rendered
// as if it ended there, and when more of it arrives takes it back (cursor to its first row,
// erase to the end of the screen) and shows it again; the lines that complete stay for good.
// Its output is for a terminal `columns` wide (it counts the rows the line in progress took);
// `columns` 0: not a terminal, only whole lines are shown (as MarkdownRenderer does).
class LiveMarkdown {
 public:
  LiveMarkdown(MarkdownStyle style, size_t columns) : renderer_(style), columns_(columns) {}

  std::string feed(std::string_view chunk);
  std::string finish();

 private:
  std::string takeBack();  // erases the line in progress shown; "" when none is

  MarkdownRenderer renderer_;
  size_t columns_;
  size_t shownRows_ = 0;  // rows the line in progress takes on the screen
};

// The output format of a reply: "text" (rendered), "markdown" (as the model wrote it) or "json";
// "" chooses text on a terminal and markdown elsewhere. ValidationError names `option` for
// anything else.
std::string replyFormat(const std::string& given, int fd, const std::string& option);

// Colour for `fd` by --color: "always", "never", or "auto" (a terminal, and NO_COLOR unset or
// empty: https://no-color.org). ValidationError for anything else.
bool colorWanted(const std::string& mode, int fd);

// The width to wrap at on `fd`: the terminal's, else $COLUMNS, else 80.
size_t terminalWidth(int fd);

// Escapes & < > " ' for HTML text and attributes.
std::string escapeHtml(std::string_view text);

// Characters a terminal shows for `text` (styles count nothing; wide characters two).
size_t displayWidth(std::string_view text);

}  // namespace parley::cli
