// LlmExecutor: the event-driven executor. A workflow engine publishes an
// LlmExecutionRequest for a node of a thread on an EventBus and listens for the
// LlmExecutionCompleted / LlmExecutionFailed of the same traceId.
//
// Per request: validate (workflowId, threadId, nodeId, requestData.prompt, requestData.profileId,
// requestData.tools; a failure is an LlmExecutionFailed whose errorDetails.field names the field),
// queue it on its thread, and on the pool: get the thread's ConversationManager (made on first
// use, loaded from the store when one is set, or restored from contextSnapshot), call the model
// with the prompt, send each tool call of a reply out as a ToolExecutionRequest (at most
// turn.maxToolConcurrency unanswered at once) and wait for the ToolExecutionCompleted/Failed of
// its thread and toolCallId (or the tool timeout: then the tool gets an error result; two
// threads may wait for calls of the same id), append the tool
// messages in call order, call again, until a reply without tool calls or maxIterations calls.
// A call of a tool that was not offered (requestData.tools), or, while the executor runs its own
// ToolWorker, of a tool its registry lacks (none when it has no registry), is not sent: it gets
// an error result at once instead of waiting out toolCallTimeout.
// With responseCacheSize set, a model call whose request was answered before is replayed
// from the cache instead (see the option). Every event a request causes carries its traceId
// (one is generated when the request has none).
//
// A request of nodeType "context_processor" applies the context operation in
// requestData.parameters (context_ops.hpp) to the thread's conversation; its result's content is
// {"operation", "messageCount", "removedForPairing"} as JSON (with "dryRun": true, the thread is
// unchanged and the content is the ContextOperationPreview's JSON, finish reason
// "context_preview"); one whose operation is "read"
// (ContextRead, context_ops.hpp) reads the history instead: into its result ({"operation":
// "read", "messageCount", "messages"}), the thread unchanged, or into its prompt, which is then
// sent to the model as an llm node's. A request of nodeType
// "user_interaction" publishes UserInteractionRequested {interactionId, prompt, timeout} and
// waits for the UserInteractionResponded of that id: the answer is appended as a user message
// and, when the request names a profile, the model is called with it (the tool loop goes on);
// no answer in time fails the node. A request of nodeType "tool" runs one tool directly:
// requestData.parameters {"tool": name, "arguments": {...}} (the name must pass the checks a
// model's call passes: offered, and registered while the executor runs its own worker); the
// call and its result join the thread as an assistant message holding the call and the tool
// message answering it; the result's content is the tool message's text, finishReason "tool"
// ("tool_error" when the tool failed: its error is its result, as in the loop). No model is
// called. A tool registered with ToolOptions::requiresApproval is
// asked about first (UserInteractionRequested, interactionId "approve-<toolCallId>"); an answer
// of yes/y/approve/ok runs it, anything else, or no answer within toolCallTimeout, becomes the
// tool's error result.
//
// An llm request whose requestData.parameters has "structured": {"schema": {...}, "name",
// "mode", "maxRepairs"} asks for a structured answer (ConversationManager::runStructuredResult,
// docs/structured-output.md): the key is checked before anything is sent (a failure names
// requestData.parameters.structured.<field>) and not sent to the model; no tool is offered
// (requestData.tools is refused). Each model call publishes a StructuredOutputAttempt, a streamed
// one LlmStreamChunks carrying the partial answer; the result's content is the valid answer as
// JSON, finishReason "structured", usage summed over every call, iterations the calls made. No
// valid answer within the repairs fails with errorDetails.kind "structured_output".
//
// A request that fails leaves its thread's conversation as it was before the request: the
// prompt, a half-done tool round and a contextSnapshot are dropped (the MessageAdded events
// already published for them stand), so a retry does not repeat the prompt. Nothing of it was
// saved: the store is written only when a request completes.
//
// Threads are isolated: one ConversationManager each. Requests of one thread run in order,
// requests of different threads concurrently, at most maxConcurrentThreads at once.
//
// Ownership: the caller owns the executor and the bus; the bus must outlive the executor.
// Subscribes in the constructor; the destructor unsubscribes, cancels what is running and
// waits for it to end.
// Thread-safety: every member may be called from any thread, also from event handlers
// (except waitIdle/execute/shutdown, which wait for the executor's own work).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "parley/events.hpp"
#include "parley/logger.hpp"
#include "parley/profiles.hpp"
#include "parley/tools.hpp"
#include "parley/turn_defaults.hpp"

