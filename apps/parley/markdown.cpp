#include "markdown.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

#include "parley/errors.hpp"

namespace parley::cli {
namespace {

// Emphasis nested deeper than this, or a closing delimiter further away than this, is left as
// typed: a reply cannot make rendering recurse deeply or search quadratically.
constexpr int kMaxInlineDepth = 8;
constexpr size_t kMaxSpanBytes = 4096;

// A reply that opens as a JSON document ({..., [{..., ["...", []) rather than as prose.
bool looksLikeJson(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string_view::npos) return false;
  if (line[first] == '{') return true;
  if (line[first] != '[') return false;
  const size_t next = line.find_first_not_of(" \t", first + 1);
  return next == std::string_view::npos || line[next] == '{' || line[next] == '"' ||
         line[next] == ']';
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// The line without up to three spaces of indentation (more is indented code or a nested item).
std::string_view outdented(std::string_view line) {
  size_t n = 0;
  while (n < 3 && n < line.size() && line[n] == ' ')
    ++n;
  return line.substr(n);
}

bool isSpace(char c) {
  return c == ' ' || c == '\t';
}

bool isWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || (static_cast<unsigned char>(c) >= 0x80);
}

// A fence: three or more backticks or tildes at the start; returns the run ("" if none).
std::string fenceOf(std::string_view line) {
  line = outdented(line);
  if (line.empty() || (line[0] != '`' && line[0] != '~')) return "";
  size_t n = 0;
  while (n < line.size() && line[n] == line[0])
    ++n;
  return n >= 3 ? std::string(line.substr(0, n)) : "";
}

bool isRule(std::string_view line) {
  line = trimmed(line);
  if (line.size() < 3 || (line[0] != '-' && line[0] != '*' && line[0] != '_')) return false;
  size_t marks = 0;
  for (char c : line) {
    if (c == line[0]) {
      ++marks;
    } else if (!isSpace(c)) {
      return false;
    }
  }
  return marks >= 3;
}

// An ATX heading ("## text ##"): its level and text, or level 0.
struct Heading {
  size_t level = 0;
  std::string_view text;
};

Heading headingOf(std::string_view body) {
  size_t level = 0;
  while (level < body.size() && body[level] == '#')
    ++level;
  if (level == 0 || level > 6 || (level < body.size() && !isSpace(body[level]))) return {};
  std::string_view text = trimmed(body.substr(level));
  while (!text.empty() && text.back() == '#')
    text.remove_suffix(1);  // closing #s
  return {level, trimmed(text)};
}

// A list item: indentation, a marker (- * + or 1. 1)), a space, the text. Empty marker: none.
struct ListItem {
  size_t indent = 0;
  std::string_view marker;
  std::string_view text;
  bool bullet() const {
    return marker.size() == 1 && !std::isdigit(static_cast<unsigned char>(marker[0]));
  }
};

ListItem listItemOf(std::string_view line) {
  size_t indent = 0;
  while (indent < line.size() && line[indent] == ' ')
    ++indent;
  size_t end = indent;
  if (end < line.size() && (line[end] == '-' || line[end] == '*' || line[end] == '+')) {
    ++end;
  } else {
    while (end < line.size() && end - indent < 9 &&
           std::isdigit(static_cast<unsigned char>(line[end])))
      ++end;
    if (end > indent && end < line.size() && (line[end] == '.' || line[end] == ')')) {
      ++end;
    } else {
      end = indent;
    }
  }
  if (end == indent || end >= line.size() || !isSpace(line[end])) return {};
  return {indent, line.substr(indent, end - indent), trimmed(line.substr(end))};
}

// Whether a link may point there from an HTML page: http(s) only.
bool isWebAddress(std::string_view url) {
  auto startsWith = [&](std::string_view scheme) {
    if (url.size() <= scheme.size()) return false;
    for (size_t i = 0; i < scheme.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(url[i])) != scheme[i]) return false;
    }
    return true;
  };
  if (!startsWith("http://") && !startsWith("https://")) return false;
  return std::none_of(url.begin(), url.end(),
                      [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; });
}

