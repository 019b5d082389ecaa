// McpClient: the JSON-RPC 2.0 session over a transport (mcp_transport.hpp): ids, the handshake,
// matching responses to requests, the server's requests (ping) and notifications (progress,
// tools/list_changed), cancellation, restarts. Over 600 lines because these share one
// session's state and lock; the transports (stdio, HTTP) are already apart.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "model/sha256.hpp"
#include "parley/json.hpp"
#include "parley/mcp.hpp"
#include "parley/telemetry.hpp"
#include "tools/mcp_elicitation.hpp"
#include "tools/mcp_list_cache.hpp"
#include "tools/mcp_oauth.hpp"
#include "tools/mcp_transport.hpp"
#include "tools/tool_schema.hpp"

namespace parley {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool mcpStatelessVersion(const std::string& version) {
  return version >= "2026-07-28";  // dates compare as text
}

McpError::McpError(int code, const std::string& message, json data)
    : Error(message + " (JSON-RPC error " + std::to_string(code) + ")"),
      code_(code),
      data_(std::move(data)) {}

namespace detail {

std::string mcpExcerpt(std::string_view text, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > limit) out += "...";
  return "\"" + out + "\"";
}

}  // namespace detail

namespace {

using detail::McpReceived;
using detail::McpTransport;

// Bytes a base64 text stands for (for descriptions only).
std::size_t base64Bytes(const json& data) {
  if (!data.is_string()) return 0;
  std::size_t size = data.get_ref<const std::string&>().size();
  return size / 4 * 3;
}

std::string stringField(const json& object, const char* key) {
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

std::string describeBlock(const json& block) {
  if (!block.is_object()) return "[content that is not an object]";
  std::string type = stringField(block, "type");
  if (type == "text") return stringField(block, "text");
  if (type == "image" || type == "audio") {
    return "[" + type + ": " + stringField(block, "mimeType") + ", " +
           std::to_string(base64Bytes(block.value("data", json()))) + " bytes]";
  }
  if (type == "resource") {
    json resource = block.value("resource", json::object());
    if (!resource.is_object()) return "[resource]";
    std::string uri = stringField(resource, "uri");
    if (resource.contains("text"))
      return "[resource " + uri + "]\n" + stringField(resource, "text");
    return "[resource " + uri + ": " + stringField(resource, "mimeType") + ", " +
           std::to_string(base64Bytes(resource.value("blob", json()))) + " bytes]";
  }
  if (type == "resource_link") {
    std::string text = "[resource link: " + stringField(block, "uri");
    std::string name = stringField(block, "name");
    if (!name.empty()) text += " (" + name + ")";
    std::string description = stringField(block, "description");
    if (!description.empty()) text += " " + description;
    return text + "]";
  }
  return "[" + (type.empty() ? std::string("untyped") : type) + " content]";
}

// Parses one message; ProtocolError when it is not JSON or nests deeper than the cap.
json parseMessage(std::string_view text, int maxDepth) {
  return parseJson(text, {.maxDepth = maxDepth});
}

struct Pending {
  bool done = false;
  json result;
  std::exception_ptr error;
  std::string tool;  // tools/call: the tool, for progress notifications
};

struct Connection : std::enable_shared_from_this<Connection> {
  std::unique_ptr<McpTransport> transport;
  std::map<int64_t, std::shared_ptr<Pending>> pending;  // McpClient::Impl::mutex
  bool alive = true;
  std::exception_ptr death;
  McpServerInfo info;
  // 2026-07-28: the _meta every request carries (version, capabilities, client); null before
  // the revision is chosen and for the 2025 era.
  json requestMeta;

  ~Connection() {
    if (transport) transport->close();
  }
};

bool validToolName(const std::string& name) {
  return !name.empty();
}

// The most arguments of one tool mirrored into headers.
constexpr std::size_t kMaxHeaderParams = 32;

// RFC 9110's tchar: what an HTTP field name is made of.
bool isTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// The `x-mcp-header` annotations of a tool's input schema (2026-07-28, SEP-2243): pairs of
// (property, header name). When one breaks the rules, says why in `problem` and returns none.
std::vector<std::pair<std::string, std::string>> headerParamsOf(const json& schema,
                                                                std::string& problem) {
  std::vector<std::pair<std::string, std::string>> out;
  auto properties = schema.find("properties");
  if (properties == schema.end() || !properties->is_object()) return out;
  std::set<std::string> seen;  // case-insensitive, as header names are
  for (const auto& [property, spec] : properties->items()) {
    if (!spec.is_object()) continue;
    auto header = spec.find("x-mcp-header");
    if (header == spec.end()) continue;
    const std::string where = "the x-mcp-header of property \"" + property.substr(0, 100) + "\"";
    const std::string name = header->is_string() ? header->get<std::string>() : std::string();
    const std::string type = stringField(spec, "type");
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.empty())
      problem = where + " is empty or not a string";
    else if (!std::all_of(name.begin(), name.end(), isTokenChar))
      problem = where + " is not an HTTP header name (letters, digits, !#$%&'*+-.^_`|~)";
    else if (type != "string" && type != "integer" && type != "boolean")
      problem = where + " is on a property of type " + (type.empty() ? "(none)" : type) +
                "; only string, integer and boolean values are mirrored";
    else if (!seen.insert(lower).second)
      problem = where + " repeats the header name " + name;
    else if (out.size() == kMaxHeaderParams)
      problem = "more than " + std::to_string(kMaxHeaderParams) + " x-mcp-header annotations";
    if (!problem.empty()) return {};
    out.emplace_back(property, name);
  }
  return out;
}

// An argument as its Mcp-Param header carries it; none for null, a missing argument or a value
// of another type (the header is then omitted).
std::optional<std::string> headerText(const json& arguments, const std::string& property) {
  if (!arguments.is_object()) return std::nullopt;
  auto value = arguments.find(property);
  if (value == arguments.end()) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (value->is_boolean()) return std::string(value->get<bool>() ? "true" : "false");
  if (value->is_number_integer()) return value->dump();
  return std::nullopt;
}

constexpr int kUnsupportedProtocolVersion = -32022;  // 2026-07-28's UnsupportedProtocolVersionError
constexpr const char* kMetaVersion = "io.modelcontextprotocol/protocolVersion";
constexpr const char* kMetaCapabilities = "io.modelcontextprotocol/clientCapabilities";
constexpr const char* kMetaClient = "io.modelcontextprotocol/clientInfo";
constexpr const char* kTasksExtension = "io.modelcontextprotocol/tasks";

// The versions of `offered` (a server's list) this client speaks, in this client's order (newest
// first). Entries that are not strings are skipped; at most kMcpProtocolVersions.size() kept.
std::vector<std::string> common(const json& offered) {
  std::vector<std::string> out;
  if (!offered.is_array()) return out;
  for (const std::string& version : kMcpProtocolVersions) {
    for (const json& item : offered)
      if (item.is_string() && item.get_ref<const std::string&>() == version) {
        out.push_back(version);
        break;
      }
  }
  return out;
}

// The JSON-RPC error in an HTTP error's body (a 2026-07-28 server answers a version it does not
// speak with 400 and UnsupportedProtocolVersionError), or null.
json rpcErrorOf(const HttpError& e) {
  json body = parseJson(e.details().body, {.maxDepth = 16}, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) return body["error"];
  return nullptr;
}

}  // namespace

json McpToolResult::forModel(bool preferStructured) const {
  bool noBlocks = !content.is_array() || content.empty();
  if (!structuredContent.is_null() && (preferStructured || noBlocks)) return structuredContent;
  std::string text;
  if (content.is_array()) {
    for (const json& block : content) {
      if (!text.empty()) text += "\n";
      text += describeBlock(block);
    }
  }
  return text;
}

struct McpClient::Impl {
  explicit Impl(McpServerOptions o) : options(std::move(o)) {
    if (!options.url.empty() && options.oauth.authorize)
      oauth = std::make_shared<detail::McpOAuth>(options.name, options.url, options.oauth);
  }

  // One of the server's requests that waits for a handler (elicitation, sampling), on a thread
  // of its own; cancelled by notifications/cancelled or close().
  struct ServerCall {
    json id;
    std::jthread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };

