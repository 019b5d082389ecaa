#include "mock/script.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/message.hpp"

namespace parley::mock {
namespace {

using nlohmann::json;

// Validation context: "rule 3" plus the path inside the rule, so every error names its field.
class Checker {
 public:
  explicit Checker(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& reason) const {
    throw ValidationError(field.empty() ? where_ : where_ + ": " + field, reason);
  }

  void onlyKeys(const json& obj, const std::string& path,
                std::initializer_list<std::string_view> allowed) const {
    for (const auto& [key, value] : obj.items()) {
      (void)value;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string known;
        for (auto a : allowed)
          known += (known.empty() ? "" : ", ") + std::string(a);
        fail(path.empty() ? key : path + "." + key, "unknown key (known: " + known + ")");
      }
    }
  }

  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string");
    return v.get<std::string>();
  }
  bool boolean(const json& v, const std::string& field) const {
    if (!v.is_boolean()) fail(field, "expected true or false");
    return v.get<bool>();
  }
  long integer(const json& v, const std::string& field, long min, long max) const {
    if (!v.is_number_integer()) fail(field, "expected an integer");
    long n = v.get<long>();
    if (n < min || n > max) {
      fail(field, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    return n;
  }
  const json& object(const json& v, const std::string& field) const {
    if (!v.is_object()) fail(field, "expected an object");
    return v;
  }

 private:
  std::string where_;
};

constexpr long kMaxMs = 3'600'000;
constexpr long kMaxCount = 1'000'000'000;

MatchSpec compileMatch(const json& m, const Checker& c) {
  c.object(m, "match");
  c.onlyKeys(
      m, "match",
      {"request", "turn", "user_contains", "user_regex", "icase", "last_role", "stream", "model",
       "tool", "response_format", "tool_choice", "user_part", "default", "endpoint"});
  MatchSpec spec;
  if (m.contains("endpoint")) {
    spec.endpoint = c.string(m["endpoint"], "match.endpoint");
    if (spec.endpoint == "chat") spec.endpoint.clear();
    if (!spec.endpoint.empty() && spec.endpoint != "count_tokens" &&
        spec.endpoint != "apply_template" && spec.endpoint != "tokenize") {
      c.fail("match.endpoint", "expected chat, count_tokens, apply_template or tokenize");
    }
  }
  if (m.contains("request")) {
    const json& r = m["request"];
    if (r.is_array()) {
      if (r.empty()) c.fail("match.request", "expected a request number or a non-empty list");
      for (std::size_t i = 0; i < r.size(); ++i) {
        spec.requests.push_back(static_cast<int>(
            c.integer(r[i], "match.request[" + std::to_string(i) + "]", 1, kMaxCount)));
      }
    } else {
      spec.requests.push_back(static_cast<int>(c.integer(r, "match.request", 1, kMaxCount)));
    }
  }
  if (m.contains("turn"))
    spec.turn = static_cast<int>(c.integer(m["turn"], "match.turn", 0, kMaxCount));
  if (m.contains("icase")) spec.icase = c.boolean(m["icase"], "match.icase");
  if (m.contains("user_contains")) {
    spec.userContains = c.string(m["user_contains"], "match.user_contains");
  }
  if (m.contains("user_regex")) {
    std::string pattern = c.string(m["user_regex"], "match.user_regex");
    auto flags = std::regex::ECMAScript;
    if (spec.icase) flags |= std::regex::icase;
    try {
      spec.userRegex = std::make_shared<const std::regex>(pattern, flags);
    } catch (const std::regex_error& e) {
      c.fail("match.user_regex", std::string("invalid regular expression: ") + e.what());
    }
  }
  if (m.contains("last_role")) {
    std::string role = c.string(m["last_role"], "match.last_role");
    static const std::vector<std::string> roles = {"system", "developer", "user", "assistant",
                                                   "tool"};
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      c.fail("match.last_role", "expected system, developer, user, assistant or tool");
    }
    spec.lastRole = role;
  }
  if (m.contains("stream")) spec.stream = c.boolean(m["stream"], "match.stream");
  if (m.contains("model")) spec.model = c.string(m["model"], "match.model");
  if (m.contains("tool")) spec.tool = c.string(m["tool"], "match.tool");
  if (m.contains("response_format")) {
    spec.responseFormat = c.string(m["response_format"], "match.response_format");
    static const std::vector<std::string> kinds = {"json_schema", "json_object", "text", "none"};
    if (std::find(kinds.begin(), kinds.end(), *spec.responseFormat) == kinds.end()) {
      c.fail("match.response_format", "expected json_schema, json_object, text or none");
    }
  }
  if (m.contains("tool_choice")) spec.toolChoice = c.string(m["tool_choice"], "match.tool_choice");
  if (m.contains("user_part")) spec.userPart = c.string(m["user_part"], "match.user_part");
  if (m.contains("default") && !c.boolean(m["default"], "match.default")) {
    c.fail("match.default", "only true makes sense (a rule without conditions matches anything)");
  }
  return spec;
}

ReplySpec compileReply(const json& r, const Checker& c) {
  c.object(r, "reply");
  c.onlyKeys(r, "reply",
             {"content", "reasoning_content", "tool_calls", "finish_reason", "usage", "chunk_size",
              "arguments_chunk_size", "repeat", "model", "id"});
  ReplySpec spec;
  if (r.contains("content") && !r["content"].is_null()) {
    spec.content = c.string(r["content"], "reply.content");
  }
  if (r.contains("reasoning_content")) {
    spec.reasoningContent = c.string(r["reasoning_content"], "reply.reasoning_content");
  }
  if (r.contains("tool_calls")) {
    const json& calls = r["tool_calls"];
    if (!calls.is_array()) c.fail("reply.tool_calls", "expected an array of tool calls");
    for (std::size_t i = 0; i < calls.size(); ++i) {
      std::string path = "reply.tool_calls[" + std::to_string(i) + "]";
      c.object(calls[i], path);
      c.onlyKeys(calls[i], path, {"id", "name", "arguments"});
      ToolCallSpec call;
      if (!calls[i].contains("name")) c.fail(path + ".name", "a tool call needs a name");
      call.name = c.string(calls[i]["name"], path + ".name");
      if (call.name.empty()) c.fail(path + ".name", "must not be empty");
      if (calls[i].contains("id")) call.id = c.string(calls[i]["id"], path + ".id");
      call.arguments = calls[i].value("arguments", json::object());
      if (!call.arguments.is_object() && !call.arguments.is_string()) {
        c.fail(path + ".arguments", "expected an object or a string");
      }
      spec.toolCalls.push_back(std::move(call));
    }
  }
  if (r.contains("finish_reason")) {
    spec.finishReason = c.string(r["finish_reason"], "reply.finish_reason");
  }
  if (r.contains("usage")) {
    const json& u = c.object(r["usage"], "reply.usage");
    for (const char* key : {"prompt_tokens", "completion_tokens", "total_tokens"}) {
      if (u.contains(key)) c.integer(u[key], std::string("reply.usage.") + key, 0, kMaxCount);
    }
    spec.usage = u;
  }
  if (r.contains("chunk_size")) {
    spec.chunkSize =
        static_cast<std::size_t>(c.integer(r["chunk_size"], "reply.chunk_size", 0, kMaxCount));
  }
  if (r.contains("arguments_chunk_size")) {
    spec.argumentsChunkSize = static_cast<std::size_t>(
        c.integer(r["arguments_chunk_size"], "reply.arguments_chunk_size", 0, kMaxCount));
  }
  if (r.contains("repeat"))
    spec.repeat = static_cast<int>(c.integer(r["repeat"], "reply.repeat", 1, 10'000'000));
  if (r.contains("model")) spec.model = c.string(r["model"], "reply.model");
  if (r.contains("id")) spec.id = c.string(r["id"], "reply.id");
  if (!spec.content && !spec.reasoningContent && spec.toolCalls.empty()) {
    c.fail("reply", "needs content, reasoning_content or tool_calls");
  }
  return spec;
}

std::string headerValue(const json& v, const Checker& c, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  c.fail(field, "expected a string or a number");
}

ErrorSpec compileError(const json& e, const Checker& c) {
  c.object(e, "error");
  c.onlyKeys(e, "error",
             {"status", "message", "type", "code", "param", "body", "retry_after", "retry_after_ms",
              "headers"});
  ErrorSpec spec;
  if (!e.contains("status")) c.fail("error.status", "an error needs an HTTP status");
  spec.status = static_cast<int>(c.integer(e["status"], "error.status", 100, 599));
  if (e.contains("body")) {
    if (e.contains("message") || e.contains("type") || e.contains("code") || e.contains("param")) {
      c.fail("error.body", "give either body or message/type/code/param, not both");
    }
    spec.body = e["body"].is_string() ? e["body"].get<std::string>() : e["body"].dump();
  } else {
    json err = {
        {"message", e.contains("message") ? c.string(e["message"], "error.message")
                                          : "mock error " + std::to_string(spec.status)},
        {"type", e.contains("type") ? c.string(e["type"], "error.type")
                                    : std::string(spec.status == 429   ? "rate_limit_error"
                                                  : spec.status >= 500 ? "server_error"
                                                                       : "invalid_request_error")},
        {"param", e.value("param", json())},
        {"code", e.value("code", json())}};
    spec.body = json{{"error", err}}.dump();
  }
  if (e.contains("retry_after")) {
    spec.headers.emplace_back("Retry-After", headerValue(e["retry_after"], c, "error.retry_after"));
  }
  if (e.contains("retry_after_ms")) {
    spec.headers.emplace_back("retry-after-ms",
                              headerValue(e["retry_after_ms"], c, "error.retry_after_ms"));
  }
  if (e.contains("headers")) {
    const json& h = c.object(e["headers"], "error.headers");
    for (const auto& [name, value] : h.items()) {
      spec.headers.emplace_back(name, headerValue(value, c, "error.headers." + name));
    }
  }
  return spec;
}

StreamSpec compileStream(const json& s, const Checker& c) {
  c.object(s, "stream");
  c.onlyKeys(s, "stream",
             {"chunk_delay_ms", "first_delay_ms", "keepalive_before", "keepalive_between",
              "disconnect_after", "malformed_at", "malformed_data", "error_after", "error",
              "omit_done", "omit_finish"});
  StreamSpec spec;
  auto intField = [&](const char* key, long min, long max, int& out) {
    if (s.contains(key))
      out = static_cast<int>(c.integer(s[key], std::string("stream.") + key, min, max));
  };
  intField("chunk_delay_ms", 0, kMaxMs, spec.chunkDelayMs);
  intField("first_delay_ms", 0, kMaxMs, spec.firstDelayMs);
  intField("keepalive_before", 0, 1'000'000, spec.keepaliveBefore);
  intField("disconnect_after", 0, kMaxCount, spec.disconnectAfter);
  intField("malformed_at", 1, kMaxCount, spec.malformedAt);
  intField("error_after", 0, kMaxCount, spec.errorAfter);
  if (s.contains("keepalive_between")) {
    spec.keepaliveBetween = c.boolean(s["keepalive_between"], "stream.keepalive_between");
  }
  spec.malformedData =
      R"({"id":"chatcmpl-mock","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tru)";
  if (s.contains("malformed_data")) {
    spec.malformedData = c.string(s["malformed_data"], "stream.malformed_data");
  }
  if (s.contains("error")) {
    if (!s["error"].is_object()) c.fail("stream.error", "expected an error object");
    spec.errorObject = s["error"];
  }
  if (spec.errorAfter >= 0 && spec.errorObject.is_null()) {
    spec.errorObject = {{"message", "mock stream error"},
                        {"type", "server_error"},
                        {"param", nullptr},
                        {"code", nullptr}};
  }
  if (!spec.errorObject.is_null() && spec.errorAfter < 0) {
    c.fail("stream.error", "needs stream.error_after (how many events come before it)");
  }
  if (s.contains("omit_done")) spec.omitDone = c.boolean(s["omit_done"], "stream.omit_done");
  if (s.contains("omit_finish"))
    spec.omitFinish = c.boolean(s["omit_finish"], "stream.omit_finish");
  return spec;
}

