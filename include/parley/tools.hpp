// Tools the model may call: a registry of named tools with JSON Schemas for their arguments, and
// an executor that checks and runs tool calls with deadlines, retries and bounded concurrency.
//
// A tool failure never becomes an exception: an unknown tool, arguments that are not JSON or do
// not match the schema, a handler that throws, a timeout and a cancellation each come back as a
// ToolResult whose content() is `{"error":"..."}` with a message the model can act on
// (docs/architecture.md, "The turn").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/errors.hpp"
#include "parley/message.hpp"

namespace parley {

class ThreadPool;
// MCP (mcp.hpp, which a caller of addMcpServer() includes): declared here only, so that a change
// to the MCP options does not rebuild every user of the registry.
struct McpServerOptions;
struct McpRegistration;
namespace detail {
struct RegisteredTool;     // a tool with its compiled schema (tools.cpp)
struct ToolExecutorState;  // an executor's cap, pool and sleeper (tools.cpp)
struct McpAttachment;      // an MCP server whose tools a registry holds (mcp_tools.cpp)
}  // namespace detail

struct ToolContext;

// How a tool asks a person through its caller (ToolExecutorOptions::ask): a durable run makes
// the question its own (the run waits; the answer comes later, from any process). `question` is
// an object ({"kind": "elicitation", ...}, docs/mcp.md). Returns the answer when the caller has
// one; otherwise throws CancelledError after noting the question, and the caller discards the
// call's result, asks, and runs the call again with the answer at hand.
using ToolAsk =
    std::function<nlohmann::json(const ToolContext& call, const nlohmann::json& question)>;

// How a call notes the handle of work that outlives one attempt (ToolContext::checkpoint).
using ToolCheckpoint = std::function<void(const ToolContext& call, const nlohmann::json& handle)>;
// The handle a call resumes from (ToolContext::resumeFrom), by call id; null json: none.
using ToolResumeLookup = std::function<nlohmann::json(const std::string& toolCallId)>;
// How a call reports progress while it runs (ToolContext::progress): a line for people and
// details for programs.
using ToolProgress = std::function<void(const ToolContext& call, const std::string& message,
                                        const nlohmann::json& data)>;

// What a handler learns about the call it serves. The executor owns it; a handler may keep a
// reference only until it returns.
struct ToolContext {
  std::string toolCallId;
  std::string name;
  // Requested when the attempt's deadline passes or the caller cancels. A long-running handler
  // should poll it (or register a std::stop_callback) and return early; whatever it returns after
  // that is discarded.
  std::stop_token stopToken;
  std::chrono::steady_clock::time_point deadline;  // of this attempt
  int attempt = 1;                                 // 1 for the first try, 2 for the first retry
  ToolAsk ask;  // the executor's ToolExecutorOptions::ask; null: the tool asks in its own way
  // Work that lives on past one attempt (a task on a remote A2A or MCP server): the handler
  // notes its handle with checkpoint(*this, handle) as soon as it has one. A durable run
  // journals it; when the run is taken over after a crash, the call runs again with the handle
  // in resumeFrom, and the handler picks the remote work up instead of starting it again
  // (docs/scale-out.md). A null checkpoint: nobody keeps the handle. A null resumeFrom: a fresh
  // call.
  ToolCheckpoint checkpoint;
  nlohmann::json resumeFrom;
  // Progress of a long call (a remote task's status and artifact chunks): a durable run writes
  // each report as a tool_execution_progress event. Null: nobody listens.
  ToolProgress progress;

