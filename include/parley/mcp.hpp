// A Model Context Protocol client: the tools of an MCP server (a child process spoken to over
// stdio, or a Streamable HTTP endpoint) offered to the model like any other tool.
//
// McpClient speaks JSON-RPC 2.0 to one server: the revision chosen (2026-07-28's stateless
// `server/discover`, else the `initialize` handshake with `notifications/initialized`),
// `tools/list` with paging, `tools/call` with progress notifications and cancellation
// (`notifications/cancelled`), `ping` both ways, and the optional `resources/list|read` and
// `prompts/list|get`; of 2026-07-28 also the lists' caching hints, `subscriptions/listen` and
// the tasks extension. ToolRegistry::addMcpServer() (tools.hpp) registers a server's tools in a
// registry. What the protocol leaves open and how parley settles it is in docs/mcp.md.
//
// Limits: every message from the server is capped (maxMessageBytes, maxJsonDepth), and so are
// the tools listed (maxTools, maxToolBytes, maxListPages), the server's requests (elicitation
// schemas, sampling requests, how many at once), the OAuth documents, the lines on stdout that are
// not JSON-RPC (maxNonJsonLines), the stderr kept (maxStderrBytes), each request's time
// (requestTimeout; tools/call has its own) and the restarts (maxRestarts). No tool runs before the
// handshake succeeded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/errors.hpp"

