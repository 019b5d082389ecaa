#include "parley/tools.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <system_error>
#include <utility>

#include "model/deadline.hpp"
#include "model/secrets.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/telemetry.hpp"
#include "parley/thread_pool.hpp"
#include "tools/tool_output.hpp"
#include "tools/tool_schema.hpp"

namespace parley {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string_view toString(ToolErrorKind kind) noexcept {
  switch (kind) {
    case ToolErrorKind::None:
      return "none";
    case ToolErrorKind::UnknownTool:
      return "unknown_tool";
    case ToolErrorKind::InvalidJson:
      return "invalid_json";
    case ToolErrorKind::InvalidArguments:
      return "invalid_arguments";
    case ToolErrorKind::HandlerFailed:
      return "handler_failed";
    case ToolErrorKind::Timeout:
      return "timeout";
    case ToolErrorKind::Cancelled:
      return "cancelled";
    case ToolErrorKind::NotRun:
      return "not_run";
  }
  return "unknown";
}

std::string ToolResult::content() const {
  // Handlers may return bytes that are not UTF-8; dump() would throw on them.
  constexpr auto kReplace = json::error_handler_t::replace;
  if (!success) return json{{"error", error}}.dump(-1, ' ', false, kReplace);
  if (result.is_string()) return result.get<std::string>();
  return result.dump(-1, ' ', false, kReplace);
}

Message ToolResult::toMessage() const {
  return Message::tool(toolCallId, content());
}

// ---------------------------------------------------------------------------------------------
// Registry

struct detail::RegisteredTool {
  std::string name;
  std::string description;
  ToolHandler handler;
  ToolOptions options;
  std::unique_ptr<CompiledSchema> schema;
};

bool isValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

namespace {

json normaliseSchema(json schema) {
  if (schema.is_null() || (schema.is_object() && schema.empty()))
    return json{{"type", "object"}, {"properties", json::object()}};
  if (!schema.is_object())
    throw ValidationError("tool.schema",
                          "must be a JSON Schema object, got " + std::string(schema.type_name()));
  auto type = schema.find("type");
  if (type == schema.end() || *type != "object")
    throw ValidationError(
        "tool.schema", "the arguments schema must have \"type\": \"object\" (OpenAI requires it)");
  return schema;
}

}  // namespace

ToolRegistry::ToolRegistry() = default;
ToolRegistry::~ToolRegistry() {
  closeMcpServers();
}

void ToolRegistry::add(const std::string& name, const std::string& description, json schema,
                       ToolHandler handler, ToolOptions options) {
  if (!isValidToolName(name))
    throw ValidationError("tool.name", "\"" + name +
                                           "\" is not a valid tool name: use 1 to 64 letters, "
                                           "digits, '_' or '-'");
  if (!handler) throw ValidationError("tool.handler", "is empty");
  if (options.timeout <= std::chrono::milliseconds::zero())
    throw ValidationError("tool.options.timeout", "must be greater than zero");
  if (options.retries < 0) throw ValidationError("tool.options.retries", "must not be negative");
  if (options.retryDelay < std::chrono::milliseconds::zero())
    throw ValidationError("tool.options.retryDelay", "must not be negative");
  if (options.maxResultBytes < 1024)
    throw ValidationError("tool.options.maxResultBytes", "must be at least 1024");

  // Compile outside the lock: it is the expensive part and touches nothing shared.
  auto tool = std::make_shared<detail::RegisteredTool>();
  tool->name = name;
  tool->description = description;
  tool->handler = std::move(handler);
  tool->options = options;
  tool->schema = std::make_unique<CompiledSchema>(normaliseSchema(std::move(schema)));

  std::lock_guard lock(mutex_);
  if (tools_.contains(name))
    throw ValidationError("tool.name", "a tool named \"" + name + "\" is already registered");
  tools_.emplace(name, std::move(tool));
  order_.push_back(name);
  ++revision_;
  definitions_.reset();
}

bool ToolRegistry::remove(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (tools_.erase(name) == 0) return false;
  order_.erase(std::find(order_.begin(), order_.end(), name));
  ++revision_;
  definitions_.reset();
  return true;
}

bool ToolRegistry::has(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return tools_.contains(name);
}

std::optional<ToolInfo> ToolRegistry::find(const std::string& name) const {
  std::shared_ptr<const detail::RegisteredTool> tool = lookup(name);
  if (!tool) return std::nullopt;
  return ToolInfo{tool->name, tool->description, tool->schema->document(), tool->options};
}

std::vector<std::string> ToolRegistry::names() const {
  std::lock_guard lock(mutex_);
  return order_;
}

std::size_t ToolRegistry::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

std::uint64_t ToolRegistry::revision() const {
  std::lock_guard lock(mutex_);
  return revision_;
}

std::shared_ptr<const ToolDefinitions> ToolRegistry::definitions() const {
  // The tools are needed now: an MCP list whose ttl passed is read again first.
  refreshStaleMcpTools();
  std::lock_guard lock(mutex_);
  if (definitions_) return definitions_;
  auto built = std::make_shared<ToolDefinitions>();
  built->revision = revision_;
  for (const std::string& name : order_) {
    const detail::RegisteredTool& tool = *tools_.at(name);
    json function = {{"name", tool.name}};
    if (!tool.description.empty()) function["description"] = tool.description;
    function["parameters"] = tool.schema->document();
    built->tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  definitions_ = std::move(built);
  return definitions_;
}

std::shared_ptr<const detail::RegisteredTool> ToolRegistry::lookup(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto found = tools_.find(name);
  return found == tools_.end() ? nullptr : found->second;
}

// ---------------------------------------------------------------------------------------------
// Executor

namespace {

// The executor's cap: at most `capacity` calls at once; an exclusive (non-parallel) call runs
// with nothing else. Waiting exclusive calls block new shared ones so they cannot starve.
class Gate {
 public:
  explicit Gate(int capacity) : capacity_(capacity) {}

  bool acquire(bool exclusive, std::stop_token cancel) {
    std::unique_lock lock(mutex_);
    if (exclusive) {
      ++exclusiveWaiting_;
      // A slot freed by the cancellation itself must not start a call: check the token last.
      bool ok = changed_.wait(lock, cancel, [&] { return !exclusive_ && active_ == 0; }) &&
                !cancel.stop_requested();
      --exclusiveWaiting_;
      if (ok) {
        exclusive_ = true;
        active_ = 1;
      } else {
        changed_.notify_all();  // shared waiters may have been held back by this one
      }
      return ok;
    }
    bool ok = changed_.wait(lock, cancel, [&] {
      return !exclusive_ && exclusiveWaiting_ == 0 && active_ < capacity_;
    }) && !cancel.stop_requested();
    if (ok) ++active_;
    return ok;
  }

  void release(bool exclusive) {
    {
      std::lock_guard lock(mutex_);
      if (exclusive) exclusive_ = false;
      --active_;
    }
    changed_.notify_all();
  }

 private:
  const int capacity_;
  std::mutex mutex_;
  std::condition_variable_any changed_;
  int active_ = 0;
  int exclusiveWaiting_ = 0;
  bool exclusive_ = false;
};

bool realSleep(std::chrono::milliseconds delay, std::stop_token stop) {
  std::mutex mutex;
  std::condition_variable_any never;
  std::unique_lock lock(mutex);
  never.wait_for(lock, stop, delay, [] { return false; });
  return !stop.stop_requested();
}

// A successful result as the model will get it: within the tool's cap, valid UTF-8. A JSON
// result that needs neither stays a JSON value; anything changed becomes text.
void fitResult(json& value, std::size_t maxResultBytes) {
  std::string text;
  if (value.is_string()) {
    text = std::move(value.get_ref<std::string&>());
  } else {
    try {
      text = value.dump();
      if (text.size() <= maxResultBytes) return;
    } catch (const json::type_error&) {  // a string in it is not UTF-8
      text = value.dump(-1, ' ', false, json::error_handler_t::replace) +
             "\n[parley: the output was not valid UTF-8: invalid byte sequences replaced with "
             "U+FFFD]";
    }
  }
  detail::fitToolOutput(text, maxResultBytes);
  value = std::move(text);
}

// What one attempt ended with.
struct Outcome {
  ToolErrorKind kind = ToolErrorKind::None;
  json value;
  std::string error;
};

// Shared by the caller waiting for an attempt and the pool thread running it; whichever
// finishes last frees it, so a handler outliving its deadline touches nothing that is gone.
struct Attempt {
  std::mutex mutex;
  std::condition_variable_any finished;
  bool done = false;
  Outcome outcome;
  std::stop_source stop;
  ToolContext context;
};

}  // namespace

struct detail::ToolExecutorState {
  ToolExecutorState(int capacity, ToolExecutorOptions&& o)
      : gate(capacity),
        pool(std::move(o.pool)),
        sleep(std::move(o.sleep)),
        ask(std::move(o.ask)),
        checkpoint(std::move(o.checkpoint)),
        resumeFrom(std::move(o.resumeFrom)),
        progress(std::move(o.progress)) {}

  Gate gate;
  std::shared_ptr<ThreadPool> pool;
  ToolSleeper sleep;
  ToolAsk ask;
  ToolCheckpoint checkpoint;
  ToolResumeLookup resumeFrom;
  ToolProgress progress;
};

namespace {

using ToolPtr = std::shared_ptr<const detail::RegisteredTool>;

}  // namespace

// Runs one attempt on the pool and waits for it until its deadline or cancellation.
static Outcome runAttempt(ThreadPool& pool, const ToolPtr& tool,
                          const std::shared_ptr<const json>& args, const ToolCall& call,
                          int attemptNumber, std::stop_token cancel,
                          std::chrono::milliseconds timeout,
                          std::optional<Clock::time_point> callDeadline,
                          const detail::ToolExecutorState& state, const json& resumeFrom) {
  auto attempt = std::make_shared<Attempt>();
  Clock::time_point deadline = detail::deadlineAfter(Clock::now(), timeout);
  if (callDeadline && *callDeadline < deadline) {
    deadline = *callDeadline;
    timeout = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  }
  attempt->context = ToolContext{call.id,          call.name,     attempt->stop.get_token(),
                                 deadline,         attemptNumber, state.ask,
                                 state.checkpoint, resumeFrom,    state.progress};
  try {
    pool.submit([attempt, tool, args, trace = currentTraceContext()] {
      ContextScope scope(trace);  // the handler's own spans (an MCP call) join the tool's
      Outcome outcome;
      try {
        outcome.value = tool->handler(*args, attempt->context);
      } catch (const ValidationError& e) {
        outcome.kind = ToolErrorKind::InvalidArguments;
        outcome.error = "invalid arguments for \"" + tool->name + "\": " + e.what();
      } catch (const std::exception& e) {
        outcome.kind = ToolErrorKind::HandlerFailed;
        outcome.error = "tool \"" + tool->name + "\" failed: " + e.what();
      } catch (...) {
        outcome.kind = ToolErrorKind::HandlerFailed;
        outcome.error = "tool \"" + tool->name + "\" failed with an unknown error";
      }
      {
        std::lock_guard lock(attempt->mutex);
        attempt->outcome = std::move(outcome);
        attempt->done = true;
      }
      attempt->finished.notify_all();
    });
  } catch (const std::system_error& e) {
    return {ToolErrorKind::HandlerFailed, nullptr,
            "tool \"" + tool->name + "\" could not be started: " + e.what()};
  }

  bool done;
  {
    std::unique_lock lock(attempt->mutex);
    done = attempt->finished.wait_until(lock, cancel, deadline, [&] { return attempt->done; });
    if (done) return std::move(attempt->outcome);
  }
  // Abandon the handler: tell it to stop; whatever it returns later stays in `attempt`, which
  // it keeps alive until it returns, and is never read.
  attempt->stop.request_stop();
  if (cancel.stop_requested())
    return {ToolErrorKind::Cancelled, nullptr, "tool \"" + tool->name + "\" was cancelled"};
  return {ToolErrorKind::Timeout, nullptr,
          "tool \"" + tool->name + "\" did not finish within " + std::to_string(timeout.count()) +
              " ms"};
}

// The whole call, retries included. The gate slot is held by the caller.
static ToolResult runCallUntraced(detail::ToolExecutorState& state, const ToolRegistry& registry,
                                  const ToolPtr& tool, const ToolCall& call, std::stop_token cancel,
                                  const ToolCallLimits& limits) {
  Clock::time_point start = Clock::now();
  ToolResult result;
  result.toolCallId = call.id;
  result.name = call.name;
  const std::size_t cap = tool ? tool->options.maxResultBytes : kDefaultMaxToolResultBytes;
  auto finish = [&](Outcome outcome) {
    result.success = outcome.kind == ToolErrorKind::None;
    result.errorKind = outcome.kind;
    result.result = result.success ? std::move(outcome.value) : json();
    if (result.success) fitResult(result.result, cap);
    result.error = std::move(outcome.error);
    if (result.error.size() > cap) detail::fitToolOutput(result.error, cap);
    result.executionTime =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    return std::move(result);
  };

  if (!tool) {
    std::vector<std::string> names = registry.names();
    std::string known;
    for (const std::string& name : names)
      known += (known.empty() ? "" : ", ") + name;
    return finish({ToolErrorKind::UnknownTool, nullptr,
                   "unknown tool \"" + call.name + "\"; " +
                       (names.empty() ? std::string("no tools are available")
                                      : "the available tools are: " + known)});
  }

  json parsed;
  try {
    parsed = call.arguments.empty() ? json::object() : parseJson(call.arguments);
  } catch (const ProtocolError& e) {
    return finish({ToolErrorKind::InvalidJson, nullptr,
                   "the arguments for \"" + tool->name + "\" are not usable (" + e.what() +
                       "); send one JSON object that matches the tool's parameters"});
  }
  if (!parsed.is_object())
    return finish({ToolErrorKind::InvalidArguments, nullptr,
                   "the arguments for \"" + tool->name + "\" must be a JSON object, got " +
                       std::string(parsed.type_name())});
  std::string problems;
  try {
    problems = tool->schema->check(parsed, {cancel, limits.deadline});
  } catch (const CancelledError&) {
    return finish({ToolErrorKind::Cancelled, nullptr, "tool \"" + tool->name + "\" was cancelled"});
  } catch (const TimeoutError&) {
    return finish({ToolErrorKind::Timeout, nullptr,
                   "checking the arguments of \"" + tool->name + "\" ran past the deadline"});
  }
  if (!problems.empty())
    return finish({ToolErrorKind::InvalidArguments, nullptr,
                   "invalid arguments for \"" + tool->name + "\": " + problems});

  auto args = std::make_shared<const json>(std::move(parsed));
  const json resumeFrom = state.resumeFrom ? state.resumeFrom(call.id) : json();
  for (int attempt = 1;; ++attempt) {
    if (cancel.stop_requested())
      return finish(
          {ToolErrorKind::Cancelled, nullptr, "tool \"" + tool->name + "\" was cancelled"});
    Outcome outcome = runAttempt(*state.pool, tool, args, call, attempt, cancel,
                                 limits.timeout.value_or(tool->options.timeout), limits.deadline,
                                 state, resumeFrom);
    bool retryable =
        outcome.kind == ToolErrorKind::HandlerFailed || outcome.kind == ToolErrorKind::Timeout;
    if (!retryable || attempt > limits.retries.value_or(tool->options.retries) ||
        (limits.deadline && Clock::now() >= *limits.deadline)) {
      if (retryable && attempt > 1) outcome.error += " (" + std::to_string(attempt) + " attempts)";
      return finish(std::move(outcome));
    }
    const auto delay = limits.retryDelay.value_or(tool->options.retryDelay);
    bool slept = state.sleep ? state.sleep(delay, cancel) : realSleep(delay, cancel);
    if (!slept)
      return finish(
          {ToolErrorKind::Cancelled, nullptr, "tool \"" + tool->name + "\" was cancelled"});
    result.retryCount = attempt;
  }
}

// runCallUntraced() in an `execute_tool {name}` span (docs/telemetry.md).
static ToolResult runCall(detail::ToolExecutorState& state, const ToolRegistry& registry,
                          const ToolPtr& tool, const ToolCall& call, std::stop_token cancel,
                          const ToolCallLimits& limits = {}) {
  Span span("execute_tool", call.name, SpanKind::Internal);
  ToolResult result = runCallUntraced(state, registry, tool, call, std::move(cancel), limits);
  if (!span.recording()) return result;
  span.set("gen_ai.operation.name", "execute_tool");
  span.set("gen_ai.tool.name", call.name);
  span.set("gen_ai.tool.call.id", call.id);
  span.set("gen_ai.tool.type", "function");
  if (tool && !tool->description.empty()) span.set("gen_ai.tool.description", tool->description);
  if (result.retryCount) span.set("parley.tool.retries", result.retryCount);
  if (!result.success) span.setError(toString(result.errorKind), result.error);
  if (auto sink = telemetry(); sink && sink->captureContent()) {
    // Opt-in content (the conventions' gen_ai.tool.call.arguments / result), secrets redacted.
    json arguments = parseJson(call.arguments.empty() ? "{}" : call.arguments, {}, false);
    span.set("gen_ai.tool.call.arguments",
             arguments.is_discarded() ? call.arguments
                                      : detail::redactSecretKeys(std::move(arguments)).dump());
    if (result.success)
      span.set("gen_ai.tool.call.result", detail::redactSecretKeys(result.result).dump());
  }
  return result;
}

static ToolResult cancelledBeforeStart(const ToolCall& call) {
  ToolResult result;
  result.toolCallId = call.id;
  result.name = call.name;
  result.errorKind = ToolErrorKind::Cancelled;
  result.error = "tool \"" + call.name + "\" was cancelled before it started";
  return result;
}

static ToolResult failedCall(const ToolCall& call, const std::exception& e) {
  ToolResult result;
  result.toolCallId = call.id;
  result.name = call.name;
  result.errorKind = ToolErrorKind::HandlerFailed;
  result.error = "tool \"" + call.name + "\" failed: " + e.what();
  return result;
}

ToolExecutor::ToolExecutor(std::shared_ptr<const ToolRegistry> registry,
                           ToolExecutorOptions options)
    : registry_(std::move(registry)) {
  if (!registry_) throw ValidationError("toolExecutor.registry", "is null");
  if (options.maxConcurrent < 1)
    throw ValidationError("toolExecutor.maxConcurrent", "must be at least 1");
  if (!options.pool) options.pool = ThreadPool::shared();
  const int capacity = options.maxConcurrent;
  state_ = std::make_shared<detail::ToolExecutorState>(capacity, std::move(options));
}

ToolExecutor::~ToolExecutor() = default;
ToolExecutor::ToolExecutor(ToolExecutor&&) noexcept = default;
ToolExecutor& ToolExecutor::operator=(ToolExecutor&&) noexcept = default;

ToolResult ToolExecutor::execute(const ToolCall& call, std::stop_token cancel) {
  return execute(call, std::move(cancel), ToolCallLimits{});
}

ToolResult ToolExecutor::execute(const ToolCall& call, std::stop_token cancel,
                                 const ToolCallLimits& limits) {
  if ((limits.timeout && limits.timeout->count() <= 0) || (limits.retries && *limits.retries < 0) ||
      (limits.retryDelay && limits.retryDelay->count() < 0)) {
    ToolResult refused;
    refused.toolCallId = call.id;
    refused.name = call.name;
    refused.errorKind = ToolErrorKind::InvalidArguments;
    refused.error =
        "the call's limits are out of range (timeout > 0, retries >= 0, retry delay "
        ">= 0)";
    return refused;
  }
  ToolPtr tool = registry_->lookup(call.name);
  bool exclusive = tool && !tool->options.parallel;
  if (!state_->gate.acquire(exclusive, cancel)) return cancelledBeforeStart(call);
  ToolResult result;
  try {
    result = runCall(*state_, *registry_, tool, call, cancel, limits);
  } catch (const std::bad_alloc&) {
    state_->gate.release(exclusive);
    throw;
  } catch (const std::exception& e) {
    result = failedCall(call, e);  // e.g. a replaced sleeper that threw
  }
  state_->gate.release(exclusive);
  return result;
}

std::vector<ToolResult> ToolExecutor::executeAll(std::span<const ToolCall> calls,
                                                 std::stop_token cancel) {
  if (calls.size() <= 1) {
    std::vector<ToolResult> results;
    for (const ToolCall& call : calls)
      results.push_back(execute(call, cancel));
    return results;
  }

  // Shared with the pool threads running the calls; this thread waits for all of them before
  // returning, but an unwinding exception must not leave them writing into a dead frame.
  struct Batch {
    std::mutex mutex;
    std::condition_variable allDone;
    std::size_t running = 0;
    std::vector<ToolResult> results;
  };
  auto batch = std::make_shared<Batch>();
  batch->results.resize(calls.size());
  auto waitForAll = [&] {
    std::unique_lock lock(batch->mutex);
    batch->allDone.wait(lock, [&] { return batch->running == 0; });
  };

  try {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const ToolCall& call = calls[i];
      ToolPtr tool = registry_->lookup(call.name);
      bool exclusive = tool && !tool->options.parallel;
      // Slots are taken in call order, so a non-parallel call waits for the ones before it
      // and holds back the ones after it.
      if (!state_->gate.acquire(exclusive, cancel)) {
        batch->results[i] = cancelledBeforeStart(call);
        continue;
      }
      {
        std::lock_guard lock(batch->mutex);
        ++batch->running;
      }
      auto run = [batch, state = state_, registry = registry_, tool, call, exclusive, cancel, i,
                  trace = currentTraceContext()] {
        ContextScope scope(trace);
        ToolResult result;
        try {
          result = runCall(*state, *registry, tool, call, cancel);
        } catch (const std::exception& e) {
          result = failedCall(call, e);
        }
        state->gate.release(exclusive);
        std::lock_guard lock(batch->mutex);
        batch->results[i] = std::move(result);
        if (--batch->running == 0) batch->allDone.notify_all();
      };
      try {
        state_->pool->submit(run);
      } catch (const std::system_error&) {
        run();  // no thread to be had: run this call here rather than fail it
      }
    }
  } catch (...) {
    waitForAll();
    throw;
  }
  waitForAll();
  return std::move(batch->results);
}

}  // namespace parley