  bool stopRequested() const noexcept { return stopToken.stop_requested(); }
};

// Why a call failed. None on success.
enum class ToolErrorKind {
  None,
  UnknownTool,       // no tool of that name is registered
  InvalidJson,       // the arguments text is not valid JSON
  InvalidArguments,  // not a JSON object, or fails the tool's schema, or the handler threw
                     // ValidationError
  HandlerFailed,     // the handler threw
  Timeout,           // the attempt's deadline passed before the handler returned
  Cancelled,         // the caller's stop token was requested
  NotRun,            // past the cap of calls run for one reply (maxToolCallsPerReply)
};
std::string_view toString(ToolErrorKind kind) noexcept;

struct ToolResult {
  std::string toolCallId;
  std::string name;
  bool success = false;
  // The handler's return value; null on failure. When it did not fit the tool's
  // maxResultBytes or was not valid UTF-8, the text the model gets instead (a string).
  nlohmann::json result;
  std::string error;  // on failure: a message for the model, naming what to fix
  ToolErrorKind errorKind = ToolErrorKind::None;
  std::chrono::microseconds executionTime{
      0};              // from the call's start to its result, retries included
  int retryCount = 0;  // attempts made beyond the first

  // The tool message's content: a string result as is, any other result as compact JSON, a
  // failure as compact {"error":"..."}. Invalid UTF-8 in JSON output is replaced by U+FFFD.
  // A result the executor returns is at most the tool's maxResultBytes and valid UTF-8 (see
  // ToolOptions::maxResultBytes).
  std::string content() const;
  // Message::tool(toolCallId, content()).
  Message toMessage() const;
};

// What a tool may hand back to the model by default: about 16 000 tokens of text. A tool that
// prints more (a log, a whole file) gets its head and tail kept and a marker in between.
inline constexpr std::size_t kDefaultMaxToolResultBytes = std::size_t{64} << 10;

// Options of one tool. Checked by ToolRegistry::add().
struct ToolOptions {
  // Per attempt. The handler's stop token is requested at the deadline and the caller gets a
  // Timeout result then, whether or not the handler returns. Must be > 0.
  std::chrono::milliseconds timeout{30'000};
  // Extra attempts after a failed one. Only HandlerFailed and Timeout are retried: bad input
  // (unknown tool, JSON, schema, a ValidationError thrown by the handler) fails the same way
  // again. Must be >= 0.
  int retries = 0;
  std::chrono::milliseconds retryDelay{500};  // wait before each retry; must be >= 0
  // false: the tool never runs beside another call of the same executor (a barrier in the batch).
  bool parallel = true;
  // For the event-driven executor: a human must approve each call before it runs. The
  // ToolExecutor itself does not ask; it only carries the flag.
  bool requiresApproval = false;
  // Running the call twice does no harm. A durable run (worker.hpp) that finds a call of this
  // tool started but never completed (its worker died) runs it again only when this is true;
  // otherwise the model gets an error result saying the call may have run.
  bool idempotent = false;
  // The most a result may take in the tool message (its content(), in bytes). A longer result
  // becomes text: its head, a line saying how many bytes were cut, its tail. Output that is not
  // valid UTF-8 has each bad sequence replaced by U+FFFD and a note saying so. Command tools
  // (command_tools.hpp) also read their process's output within this cap. Must be >= 1024.
  std::size_t maxResultBytes = kDefaultMaxToolResultBytes;
};

using ToolHandler = std::function<nlohmann::json(const nlohmann::json& args, ToolContext& context)>;

// A registered tool as callers may inspect it.
struct ToolInfo {
  std::string name;
  std::string description;
  nlohmann::json
      schema;  // the parameters schema as stored (never null: {} becomes an object schema)
  ToolOptions options;
};

// The OpenAI `tools` array, built once per registry revision.
struct ToolDefinitions {
  std::uint64_t revision = 0;
  nlohmann::json tools = nlohmann::json::array();  // [{"type":"function","function":{...}}, ...]
};

// The tools a conversation offers to the model. Usually shared (std::shared_ptr) between the
// conversations and executors that use it.
//
// Thread-safety: every member may be called from any thread at any time. A call in flight keeps
// the tool it started with even if that tool is removed or replaced meanwhile.
class ToolRegistry {
 public:
  ToolRegistry();
  ~ToolRegistry();
  ToolRegistry(const ToolRegistry&) = delete;
  ToolRegistry& operator=(const ToolRegistry&) = delete;