namespace parley {

// The protocol revisions this client speaks, newest first. 2026-07-28 is stateless ("modern":
// no initialize, the version and capabilities in every request's _meta, server/discover); the
// others begin with the initialize handshake ("legacy"). McpServerOptions::protocol picks one, or
// "auto": the newest the server speaks too (docs/mcp.md, "Revisions and negotiation").
inline const std::vector<std::string> kMcpProtocolVersions = {
    "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

// True for a stateless revision (2026-07-28 and later).
bool mcpStatelessVersion(const std::string& version);

// At most this many MCP servers per ToolRegistry (ToolRegistry::addMcpServer()).
inline constexpr std::size_t kMaxMcpServersPerRegistry = 16;

// The server answered a request with a JSON-RPC error object.
class McpError : public Error {
 public:
  McpError(int code, const std::string& message, nlohmann::json data);
  int code() const noexcept { return code_; }
  const nlohmann::json& data() const noexcept { return data_; }

 private:
  int code_;
  nlohmann::json data_;
};

// Who may run a server's tools without asking a human (ToolOptions::requiresApproval).
enum class McpApproval {
  Never,   // no tool needs approval (the default)
  Always,  // every tool needs approval
  Listed,  // the tools named in McpServerOptions::approveTools need approval
  // A tool needs approval unless its annotations say it only reads (readOnlyHint: true) or does
  // nothing destructive (destructiveHint: false); the specification's defaults make a tool
  // without annotations destructive. Annotations are the server's word: a server that lies
  // about them escapes this policy (use Always for a server you do not trust).
  Destructive,
};

struct McpServerOptions;
struct McpTool;

// Whether `tool` needs a person's approval under the server's policy (McpServerOptions::approval,
// approveTools, the tool's annotations). ToolRegistry::addMcpServer() sets
// ToolOptions::requiresApproval from it.
bool mcpToolNeedsApproval(const McpServerOptions& options, const McpTool& tool);
// Whether calling `tool` twice does no harm by its annotations (readOnlyHint or idempotentHint
// true): ToolOptions::idempotent, so a durable run whose worker died mid-call runs it again.
bool mcpToolIsIdempotent(const McpTool& tool);

// A progress notification for a tools/call in flight.
struct McpProgress {
  std::string server;  // McpServerOptions::name
  std::string tool;    // the server's name for the tool
  double progress = 0;
  std::optional<double> total;
  std::string message;
};

// --- the server asks the user (elicitation/create) --------------------------------------------

// What a server asks for: a form (`requestedSchema`, a flat object of strings, numbers, integers,
// booleans and enums, checked against the caps of McpServerOptions before the handler sees it)
// or a page for the person to open (`url`: mode "url", 2025-11-25).
struct McpElicitation {
  std::string server;  // McpServerOptions::name
  std::string mode;    // "form" or "url"
  std::string message;
  nlohmann::json requestedSchema = nlohmann::json::object();  // form
  std::string url;                                            // url
  std::string elicitationId;                                  // url
};

struct McpElicitationAnswer {
  enum class Action { Accept, Decline, Cancel };
  Action action = Action::Decline;
  // Form mode with Accept: the values given. The schema's defaults fill in what is left out
  // (SEP-1034), and the result is checked against the schema before it is sent.
  nlohmann::json content = nlohmann::json::object();
};

// Called on a thread of the client's own (never the one reading the connection), so it may ask
// a person and wait; it should return soon after `cancel` is requested (the server cancelled
// the request or the client closes). Throwing sends the server an error instead.
using McpElicitationHandler =
    std::function<McpElicitationAnswer(const McpElicitation&, std::stop_token cancel)>;

// --- the server asks for a model completion (sampling/createMessage)
// ------------------------------

// The request's params as the server sent them (messages, systemPrompt, maxTokens, ...), after
// the caps of McpServerOptions (messages, bytes; maxTokens clipped to samplingMaxTokens).
struct McpSamplingRequest {
  std::string server;
  nlohmann::json params = nlohmann::json::object();
};

// Answers with a CreateMessageResult ({"role":"assistant","content":{...},"model":...}); throws to
// refuse (the server gets a JSON-RPC error with the message). Same thread rules as elicitation.
using McpSamplingHandler =
    std::function<nlohmann::json(const McpSamplingRequest&, std::stop_token cancel)>;

// A root the client offers the server (roots/list).
struct McpRoot {
  std::string uri;  // file://...
  std::string name;
};

// --- OAuth 2.1 for Streamable HTTP servers
// ---------------------------------------------------------

// A sign-in to show a person: open `url` in a browser; the authorization server sends the browser
// back to `redirectUri` with a code and `state`.
struct McpAuthorizationRequest {
  std::string server;
  std::string url;
  std::string redirectUri;
  std::string state;
};

// Shows the sign-in and returns the URL the browser was sent back to (with code and state);
// throws to give up. Runs on a transport thread; it should return once `cancel` is requested.
using McpAuthorizeHandler =
    std::function<std::string(const McpAuthorizationRequest&, std::stop_token cancel)>;

// How to sign in to an HTTP server that answers 401 (the MCP authorization specification of
// 2025-11-25, with the 2025-03-26 fallbacks; docs/mcp.md).
struct McpOAuthOptions {
  // Set: sign in when the server asks; unset: a 401 is an error (a static bearerToken may do).
  McpAuthorizeHandler authorize;
  std::string redirectUri = "http://127.0.0.1:33418/callback";
  // A client registered beforehand (its secret, if any); else a client ID metadata document
  // (`clientMetadataUrl`, when the authorization server supports them), else dynamic client
  // registration under `clientName`.
  std::string clientId;
  std::string clientSecret;
  std::string clientMetadataUrl;
  std::string clientName = "parley";
  std::vector<std::string> scopes;  // asked for instead of what the server names, when set
  // Where tokens and the registration are kept between runs (created 0600, one entry per server
  // URL); "" keeps them in memory only. Tokens are never logged nor put in error messages.
  std::string tokenFile;
  int maxAuthorizations = 3;                // sign-ins for one request, step-up included
  std::size_t maxDocumentBytes = 64 << 10;  // each metadata document, registration, token answer
  std::chrono::milliseconds httpTimeout{10'000};  // each request to the authorization server
};

// For an authorization server that approves without a person (tests, the conformance suite):
// requests the sign-in URL without following the redirect and returns where it points.
// Throws ConnectionError/TimeoutError, or ProtocolError when the answer is not a redirect.
std::string mcpFollowAuthorizationRedirect(const McpAuthorizationRequest& request,
                                           std::chrono::milliseconds timeout);

// For a person with a browser: listens on the loopback address and port of
// `request.redirectUri` (http://127.0.0.1:PORT/PATH or http://localhost:PORT/PATH), calls
// `show(request.url)` once it listens (print it, open a browser), and returns the URL the browser
// comes back to, answering it with a short page. Gives up after `timeout` (TimeoutError) or when
// `cancel` is requested (CancelledError); ValidationError for a redirect URI that is not loopback.
std::string mcpAwaitBrowserSignIn(const McpAuthorizationRequest& request,
                                  const std::function<void(const std::string& url)>& show,
                                  std::chrono::milliseconds timeout, std::stop_token cancel);

// How to reach one server and what to take from it. Checked by McpClient's constructor.
struct McpServerOptions {
  // A label for messages, and the prefix of tool names with prefixToolNames. For
  // ToolRegistry::addMcpServer() it must match ^[a-zA-Z0-9_-]{1,32}$.
  std::string name;

  // --- stdio: the server is a child process (exactly one of `command` and `url` is set) ------
  // argv, run without a shell; argv[0] is looked up in PATH.
  std::vector<std::string> command;
  // The child's environment: the variables named in `inheritEnv` that are set here, then `env`
  // on top. Nothing else leaks from this process (API keys in particular).
  std::vector<std::string> inheritEnv = {"HOME", "LOGNAME", "PATH", "SHELL",
                                         "TERM", "USER",    "LANG", "TMPDIR"};
  std::map<std::string, std::string> env;
  std::string cwd;  // "" keeps this process's working directory

  // --- Streamable HTTP: the server's MCP endpoint, http:// or https:// ------------------------
  std::string url;
  std::string bearerToken;                     // sent as "Authorization: Bearer ..." when set
  std::map<std::string, std::string> headers;  // extra request headers
  McpOAuthOptions oauth;                       // sign-in when the server asks for it

  // --- the protocol revision ----------------------------------------------------------------
  // "auto": server/discover first (2026-07-28); a server that answers it is spoken to statelessly
  // in the newest revision both speak, one that does not (an error that is not a 2026 error, or
  // no answer within discoverTimeout) gets the initialize handshake of 2025-11-25. Or one of
  // kMcpProtocolVersions, and nothing else is tried.
  std::string protocol = "auto";
  // "auto": how long a server may take to answer server/discover before it is taken for one of
  // the 2025 era (over stdio such a server may never answer a request before initialize).
  std::chrono::milliseconds discoverTimeout{5'000};

  // --- what the client offers the server (declared in initialize) -----------------------------
  McpElicitationHandler onElicitation;  // set: capability "elicitation" (form and url)
  McpSamplingHandler onSampling;        // set: capability "sampling"
  std::vector<McpRoot> roots;           // non-empty: capability "roots"

  // --- which tools, and how they run -----------------------------------------------------------
  bool prefixToolNames = false;    // register "name__tool" instead of "tool"
  std::vector<std::string> allow;  // the server's tool names to take; empty: all of them
  std::vector<std::string> deny;   // tool names never taken (applied after `allow`)
  McpApproval approval = McpApproval::Never;
  std::vector<std::string> approveTools;          // with McpApproval::Listed; the server's names
  std::chrono::milliseconds toolTimeout{60'000};  // each tools/call (ToolOptions::timeout)
  // The model sees a result's structuredContent rather than its content blocks.
  bool useStructuredContent = false;
  // Called on a transport thread for each progress notification of a tools/call; must not block.
  std::function<void(const McpProgress&)> onProgress;
  // ToolRegistry::addMcpServer(): called (on a pool thread) after the server said its tools
  // changed and the registry listed them again, with the names now registered; also (on the
  // thread building a request's tools) after a list whose 2026-07-28 ttlMs passed was read again
  // and differed. Never after the registry is destroyed. It must not call back into the
  // registry's MCP servers.
  std::function<void(const std::vector<std::string>& tools)> onToolsRefreshed;

  // --- limits ----------------------------------------------------------------------------------
  // Every request other than tools/call (initialize, tools/list, ping, ...), and starting the
  // child; a stalled server is given up on after this long.
  std::chrono::milliseconds requestTimeout{30'000};
  std::size_t maxMessageBytes = std::size_t{4} << 20;  // one JSON-RPC message from the server
  int maxJsonDepth = 64;                               // nesting of one message
  std::size_t maxTools = 512;                          // tools taken from tools/list
  int maxListPages = 32;                               // pages of one */list
  int maxNonJsonLines = 100;  // stdio: lines on stdout that are not JSON-RPC before giving up
  std::size_t maxStderrBytes = 16 << 10;  // stdio: the tail of stderr kept for error messages
  std::size_t maxToolBytes = std::size_t{1} << 20;  // all tools of tools/list, as JSON
  // The server's requests: how many wait for a handler at once (more get an error), the size of
  // an elicitation schema and its properties, a sampling request's size and messages, and the
  // maxTokens a sampling request may ask for (larger is clipped).
  int maxServerRequestsInFlight = 4;
  std::size_t maxElicitationSchemaBytes = 16 << 10;
  std::size_t maxElicitationProperties = 32;
  std::size_t maxSamplingBytes = std::size_t{1} << 20;
  std::size_t maxSamplingMessages = 64;
  int samplingMaxTokens = 4096;
  // 2026-07-28 multi round-trip requests: a tools/call, resources/read or prompts/get answered
  // with input_required is sent again with the answers at most maxInputRounds times, and one such
  // result may ask for at most maxInputRequests things (more: ProtocolError).
  int maxInputRounds = 8;
  std::size_t maxInputRequests = 8;
  // The tasks extension (io.modelcontextprotocol/tasks, 2026-07-28): a tools/call the server
  // answers with a task is followed with tasks/get at the server's pollIntervalMs (clipped to
  // taskPollMin..taskPollMax; taskPollMax when it names none), at most maxTaskPolls times (then
  // tasks/cancel and ProtocolError); the call's timeout bounds it all, the result's size is
  // maxMessageBytes. The extension is declared on every 2026-07-28 request when `tasks` is set.
  bool tasks = true;
  // subscriptions/listen (2026-07-28): with an onToolsChanged callback (a registry sets one) and
  // a server whose capabilities say tools.listChanged, one stream is kept open for
  // notifications/tools/list_changed. At most maxListenEvents notifications per stream (then it
  // is ended and opened again); a stream that breaks is opened again after listenBackoff,
  // doubled per failure in a row (at most 30 s), at most maxListenReconnects times in a row.
  bool listen = true;
  int maxListenEvents = 1000;
  int maxListenReconnects = 5;
  std::chrono::milliseconds listenBackoff{1'000};
  int maxTaskPolls = 1000;
  std::chrono::milliseconds taskPollMin{50};
  std::chrono::milliseconds taskPollMax{5'000};
  // Restarts in a row without a successful request in between; then the server is given up on
  // and every call of its tools is an error result.
  int maxRestarts = 3;
  // stdio: after closing the child's stdin, how long it has to exit before SIGTERM, and again
  // before SIGKILL.
  std::chrono::milliseconds shutdownGrace{2'000};
};

// What the server said about itself in the handshake (or in server/discover).
struct McpServerInfo {
  std::string protocolVersion;  // as negotiated
  bool stateless = false;       // protocolVersion is 2026-07-28 or later: no initialize, no session
  std::vector<std::string> supportedVersions;  // server/discover's list; empty for the 2025 era
  std::string name;
  std::string version;
  std::string instructions;
  nlohmann::json capabilities = nlohmann::json::object();
};

// A tool as tools/list describes it.
struct McpTool {
  std::string name;
  std::string title;
  std::string description;
  nlohmann::json inputSchema = nlohmann::json::object();
  nlohmann::json outputSchema;  // null when the tool declares none
  nlohmann::json annotations;   // null when absent
  // Why the tool cannot be called ("" when it can): an inputSchema whose `x-mcp-header`
  // annotations break the 2026-07-28 rules (empty, not an HTTP token, on a property that is not
  // a string, integer or boolean, or a name used twice). ToolRegistry::addMcpServer skips such a
  // tool, naming the reason; callTool refuses it.
  std::string unusable;
};

// The result of tools/call.
struct McpToolResult {
  nlohmann::json content = nlohmann::json::array();  // the content blocks as sent
  nlohmann::json structuredContent;                  // null when absent
  bool isError = false;

  // What the model sees (docs/mcp.md): the content blocks as text: text as is, images, audio
  // and blobs as a one-line description (a tool message carries text only), embedded text
  // resources with their URI, resource links as their URI and name; blocks joined with
  // newlines. The structured content instead when `preferStructured`, or when there are no
  // content blocks (the specification asks servers to send both, the text for models).
  nlohmann::json forModel(bool preferStructured = false) const;
};

// A resource or a prompt as the server lists it (the JSON object as sent).
struct McpListResult {
  std::vector<nlohmann::json> items;
};

struct McpCallOptions {
  std::optional<std::chrono::milliseconds> timeout;  // default: McpServerOptions::toolTimeout
  std::stop_token cancel;  // requesting it cancels the call (notifications/cancelled)
  // Answers this call's 2026-07-28 elicitations (input_required) instead of
  // McpServerOptions::onElicitation, which must be set for the capability to be offered.
  McpElicitationHandler onElicitation;
  // The tasks extension: called (on the calling thread) with the task's id as soon as the server
  // answered with a task, before it is followed; throwing cancels the task and fails the call.
  std::function<void(const std::string& taskId)> onTask;
  // Set: the call is not sent; the server's task of this id (from an earlier call's onTask) is
  // followed instead, to its result.
  std::string resumeTask;
};

class McpClient;

// What ToolRegistry::addMcpServer() registered.
struct McpRegistration {
  std::shared_ptr<McpClient> client;  // the registry keeps it too, until it is destroyed
  std::vector<std::string> tools;     // the registered names, in the server's order
  // Tools allow/deny let through that could not be registered, as "tool: why" (a name that is
  // taken or too long, a schema valijson cannot compile).
  std::vector<std::string> skipped;
};

// One connection to one MCP server, started on first use and restarted (up to maxRestarts in a
// row) when the server dies or ends the session.
//
// Errors: McpError for an error the server answered with; TimeoutError, CancelledError;
// ConnectionError when the server cannot be started, dies or breaks the connection (the message
// carries its exit status and the tail of its stderr); ProtocolError for bytes that are not
// valid JSON-RPC or that pass a limit; ValidationError for bad options.
//
// Thread-safety: every member may be called from any thread; requests run concurrently over the
// one connection. Lifetime: the destructor closes the connection (stdio: closes the child's stdin
// and waits up to 2 x shutdownGrace for it to exit, then kills it); a call in flight then ends
// with ConnectionError.
class McpClient {
 public:
  // Checks the options; connects on first use. Throws ValidationError naming the field.
  explicit McpClient(McpServerOptions options);
  ~McpClient();
  McpClient(const McpClient&) = delete;
  McpClient& operator=(const McpClient&) = delete;

  const McpServerOptions& options() const noexcept;

  // Starts the server and completes the handshake now, if not done yet (2026-07-28: the
  // server/discover that chooses the revision).
  void connect();
  McpServerInfo serverInfo();  // connects first

  // All pages of tools/list (at most maxListPages pages and maxTools tools, else ProtocolError).
  // 2026-07-28: a page the server gave a positive `ttlMs` is reused while it is fresh, shared
  // with the other clients of the same HTTP server when its `cacheScope` is "public", and only
  // under the same credentials when "private" (docs/mcp.md, "Caching"); a list-changed
  // notification ends that at once.
  std::vector<McpTool> listTools();
  // True when pages of the tool list last read had a positive ttlMs and the earliest of them has
  // passed: the list should be read again before it is used (ToolRegistry does so when it builds
  // a request's tools). False for a list without ttl (kept until the server says it changed).
  bool toolListStale() const;
  // tools/call. A result with isError is returned, not thrown. A 2026-07-28 input_required
  // result is answered (onElicitation, onSampling, roots) and the call sent again with the answers
  // and the server's requestState, up to maxInputRounds times. A task (the tasks extension) is
  // followed to its end: its result is the call's, a failed task's error an McpError, a task the
  // server cancelled an isError result; when the caller cancels or the timeout passes, the task
  // is cancelled (tasks/cancel).
  McpToolResult callTool(const std::string& name, const nlohmann::json& arguments,
                         const McpCallOptions& options = {});
  void ping();  // 2026-07-28 has no ping: server/discover instead

  McpListResult listResources();
  nlohmann::json readResource(const std::string& uri);  // the result object: {"contents":[...]}
  McpListResult listPrompts();
  nlohmann::json getPrompt(const std::string& name,
                           const std::map<std::string, std::string>& arguments = {});

  // Called (on a transport thread; it must not block) when the server says its tool list changed.
  void onToolsChanged(std::function<void()> callback);

  // Ends the connection; the next request starts a new one (and counts as a restart).
  void close();

  // Diagnostics, for tests and `parley mcp list`.
  struct Stats {
    int starts = 0;                   // connections started, the first included
    int cancellationsSent = 0;        // notifications/cancelled sent
    int progressReceived = 0;         // progress notifications matched to a call
    int cachedListPages = 0;          // */list pages taken from the cache (2026-07-28 ttlMs)
    int tasksFollowed = 0;            // tools/call answered with a task, or resumed
    int taskPolls = 0;                // tasks/get sent
    int tasksCancelled = 0;           // tasks/cancel sent
    int listenStreams = 0;            // subscriptions/listen streams the server acknowledged
    int listenReconnects = 0;         // streams opened again after one broke
    bool listenGaveUp = false;        // maxListenReconnects passed: no longer listening
    int nonJsonLines = 0;             // stdio lines that were not JSON-RPC, over all connections
    std::size_t pendingRequests = 0;  // requests waiting for their response now (an open
                                      // subscriptions/listen stream is one)
    long processId = -1;              // stdio: the running child's pid; -1 when none
  };
  Stats stats() const;
  std::string stderrTail() const;  // stdio: the last maxStderrBytes of the child's stderr

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace parley