Rule compileRule(const json& r, std::size_t index, const Checker& c) {
  if (!r.is_object()) c.fail("", "a rule must be a JSON object");
  c.onlyKeys(r, "",
             {"name", "match", "times", "delay_ms", "disconnect_after_bytes", "reply", "error",
              "raw", "content_type", "status", "stream"});
  Rule rule;
  rule.name =
      r.contains("name") ? c.string(r["name"], "name") : "rule " + std::to_string(index + 1);
  if (r.contains("match")) rule.match = compileMatch(r["match"], c);
  if (r.contains("times"))
    rule.times = static_cast<int>(c.integer(r["times"], "times", 1, kMaxCount));
  if (r.contains("delay_ms"))
    rule.delayMs = static_cast<int>(c.integer(r["delay_ms"], "delay_ms", 0, kMaxMs));
  if (r.contains("disconnect_after_bytes")) {
    rule.disconnectAfterBytes =
        c.integer(r["disconnect_after_bytes"], "disconnect_after_bytes", 0, kMaxCount);
  }
  int answers = int(r.contains("reply")) + int(r.contains("error")) + int(r.contains("raw"));
  if (answers != 1) c.fail("", "a rule needs exactly one of reply, error or raw");
  if (r.contains("reply")) rule.reply = compileReply(r["reply"], c);
  if (r.contains("reply") && !rule.match.endpoint.empty()) {
    c.fail("reply", "a rule for the " + rule.match.endpoint +
                        " route answers with error or raw (its answer is the mock's count)");
  }
  if (r.contains("error")) rule.error = compileError(r["error"], c);
  if (r.contains("raw")) {
    const json& raw = r["raw"];
    if (raw.is_string()) {
      rule.raw.push_back(raw.get<std::string>());
    } else if (raw.is_array() && !raw.empty()) {
      for (std::size_t i = 0; i < raw.size(); ++i) {
        rule.raw.push_back(c.string(raw[i], "raw[" + std::to_string(i) + "]"));
      }
    } else {
      c.fail("raw", "expected a string or a non-empty array of strings");
    }
    if (r.contains("content_type"))
      rule.rawContentType = c.string(r["content_type"], "content_type");
    if (r.contains("status"))
      rule.rawStatus = static_cast<int>(c.integer(r["status"], "status", 100, 599));
  } else if (r.contains("content_type") || r.contains("status")) {
    c.fail(r.contains("status") ? "status" : "content_type",
           "only for raw rules (an error rule takes error.status)");
  }
  if (r.contains("stream")) {
    if (r.contains("error")) c.fail("stream", "an error rule sends no stream");
    rule.stream = compileStream(r["stream"], c);
  }
  return rule;
}

}  // namespace

