// What a tool hands back, made fit for a model: at most a cap of bytes (the head and the tail,
// with a marker saying what was cut) and valid UTF-8 (bad bytes become U+FFFD). The executor
// applies it to every result (ToolOptions::maxResultBytes); a command tool also reads its
// process's output through OutputCollector, so a tool printing a gigabyte costs a few times the
// cap in memory, not the gigabyte. Internal: not installed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace parley::detail {

// Replaces every maximal ill-formed subsequence of `text` with U+FFFD (as a WHATWG decoder
// reads it) and returns how many were replaced; valid UTF-8 is left untouched.
std::size_t repairUtf8(std::string& text);

// The tool message's text for a result text: repaired (with a note saying so) and cut to at
// most maxBytes: its head, a marker line saying how much was cut, its tail; cuts fall between
// UTF-8 characters. Returns false (and leaves `text` as it was) when nothing had to change.
bool fitToolOutput(std::string& text, std::size_t maxBytes);

// Collects a stream of bytes in bounded memory: the first and the last bytes of it, enough for
// cutToFit(..., maxBytes), and the total seen.
class OutputCollector {
 public:
  explicit OutputCollector(std::size_t maxBytes);
  void append(std::string_view bytes);
  std::size_t totalBytes() const noexcept { return total_; }
  bool truncated() const noexcept { return total_ > maxBytes_; }
  // Everything when it fit, else head + marker + tail (at most maxBytes), as fitToolOutput().
  std::string text() const;

 private:
  std::size_t maxBytes_;
  std::size_t headCap_;
  std::string head_;
  std::string ring_;  // the last bytes after the head, as a ring of ringCap_ bytes
  std::size_t ringCap_;
  std::size_t ringStart_ = 0;  // where the oldest byte is, once the ring is full
  std::size_t total_ = 0;
};

}  // namespace parley::detail
