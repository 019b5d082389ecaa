#include "parley/sse.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parley/errors.hpp"

namespace parley {
namespace {

struct Seen {
  std::string type;
  std::string data;
  std::string id;
  std::optional<int64_t> retry;
  bool operator==(const Seen&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
  return os << "{" << s.type << ", \"" << s.data << "\", id=" << s.id
            << ", retry=" << (s.retry ? std::to_string(*s.retry) : "-") << "}";
}

std::vector<Seen> decodePieces(const std::vector<std::string_view>& pieces,
                               SseDecoder::Options options = {}) {
  SseDecoder decoder(options);
  std::vector<Seen> seen;
  auto handler = [&seen](const SseEvent& e) {
    seen.push_back({e.type, e.data, e.lastEventId, e.retry});
    return true;
  };
  for (auto piece : pieces)
    decoder.feed(piece, handler);
  decoder.finish(handler);
  return seen;
}

std::string withLineEnding(std::string_view text, std::string_view ending) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out.append(ending);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

struct Vector {
  const char* name;
  std::string input;  // written with "\n"; run with LF, CRLF and CR
  std::vector<Seen> expected;
};

const std::vector<Vector>& vectors() {
  static const std::vector<Vector> v = {
      {"single event", "data: hello\n\n", {{"message", "hello", "", {}}}},
      {"no space after colon", "data:hello\n\n", {{"message", "hello", "", {}}}},
      {"only one space removed", "data:  two\n\n", {{"message", " two", "", {}}}},
      {"multi-line data", "data: a\ndata: b\ndata:\n\n", {{"message", "a\nb\n", "", {}}}},
      {"comments ignored",
       ": keep-alive\ndata: x\n: more\n\n: tail\n\n",
       {{"message", "x", "", {}}}},
      {"event, id and retry",
       "event: delta\nid: 7\nretry: 1500\ndata: {\"a\":1}\n\ndata: next\n\n",
       {{"delta", "{\"a\":1}", "7", 1500}, {"message", "next", "7", {}}}},
      {"bad retry ignored", "retry: 12x\ndata: d\n\n", {{"message", "d", "", {}}}},
      {"field without colon", "data\n\n", {{"message", "", "", {}}}},
      {"unknown field ignored", "foo: bar\ndata: d\n\n", {{"message", "d", "", {}}}},
      {"block without data dispatches nothing",
       "event: ping\n\ndata: d\n\n",
       {{"message", "d", "", {}}}},
      {"leading BOM stripped",
       "\xEF\xBB\xBF"
       "data: b\n\n",
       {{"message", "b", "", {}}}},
      {"UTF-8 text",
       "data: h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80\n\n",
       {{"message", "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80", "", {}}}},
      {"incomplete last event discarded", "data: one\n\ndata: cut", {{"message", "one", "", {}}}},
      {"openai stream",
       "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"
       "data: {\"choices\":[],\"usage\":{}}\n\ndata: [DONE]\n\n",
       {{"message", "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}", "", {}},
        {"message", "{\"choices\":[],\"usage\":{}}", "", {}},
        {"message", "[DONE]", "", {}}}},
  };
  return v;
}

// Every vector, every line ending, split into two pieces at every byte and fed one byte at a
// time: the events never depend on how the bytes arrived.
TEST(SseDecoder, VectorsAtEverySplitPointAndLineEnding) {
  for (const Vector& v : vectors()) {
    for (std::string_view ending : {"\n", "\r\n", "\r"}) {
      const std::string input = withLineEnding(v.input, ending);
      SCOPED_TRACE(std::string(v.name) + " with ending " +
                   (ending == "\n"     ? "LF"
                    : ending == "\r\n" ? "CRLF"
                                       : "CR"));
      EXPECT_EQ(decodePieces({input}), v.expected);
      for (size_t split = 0; split <= input.size(); ++split) {
        std::string_view all(input);
        ASSERT_EQ(decodePieces({all.substr(0, split), all.substr(split)}), v.expected)
            << "split at byte " << split;
      }
      std::vector<std::string_view> bytes;
      for (size_t i = 0; i < input.size(); ++i)
        bytes.push_back(std::string_view(input).substr(i, 1));
      EXPECT_EQ(decodePieces(bytes), v.expected) << "one byte at a time";
    }
  }
}

TEST(SseDecoder, CrLfSplitAcrossReads) {
  // "\r" ends the first piece; the "\n" starting the second belongs to it, not a blank line.
  EXPECT_EQ(decodePieces({"data: a\r", "\ndata: b\r\n\r\n"}),
            (std::vector<Seen>{{"message", "a\nb", "", {}}}));
}

TEST(SseDecoder, MixedLineEndings) {
  EXPECT_EQ(decodePieces({"data: a\rdata: b\r\ndata: c\n\r\n"}),
            (std::vector<Seen>{{"message", "a\nb\nc", "", {}}}));
}

TEST(SseDecoder, BomOnlyAtTheStart) {
  // A BOM later in the stream is data, and a partial BOM at the start is not stripped.
  EXPECT_EQ(decodePieces({"data: \xEF\xBB\xBFx\n\n"}),
            (std::vector<Seen>{{"message", "\xEF\xBB\xBFx", "", {}}}));
  EXPECT_EQ(decodePieces({"\xEF\xBB", "data: y\n\n"}), std::vector<Seen>{});
  EXPECT_EQ(decodePieces({"\xEF", "\xBB", "\xBF", "data: y\n\n"}),
            (std::vector<Seen>{{"message", "y", "", {}}}));
}

TEST(SseDecoder, IdPersistsAcrossEvents) {
  EXPECT_EQ(decodePieces({"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"}),
            (std::vector<Seen>{
                {"message", "a", "1", {}}, {"message", "b", "1", {}}, {"message", "c", "", {}}}));
}

TEST(SseDecoder, PendingEventAtEndOnlyWhenAsked) {
  SseDecoder::Options lenient;
  lenient.dispatchPendingAtEnd = true;
  EXPECT_EQ(decodePieces({"data: [DONE]\n"}), std::vector<Seen>{});
  EXPECT_EQ(decodePieces({"data: [DONE]\n"}, lenient),
            (std::vector<Seen>{{"message", "[DONE]", "", {}}}));
  // An unterminated last line may be cut short: never dispatched.
  EXPECT_EQ(decodePieces({"data: a\ndata: {\"cho"}, lenient),
            (std::vector<Seen>{{"message", "a", "", {}}}));
}

TEST(SseDecoder, EventLargerThanTheLimitIsAProtocolError) {
  SseDecoder::Options options;
  options.maxEventBytes = 16;
  SseDecoder decoder(options);
  auto ignore = [](const SseEvent&) { return true; };
  EXPECT_TRUE(decoder.feed("data: 0123456789\n\n", ignore));  // 10 bytes of data: fine
  EXPECT_THROW(decoder.feed("data: 0123456789\ndata: 0123456789\n\n", ignore), ProtocolError);
  SseDecoder lines(options);
  // One line growing across reads without an end is caught too.
  lines.feed("data: 01234567", ignore);
  EXPECT_THROW(lines.feed("89abcdef", ignore), ProtocolError);
}

TEST(SseDecoder, HandlerCanStopTheStream) {
  SseDecoder decoder;
  int calls = 0;
  auto stopAtFirst = [&calls](const SseEvent&) {
    ++calls;
    return false;
  };
  EXPECT_FALSE(decoder.feed("data: a\n\ndata: b\n\n", stopAtFirst));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace parley