std::string messageText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
    }
  }
  return text;
}

namespace {

// The non-text parts of a chat message's content array, described for `user_part` and
// {{user_parts}}. Parts parley cannot read are described by their type.
std::vector<std::string> describeParts(const json& message) {
  std::vector<std::string> out;
  if (!message.contains("content") || !message["content"].is_array()) return out;
  std::vector<Part> parts;
  try {
    parts = partsOf(messageFromJson(message));
  } catch (const ValidationError&) {
    for (const auto& part : message["content"]) {
      if (part.is_object() && part.value("type", "") != "text")
        out.push_back(part.value("type", ""));
    }
    return out;
  }
  for (const Part& part : parts) {
    switch (part.kind) {
      case PartKind::Text:
        break;
      case PartKind::Image:
        if (!part.url.empty()) {
          out.push_back("image url " + part.url);
        } else if (auto size = imageSize(part.bytes)) {
          out.push_back(part.mimeType + " " + std::to_string(size->width) + "x" +
                        std::to_string(size->height));
        } else {
          out.push_back(part.mimeType);
        }
        break;
      case PartKind::Audio:
        out.push_back(part.mimeType);
        break;
      case PartKind::File:
        out.push_back(part.mimeType + (part.filename.empty() ? "" : " " + part.filename));
        break;
    }
  }
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

}  // namespace

Script compileScript(const json& rules) {
  if (!rules.is_array()) throw ValidationError("script", "expected a JSON array of rules");
  Script script;
  script.reserve(rules.size());
  for (std::size_t i = 0; i < rules.size(); ++i) {
    script.push_back(compileRule(rules[i], i, Checker("rule " + std::to_string(i + 1))));
  }
  return script;
}

json readScript(std::string_view text, const std::string& source) {
  json rules = json::array();
  std::size_t lineNo = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') {
      if (end == text.size()) break;
      continue;
    }
    std::string where = source + ":" + std::to_string(lineNo);
    json rule;
    try {
      rule = parseJson(line);
    } catch (const ProtocolError& e) {
      throw ValidationError(where, std::string("invalid JSON: ") + e.what());
    }
    compileRule(rule, rules.size(), Checker(where));
    rules.push_back(std::move(rule));
    if (end == text.size()) break;
  }
  return rules;
}

json readScriptFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValidationError(path, "cannot read the script file");
  std::ostringstream text;
  text << in.rdbuf();
  return readScript(text.str(), path);
}

std::string_view demoScriptText() {
  // Order matters: the first matching rule answers.
  static constexpr std::string_view kText =
      R"jsonl(# parley's built-in demo agent (parley mock with no --script).
{"name":"tool-result","match":{"last_role":"tool"},"reply":{"content":"{{last_tool_name}} says: {{tool_results}}"}}
{"name":"weather-in","match":{"tool":"get_weather","user_regex":"weather\\s+(?:in|for|at)\\s+([A-Za-z][A-Za-z .'-]*[A-Za-z])","icase":true},"reply":{"tool_calls":[{"name":"get_weather","arguments":{"city":"{{1}}"}}]}}
{"name":"weather","match":{"tool":"get_weather","user_contains":"weather","icase":true},"reply":{"tool_calls":[{"name":"get_weather","arguments":{"city":"here"}}]}}
{"name":"time","match":{"tool":"get_time","user_regex":"\\b(?:time|clock)\\b","icase":true},"reply":{"tool_calls":[{"name":"get_time","arguments":{}}]}}
{"name":"calculate","match":{"tool":"calculate","user_regex":"((?:[-(]\\s*)*[0-9][0-9.]*(?:\\s*[-+*/%^]\\s*(?:[-(]\\s*)*[0-9][0-9.]*(?:\\s*\\))*)+)"},"reply":{"tool_calls":[{"name":"calculate","arguments":{"expression":"{{1}}"}}]}}
{"name":"echo","reply":{"content":"You said: {{last_user}}"}}
)jsonl";
  return kText;
}