uint32_t decodeAt(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  i += n;
  return cp;
}

int widthOf(uint32_t cp) {
  if ((cp >= 0x0300 && cp <= 0x036f) || (cp >= 0x200b && cp <= 0x200f) ||
      (cp >= 0xfe00 && cp <= 0xfe0f)) {
    return 0;  // combining marks, zero-width spaces, variation selectors
  }
  const bool wide = (cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0xa4cf) ||
                    (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
                    (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
                    (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
                    (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd);
  return wide ? 2 : 1;
}

}  // namespace

std::string escapeHtml(std::string_view text) {
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

size_t displayWidth(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\033' && i + 1 < text.size() && text[i + 1] == '[') {
      i += 2;
      while (i < text.size() && !(text[i] >= 0x40 && text[i] <= 0x7e))
        ++i;
      ++i;
      continue;
    }
    width += static_cast<size_t>(widthOf(decodeAt(text, i)));
  }
  return width;
}

std::string MarkdownRenderer::feed(std::string_view chunk) {
  pending_.append(chunk);
  std::string out;
  size_t start = 0;
  for (size_t newline; (newline = pending_.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    out += renderLine(std::string_view(pending_).substr(start, newline - start));
    if (!style_.html) out += '\n';  // an HTML line brings its own
  }
  pending_.erase(0, start);
  return out;
}

std::string MarkdownRenderer::preview() const {
  MarkdownRenderer copy = *this;
  return copy.finish();
}

std::string MarkdownRenderer::finish() {
  std::string out = pending_.empty() ? "" : renderLine(pending_);
  pending_.clear();
  if (style_.html) out += inCode_ ? "</code></pre>\n" : closeBlock();
  inCode_ = false;
  fence_.clear();
  return out;
}

namespace {

struct BlockTags {
  const char* open;
  const char* close;
};

BlockTags tagsOf(MarkdownRenderer::Block block) {
  using Block = MarkdownRenderer::Block;
  switch (block) {
    case Block::Paragraph:
      return {"<p>", "</p>\n"};
    case Block::Bullets:
      return {"<ul>\n", "</ul>\n"};
    case Block::Numbers:
      return {"<ol>\n", "</ol>\n"};
    case Block::Quote:
      return {"<blockquote>", "</blockquote>\n"};
    case Block::Table:
      return {"<pre class=\"table\">", "</pre>\n"};
    case Block::None:
      break;
  }
  return {"", ""};
}

}  // namespace

std::string MarkdownRenderer::closeBlock() {
  std::string out = tagsOf(block_).close;
  block_ = Block::None;
  return out;
}

std::string MarkdownRenderer::openBlock(Block block) {
  if (block_ == block) return "";
  std::string out = closeBlock();
  out += tagsOf(block).open;
  block_ = block;
  return out;
}

std::string MarkdownRenderer::htmlLine(std::string_view line) {
  if (inCode_) {
    const std::string fence = fenceOf(line);
    if (!fence.empty() && fence[0] == fence_[0] && fence.size() >= fence_.size() &&
        trimmed(outdented(line).substr(fence.size())).empty()) {
      inCode_ = false;
      return "</code></pre>\n";
    }
    return escapeHtml(line) + "\n";
  }
  if (const std::string fence = fenceOf(line); !fence.empty()) {
    inCode_ = true;
    fence_ = fence;
    // The info string names the language: kept as a class, escaped.
    const std::string_view info = trimmed(outdented(line).substr(fence.size()));
    const std::string_view language = info.substr(0, info.find_first_of(" \t{"));
    std::string out = closeBlock() + "<pre><code";
    if (!language.empty()) out += " class=\"language-" + escapeHtml(language) + "\"";
    return out + ">";
  }
  if (trimmed(line).empty()) return closeBlock();
  if (isRule(line)) return closeBlock() + "<hr>\n";
  const std::string_view body = outdented(line);
  if (body.front() == '|') return openBlock(Block::Table) + escapeHtml(line) + "\n";
  if (const Heading heading = headingOf(body); heading.level > 0) {
    // Two levels down: the page's own h1 and h2 are the thread's title and its turns.
    const std::string tag = "h" + std::to_string(std::min<size_t>(heading.level + 2, 6));
    return closeBlock() + "<" + tag + ">" + inlineText(heading.text) + "</" + tag + ">\n";
  }
  if (body.front() == '>') {
    std::string_view text = body.substr(1);
    if (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    return openBlock(Block::Quote) + inlineText(trimmed(text)) + "\n";
  }
  if (const ListItem item = listItemOf(line); !item.marker.empty()) {
    return openBlock(item.bullet() ? Block::Bullets : Block::Numbers) + "<li>" +
           inlineText(item.text) + "</li>\n";
  }
  return openBlock(Block::Paragraph) + inlineText(trimmed(line)) + "\n";
}

std::string MarkdownRenderer::renderLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (style_.html) return htmlLine(line);
  if (!started_ && !trimmed(line).empty()) {
    started_ = true;
    verbatim_ = looksLikeJson(line);
  }
  if (verbatim_) return std::string(line);
  const bool color = style_.color;
  auto styled = [color](std::string_view text, const char* on, const char* off) {
    return color ? std::string(on) + std::string(text) + off : std::string(text);
  };
  if (inCode_) {
    const std::string fence = fenceOf(line);
    if (!fence.empty() && fence[0] == fence_[0] && fence.size() >= fence_.size() &&
        trimmed(outdented(line).substr(fence.size())).empty()) {
      inCode_ = false;
      return styled(line, "\033[2m", "\033[22m");
    }
    return styled(line, "\033[36m", "\033[39m");
  }
  if (const std::string fence = fenceOf(line); !fence.empty()) {
    inCode_ = true;
    fence_ = fence;
    return styled(line, "\033[2m", "\033[22m");
  }
  if (trimmed(line).empty()) return "";
  if (isRule(line)) {
    const size_t n = style_.width == 0 ? 40 : std::min<size_t>(style_.width, 40);
    std::string rule;
    for (size_t i = 0; i < n; ++i)
      rule += "\u2500";
    return styled(rule, "\033[2m", "\033[22m");
  }
  const std::string_view body = outdented(line);
  if (body.front() == '|') return std::string(line);  // a table row, as written
  if (const Heading heading = headingOf(body); heading.level > 0) {
    const std::string rendered = wrapped(inlineText(heading.text), "", "");
    return heading.level == 1 ? styled(rendered, "\033[1;4m", "\033[22;24m")
                              : styled(rendered, "\033[1m", "\033[22m");
  }
  if (body.front() == '>') {
    std::string_view text = body.substr(1);
    if (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    const std::string bar = styled("\u2502", "\033[2m", "\033[22m") + " ";
    return wrapped(inlineText(trimmed(text)), bar, bar);
  }
  if (const ListItem item = listItemOf(line); !item.marker.empty()) {
    std::string marker(item.marker);
    const bool bullet = item.bullet();
    if (bullet) marker = color ? "\u2022" : "-";
    const std::string first = std::string(item.indent, ' ') +
                              (color && bullet ? styled(marker, "\033[2m", "\033[22m") : marker) +
                              " ";
    const std::string rest(item.indent + displayWidth(marker) + 1, ' ');
    return wrapped(inlineText(item.text), first, rest);
  }
  return wrapped(inlineText(trimmed(line)), "", "");
}

std::string MarkdownRenderer::inlineText(std::string_view text) const {
  // One pass over the text. Where a closing delimiter can be does not depend on the opener, so
  // each search resumes where the last one of its kind gave up: linear in the text, whatever
  // the reply; emphasis recurses at most kMaxInlineDepth levels.
  struct Inline {
    bool color;
    bool html;
    std::string operator()(std::string_view s, int depth) const {
      std::string out;
      // A style's opening or closing mark: an SGR code on a colour terminal, an element in HTML.
      auto mark = [&](const char* sgr, const char* element) {
        if (html) {
          out += element;
        } else if (color) {
          out += sgr;
        }
      };
      // Text as typed: escaped in HTML, before any element is made.
      auto put = [&](std::string_view typed) {
        out += html ? escapeHtml(typed) : std::string(typed);
      };
      auto runAt = [&](size_t j, char c, size_t run) {
        if (j + run > s.size()) return false;
        for (size_t k = 0; k < run; ++k) {
          if (s[j + k] != c) return false;
        }
        return j + run == s.size() || s[j + run] != c;
      };
      size_t searched[4][4] = {};  // [` * _ ~][run]: no closer before this offset
      auto kind = [](char c) { return c == '`' ? 0 : c == '*' ? 1 : c == '_' ? 2 : 3; };
      size_t labelAt = 0;  // the next "](" at or after this search's start, or npos
      bool labelKnown = false;
      for (size_t i = 0; i < s.size();) {
        const char c = s[i];
        if (c == '\\' && i + 1 < s.size() && std::ispunct(static_cast<unsigned char>(s[i + 1]))) {
          put(s.substr(i + 1, 1));
          i += 2;
          continue;
        }
        const bool emphasis = (c == '*' || c == '_' || c == '~') && depth < kMaxInlineDepth;
        if (c == '`' || emphasis) {
          size_t run = 0;
          while (i + run < s.size() && s[i + run] == c && run < 3)
            ++run;
          bool opens = i + run < s.size();
          if (c != '`') {
            opens = opens && !isSpace(s[i + run]) &&
                    (c != '_' || i == 0 || !isWordChar(s[i - 1])) && (c != '~' || run == 2);
          }
          size_t close = std::string_view::npos;
          if (opens) {
            const size_t limit = std::min(s.size(), i + run + kMaxSpanBytes);
            size_t& from = searched[kind(c)][run];
            for (size_t j = std::max(from, i + run + (c == '`' ? 0 : 1)); j + run <= limit; ++j) {
              if (!runAt(j, c, run)) continue;
              if (c == '`' || (!isSpace(s[j - 1]) &&
                               (c != '_' || j + run == s.size() || !isWordChar(s[j + run])))) {
                close = j;
                break;
              }
            }
            if (close == std::string_view::npos) from = std::max(from, limit);
          }
          if (close == std::string_view::npos) {
            put(s.substr(i, run));
            i += run;
            continue;
          }
          if (c == '`') {
            std::string_view code = s.substr(i + run, close - i - run);
            if (code.size() >= 2 && code.front() == ' ' && code.back() == ' ') {
              code = code.substr(1, code.size() - 2);
            }
            mark("\033[36m", "<code>");
            put(code);
            mark("\033[39m", "</code>");
          } else {
            const std::string inner = (*this)(s.substr(i + run, close - i - run), depth + 1);
            // Its marks: {SGR on, HTML on, SGR off, HTML off}.
            static constexpr std::array<std::array<const char*, 4>, 4> kEmphasis = {{
                {"\033[9m", "<del>", "\033[29m", "</del>"},
                {"\033[3m", "<em>", "\033[23m", "</em>"},
                {"\033[1m", "<strong>", "\033[22m", "</strong>"},
                {"\033[1;3m", "<strong><em>", "\033[22;23m", "</em></strong>"},
            }};
            const auto& marks = kEmphasis[c == '~' ? 0 : std::min<size_t>(run, 3)];
            mark(marks[0], marks[1]);
            out += inner;
            mark(marks[2], marks[3]);
          }
          i = close + run;
          continue;
        }
        if (c == '[') {
          if (!labelKnown || (labelAt != std::string_view::npos && labelAt <= i)) {
            labelAt = s.find("](", i + 1);
            labelKnown = true;
          }
          const size_t label = labelAt;
          if (label != std::string_view::npos && label - i < kMaxSpanBytes &&
              s.substr(i + 1, label - i - 1).find('[') == std::string_view::npos) {
            const size_t close = s.find(')', label + 2);
            if (close != std::string_view::npos && close - label < kMaxSpanBytes) {
              const std::string_view url = s.substr(label + 2, close - label - 2);
              const std::string_view labelText = s.substr(i + 1, label - i - 1);
              const std::string shown = (*this)(labelText, depth + 1);
              // HTML links only to the web: a javascript: or data: address stays text.
              if (html && isWebAddress(url)) {
                out += "<a href=\"" + escapeHtml(url) + "\" rel=\"nofollow noopener noreferrer\">";
                out += shown;
                out += "</a>";
              } else {
                mark("\033[4m", "");
                out += shown;
                mark("\033[24m", "");
                if (labelText != url) {
                  out += " (";
                  mark("\033[2m", "");
                  put(url);
                  mark("\033[22m", "");
                  out += ")";
                }
              }
              i = close + 1;
              continue;
            }
          }
        }
        put(s.substr(i, 1));
        ++i;
      }
      return out;
    }
  };
  return Inline{style_.color && !style_.html, style_.html}(text, 0);
}

std::string MarkdownRenderer::wrapped(const std::string& text, const std::string& first,
                                      const std::string& rest) const {
  if (style_.width == 0) return first + text;
  std::string out;
  std::string line = first;
  size_t width = displayWidth(first);
  bool hasWord = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t space = text.find(' ', start);
    if (space == std::string::npos) space = text.size();
    const std::string_view word = std::string_view(text).substr(start, space - start);
    start = space + 1;
    if (word.empty()) continue;
    const size_t w = displayWidth(word);
    if (hasWord && width + 1 + w > style_.width) {
      out += line + "\n";
      line = rest;
      width = displayWidth(rest);
      hasWord = false;
    }
    if (hasWord) {
      line += ' ';
      ++width;
    }
    line.append(word);
    width += w;
    hasWord = true;
  }
  return out + line;
}

std::string replyFormat(const std::string& given, int fd, const std::string& option) {
  if (given.empty()) return ::isatty(fd) ? "text" : "markdown";
  if (given == "text" || given == "markdown" || given == "json") return given;
  throw ValidationError(option, "must be text, markdown or json, got \"" + given + "\"");
}

bool colorWanted(const std::string& mode, int fd) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  if (mode != "auto") {
    throw ValidationError("--color", "must be auto, always or never, got \"" + mode + "\"");
  }
  const char* noColor = std::getenv("NO_COLOR");
  return ::isatty(fd) && (noColor == nullptr || *noColor == '\0');
}

std::string LiveMarkdown::takeBack() {
  if (shownRows_ == 0) return "";
  std::string out = "\r";
  if (shownRows_ > 1) out += "\033[" + std::to_string(shownRows_ - 1) + "A";
  shownRows_ = 0;
  return out + "\033[J";
}

std::string LiveMarkdown::feed(std::string_view chunk) {
  std::string done = renderer_.feed(chunk);
  if (columns_ == 0) return done;
  const std::string partial = renderer_.preview();
  if (done.empty() && partial.empty()) return "";
  std::string out = takeBack() + done + partial;
  // The rows it takes: each of its lines, wrapped by the terminal when wider than it.
  size_t start = 0;
  while (!partial.empty()) {
    const size_t end = partial.find('\n', start);
    const size_t width = displayWidth(std::string_view(partial).substr(
        start, end == std::string::npos ? std::string::npos : end - start));
    shownRows_ += std::max<size_t>(1, (width + columns_ - 1) / columns_);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string LiveMarkdown::finish() {
  return takeBack() + renderer_.finish();
}

size_t terminalWidth(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n >= 20 && n <= 1000) return static_cast<size_t>(n);
  }
  return 80;
}

}  // namespace parley::cli
