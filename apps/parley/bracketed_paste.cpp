#include "bracketed_paste.hpp"

#include <editline/readline.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <string>
#include <string_view>

namespace parley::cli {
namespace {

constexpr std::string_view kPasteStart = "\033[200~";
constexpr std::string_view kPasteEnd = "\033[201~";
// How long the rest of an escape sequence may take to arrive after its ESC: a terminal sends a
// sequence in one write, so anything slower is a person pressing Escape.
constexpr int kSequenceWaitMs = 50;

std::deque<int> pending;  // characters read ahead, handed to libedit first
std::optional<Paste> lastPaste;
int interruptFd = -1;  // readable: the line ends (Ctrl-C at the prompt)

// `fd` (the terminal) opened again without blocking, or `fd` when it cannot be. A Ctrl-C
// flushes the terminal's input (ISIG without NOFLSH), so the bytes poll() saw may be gone when
// read() comes, and a blocking read would then sit past the interrupt until the next key. A
// second open file description, so the descriptor shared with the shell stays blocking.
int nonBlocking(int fd) {
  static const int copy = [fd] {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const int opened = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    return opened >= 0 ? opened : fd;
  }();
  return copy;
}

// One byte from `fd`; -1 at end of input, on an error, or once interruptFd is readable (its
// owner empties it after readline() returns). A signal's EINTR is retried.
int readByte(int fd) {
  const int source = interruptFd >= 0 ? nonBlocking(fd) : fd;
  for (;;) {
    if (interruptFd >= 0) {
      pollfd p[2] = {{fd, POLLIN, 0}, {interruptFd, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      if (p[1].revents != 0) return -1;
      // Without a second description, a read only when the flush left something to read.
      int waiting = 0;
      if (source == fd && (p[0].revents & POLLIN) != 0 && ::ioctl(fd, FIONREAD, &waiting) == 0 &&
          waiting == 0) {
        continue;
      }
    }
    unsigned char c = 0;
    const ssize_t n = ::read(source, &c, 1);
    if (n == 1) return c;
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return -1;
  }
}

bool byteWaiting(int fd, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeoutMs) > 0;
}

// A UTF-8 character from its lead byte on, the rest from next() (-1: none): the code point, or
// the lead byte alone when the sequence is not well formed (a byte that does not continue it is
// handed to unread(), to be read next).
template <class Next, class Unread>
int decodeUtf8(int lead, Next next, Unread unread) {
  const int length = lead < 0x80           ? 1
                     : (lead >> 5) == 0x06 ? 2
                     : (lead >> 4) == 0x0e ? 3
                     : (lead >> 3) == 0x1e ? 4
                                           : 1;
  int cp = length == 1 ? lead : lead & (0x7f >> length);
  for (int i = 1; i < length; ++i) {
    const int c = next();
    if (c < 0 || (c & 0xc0) != 0x80) {
      if (c >= 0) unread(c);
      return lead;
    }
    cp = (cp << 6) | (c & 0x3f);
  }
  return cp;
}

// Reads the paste's bytes up to its end marker (or end of input).
Paste readPaste(int fd) {
  Paste paste;
  std::string tail;  // a possible end marker being matched
  for (int c; (c = readByte(fd)) >= 0;) {
    tail.push_back(static_cast<char>(c));
    if (kPasteEnd.substr(0, tail.size()) == tail) {
      if (tail.size() == kPasteEnd.size()) break;
      continue;
    }
    for (char b : tail) {
      if (paste.text.size() < kMaxPasteBytes) {
        paste.text.push_back(b);
      } else {
        paste.truncated = true;
      }
    }
    tail.clear();
  }
  // Line breaks as "\n", whatever the terminal sent (\r, \r\n).
  std::string text;
  text.reserve(paste.text.size());
  for (size_t i = 0; i < paste.text.size(); ++i) {
    if (paste.text[i] == '\r') {
      text.push_back('\n');
      if (i + 1 < paste.text.size() && paste.text[i + 1] == '\n') ++i;
    } else {
      text.push_back(paste.text[i]);
    }
  }
  paste.text = std::move(text);
  return paste;
}

int readCharacter(FILE* stream) {
  if (!pending.empty()) {
    const int c = pending.front();
    pending.pop_front();
    return c;
  }
  const int fd = ::fileno(stream);
  const int first = readByte(fd);
  if (first < 0) return -1;
  if (first != 0x1b) {
    return decodeUtf8(
        first, [&] { return readByte(fd); }, [](int c) { pending.push_back(c); });
  }
  // ESC: the start of a paste, or a key's sequence (arrows...) for libedit to read as before.
  std::string seen(1, '\033');
  while (seen.size() < kPasteStart.size() && kPasteStart.substr(0, seen.size()) == seen &&
         byteWaiting(fd, kSequenceWaitMs)) {
    const int c = readByte(fd);
    if (c < 0) break;
    seen.push_back(static_cast<char>(c));
  }
  if (seen != kPasteStart) {
    for (size_t i = 1; i < seen.size(); ++i)
      pending.push_back(static_cast<unsigned char>(seen[i]));
    return 0x1b;
  }
  Paste paste = readPaste(fd);
  if (!paste.text.empty() && paste.text.back() == '\n') paste.text.pop_back();
  if (paste.text.find('\n') == std::string::npos && !paste.truncated) {
    // One line: typed in, to be edited like any other.
    std::deque<int> bytes;
    for (char b : paste.text)
      bytes.push_back(static_cast<unsigned char>(b));
    while (!bytes.empty()) {
      const int lead = bytes.front();
      bytes.pop_front();
      pending.push_back(decodeUtf8(
          lead,
          [&] {
            if (bytes.empty()) return -1;
            const int c = bytes.front();
            bytes.pop_front();
            return c;
          },
          [&](int c) { bytes.push_front(c); }));
    }
    return readCharacter(stream);
  }
  // Several lines: the line ends here, and the paste goes with it as one prompt.
  lastPaste = std::move(paste);
  return '\n';
}

void writeAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

void enableBracketedPaste(int fd) {
  writeAll(fd, "\033[?2004h");
}

void disableBracketedPaste(int fd) {
  writeAll(fd, "\033[?2004l");
}

void installPasteReader(int interrupt) {
  interruptFd = interrupt;
  rl_getc_function = readCharacter;
}

std::optional<Paste> takePaste() {
  std::optional<Paste> paste = std::move(lastPaste);
  lastPaste.reset();
  return paste;
}

}  // namespace parley::cli