const json& demoScript() {
  static const json script = readScript(demoScriptText(), "demo script");
  return script;
}

ChatContext describeRequest(const json& body, int requestNumber) {
  if (!body.is_object()) throw ValidationError("body", "expected a JSON object");
  if (!body.contains("messages") || !body["messages"].is_array()) {
    throw ValidationError("messages", "expected an array of messages");
  }
  ChatContext ctx;
  ctx.requestNumber = requestNumber;
  ctx.model = body.value("model", "");
  if (body.contains("stream") && body["stream"].is_boolean())
    ctx.stream = body["stream"].get<bool>();
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    const json& so = body["stream_options"];
    ctx.includeUsage = so.contains("include_usage") && so["include_usage"] == true;
  }
  if (body.contains("tools") && body["tools"].is_array()) {
    for (const auto& t : body["tools"]) {
      if (t.is_object() && t.contains("function") && t["function"].is_object() &&
          t["function"].contains("name") && t["function"]["name"].is_string()) {
        ctx.toolNames.push_back(t["function"]["name"].get<std::string>());
      }
    }
  }
  ctx.responseFormat = "none";
  if (auto rf = body.find("response_format"); rf != body.end() && rf->is_object())
    ctx.responseFormat = rf->value("type", "none");
  ctx.forcedTool = "none";
  if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_object() &&
                                          tc->contains("function") &&
                                          (*tc)["function"].is_object()) {
    ctx.forcedTool = (*tc)["function"].value("name", "none");
  }
  const json& messages = body["messages"];
  std::vector<std::pair<std::string, std::string>> callNames;  // tool_call id -> name
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      throw ValidationError("messages[" + std::to_string(i) + "].role", "expected a string");
    }
    std::string role = m["role"].get<std::string>();
    std::string text = m.contains("content") ? messageText(m["content"]) : std::string();
    std::size_t bytes = text.size();
    if (role == "user") {
      ++ctx.turn;
      ctx.lastUser = text;
      ctx.lastUserParts = describeParts(m);
    }
    if (role == "tool") {
      if (ctx.lastRole != "tool") ctx.toolResults.clear();
      ctx.toolResults.push_back(text);
      std::string id = m.value("tool_call_id", "");
      ctx.lastToolName.clear();
      for (const auto& [callId, name] : callNames) {
        if (callId == id) ctx.lastToolName = name;
      }
    }
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (const auto& call : m["tool_calls"]) {
        if (call.is_object() && call.contains("function") && call["function"].is_object()) {
          callNames.emplace_back(call.value("id", ""), call["function"].value("name", ""));
          bytes += call["function"].value("arguments", "").size();
        }
      }
    }
    ctx.promptBytes += bytes;
    ctx.messageBytes.push_back(bytes);
    ctx.lastRole = role;
  }
  if (ctx.lastRole != "tool") ctx.toolResults.clear();
  return ctx;
}

