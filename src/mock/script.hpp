// The mock server's script: an ordered list of rules, each matching a chat request and saying how
// to answer it (a reply, an HTTP error, or raw bytes) and which faults to inject. The format is
// documented in docs/mock.md; a script is JSON Lines on disk and a JSON array in memory.
//
// Thread-safety: the functions are pure; a compiled Script is immutable and may be shared.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley::mock {

// Reads a JSON Lines script: one rule object per line; blank lines and lines whose first
// non-blank character is '#' are skipped. Every rule is validated.
// Throws parley::ValidationError("<source>:<line>[: field]", reason) on bad JSON or a bad rule.
nlohmann::json readScript(std::string_view text, const std::string& source = "script");

// readScript() on a file's contents; an unreadable file is a ValidationError naming the path.
nlohmann::json readScriptFile(const std::string& path);

// The built-in demo agent, used when no script is given: echoes what it is told and calls
// get_weather / get_time / calculate (when the request offers them) and answers from their
// results on the next turn. demoScriptText() is the same script as JSON Lines.
const nlohmann::json& demoScript();
std::string_view demoScriptText();

// ---- Compiled form (used by the server; exposed for tests) ----

struct MatchSpec {
  std::vector<int> requests;  // 1-based chat request numbers; empty = any
  std::optional<int> turn;    // number of user messages in the request
  std::optional<std::string> userContains;
  std::shared_ptr<const std::regex> userRegex;  // searched in the last user message
  bool icase = false;                           // applies to userContains and userRegex
  std::optional<std::string> lastRole;          // role of the request's last message
  std::optional<bool> stream;
  std::optional<std::string> model;
  std::optional<std::string> tool;  // the request offers a function tool with this name
  // The request's response_format type ("json_schema", "json_object", "text"; "none": absent).
  std::optional<std::string> responseFormat;
  // The tool the request forces (tool_choice naming a function); "none": no tool forced.
  std::optional<std::string> toolChoice;
  std::optional<std::string> userPart;  // a last user part's description starts with this
  // Which route the rule answers: "" (the chat routes, the default), or one of the counting
  // routes "count_tokens", "apply_template", "tokenize" (docs/mock.md, "Counting routes"); a
  // counting rule answers with error or raw only, and of `match` only this applies.
  std::string endpoint;
};

struct ToolCallSpec {
  std::string id;            // empty = "call_<request>_<index>"
  std::string name;          // may contain {{placeholders}}
  nlohmann::json arguments;  // object (templated string values) or a verbatim string
};

struct ReplySpec {
  std::optional<std::string> content;
  std::optional<std::string> reasoningContent;
  std::vector<ToolCallSpec> toolCalls;
  std::string finishReason;   // empty = "tool_calls" when there are tool calls, else "stop"
  nlohmann::json usage;       // null = estimated; given fields override the estimate
  std::size_t chunkSize = 0;  // bytes per content delta; 0 = one word per delta
  std::size_t argumentsChunkSize = 0;  // bytes per arguments delta; 0 = 4 bytes
  int repeat = 1;                      // content repeated this many times (large replies)
  std::string model;                   // empty = the request's model
  std::string id;                      // empty = "chatcmpl-mock-<request>"
};

struct ErrorSpec {
  int status = 500;
  std::string body;  // verbatim response body
  std::vector<std::pair<std::string, std::string>> headers;
};

struct StreamSpec {
  int chunkDelayMs = 0;           // between two events (and after each keepaliveBefore line)
  int firstDelayMs = 0;           // after the headers, before the first event
  int keepaliveBefore = 0;        // ": keep-alive" comment lines before the first event
  bool keepaliveBetween = false;  // a comment line half-way through every gap between events
  int disconnectAfter = -1;       // close the connection after this many events
  int malformedAt = -1;           // the Nth event (1-based) carries malformed JSON
  std::string malformedData;
  int errorAfter = -1;  // after this many events send {"error": ...} and end the stream
  nlohmann::json errorObject;
  bool omitDone = false;    // no "data: [DONE]"
  bool omitFinish = false;  // no finish_reason chunk (and no usage chunk)
};

struct Rule {
  std::string name;  // for logs and recorded requests; default "rule <n>"
  MatchSpec match;
  std::optional<int> times;        // the rule answers at most this many requests
  int delayMs = 0;                 // before the response starts
  long disconnectAfterBytes = -1;  // cut the body after this many bytes, then close
  std::optional<ReplySpec> reply;
  std::optional<ErrorSpec> error;
  std::vector<std::string> raw;  // verbatim body pieces, written one by one
  std::string rawContentType = "text/event-stream";
  int rawStatus = 200;
  StreamSpec stream;
};

using Script = std::vector<Rule>;

// Validates and compiles rules (a JSON array of rule objects). Errors name the rule:
// ValidationError("rule 3: reply.tool_calls[0].name", "expected a string").
Script compileScript(const nlohmann::json& rules);

// What the rules look at in a chat request.
struct ChatContext {
  int requestNumber = 0;  // 1-based, counting chat completion requests
  int turn = 0;           // user messages in the request
  std::string lastUser;   // text of the last user message
  // The last user message's non-text parts, described: "image/png 2x3" (an image's bytes, with
  // the size its header declares), "image url https://...", "audio/wav", "application/pdf a.pdf".
  std::vector<std::string> lastUserParts;
  std::string lastRole;
  std::vector<std::string> toolResults;  // trailing tool messages' text, in order
  std::string lastToolName;              // function name of the last tool result, if known
  bool stream = false;
  bool includeUsage = false;  // stream_options.include_usage
  std::string model;
  std::vector<std::string> toolNames;  // function tools offered
  std::string responseFormat;          // response_format.type; "none" when absent
  std::string forcedTool;              // the function tool_choice names; "none" when none
  std::size_t promptBytes = 0;         // message text bytes, for the usage estimate
  // Each message's share of promptBytes (its text and tool-call arguments), in order.
  std::vector<std::size_t> messageBytes;
};

// The text of a chat message's content: a string, or its text parts joined by newlines.
std::string messageText(const nlohmann::json& content);

// Reads a chat completion request body. Throws ValidationError naming the field when the
// body is not a chat request (no messages array, a message without role...).
ChatContext describeRequest(const nlohmann::json& body, int requestNumber);

// True when `match` accepts `ctx`; fills `groups` with the user_regex capture groups
// (groups[0] the whole match).
bool matches(const MatchSpec& match, const ChatContext& ctx, std::vector<std::string>& groups);

// Replaces {{last_user}}, {{last_tool}}, {{last_tool_name}}, {{tool_results}}, {{request}},
// {{turn}}, {{model}}, {{response_format}}, {{tool_choice}} and {{0}}..{{9}} (regex groups).
// Unknown placeholders stay as they are.
std::string expandTemplate(std::string_view text, const ChatContext& ctx,
                           const std::vector<std::string>& groups);

}  // namespace parley::mock
