// Bounded JSON parsing: the one way JSON from outside the process (a server's replies and stream
// chunks, tool arguments and tool output, snapshot files, config) becomes a nlohmann::json value.
//
// Why a depth limit: nlohmann's parser is iterative, but copying, comparing and serialising a
// value recurse once per level of nesting, so a document nested 100 000 levels deep (a few
// hundred kilobytes of "[[[[...") overflows the stack later, wherever it is first copied. The
// nesting is checked before the value is built; no JSON deeper than the limit ever exists in
// parley, and nothing that recurses over a value parsed here runs on unbounded depth.
//
// Thread-safety: free functions on values; safe from any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

namespace parley {

// Deep enough for any real API payload, tool schema or snapshot, shallow enough that every
// recursive walk over the value (copy, dump, schema validation) stays within a few tens of
// kilobytes of stack, on any thread.
inline constexpr int kDefaultMaxJsonDepth = 128;

struct JsonLimits {
  // Containers inside containers: `1` is `{}` or `[]`, `[[1]]` is 2. Must be >= 1.
  int maxDepth = kDefaultMaxJsonDepth;
};

// Parses `text` as one JSON document (no comments, nothing after it but whitespace).
// Throws ProtocolError when the text is not JSON ("not valid JSON: syntax error at line 1,
// column 3 ...") or nests deeper than limits.maxDepth ("JSON nested deeper than 128 levels (at
// byte 128)"); callers that read a user's file or option turn it into a ValidationError naming
// the file. With allowExceptions = false it returns a discarded value (is_discarded()) instead,
// as nlohmann::json::parse(text, nullptr, false) does.
nlohmann::json parseJson(std::string_view text, const JsonLimits& limits = {},
                         bool allowExceptions = true);

// The same, keeping each object's keys in document order (for what must be sent back exactly as
// it came, e.g. a tool call's input).
nlohmann::ordered_json parseOrderedJson(std::string_view text, const JsonLimits& limits = {},
                                        bool allowExceptions = true);

// The offset of the first '[' or '{' that opens a container deeper than `maxDepth`, or npos.
// Reads strings correctly (brackets inside them do not count) and stops at the first byte that
// is too deep, so it costs one pass over the text at most. parseJson() calls it first.
std::size_t findJsonTooDeep(std::string_view text, int maxDepth) noexcept;

}  // namespace parley