bool matches(const MatchSpec& match, const ChatContext& ctx, std::vector<std::string>& groups) {
  groups.clear();
  if (!match.endpoint.empty()) return false;  // a counting route's rule
  if (!match.requests.empty() && std::find(match.requests.begin(), match.requests.end(),
                                           ctx.requestNumber) == match.requests.end()) {
    return false;
  }
  if (match.turn && *match.turn != ctx.turn) return false;
  if (match.lastRole && *match.lastRole != ctx.lastRole) return false;
  if (match.stream && *match.stream != ctx.stream) return false;
  if (match.model && *match.model != ctx.model) return false;
  if (match.responseFormat && *match.responseFormat != ctx.responseFormat) return false;
  if (match.toolChoice && *match.toolChoice != ctx.forcedTool) return false;
  if (match.tool &&
      std::find(ctx.toolNames.begin(), ctx.toolNames.end(), *match.tool) == ctx.toolNames.end()) {
    return false;
  }
  if (match.userPart &&
      std::none_of(ctx.lastUserParts.begin(), ctx.lastUserParts.end(),
                   [&](const std::string& d) { return d.rfind(*match.userPart, 0) == 0; })) {
    return false;
  }
  if (match.userContains) {
    bool found = match.icase
                     ? lower(ctx.lastUser).find(lower(*match.userContains)) != std::string::npos
                     : ctx.lastUser.find(*match.userContains) != std::string::npos;
    if (!found) return false;
  }
  if (match.userRegex) {
    std::smatch m;
    if (!std::regex_search(ctx.lastUser, m, *match.userRegex)) return false;
    for (const auto& g : m)
      groups.push_back(g.str());
  }
  return true;
}

std::string expandTemplate(std::string_view text, const ChatContext& ctx,
                           const std::vector<std::string>& groups) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t open = text.find("{{", pos);
    if (open == std::string_view::npos) break;
    std::size_t close = text.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    out.append(text.substr(pos, open - pos));
    std::string_view key = text.substr(open + 2, close - open - 2);
    std::optional<std::string> value;
    if (key == "last_user")
      value = ctx.lastUser;
    else if (key == "user_parts") {
      std::string list;
      for (const std::string& d : ctx.lastUserParts)
        list += (list.empty() ? "" : ", ") + d;
      value = list;
    } else if (key == "last_tool")
      value = ctx.toolResults.empty() ? "" : ctx.toolResults.back();
    else if (key == "last_tool_name")
      value = ctx.lastToolName.empty() ? "the tool" : ctx.lastToolName;
    else if (key == "request")
      value = std::to_string(ctx.requestNumber);
    else if (key == "turn")
      value = std::to_string(ctx.turn);
    else if (key == "model")
      value = ctx.model;
    else if (key == "response_format")
      value = ctx.responseFormat;
    else if (key == "tool_choice")
      value = ctx.forcedTool;
    else if (key == "tool_results") {
      std::string joined;
      for (const auto& r : ctx.toolResults)
        joined += (joined.empty() ? "" : "; ") + r;
      value = joined;
    } else if (key.size() == 1 && key[0] >= '0' && key[0] <= '9') {
      std::size_t g = static_cast<std::size_t>(key[0] - '0');
      value = g < groups.size() ? groups[g] : "";
    }
    if (value) {
      out += *value;
    } else {
      out.append(text.substr(open, close + 2 - open));
    }
    pos = close + 2;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace parley::mock