  // Adds a tool. `schema` is the JSON Schema of the arguments object (draft 4-7 as valijson reads
  // it); null or {} means "no arguments" and is stored as {"type":"object","properties":{}}.
  // Any other schema must be an object with "type":"object" (OpenAI rejects anything else).
  // The schema is compiled here, once.
  // Throws ValidationError (and adds nothing) when: the name does not match ^[a-zA-Z0-9_-]{1,64}$
  // ("tool.name") or is taken ("tool.name"); the schema cannot be compiled, refers to a remote
  // document or has an invalid "pattern" ("tool.schema"); the handler is empty ("tool.handler");
  // an option is out of range ("tool.options.timeout", ".retries", ".retryDelay",
  // ".maxResultBytes").
  void add(const std::string& name, const std::string& description, nlohmann::json schema,
           ToolHandler handler, ToolOptions options = {});

  // Registers the tools of an MCP server (mcp.hpp): connects (starts the child or opens the
  // session), completes the handshake, lists the tools, and adds each one that `allow` and `deny`
  // let through as any other tool, its inputSchema compiled and checked on every call. Names
  // are the server's, or "name__tool" with prefixToolNames; characters a tool name may not have
  // become '_'. Each call is a tools/call with the server's toolTimeout; when the deadline passes
  // or the caller cancels, the server gets notifications/cancelled. A result with isError, a
  // server that died (it is restarted on the next call, up to maxRestarts in a row) or any other
  // failure is an error result the model reads, never an exception. When the server says its
  // tools changed, they are listed again and replaced here. The server is closed with the
  // registry. `options.name` is set to `name`.
  // Throws ValidationError (and adds nothing) for a name that does not match
  // ^[a-zA-Z0-9_-]{1,32}$ or is taken by another server ("mcp.name"), bad options, or more than
  // kMaxMcpServersPerRegistry servers ("mcp"); ConnectionError, TimeoutError, ProtocolError or
  // McpError when the server cannot be reached or listed.
  McpRegistration addMcpServer(const std::string& name, McpServerOptions options);

  // Removes a tool; false if there was none of that name.
  bool remove(const std::string& name);
  bool has(const std::string& name) const;
  std::optional<ToolInfo> find(const std::string& name) const;
  std::vector<std::string> names() const;  // in the order added
  std::size_t size() const;

  // The `tools` array for a request, tools in the order added; descriptions that are empty are
  // left out. Built on the first call after a change and shared until the next change, so
  // calling it for every request costs a lock and a shared_ptr copy.
  std::shared_ptr<const ToolDefinitions> definitions() const;

  // Increases by one with every successful add() and remove(). Starts at 0.
  std::uint64_t revision() const;

