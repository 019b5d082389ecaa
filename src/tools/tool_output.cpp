#include "tools/tool_output.hpp"

#include <algorithm>
#include <cstring>

namespace parley::detail {

namespace {

// Room kept for the marker line; it is about 110 bytes with 20-digit numbers.
constexpr std::size_t kMarkerRoom = 160;

bool isContinuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// `size`, or less so that text[0, size) does not end inside a UTF-8 character.
std::size_t wholeCharacters(std::string_view text, std::size_t size) {
  std::size_t lead = size;
  for (int i = 0; i < 4 && lead > 0; ++i) {
    --lead;
    if (!isContinuation(text[lead])) {
      const auto c = static_cast<unsigned char>(text[lead]);
      const std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      return lead + length > size ? lead : size;
    }
  }
  return size;  // not UTF-8 here anyway; repairUtf8() deals with it
}

// Bytes of the output's head and tail that fit beside the marker.
std::size_t keepBudget(std::size_t maxBytes) {
  return maxBytes > 2 * kMarkerRoom ? maxBytes - kMarkerRoom : maxBytes / 2;
}

// `head` is a prefix of an output of `total` bytes and `tail` a suffix of it (total >
// maxBytes); keeps what fits of each, never splitting a UTF-8 character.
std::string joinCut(std::string_view head, std::string_view tail, std::size_t total,
                    std::size_t maxBytes) {
  const std::size_t budget = keepBudget(maxBytes);
  std::size_t headKeep = std::min(head.size(), budget / 2);
  std::size_t tailKeep = std::min(tail.size(), budget - headKeep);
  // A character cut at the head's end is dropped whole; so is one cut at the tail's start.
  headKeep = wholeCharacters(head, headKeep);
  for (int i = 0; i < 3 && tailKeep > 0 && isContinuation(tail[tail.size() - tailKeep]); ++i)
    --tailKeep;
  const std::size_t cut = total - headKeep - tailKeep;
  std::string text;
  text.reserve(headKeep + tailKeep + kMarkerRoom);
  text.append(head.substr(0, headKeep));
  text += "\n[... " + std::to_string(cut) + " bytes cut here: the output was " +
          std::to_string(total) + " bytes, more than the limit of " + std::to_string(maxBytes) +
          " ...]\n";
  text.append(tail.substr(tail.size() - tailKeep));
  return text;
}

// Everything when nothing was cut, else joinCut().
std::string cutToFit(std::string_view head, std::string_view tail, std::size_t totalBytes,
                     std::size_t maxBytes) {
  if (totalBytes <= maxBytes && head.size() + tail.size() == totalBytes) {
    std::string text(head);
    text.append(tail);
    return text;
  }
  return joinCut(head, tail, totalBytes, maxBytes);
}

}  // namespace

std::size_t repairUtf8(std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::string out;
  std::size_t replaced = 0;
  std::size_t copied = 0;  // bytes of `text` before this are in `out` already
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The length of the sequence c starts and the range of its second byte (Unicode 15, table
    // 3-7): this excludes overlong forms, surrogates and code points past U+10FFFF.
    std::size_t need = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    }
    std::size_t length = 1;  // of the well-formed prefix; a maximal subpart when ill-formed
    bool ok = need > 0;
    for (std::size_t k = 1; ok && k <= need; ++k) {
      if (i + k >= n) {
        ok = false;
        break;
      }
      const unsigned char b = s[i + k];
      const bool inRange = k == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
      if (!inRange) {
        ok = false;
        break;
      }
      length = k + 1;
    }
    if (ok) {
      i += need + 1;
      continue;
    }
    out.append(text, copied, i - copied);
    out += "\xEF\xBF\xBD";  // U+FFFD
    ++replaced;
    i += length;
    copied = i;
  }
  if (replaced == 0) return 0;
  out.append(text, copied, std::string::npos);
  text = std::move(out);
  return replaced;
}

bool fitToolOutput(std::string& text, std::size_t maxBytes) {
  const std::size_t replaced = repairUtf8(text);
  if (replaced > 0) {
    text += "\n[parley: the output was not valid UTF-8: " + std::to_string(replaced) +
            " invalid byte sequence(s) replaced with U+FFFD]";
  }
  if (text.size() <= maxBytes) return replaced > 0;
  text = joinCut(text, text, text.size(), maxBytes);
  return true;
}

OutputCollector::OutputCollector(std::size_t maxBytes)
    : maxBytes_(maxBytes), headCap_(keepBudget(maxBytes) / 2), ringCap_(maxBytes - headCap_) {}

void OutputCollector::append(std::string_view bytes) {
  total_ += bytes.size();
  if (head_.size() < headCap_) {
    const std::size_t n = std::min(bytes.size(), headCap_ - head_.size());
    head_.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  if (bytes.empty() || ringCap_ == 0) return;
  if (bytes.size() >= ringCap_) {
    ring_.assign(bytes.substr(bytes.size() - ringCap_));
    ringStart_ = 0;
    return;
  }
  if (ring_.size() < ringCap_) {
    const std::size_t n = std::min(bytes.size(), ringCap_ - ring_.size());
    ring_.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  while (!bytes.empty()) {  // the ring is full: overwrite its oldest bytes
    const std::size_t n = std::min(bytes.size(), ringCap_ - ringStart_);
    std::memcpy(ring_.data() + ringStart_, bytes.data(), n);
    ringStart_ = (ringStart_ + n) % ringCap_;
    bytes.remove_prefix(n);
  }
}

std::string OutputCollector::text() const {
  std::string tail = ring_.substr(ringStart_);
  tail.append(ring_, 0, ringStart_);
  return cutToFit(head_, tail, total_, maxBytes_);
}

}  // namespace parley::detail