  McpServerOptions options;
  std::shared_ptr<detail::McpOAuth> oauth;
  std::mutex serverCallsMutex;  // serverCalls
  std::list<ServerCall> serverCalls;
  // The tools' output schemas from the last tools/list, to check structuredContent against.
  std::map<std::string, std::shared_ptr<CompiledSchema>> outputSchemas;  // mutex
  // The tools' x-mcp-header annotations from the last tools/list: (property, header name).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> headerParams;  // mutex
  // The tools that listing found unusable, with the reason (McpTool::unusable).
  std::map<std::string, std::string> unusableTools;  // mutex
  mutable std::mutex mutex;
  std::condition_variable_any changed;
  std::shared_ptr<Connection> connection;
  bool connecting = false;
  bool closed = false;
  int64_t nextId = 1;
  int restartsInRow = 0;
  std::exception_ptr lastFailure;
  Stats stats;
  int nonJsonBefore = 0;  // non-JSON lines of connections that are gone
  std::string lastStderr;
  std::function<void()> toolsChanged;
  // The calls in flight with a handler of their own (McpCallOptions::onElicitation), for the
  // 2025 era's elicitation/create, which names no call: with exactly one, it answers.
  std::list<std::shared_ptr<const McpElicitationHandler>> callElicitors;  // mutex
  bool knownLegacy = false;  // HTTP, "auto": the server did not answer server/discover before
  // When the tool list last read stops being fresh (the least ttlMs of its pages); unset when
  // no page carried a positive ttlMs (then it is kept until the server says it changed).
  std::optional<Clock::time_point> toolsExpire;  // mutex
  // Tells this client's stdio server apart in the list cache (a child is nobody else's).
  const std::string stdioScope = "stdio " + std::to_string(nextStdioScope());
  // subscriptions/listen (2026-07-28): the thread that keeps the stream open, and the stream's
  // request id and notifications counted against maxListenEvents. All under `mutex`.
  std::jthread listener;
  std::shared_ptr<std::stop_source> listenStream;  // ends the current stream (the events cap)
  int64_t listenId = -1;
  int listenEvents = 0;
  bool listenRefused = false;  // the server did not agree to toolsListChanged

  static int64_t nextStdioScope() {
    static std::atomic<int64_t> next{1};
    return next++;
  }

  std::string who() const { return "MCP server \"" + options.name + "\""; }

  // --- events from the transport (transport threads) ------------------------------------------

  McpReceived receive(Connection& connection, std::string_view text) {
    json message;
    try {
      message = parseMessage(text, options.maxJsonDepth);
    } catch (const ProtocolError& e) {
      return {false, std::nullopt, e.what(), nullptr};
    }
    if (message.is_array()) {  // a batch (protocol 2025-03-26)
      McpReceived all{true, std::nullopt, "", nullptr};
      for (const json& item : message) {
        McpReceived one = dispatch(connection, item);
        all.valid = all.valid && one.valid;
        if (!one.valid) all.problem = one.problem;
        if (one.responseTo) all.responseTo = one.responseTo;
        if (one.fatal && !all.fatal) all.fatal = one.fatal;
      }
      return all;
    }
    return dispatch(connection, message);
  }

  McpReceived dispatch(Connection& connection, const json& message) {
    if (!message.is_object() || message.value("jsonrpc", json()) != "2.0")
      return {false, std::nullopt, "not a JSON-RPC 2.0 message", nullptr};
    auto method = message.find("method");
    auto id = message.find("id");
    if (method != message.end()) {
      if (!method->is_string()) return {false, std::nullopt, "the method is not a string", nullptr};
      if (id != message.end()) {
        std::exception_ptr fatal = answerServerRequest(connection, *id, method->get<std::string>(),
                                                       message.value("params", json()));
        return {true, std::nullopt, "", fatal};
      }
      notification(connection, method->get<std::string>(), message.value("params", json()));
      return {true, std::nullopt, "", nullptr};
    }
    bool isResult = message.contains("result");
    bool isError = message.contains("error");
    if (id == message.end() || isResult == isError)
      return {false, std::nullopt, "neither a request, a notification nor a response", nullptr};
    if (!id->is_number_integer())
      return {true, std::nullopt, "", nullptr};  // not an id this client sent
    int64_t requestId = id->get<int64_t>();
    std::unique_lock lock(mutex);
    auto found = connection.pending.find(requestId);
    if (found == connection.pending.end())
      return {true, requestId, "", nullptr};  // late: abandoned
    Pending& pending = *found->second;
    if (isResult) {
      pending.result = message["result"];
      restartsInRow = 0;
    } else {
      const json& error = message["error"];
      int code = error.is_object() ? error.value("code", 0) : 0;
      std::string text = error.is_object() ? stringField(error, "message") : std::string();
      pending.error = std::make_exception_ptr(
          McpError(code, who() + ": " + (text.empty() ? "error" : text),
                   error.is_object() ? error.value("data", json()) : json()));
    }
    pending.done = true;
    connection.pending.erase(found);
    lock.unlock();
    changed.notify_all();
    return {true, requestId, "", nullptr};
  }