namespace parley {

class ConversationStore;
class ThreadPool;
class ToolTape;

struct ExecutorOptions {
  std::shared_ptr<ProfileRegistry> profiles;  // required: requests name a profile
  std::shared_ptr<ToolRegistry> tools;        // null: no tools offered
  int maxConcurrentThreads = 16;              // threads running a request at once; >= 1
  // How long a tool call may stay unanswered; then it gets an error result.
  std::chrono::milliseconds toolCallTimeout{60'000};
  // The turn's settings (turn_defaults.hpp), one llm request being one turn: callTimeout bounds
  // each model call, turnTimeout the whole request (every model call, retry and tool call it
  // makes: when it passes, what is under way is cancelled and the request fails with a
  // TimeoutError), maxIterations its model calls, tokenLimit publishes a TokenLimitExceeded,
  // systemPrompt opens every new thread, budget refuses a call that could go over it
  // (BudgetExceeded, nothing sent). maxToolConcurrency is how many tool calls of one thread are
  // sent out (ToolExecutionRequest) and not yet answered at once: a reply with more calls sends
  // that many and the next one each time an answer or a timeout frees a slot; the results are
  // still appended in call order.
  TurnDefaults turn{};
  // How long a user_interaction node waits for its answer unless the request's
  // parameters.timeoutMs says otherwise; then the node fails (errorDetails.kind "timeout").
  std::chrono::milliseconds interactionTimeout{300'000};
  // Non-null: a thread not in memory is loaded from the store (or created there), and every
  // completed request is saved to it.
  std::shared_ptr<ConversationStore> store;
  // Runs the requests; null: a pool of the executor's own.
  std::shared_ptr<ThreadPool> pool;
  // Run a ToolWorker for `tools` on the same bus, so tool calls are answered without a
  // worker of your own. false: you answer ToolExecutionRequest events yourself.
  bool toolWorker = true;
  // Replies of the model kept for identical requests, at most this many (least recently used
  // evicted); 0: off. The key is the whole request the model would receive: profile, base
  // URL, model, every message of the view, tools and parameters (its SHA-256 indexes it; a
  // hit compares the full request). A hit does not call the model: its content, tool calls
  // (with fresh ids), finish reason and usage are replayed as if the model had answered, and
  // a streaming request gets ONE LlmStreamChunk holding the whole content. Failed calls are
  // not kept. Shared by every thread of the executor; identical requests that miss at the
  // same time both call the model.
  size_t responseCacheSize = 0;
  // Records the tool calls of every llm request's loop and their results, or, replaying, takes
  // them from the tape instead of sending them out (tool_tape.hpp, docs/cassettes.md "Whole
  // runs"): with the model calls replayed from cassettes, a recorded run replays whole, no tool
  // runs and no approval is asked. Calls are keyed by the request's threadId (replay with
  // ToolTapeOptions::byThread when threads may reuse call ids). A replayed call publishes no
  // ToolExecutionRequest/Completed (nothing runs it); its tool message is a MessageAdded as
  // always. A call the tape lacks fails the request with a ReplayMiss naming the call and the
  // message. Tool nodes (nodeType "tool") are not on the tape: their call ids are new each time.
  std::shared_ptr<ToolTape> toolTape;
  Logger log;  // diagnostics; null: stderr
  // Each failed request (LlmExecutionFailed) and each tool call that could not be run
  // (ToolExecutionFailed) is also written to `log`, one line with its trace id, so a failure
  // nobody listens for is still seen. Turn it off when an EventLog (or a subscriber of your
  // own) records the bus.
  bool logErrors = true;
};

// The executor's count of the tool calls of one tool (LlmExecutor::toolStats()).
struct ToolStats {
  uint64_t calls = 0;     // calls that got a result: run, refused or timed out
  uint64_t failures = 0;  // results that are errors, timeouts included
  uint64_t timeouts = 0;  // no answer within toolCallTimeout, or a worker reporting a timeout
  // From sending each call to its result (queueing in the worker included); 0 for a call
  // settled without being sent (refused).
  std::chrono::microseconds totalTime{0};
};

class LlmExecutor {
 public:
  // Throws ValidationError for null profiles ("options.profiles") or out-of-range limits.
  LlmExecutor(EventBus& bus, ExecutorOptions options);
  ~LlmExecutor();
  LlmExecutor(const LlmExecutor&) = delete;
  LlmExecutor& operator=(const LlmExecutor&) = delete;

  // Publishes the request on the bus and waits for its completion. A failure is rethrown as
  // the error the request failed with (errorFromJson of its errorDetails): ValidationError
  // naming the field for an invalid request, CancelledError when it was cancelled, HttpError
  // with the status and body the server sent, and so on. A request without traceId gets one.
  LlmExecutionResult execute(LlmExecutionRequest request);

  // Returns once no request is queued or running.
  void waitIdle();

  // Cancels the thread's running request (its model call and tool waits end; it fails with
  // "cancelled") and its queued ones, and forgets the thread's conversation. Returns whether
  // the thread was known.
  bool cleanupThread(const std::string& threadId);

  // cleanupThread() for every thread, refuses new requests, and waits until idle. Idempotent.
  void shutdown();

  // Threads with a conversation in memory.
  size_t threadCount() const;

  // The response cache's counters (all 0 when responseCacheSize is 0).
  struct CacheStats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    size_t size = 0;  // replies kept now
  };
  CacheStats responseCacheStats() const;

  // The tool calls of the thread's requests, per tool name; with an empty threadId, of every
  // thread since the executor started (cleanupThread() forgets a thread's own counts, not
  // these). At most kMaxToolStatNames names per thread and overall; the calls of further names
  // are counted under "(other)".
  static constexpr size_t kMaxToolStatNames = 256;
  std::map<std::string, ToolStats> toolStats(const std::string& threadId = {}) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct ToolWorkerOptions {
  int maxConcurrent = 8;             // tool calls running at once; >= 1
  std::shared_ptr<ThreadPool> pool;  // null: ThreadPool::shared()
};

// Answers ToolExecutionRequest events by running the registry's tools (ToolExecutor: schema
// checks, the tool's own timeout and retries) and publishing a ToolExecutionCompleted (with
// result.success false for a failed tool). Calls run on a pool, not on the publisher's thread.
// Replace it with your own subscriber to run tools elsewhere.
// Ownership: the bus must outlive the worker. The destructor unsubscribes and waits for the
// calls in flight (each ends by its tool's timeout).
class ToolWorker {
 public:
  ToolWorker(EventBus& bus, std::shared_ptr<ToolRegistry> tools,
             const ToolWorkerOptions& options = {});
  ~ToolWorker();
  ToolWorker(const ToolWorker&) = delete;
  ToolWorker& operator=(const ToolWorker&) = delete;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  Subscription subscription_;
};

}  // namespace parley