 private:
  friend class ToolExecutor;
  std::shared_ptr<const detail::RegisteredTool> lookup(const std::string& name) const;
  void closeMcpServers() noexcept;
  // MCP servers' tool lists (mcp_tools.cpp): read again when the server said they changed, or
  // (onlyIfStale) when their 2026-07-28 ttl passed; a list that changed replaces the server's
  // tools in their place, so the order of all tools stays as it was.
  static void refreshMcpTools(const std::shared_ptr<detail::McpAttachment>& attachment,
                              bool onlyIfStale);
  void refreshStaleMcpTools() const;
  void placeTools(const std::vector<std::string>& names, std::size_t position);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const detail::RegisteredTool>> tools_;
  std::vector<std::string> order_;
  std::uint64_t revision_ = 0;
  mutable std::shared_ptr<const ToolDefinitions> definitions_;  // cache; null when stale
  std::vector<std::shared_ptr<detail::McpAttachment>> mcpServers_;
};

// Waits `delay` unless `stop` is requested first; returns false if it was. Tests replace it to
// make retry delays instant and observable.
using ToolSleeper = std::function<bool(std::chrono::milliseconds delay, std::stop_token stop)>;

// Limits a caller sets for one call in place of the tool's own ToolOptions (the executor's
// ToolExecutionRequest carries them to a ToolWorker). nullopt: the tool's own.
struct ToolCallLimits {
  std::optional<std::chrono::milliseconds> timeout;  // each attempt; > 0
  std::optional<int> retries;                        // >= 0
  std::optional<std::chrono::milliseconds> retryDelay;
  // The whole call, retries included: no attempt runs past it, none starts after it.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

struct ToolExecutorOptions {
  // Calls of this executor running at once (one executor per conversation). Must be >= 1.
  // A call that timed out or was cancelled stops counting when its result is returned, even if
  // its handler keeps running: an abandoned handler never lowers the executor's capacity.
  int maxConcurrent = 4;
  // Where handlers run; null: ThreadPool::shared(). Every attempt runs on a pool thread, so
  // the caller can stop waiting at the deadline. The pool is elastic (thread_pool.hpp), so a
  // handler that never returns holds one thread and starves nobody.
  std::shared_ptr<ThreadPool> pool{};
  ToolSleeper sleep{};  // retry delays; null: a real, cancellable wait
  // Given to every call's ToolContext::ask (a durable run's questions); null: none.
  ToolAsk ask{};
  // Given to every call's ToolContext::checkpoint (a durable run's journal); null: none.
  ToolCheckpoint checkpoint{};
  // Asked for each call's ToolContext::resumeFrom before its first attempt; null: none.
  ToolResumeLookup resumeFrom{};
  // Given to every call's ToolContext::progress; null: none.
  ToolProgress progress{};
};

// Checks and runs tool calls against a registry.
//
// Timeouts: C++ cannot kill a thread. At an attempt's deadline the executor requests the
// handler's stop token, returns the Timeout result at once and forgets the attempt; the handler's
// thread runs on until the handler returns, and what it returns is dropped. The attempt's state
// is shared (shared_ptr) by the waiting caller and the running handler, so whichever ends last
// frees it and nothing dangles. Handlers run on an elastic pool (ThreadPool) that starts a thread
// whenever none is idle, so stuck handlers never delay other calls; a handler that never returns
// costs one thread for the life of the process.
//
// Thread-safety: execute() and executeAll() may be called from several threads at once; the
// concurrency cap and the non-parallel rule hold across all of them.
// Lifetime: the executor may be destroyed as soon as no execute()/executeAll() is running, even
// while abandoned handlers still run: they share nothing with it.
// A handler must not call back into the executor that runs it (it could wait for a slot that
// it holds itself).
class ToolExecutor {
 public:
  // Throws ValidationError for a null registry or maxConcurrent < 1.
  explicit ToolExecutor(std::shared_ptr<const ToolRegistry> registry,
                        ToolExecutorOptions options = {});
  ~ToolExecutor();
  // A moved-from executor may only be destroyed or assigned to.
  ToolExecutor(ToolExecutor&&) noexcept;
  ToolExecutor& operator=(ToolExecutor&&) noexcept;

  // Runs one call: looks the tool up, parses the arguments ("" means {}), checks them against
  // the schema, runs the handler with a deadline, retries as the tool's options say. Never
  // throws (except std::bad_alloc); every failure is a ToolResult with success == false.
  // Requesting `cancel` ends the wait at once with a Cancelled result.
  ToolResult execute(const ToolCall& call, std::stop_token cancel = {});
  // The same with `limits` in place of the tool's own timeout and retries. A limit out of range
  // (a timeout <= 0, retries < 0) is the call's error result.
  ToolResult execute(const ToolCall& call, std::stop_token cancel, const ToolCallLimits& limits);

  // Runs the calls of one reply concurrently, at most maxConcurrent at once, and returns their
  // results in the order of `calls`, whatever order they finish in. A call whose tool is not
  // `parallel` waits for the calls started before it and runs alone; later calls wait for it.
  // Requesting `cancel` ends the calls in flight with Cancelled results and does not start the
  // rest (they are Cancelled too). Never throws (except std::bad_alloc).
  std::vector<ToolResult> executeAll(std::span<const ToolCall> calls, std::stop_token cancel = {});

  const std::shared_ptr<const ToolRegistry>& registry() const noexcept { return registry_; }

 private:
  std::shared_ptr<const ToolRegistry> registry_;
  std::shared_ptr<detail::ToolExecutorState> state_;
};

}  // namespace parley