  static json errorReply(const json& id, int code, const std::string& message) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
  }

  // Answers at once what needs no handler; hands elicitation and sampling to a thread of their
  // own. Returns an error to end the connection with when an answer cannot be sent at once (a
  // server that floods requests and does not read the answers).
  std::exception_ptr answerServerRequest(Connection& connection, const json& id,
                                         const std::string& method, const json& params) {
    json reply = {{"jsonrpc", "2.0"}, {"id", id}};
    if (method == "ping") {
      reply["result"] = json::object();
    } else if (method == "roots/list" && !options.roots.empty()) {
      reply["result"] = {{"roots", rootsJson()}};
    } else if ((method == "elicitation/create" && options.onElicitation) ||
               (method == "sampling/createMessage" && options.onSampling)) {
      std::string problem = method == "elicitation/create"
                                ? detail::checkElicitation(params, options)
                                : detail::checkSampling(params, options);
      if (!problem.empty()) {
        reply = errorReply(id, -32602, problem);
      } else if (!startServerCall(connection, id, method, params)) {
        reply = errorReply(id, -32603,
                           "too many requests of the server wait for an answer "
                           "(maxServerRequestsInFlight = " +
                               std::to_string(options.maxServerRequestsInFlight) + ")");
      } else {
        return nullptr;
      }
    } else {
      reply = errorReply(id, -32601, "Method not found: " + method);
    }
    try {
      connection.transport->sendAnswer(reply.dump());
    } catch (const TimeoutError&) {
      return std::make_exception_ptr(
          ProtocolError(who() + " sends requests but does not read the answers"));
    } catch (const Error&) {
      // The connection is going away; its death is reported on its own.
    }
    return nullptr;
  }

  // False when maxServerRequestsInFlight are running already.
  bool startServerCall(Connection& connection, const json& id, const std::string& method,
                       const json& params) {
    {
      std::lock_guard state(mutex);
      if (closed) return false;
    }
    std::lock_guard lock(serverCallsMutex);
    serverCalls.remove_if([](ServerCall& call) { return call.done->load(); });  // joins them
    if (serverCalls.size() >= static_cast<std::size_t>(options.maxServerRequestsInFlight))
      return false;
    std::shared_ptr<Connection> held = connection.shared_from_this();
    std::shared_ptr<const McpElicitationHandler> elicit;
    {
      std::lock_guard state(mutex);
      if (callElicitors.size() == 1) elicit = callElicitors.front();
    }
    if (!elicit) elicit = std::make_shared<const McpElicitationHandler>(options.onElicitation);
    ServerCall& call = serverCalls.emplace_back();
    call.id = id;
    call.thread = std::jthread(
        [this, held, id, method, params, elicit, done = call.done](std::stop_token stop) {
          json reply;
          try {
            json result = method == "elicitation/create"
                              ? detail::runElicitation(params, options, *elicit, stop)
                              : detail::runSampling(params, options, stop);
            reply = {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
          } catch (const CancelledError& e) {
            reply = errorReply(id, -1, e.what());  // the user declined (the specification's -1)
          } catch (const std::exception& e) {
            reply = errorReply(id, -32603, e.what());
          }
          if (!stop.stop_requested()) {
            try {
              held->transport->send(reply.dump(-1, ' ', false, json::error_handler_t::replace),
                                    std::nullopt, Clock::now() + options.requestTimeout);
            } catch (const Error&) {
              // The connection is gone; the server has forgotten the request.
            }
          }
          done->store(true);
        });
    return true;
  }

  // notifications/cancelled for one of the server's requests: its handler is told to stop.
  void serverCancelled(const json& requestId) {
    std::lock_guard lock(serverCallsMutex);
    for (ServerCall& call : serverCalls)
      if (call.id == requestId) call.thread.request_stop();
  }

  void stopServerCalls() {
    std::list<ServerCall> calls;
    {
      std::lock_guard lock(serverCallsMutex);
      calls = std::move(serverCalls);
    }
    for (ServerCall& call : calls)
      call.thread.request_stop();
    calls.clear();  // joins
  }

  void notification(Connection& connection, const std::string& method, const json& params) {
    if (!listenNotification(method, params)) return;
    if (method == "notifications/progress" && params.is_object()) {
      auto token = params.find("progressToken");
      if (token == params.end() || !token->is_number_integer()) return;
      McpProgress progress;
      progress.server = options.name;
      {
        std::lock_guard lock(mutex);
        auto found = connection.pending.find(token->get<int64_t>());
        if (found == connection.pending.end()) return;
        progress.tool = found->second->tool;
        ++stats.progressReceived;
      }
      if (auto value = params.find("progress"); value != params.end() && value->is_number())
        progress.progress = value->get<double>();
      if (auto total = params.find("total"); total != params.end() && total->is_number())
        progress.total = total->get<double>();
      progress.message = stringField(params, "message");
      if (options.onProgress) options.onProgress(progress);
    } else if (method == "notifications/cancelled" && params.is_object() &&
               params.contains("requestId")) {
      serverCancelled(params["requestId"]);
    } else if (method == "notifications/prompts/list_changed" ||
               method == "notifications/resources/list_changed") {
      forgetList(connection, method == "notifications/prompts/list_changed" ? "prompts/list"
                                                                            : "resources/list");
    } else if (method == "notifications/tools/list_changed") {
      // The notification makes a cached list stale at once (caching.mdx).
      forgetList(connection, "tools/list");
      std::function<void()> callback;
      {
        std::lock_guard lock(mutex);
        callback = toolsChanged;
      }
      if (callback) callback();
    }
    // Other notifications (logging, resources, elicitation/complete) need nothing from this
    // client.
  }

  void requestFailed(Connection& connection, int64_t id, std::exception_ptr why) {
    {
      std::lock_guard lock(mutex);
      auto found = connection.pending.find(id);
      if (found == connection.pending.end()) return;
      found->second->error = std::move(why);
      found->second->done = true;
      connection.pending.erase(found);
    }
    changed.notify_all();
  }

  void died(Connection& connection, const std::exception_ptr& why) {
    std::string tail = connection.transport->stderrTail();
    {
      std::lock_guard lock(mutex);
      connection.alive = false;
      connection.death = why;
      lastFailure = why;
      lastStderr = std::move(tail);
      for (auto& [id, pending] : connection.pending) {
        pending->error = why;
        pending->done = true;
      }
      connection.pending.clear();
    }
    changed.notify_all();
  }

  // --- requests ----------------------------------------------------------------------------------

  // requestOnUntraced() in an MCP client span, `{mcp.method.name} {tool}` (docs/telemetry.md);
  // the trace goes to the server in the request's _meta.
  json requestOn(const std::shared_ptr<Connection>& connection, const std::string& method,
                 json params, Clock::time_point deadline, std::stop_token cancel,
                 const std::string& tool) {
    Span span(method, tool, SpanKind::Client);
    if (span.recording()) {
      span.set("mcp.method.name", method);
      if (!tool.empty()) {
        span.set("gen_ai.operation.name", "execute_tool");
        span.set("gen_ai.tool.name", tool);
      }
    }
    if (const TraceContext trace = currentTraceContext(); trace.valid()) {
      if (params.is_null()) params = json::object();
      if (params.is_object()) {
        params["_meta"]["traceparent"] = trace.traceparent();
        if (!trace.traceState.empty()) params["_meta"]["tracestate"] = trace.traceState;
      }
    }
    try {
      return requestOnUntraced(connection, method, std::move(params), deadline, std::move(cancel),
                               tool);
    } catch (const std::exception& e) {
      span.setError(e);
      throw;
    }
  }

  json requestOnUntraced(const std::shared_ptr<Connection>& connection, const std::string& method,
                         json params, Clock::time_point deadline, std::stop_token cancel,
                         const std::string& tool) {
    auto pending = std::make_shared<Pending>();
    pending->tool = tool;
    int64_t id;
    {
      std::lock_guard lock(mutex);
      if (!connection->alive) std::rethrow_exception(connection->death);
      id = nextId++;
      connection->pending.emplace(id, pending);
      if (method == "subscriptions/listen") {
        listenId = id;  // the subscription's id, which its notifications carry
        listenEvents = 0;
      }
    }
    if (!tool.empty()) params["_meta"]["progressToken"] = id;
    detail::McpRouting routing;
    if (!connection->requestMeta.is_null()) {
      // 2026-07-28: every request says its version and the client's capabilities.
      if (!params.is_object()) params = json::object();
      for (const auto& [key, value] : connection->requestMeta.items())
        params["_meta"][key] = value;
      routing.method = method;
      if (method == "tools/call" || method == "prompts/get")
        routing.name = stringField(params, "name");
      if (method == "tools/call") {
        std::lock_guard lock(mutex);
        if (auto found = headerParams.find(routing.name); found != headerParams.end()) {
          const json empty;
          const auto arguments = params.find("arguments");
          for (const auto& [property, header] : found->second)
            if (auto text = headerText(arguments == params.end() ? empty : *arguments, property))
              routing.params.emplace_back(header, std::move(*text));
        }
      } else if (method == "resources/read") {
        routing.name = stringField(params, "uri");
      } else if (method == "tasks/get" || method == "tasks/update" || method == "tasks/cancel") {
        routing.name = stringField(params, "taskId");  // routes to the instance holding the task
      }
    }
    json message = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    if (!params.is_null()) message["params"] = std::move(params);
    try {
      connection->transport->send(message.dump(-1, ' ', false, json::error_handler_t::replace), id,
                                  deadline, routing);
    } catch (...) {
      std::lock_guard lock(mutex);
      connection->pending.erase(id);
      throw;
    }
    std::unique_lock lock(mutex);
    bool done = changed.wait_until(lock, cancel, deadline, [&] { return pending->done; });
    // A person signing in (OAuth) is not a stalled server: the wait goes on while the sign-in
    // does, which its own handler bounds.
    while (!done && !cancel.stop_requested() && oauth && oauth->signingIn())
      done = changed.wait_until(lock, cancel, Clock::now() + std::chrono::milliseconds(200),
                                [&] { return pending->done; });
    if (done) {
      if (pending->error) std::rethrow_exception(pending->error);
      return std::move(pending->result);
    }
    connection->pending.erase(id);
    bool cancelled = cancel.stop_requested();
    lock.unlock();
    connection->transport->abandon(id);
    // The specification forbids cancelling initialize; the connection is dropped instead. A
    // server/discover that got no answer is not cancelled either: it may be a 2025-era server that
    // is waiting for initialize. Over 2026-07-28 HTTP, closing the stream (abandon()) is the
    // cancellation.
    bool statelessHttp = !connection->requestMeta.is_null() && options.command.empty();
    if (method != "initialize" && method != "server/discover" && !statelessHttp) {
      json notice = {
          {"jsonrpc", "2.0"},
          {"method", "notifications/cancelled"},
          {"params",
           {{"requestId", id},
            {"reason", cancelled ? "cancelled by the client" : "the client's timeout passed"}}}};
      // Bounded by kAnswerWait, not requestTimeout: the call's timeout bounds the whole call,
      // also against a server that stopped reading.
      try {
        connection->transport->send(notice.dump(), std::nullopt,
                                    Clock::now() + detail::kAnswerWait);
        std::lock_guard count(mutex);
        ++stats.cancellationsSent;
      } catch (const Error&) {
        // The server is gone or not reading: there is nothing more to do for it.
      }
    }
    if (cancelled) throw CancelledError(who() + ": " + method + " was cancelled");
    throw TimeoutError(who() + ": no answer to " + method + " in time");
  }

  void notify(Connection& connection, const std::string& method) {
    json message = {{"jsonrpc", "2.0"}, {"method", method}};
    connection.transport->send(message.dump(), std::nullopt, Clock::now() + options.requestTimeout);
  }

  // The connection to use, started (or restarted) and past the handshake.
  std::shared_ptr<Connection> connected() {
    std::unique_lock lock(mutex);
    for (;;) {
      if (closed) throw ConnectionError(who() + ": the client is closed");
      if (connection && connection->alive) return connection;
      if (!connecting) break;
      changed.wait(lock);  // another thread is connecting; bounded by its requestTimeout
    }
    if (stats.starts > 0) {
      if (restartsInRow >= options.maxRestarts) {
        std::string last = "unknown";
        try {
          if (lastFailure) std::rethrow_exception(lastFailure);
        } catch (const std::exception& e) {
          last = e.what();
        }
        throw ConnectionError(who() + " was given up on after " +
                              std::to_string(options.maxRestarts) +
                              " restarts in a row (maxRestarts); the last failure: " + last);
      }
      ++restartsInRow;
    }
    ++stats.starts;
    connecting = true;
    std::shared_ptr<Connection> old = std::move(connection);
    if (old && old->transport) nonJsonBefore += old->transport->nonJsonLines();
    lock.unlock();
    old.reset();  // closes it unless a request still holds it

    auto fresh = std::make_shared<Connection>();
    try {
      handshake(fresh);
    } catch (...) {
      std::exception_ptr failure = std::current_exception();
      std::string tail = fresh->transport ? fresh->transport->stderrTail() : std::string();
      {
        std::lock_guard relock(mutex);
        connecting = false;
        lastFailure = failure;
        if (fresh->transport) {
          nonJsonBefore += fresh->transport->nonJsonLines();
          lastStderr = tail;
        }
      }
      changed.notify_all();
      fresh.reset();
      std::rethrow_exception(failure);
    }
    lock.lock();
    connecting = false;
    if (closed) {
      lock.unlock();
      changed.notify_all();
      throw ConnectionError(who() + ": the client is closed");
    }
    connection = fresh;
    maybeListen(*fresh);
    lock.unlock();
    changed.notify_all();
    return fresh;
  }

  void handshake(const std::shared_ptr<Connection>& fresh) {
    fresh->transport = options.command.empty() ? detail::makeHttpTransport(options, oauth)
                                               : detail::makeStdioTransport(options);
    Connection* raw = fresh.get();
    detail::McpTransportEvents events;
    events.onMessage = [this, raw](std::string_view text) { return receive(*raw, text); };
    events.onRequestFailed = [this, raw](int64_t id, std::exception_ptr why) {
      requestFailed(*raw, id, std::move(why));
    };
    events.onClosed = [this, raw](const std::exception_ptr& why) { died(*raw, why); };
    fresh->transport->start(std::move(events));

    const std::string& wanted = options.protocol;
    std::string legacyVersion = "2025-11-25";
    if (wanted != "auto" && !mcpStatelessVersion(wanted)) {
      legacyVersion = wanted;
    } else if (wanted != "auto" || !knownLegacy) {
      std::optional<std::string> legacy = discover(fresh);
      if (!legacy) return;  // stateless from now on
      legacyVersion = *legacy;
      if (!options.command.empty()) {
        // A stdio server that did not answer server/discover is still reading it; initialize
        // follows on the same connection (the specification's fallback).
      } else {
        std::lock_guard lock(mutex);
        knownLegacy = true;  // an HTTP origin's era is kept: no probe on the next connection
      }
      fresh->transport->useProtocol("", false);
    }
    initialize(fresh, legacyVersion);
  }

  json clientCapabilities() const {
    json capabilities = json::object();
    if (options.onElicitation)
      capabilities["elicitation"] = {{"form", json::object()}, {"url", json::object()}};
    if (options.onSampling) capabilities["sampling"] = json::object();
    if (!options.roots.empty()) capabilities["roots"] = {{"listChanged", false}};
    return capabilities;
  }

  // 2026-07-28: server/discover in the newest stateless revision asked for, again in the one the
  // server names when it answers UnsupportedProtocolVersionError. Returns nullopt when the
  // connection is stateless from now on; else the 2025-era version to initialize with (only
  // with protocol "auto": a pinned 2026 revision the server does not answer is an error).
  std::optional<std::string> discover(const std::shared_ptr<Connection>& fresh) {
    const bool pinned = options.protocol != "auto";
    std::string version = pinned ? options.protocol : kMcpProtocolVersions.front();
    const bool stdio = !options.command.empty();
    std::chrono::milliseconds wait = stdio && !pinned
                                         ? std::min(options.discoverTimeout, options.requestTimeout)
                                         : options.requestTimeout;
    auto legacyOr = [&](const std::string& why) -> std::optional<std::string> {
      if (pinned)
        throw ProtocolError(who() + " does not speak protocol version " + version + ": " + why);
      return std::string("2025-11-25");
    };
    // The versions a modern error or a discover result names: the newest both speak.
    auto choose = [&](const json& offered, const std::string& where) -> std::string {
      std::vector<std::string> both = common(offered);
      if (pinned) {
        if (std::find(both.begin(), both.end(), version) != both.end()) return version;
        throw ProtocolError(who() + " does not speak protocol version " + version + " (" + where +
                            " names " + offered.dump() + ")");
      }
      if (both.empty())
        throw ProtocolError(who() + " speaks none of parley's protocol versions (" + where +
                            " names " + offered.dump() + ")");
      return both.front();
    };
    for (int attempt = 0; attempt < 2; ++attempt) {
      json capabilities = clientCapabilities();
      if (options.tasks) capabilities["extensions"][kTasksExtension] = json::object();
      fresh->requestMeta = {{kMetaVersion, version},
                            {kMetaCapabilities, std::move(capabilities)},
                            {kMetaClient, {{"name", "parley"}, {"version", PARLEY_VERSION}}}};
      fresh->transport->useProtocol(version, true);
      json supported;
      try {
        json result =
            requestOn(fresh, "server/discover", json::object(), Clock::now() + wait, {}, "");
        if (!result.is_object() || !result.contains("supportedVersions"))
          return legacyOr("its server/discover result has no supportedVersions");
        std::string chosen = choose(result["supportedVersions"], "server/discover");
        if (!mcpStatelessVersion(chosen)) {
          fresh->requestMeta = nullptr;
          return chosen;  // only the 2025 era in common ("auto")
        }
        if (chosen != version) {
          version = chosen;
          continue;  // discover again in the version both speak
        }
        McpServerInfo& info = fresh->info;
        info.protocolVersion = version;
        info.stateless = true;
        info.supportedVersions.clear();
        for (const json& item : result["supportedVersions"])
          if (item.is_string() && info.supportedVersions.size() < 32)
            info.supportedVersions.push_back(item.get<std::string>());
        // serverInfo belongs in _meta; some servers of the drafts put it beside.
        json meta = result.value("_meta", json::object());
        json server =
            meta.is_object() ? meta.value("io.modelcontextprotocol/serverInfo", json()) : json();
        if (!server.is_object()) server = result.value("serverInfo", json());
        if (server.is_object()) {
          info.name = stringField(server, "name");
          info.version = stringField(server, "version");
        }
        info.instructions = stringField(result, "instructions");
        if (auto caps = result.find("capabilities"); caps != result.end() && caps->is_object())
          info.capabilities = *caps;
        return std::nullopt;
      } catch (const McpError& e) {
        if (e.code() != kUnsupportedProtocolVersion) return legacyOr(e.what());
        supported = e.data().is_object() ? e.data().value("supported", json()) : json();
      } catch (const HttpError& e) {
        json error = rpcErrorOf(e);
        if (!error.is_object() || error.value("code", 0) != kUnsupportedProtocolVersion)
          return legacyOr(e.what());
        json data = error.value("data", json());
        supported = data.is_object() ? data.value("supported", json()) : json();
      } catch (const TimeoutError& e) {
        // Over stdio a 2025-era server may keep quiet before initialize; over HTTP a timeout is
        // a timeout.
        if (!stdio) throw;
        return legacyOr(e.what());
      }
      // UnsupportedProtocolVersionError: a 2026-era server; never fall back to initialize
      // unless it names only 2025-era versions.
      std::string chosen = choose(supported, "its UnsupportedProtocolVersionError");
      if (!mcpStatelessVersion(chosen)) {
        fresh->requestMeta = nullptr;
        return chosen;
      }
      // The same version again: once (a server may refuse a first request it would take).
      version = chosen;
    }
    throw ProtocolError(who() + " refused protocol version " + version +
                        " that it names as supported");
  }

  void initialize(const std::shared_ptr<Connection>& fresh, const std::string& version) {
    fresh->requestMeta = nullptr;
    json params = {{"protocolVersion", version},
                   {"capabilities", clientCapabilities()},
                   {"clientInfo", {{"name", "parley"}, {"version", PARLEY_VERSION}}}};
    json result;
    try {
      result = requestOn(fresh, "initialize", std::move(params),
                         Clock::now() + options.requestTimeout, {}, "");
    } catch (const TimeoutError& e) {
      // Our own wait ran out; a timeout on the way (a sign-in's) keeps its message.
      if (std::string_view(e.what()).find("no answer to initialize in time") == std::string::npos)
        throw;
      throw TimeoutError(who() + " did not answer initialize within " +
                         std::to_string(options.requestTimeout.count()) + " ms (requestTimeout)" +
                         diagnostics(*fresh));
    }
    if (!result.is_object())
      throw ProtocolError(who() + ": the initialize result is not an object");
    McpServerInfo& info = fresh->info;
    info.protocolVersion = stringField(result, "protocolVersion");
    if (mcpStatelessVersion(info.protocolVersion) ||
        std::find(kMcpProtocolVersions.begin(), kMcpProtocolVersions.end(), info.protocolVersion) ==
            kMcpProtocolVersions.end()) {
      std::string known;
      for (const std::string& each : kMcpProtocolVersions)
        if (!mcpStatelessVersion(each)) known += (known.empty() ? "" : ", ") + each;
      throw ProtocolError(who() + " speaks protocol version \"" + info.protocolVersion +
                          "\" in initialize; parley speaks " + known + " there");
    }
    if (auto server = result.find("serverInfo"); server != result.end() && server->is_object()) {
      info.name = stringField(*server, "name");
      info.version = stringField(*server, "version");
    }
    info.instructions = stringField(result, "instructions");
    if (auto caps = result.find("capabilities"); caps != result.end() && caps->is_object())
      info.capabilities = *caps;
    notify(*fresh, "notifications/initialized");
    fresh->transport->handshakeDone(info.protocolVersion);
  }

  std::string diagnostics(const Connection& connection) const {
    std::string text;
    int nonJson = connection.transport ? connection.transport->nonJsonLines() : 0;
    if (nonJson > 0)
      text += "; it wrote " + std::to_string(nonJson) + " lines on stdout that are not JSON-RPC";
    std::string tail = connection.transport ? connection.transport->stderrTail() : std::string();
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r'))
      tail.pop_back();
    if (tail.size() > 600) tail = "..." + tail.substr(tail.size() - 600);
    if (!tail.empty()) text += "; its stderr ends with: " + tail;
    return text;
  }

  json request(const std::string& method, json params, std::chrono::milliseconds timeout,
               std::stop_token cancel = {}, const std::string& tool = "") {
    std::shared_ptr<Connection> connection = connected();
    return requestOn(connection, method, std::move(params), Clock::now() + timeout,
                     std::move(cancel), tool);
  }

  // A request whose result may be 2026-07-28's input_required (tools/call, resources/read,
  // prompts/get): the server's requests are answered and the request sent again, with the
  // answers and the server's requestState exactly as it came, as a new request.
  json complete(const std::string& method, json params, std::chrono::milliseconds timeout,
                std::stop_token cancel, const std::string& tool,
                const McpElicitationHandler& elicit) {
    const json base = params;
    for (int round = 0;; ++round) {
      json result = request(method, std::move(params), timeout, cancel, tool);
      std::string type = result.is_object() ? stringField(result, "resultType") : std::string();
      if (type.empty() || type == "complete") return result;  // the 2025 era sends none
      // A task is followed by callTool(); only tools/call may be answered with one.
      if (type == "task" && method == "tools/call" && options.tasks) return result;
      if (type != "input_required")
        throw ProtocolError(who() + ": " + method + " answered with resultType " +
                            detail::mcpExcerpt(type, 40));
      if (round >= options.maxInputRounds)
        throw ProtocolError(who() + " still asks for input after " +
                            std::to_string(options.maxInputRounds) + " rounds of " + method +
                            " (maxInputRounds)");
      auto requests = result.find("inputRequests");
      auto state = result.find("requestState");
      if (requests == result.end() && state == result.end())
        throw ProtocolError(who() + ": an input_required result of " + method +
                            " has neither inputRequests nor requestState");
      params = base;
      if (requests != result.end())
        params["inputResponses"] = answerInputRequests(*requests, cancel, elicit);
      if (state != result.end()) {
        if (!state->is_string())
          throw ProtocolError(who() + ": the requestState of " + method + " is not a string");
        params["requestState"] = std::move(*state);
      }
    }
  }

  // The answers to an input_required result's inputRequests, under the same keys.
  json answerInputRequests(const json& requests, std::stop_token cancel,
                           const McpElicitationHandler& elicit) {
    if (!requests.is_object()) throw ProtocolError(who() + ": inputRequests is not an object");
    if (requests.size() > options.maxInputRequests)
      throw ProtocolError(who() + " asks for " + std::to_string(requests.size()) +
                          " inputs at once, more than " + std::to_string(options.maxInputRequests) +
                          " (maxInputRequests)");
    json answers = json::object();
    for (const auto& [key, asked] : requests.items()) {
      std::string method = asked.is_object() ? stringField(asked, "method") : std::string();
      json params = asked.is_object() ? asked.value("params", json::object()) : json();
      const std::string& name = key;  // a structured binding clang cannot capture
      auto refuse = [&](const std::string& why) {
        return ProtocolError(who() + ": input request \"" + name + "\" (" +
                             (method.empty() ? std::string("no method") : method) + "): " + why);
      };
      if (method == "elicitation/create") {
        if (!elicit) throw refuse("this client did not offer elicitation");
        std::string problem = detail::checkElicitation(params, options);
        if (!problem.empty()) throw refuse(problem);
        answers[key] = detail::runElicitation(params, options, elicit, cancel);
      } else if (method == "sampling/createMessage") {
        if (!options.onSampling) throw refuse("this client did not offer sampling");
        std::string problem = detail::checkSampling(params, options);
        if (!problem.empty()) throw refuse(problem);
        answers[key] = detail::runSampling(params, options, cancel);
      } else if (method == "roots/list") {
        if (options.roots.empty()) throw refuse("this client did not offer roots");
        answers[key] = {{"roots", rootsJson()}};
      } else {
        throw refuse("not a request a server may make of a client");
      }
    }
    return answers;
  }

  json rootsJson() const {
    json roots = json::array();
    for (const McpRoot& root : options.roots) {
      json item = {{"uri", root.uri}};
      if (!root.name.empty()) item["name"] = root.name;
      roots.push_back(std::move(item));
    }
    return roots;
  }

  // --- subscriptions/listen (docs/mcp.md, "Listening for changes") --------------------------

  // A notification of the listen stream: counted (past maxListenEvents the stream is ended and
  // opened again after a pause); an acknowledgment without toolsListChanged ends listening.
  // Returns false when it is to be dropped.
  bool listenNotification(const std::string& method, const json& params) {
    if (!params.is_object()) return true;
    auto meta = params.find("_meta");
    if (meta == params.end() || !meta->is_object()) return true;
    auto sub = meta->find("io.modelcontextprotocol/subscriptionId");
    if (sub == meta->end()) return true;
    std::lock_guard lock(mutex);
    if (!sub->is_number_integer() || sub->get<int64_t>() != listenId) return false;  // not ours
    if (method == "notifications/subscriptions/acknowledged") {
      json agreed = params.value("notifications", json::object());
      ++stats.listenStreams;
      if (!agreed.is_object() || agreed.value("toolsListChanged", json()) != true) {
        listenRefused = true;
        if (listenStream) listenStream->request_stop();
      }
      return false;
    }
    if (++listenEvents > options.maxListenEvents) {
      if (listenStream) listenStream->request_stop();
      return false;
    }
    return true;
  }

  // Starts the listener once: a stateless server that says its tools may change
  // (capabilities.tools.listChanged), and someone to tell (onToolsChanged). Under `mutex`.
  void maybeListen(const Connection& connection) {
    if (listener.joinable() || closed || !options.listen || !toolsChanged) return;
    if (connection.requestMeta.is_null()) return;
    const json& caps = connection.info.capabilities;
    auto tools = caps.find("tools");
    if (tools == caps.end() || !tools->is_object() || tools->value("listChanged", json()) != true)
      return;
    listener = std::jthread([this](std::stop_token stop) { listen(stop); });
  }

  // Keeps one subscriptions/listen stream open until the client closes. A stream the server
  // ends with a result is not opened again; one that breaks (or passes maxListenEvents) is, after
  // listenBackoff doubled per failure in a row (at most 30 s), at most maxListenReconnects times
  // in a row; an acknowledged stream starts the count again.
  void listen(std::stop_token stop) {
    int failures = 0;
    std::chrono::milliseconds pause = options.listenBackoff;
    while (!stop.stop_requested()) {
      auto stream = std::make_shared<std::stop_source>();
      std::stop_callback forward(stop, [stream] { stream->request_stop(); });
      int streamsBefore;
      {
        std::lock_guard lock(mutex);
        listenStream = stream;
        streamsBefore = stats.listenStreams;
      }
      bool ended = false;
      try {
        std::shared_ptr<Connection> connection = connected();
        // The stream stays open as long as the client: the deadline is a year away.
        requestOn(connection, "subscriptions/listen",
                  {{"notifications", {{"toolsListChanged", true}}}},
                  Clock::now() + std::chrono::hours(24 * 365), stream->get_token(), "");
        ended = true;  // the server ended it with a result: it has nothing more to say
      } catch (const ConnectionError&) {
        // Broken (or the client closing): opened again below.
      } catch (const CancelledError&) {
        // Cut at the events cap (or the client closing): opened again below.
      } catch (const Error&) {
        // Refused (an error answer such as -32601, an HTTP status, a bad message): not again.
        std::lock_guard lock(mutex);
        listenStream.reset();
        return;
      }
      std::unique_lock lock(mutex);
      listenStream.reset();
      if (ended || listenRefused || stop.stop_requested() || closed) return;
      if (stats.listenStreams > streamsBefore) {
        failures = 0;  // it was acknowledged: a stream that worked
        pause = options.listenBackoff;
      }
      if (++failures > options.maxListenReconnects) {
        stats.listenGaveUp = true;
        return;
      }
      changed.wait_for(lock, stop, pause, [&] { return closed; });
      pause = std::min(pause * 2, std::chrono::milliseconds(30'000));
      ++stats.listenReconnects;
    }
  }

  // --- the tasks extension (docs/mcp.md, "Tasks") ---------------------------------------------

  // Follows task `taskId` (whose latest state is `task`, or null to ask first) until it ends:
  // tasks/get at the server's pollIntervalMs, the server's inputRequests answered with
  // tasks/update. Returns the CallToolResult of a completed task. The caller stopping, the
  // deadline, a cap or any failure but the connection's cancels the task (tasks/cancel).
  json followTask(const std::string& taskId, json task, Clock::time_point deadline,
                  std::stop_token cancel, const McpElicitationHandler& elicit) {
    {
      std::lock_guard lock(mutex);
      ++stats.tasksFollowed;
    }
    std::set<std::string> answered;  // inputRequests keys answered (they are unique per task)
    int polls = 0;
    try {
      for (;;) {
        if (task.is_object()) {
          std::string status = stringField(task, "status");
          if (status == "completed") {
            auto result = task.find("result");
            if (result == task.end() || !result->is_object())
              throw ProtocolError(who() + ": completed task " + taskId + " has no result object");
            return std::move(*result);
          }
          if (status == "failed") {
            json error = task.value("error", json::object());
            if (!error.is_object()) error = json::object();
            throw McpError(error.value("code", json(-32603)).is_number_integer()
                               ? error["code"].get<int>()
                               : -32603,
                           who() + ": task " + taskId + " failed: " +
                               detail::mcpExcerpt(error.value("message", json("")).is_string()
                                                      ? error["message"].get<std::string>()
                                                      : std::string(),
                                                  500),
                           error.value("data", json()));
          }
          if (status == "cancelled") return cancelledResult(taskId, task);
          if (status == "input_required") {
            json requests = task.value("inputRequests", json::object());
            if (requests.is_object()) {
              json fresh = json::object();
              for (const auto& [key, value] : requests.items())
                if (!answered.contains(key)) fresh[key] = value;
              if (!fresh.empty()) {
                json answers = answerInputRequests(fresh, cancel, elicit);
                for (const auto& [key, value] : answers.items())
                  answered.insert(key);
                request("tasks/update",
                        {{"taskId", taskId}, {"inputResponses", std::move(answers)}},
                        remaining(deadline), cancel);
              }
            }
          } else if (status != "working") {
            throw ProtocolError(who() + ": task " + taskId + " has status " +
                                detail::mcpExcerpt(status, 40));
          }
        }
        if (!task.is_null()) {
          if (polls >= options.maxTaskPolls)
            throw ProtocolError(who() + ": task " + taskId + " did not end within " +
                                std::to_string(options.maxTaskPolls) + " polls (maxTaskPolls)");
          waitToPoll(task, deadline, cancel);
        }
        ++polls;
        {
          std::lock_guard lock(mutex);
          ++stats.taskPolls;
        }
        task = request("tasks/get", {{"taskId", taskId}}, remaining(deadline), cancel);
        if (!task.is_object()) throw ProtocolError(who() + ": a tasks/get result is not an object");
        if (stringField(task, "taskId") != taskId)
          throw ProtocolError(who() + ": tasks/get for " + taskId + " answered another task");
      }
    } catch (const ConnectionError&) {
      throw;  // nobody to tell; the task stays, to be resumed
    } catch (...) {
      cancelTask(taskId);
      throw;
    }
  }

  // What is left of the call's time; a passed deadline still leaves the request a moment, so
  // that it fails as a timeout rather than not being sent.
  static std::chrono::milliseconds remaining(Clock::time_point deadline) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }

  // Waits the task's pollIntervalMs (clipped), the caller's stop, the deadline or close().
  void waitToPoll(const json& task, Clock::time_point deadline, std::stop_token cancel) {
    std::chrono::milliseconds interval = options.taskPollMax;
    if (auto given = task.find("pollIntervalMs"); given != task.end() && given->is_number_integer())
      interval = std::chrono::milliseconds(std::clamp<int64_t>(
          given->get<int64_t>(), options.taskPollMin.count(), options.taskPollMax.count()));
    Clock::time_point until = std::min(Clock::now() + interval, deadline);
    std::unique_lock lock(mutex);
    changed.wait_until(lock, cancel, until, [&] { return closed; });
    if (closed) throw ConnectionError(who() + ": the client is closed");
    if (cancel.stop_requested()) throw CancelledError(who() + ": the call was cancelled");
    if (Clock::now() >= deadline)
      throw TimeoutError(who() + ": task did not end within the call's timeout");
  }

  // A task the server cancelled: an error result the model reads.
  json cancelledResult(const std::string& taskId, const json& task) const {
    std::string why = stringField(task, "statusMessage");
    return {{"content",
             json::array({{{"type", "text"},
                           {"text", who() + " cancelled task " + taskId +
                                        (why.empty() ? std::string()
                                                     : ": " + detail::mcpExcerpt(why, 500))}}})},
            {"isError", true}};
  }

  // tasks/cancel, once, briefly: cancellation is the server's to honour.
  void cancelTask(const std::string& taskId) {
    try {
      request("tasks/cancel", {{"taskId", taskId}}, std::chrono::milliseconds(2'000));
      std::lock_guard lock(mutex);
      ++stats.tasksCancelled;
    } catch (const Error&) {
      // The server is gone or refuses: nothing more to do for the task.
    }
  }

  // --- the 2026-07-28 caching hints (docs/mcp.md, "Caching") ---------------------------------

  // Who may share this connection's cached pages: the server (the URL and the headers sent
  // besides credentials; a stdio child is this client's alone) and what the client says of itself
  // in _meta (version, capabilities), which may shape a result. Empty: nothing is cached (the
  // 2025 era has no caching hints).
  std::string cacheScopeOf(const Connection& connection) const {
    if (connection.requestMeta.is_null()) return "";
    std::string scope = options.command.empty() ? "http " + options.url : stdioScope;
    for (const auto& [name, value] : options.headers)
      if (!isAuthorizationHeader(name)) scope += "\n" + name + ": " + value;
    return detail::sha256Hex(scope + "\n" + connection.requestMeta.dump());
  }

  static bool isAuthorizationHeader(const std::string& name) {
    static const std::string kAuthorization = "authorization";
    return name.size() == kAuthorization.size() &&
           std::equal(name.begin(), name.end(), kAuthorization.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  }

  // The credentials requests carry now (a digest: no token is kept in the cache's keys). Pages
  // marked "private" are reused only under the same credentials.
  std::string authorizationContext() const {
    std::string context = oauth ? oauth->held() : options.bearerToken;
    for (const auto& [name, value] : options.headers)
      if (isAuthorizationHeader(name)) context += "\n" + value;
    return detail::sha256Hex(context);
  }

  void forgetList(const Connection& connection, const std::string& method) {
    std::string scope = cacheScopeOf(connection);
    if (!scope.empty()) detail::McpListCache::shared().forget(scope, method);
  }

  // A page's ttlMs as a duration: absent, not an integer, zero or negative is none (docs/mcp.md:
  // such a list is kept until the server says it changed); at most a day.
  static std::optional<std::chrono::milliseconds> ttlOf(const json& result) {
    auto ttl = result.find("ttlMs");
    if (ttl == result.end() || !ttl->is_number_integer()) return std::nullopt;
    int64_t ms = ttl->get<int64_t>();
    if (ms <= 0) return std::nullopt;
    return std::chrono::milliseconds(std::min<int64_t>(ms, kMaxListTtl.count()));
  }
  static constexpr std::chrono::milliseconds kMaxListTtl{24 * 3600 * 1000};

  // All pages of a */list request; `key` names the array in each page. A page the server gave a
  // positive ttlMs is kept in the list cache and reused while it is fresh; `expires` (when set)
  // gets the earliest end of freshness among the pages, unset when none had a ttl.
  std::vector<json> listAll(const std::string& method, const std::string& key, std::size_t maxItems,
                            std::size_t maxBytes = SIZE_MAX,
                            std::optional<Clock::time_point>* expires = nullptr) {
    std::shared_ptr<Connection> connection = connected();
    const std::string scope = cacheScopeOf(*connection);
    const std::string context = scope.empty() ? std::string() : authorizationContext();
    detail::McpListCache& cache = detail::McpListCache::shared();
    std::optional<Clock::time_point> earliest;
    std::vector<json> items;
    std::size_t bytes = 0;
    std::string cursor;
    for (int page = 0; page < options.maxListPages; ++page) {
      json result;
      std::optional<detail::McpCachedPage> cached;
      if (!scope.empty()) cached = cache.find(scope, method, cursor, context);
      if (cached) {
        result = std::move(cached->result);
        earliest = std::min(earliest.value_or(cached->expires), cached->expires);
        std::lock_guard lock(mutex);
        ++stats.cachedListPages;
      } else {
        json params = json::object();
        if (!cursor.empty()) params["cursor"] = cursor;
        try {
          result = requestOn(connection, method, std::move(params),
                             Clock::now() + options.requestTimeout, {}, "");
        } catch (...) {
          // A cursor the server no longer takes, or any failure: start afresh next time.
          if (!scope.empty()) cache.forget(scope, method);
          throw;
        }
        if (result.is_object() && !scope.empty()) {
          if (auto ttl = ttlOf(result)) {
            Clock::time_point until = Clock::now() + *ttl;
            // Absent or unknown cacheScope: private, the scope that shares less.
            bool isPublic = result.value("cacheScope", json()) == "public";
            cache.store(scope, method, cursor, context, isPublic, result, until);
            earliest = std::min(earliest.value_or(until), until);
          }
        }
      }
      if (!result.is_object() || !result.contains(key) || !result[key].is_array())
        throw ProtocolError(who() + ": the " + method + " result has no \"" + key + "\" array");
      for (json& item : result[key]) {
        if (items.size() >= maxItems)
          throw ProtocolError(who() + " lists more than " + std::to_string(maxItems) + " " + key +
                              " (maxTools)");
        // Every tool definition goes with every model call: their total is capped too.
        if (maxBytes != SIZE_MAX) {
          bytes += item.dump().size();
          if (bytes > maxBytes)
            throw ProtocolError(who() + ": the definitions of its " + key + " take more than " +
                                std::to_string(maxBytes) + " bytes (maxToolBytes)");
        }
        items.push_back(std::move(item));
      }
      cursor = stringField(result, "nextCursor");
      if (cursor.empty()) {
        if (expires) *expires = earliest;
        return items;
      }
    }
    throw ProtocolError(who() + ": " + method + " has more than " +
                        std::to_string(options.maxListPages) + " pages (maxListPages)");
  }
};

namespace {

void checkOptions(const McpServerOptions& options) {
  if (options.command.empty() == options.url.empty())
    throw ValidationError("mcp." + options.name,
                          "give exactly one of command (a child process) and url (HTTP)");
  if (!options.command.empty() && options.command.front().empty())
    throw ValidationError("mcp." + options.name + ".command", "the program name is empty");
  if (!options.url.empty() && options.url.rfind("http://", 0) != 0 &&
      options.url.rfind("https://", 0) != 0)
    throw ValidationError("mcp." + options.name + ".url", "must start with http:// or https://");
  auto positive = [&](bool ok, const char* field, const char* rule) {
    if (!ok) throw ValidationError("mcp." + options.name + "." + field, rule);
  };
  positive(options.toolTimeout.count() > 0, "toolTimeout", "must be greater than zero");
  positive(options.requestTimeout.count() > 0, "requestTimeout", "must be greater than zero");
  positive(options.maxMessageBytes > 0, "maxMessageBytes", "must be greater than zero");
  positive(options.maxJsonDepth > 0, "maxJsonDepth", "must be greater than zero");
  positive(options.maxTools > 0, "maxTools", "must be greater than zero");
  positive(options.maxListPages > 0, "maxListPages", "must be greater than zero");
  positive(options.maxNonJsonLines >= 0, "maxNonJsonLines", "must not be negative");
  positive(options.maxRestarts >= 0, "maxRestarts", "must not be negative");
  positive(options.shutdownGrace.count() >= 0, "shutdownGrace", "must not be negative");
  positive(options.discoverTimeout.count() > 0, "discoverTimeout", "must be greater than zero");
  positive(options.maxInputRounds >= 0, "maxInputRounds", "must not be negative");
  positive(options.maxInputRequests > 0, "maxInputRequests", "must be greater than zero");
  positive(options.maxTaskPolls > 0, "maxTaskPolls", "must be greater than zero");
  positive(options.maxListenEvents > 0, "maxListenEvents", "must be greater than zero");
  positive(options.maxListenReconnects >= 0, "maxListenReconnects", "must not be negative");
  positive(options.listenBackoff.count() > 0, "listenBackoff", "must be greater than zero");
  positive(options.taskPollMin.count() > 0, "taskPollMin", "must be greater than zero");
  positive(options.taskPollMax >= options.taskPollMin, "taskPollMax",
           "must not be less than taskPollMin");
  if (options.protocol != "auto" &&
      std::find(kMcpProtocolVersions.begin(), kMcpProtocolVersions.end(), options.protocol) ==
          kMcpProtocolVersions.end()) {
    std::string known = "auto";
    for (const std::string& version : kMcpProtocolVersions)
      known += ", " + version;
    throw ValidationError("mcp." + options.name + ".protocol",
                          "\"" + options.protocol + "\" is not one of " + known);
  }
}

}  // namespace

McpClient::McpClient(McpServerOptions options) {
  if (options.name.empty())
    options.name = options.command.empty() ? options.url : options.command[0];
  checkOptions(options);
  impl_ = std::make_shared<Impl>(std::move(options));
}

McpClient::~McpClient() {
  close();
}

const McpServerOptions& McpClient::options() const noexcept {
  return impl_->options;
}

void McpClient::connect() {
  impl_->connected();
}

McpServerInfo McpClient::serverInfo() {
  return impl_->connected()->info;
}

std::vector<McpTool> McpClient::listTools() {
  std::vector<McpTool> tools;
  std::map<std::string, std::shared_ptr<CompiledSchema>> outputSchemas;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> headerParams;
  std::map<std::string, std::string> unusableTools;
  std::optional<Clock::time_point> expires;
  for (json& item : impl_->listAll("tools/list", "tools", impl_->options.maxTools,
                                   impl_->options.maxToolBytes, &expires)) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string() ||
        !validToolName(item["name"].get<std::string>()))
      throw ProtocolError(impl_->who() + ": tools/list has a tool without a name");
    McpTool tool;
    tool.name = item["name"].get<std::string>();
    tool.title = stringField(item, "title");
    tool.description = stringField(item, "description");
    if (auto schema = item.find("inputSchema"); schema != item.end() && schema->is_object())
      tool.inputSchema = std::move(*schema);
    if (auto schema = item.find("outputSchema"); schema != item.end())
      tool.outputSchema = std::move(*schema);
    if (auto annotations = item.find("annotations"); annotations != item.end())
      tool.annotations = std::move(*annotations);
    auto mirrored = headerParamsOf(tool.inputSchema, tool.unusable);
    if (!tool.unusable.empty())
      unusableTools[tool.name] = tool.unusable;
    else if (!mirrored.empty())
      headerParams[tool.name] = std::move(mirrored);
    if (tool.outputSchema.is_object()) {
      try {
        outputSchemas[tool.name] = std::make_shared<CompiledSchema>(
            tool.outputSchema, "tools." + tool.name + ".outputSchema", "structuredContent");
      } catch (const ValidationError&) {
        // A schema valijson cannot compile is not checked; the registry skips such a tool.
      }
    }
    tools.push_back(std::move(tool));
  }
  std::lock_guard lock(impl_->mutex);
  impl_->outputSchemas = std::move(outputSchemas);
  impl_->headerParams = std::move(headerParams);
  impl_->unusableTools = std::move(unusableTools);
  impl_->toolsExpire = expires;
  return tools;
}

bool McpClient::toolListStale() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->toolsExpire && Clock::now() >= *impl_->toolsExpire;
}

McpToolResult McpClient::callTool(const std::string& name, const json& arguments,
                                  const McpCallOptions& options) {
  {
    std::lock_guard lock(impl_->mutex);
    if (auto found = impl_->unusableTools.find(name); found != impl_->unusableTools.end())
      throw ValidationError("tool " + name, "cannot be called: " + found->second);
  }
  json params = {{"name", name}, {"arguments", arguments.is_null() ? json::object() : arguments}};
  // A call with its own elicitation handler answers the 2025 era's elicitation/create while it
  // is the only such call in flight.
  std::list<std::shared_ptr<const McpElicitationHandler>>::iterator own;
  bool registered = false;
  if (options.onElicitation && impl_->options.onElicitation) {
    std::lock_guard lock(impl_->mutex);
    own = impl_->callElicitors.insert(
        impl_->callElicitors.end(),
        std::make_shared<const McpElicitationHandler>(options.onElicitation));
    registered = true;
  }
  struct Unregister {
    Impl* impl;
    bool registered;
    std::list<std::shared_ptr<const McpElicitationHandler>>::iterator own;
    ~Unregister() {
      if (!registered) return;
      std::lock_guard lock(impl->mutex);
      impl->callElicitors.erase(own);
    }
  } unregister{impl_.get(), registered, own};
  const std::chrono::milliseconds timeout = options.timeout.value_or(impl_->options.toolTimeout);
  const Clock::time_point deadline = Clock::now() + timeout;
  const McpElicitationHandler& elicit =
      options.onElicitation ? options.onElicitation : impl_->options.onElicitation;
  json result;
  if (!options.resumeTask.empty()) {
    result = impl_->followTask(options.resumeTask, nullptr, deadline, options.cancel, elicit);
  } else {
    result =
        impl_->complete("tools/call", std::move(params), timeout, options.cancel, name, elicit);
    if (result.is_object() && stringField(result, "resultType") == "task") {
      std::string taskId = stringField(result, "taskId");
      if (taskId.empty() || taskId.size() > 1024)
        throw ProtocolError(impl_->who() + ": a task result of tools/call has no usable taskId");
      if (options.onTask) {
        try {
          options.onTask(taskId);
        } catch (...) {
          impl_->cancelTask(taskId);
          throw;
        }
      }
      result = impl_->followTask(taskId, std::move(result), deadline, options.cancel, elicit);
    }
  }
  if (!result.is_object())
    throw ProtocolError(impl_->who() + ": the tools/call result is not an object");
  McpToolResult out;
  if (auto content = result.find("content"); content != result.end() && content->is_array())
    out.content = std::move(*content);
  if (auto structured = result.find("structuredContent"); structured != result.end())
    out.structuredContent = std::move(*structured);
  if (auto isError = result.find("isError"); isError != result.end() && isError->is_boolean())
    out.isError = isError->get<bool>();
  std::shared_ptr<CompiledSchema> schema;
  {
    std::lock_guard lock(impl_->mutex);
    if (auto found = impl_->outputSchemas.find(name); found != impl_->outputSchemas.end())
      schema = found->second;
  }
  // A tool with an outputSchema must answer with structuredContent that matches it.
  if (schema && !out.isError) {
    std::string problem = out.structuredContent.is_null()
                              ? std::string("there is no structuredContent")
                              : schema->check(out.structuredContent);
    if (!problem.empty()) {
      out.isError = true;
      out.content = json::array({{{"type", "text"},
                                  {"text", impl_->who() + ": the result of " + name +
                                               " does not match its outputSchema: " + problem}}});
      out.structuredContent = nullptr;
    }
  }
  return out;
}

void McpClient::ping() {
  // 2026-07-28 removed ping; server/discover is the cheap request every server answers.
  bool stateless = impl_->connected()->info.stateless;
  impl_->request(stateless ? "server/discover" : "ping", stateless ? json::object() : json(),
                 impl_->options.requestTimeout);
}

McpListResult McpClient::listResources() {
  return {impl_->listAll("resources/list", "resources", impl_->options.maxTools)};
}

json McpClient::readResource(const std::string& uri) {
  return impl_->complete("resources/read", {{"uri", uri}}, impl_->options.requestTimeout, {}, "",
                         impl_->options.onElicitation);
}

McpListResult McpClient::listPrompts() {
  return {impl_->listAll("prompts/list", "prompts", impl_->options.maxTools)};
}

json McpClient::getPrompt(const std::string& name,
                          const std::map<std::string, std::string>& arguments) {
  json params = {{"name", name}};
  if (!arguments.empty()) params["arguments"] = arguments;
  return impl_->complete("prompts/get", std::move(params), impl_->options.requestTimeout, {}, "",
                         impl_->options.onElicitation);
}

void McpClient::onToolsChanged(std::function<void()> callback) {
  std::lock_guard lock(impl_->mutex);
  impl_->toolsChanged = std::move(callback);
}

void McpClient::close() {
  std::shared_ptr<Connection> connection;
  std::jthread listener;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->closed = true;
    listener = std::move(impl_->listener);
    if (listener.joinable()) listener.request_stop();
    connection = std::move(impl_->connection);
    if (connection) {
      auto why = std::make_exception_ptr(ConnectionError(impl_->who() + ": the client is closed"));
      for (auto& [id, pending] : connection->pending) {
        pending->error = why;
        pending->done = true;
      }
      connection->pending.clear();
      connection->alive = false;
      connection->death = why;
    }
  }
  impl_->changed.notify_all();
  impl_->stopServerCalls();
  if (listener.joinable()) listener.join();  // its stream ends with the connection's requests
  if (connection && connection->transport) connection->transport->close();
}

McpClient::Stats McpClient::stats() const {
  std::lock_guard lock(impl_->mutex);
  Stats stats = impl_->stats;
  stats.nonJsonLines = impl_->nonJsonBefore;
  if (impl_->connection) {
    stats.pendingRequests = impl_->connection->pending.size();
    stats.processId = impl_->connection->transport->processId();
    stats.nonJsonLines += impl_->connection->transport->nonJsonLines();
  }
  return stats;
}

std::string McpClient::stderrTail() const {
  std::lock_guard lock(impl_->mutex);
  if (impl_->connection && impl_->connection->transport)
    return impl_->connection->transport->stderrTail();
  return impl_->lastStderr;
}

}  // namespace parley
