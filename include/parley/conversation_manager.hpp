// ConversationManager: one conversation's history, its visible view and batches, its model
// calls, tool calls and token accounting (docs/architecture.md).
//
// A default-constructed manager has no model attached and serves as a plain message store.
// Constructed from ConversationOptions it calls a model (executeLlmCall), runs the tools the
// model asks for (executeToolCall/s) and runs the whole tool-call loop (run).
// Every query works on the visible view and returns copies; getAllMessages() is the only way
// to storage. Message indices in queries are view positions; indices in the mark map and in
// isModified() are storage indices.
//
// Ownership: the caller owns the manager. clone() returns an independent manager that shares
// the common prefix of the history with this one (O(1) in the history's length); the two
// then evolve alone.
//
// Thread-safety: any number of threads may call the const methods while one thread writes;
// the manager holds a reader/writer lock (std::shared_mutex) around its state, and never
// holds it while waiting for the model or a tool. Model calls and runs are writers: run one
// at a time per manager. Moving a manager is not synchronised: do not move one that other
// threads are using.
//
// Failure: executeLlmCall() that throws has added nothing. run() commits the prompt together
// with the first reply, so a run whose first call fails adds nothing; a run that fails later
// (the model errors on the third iteration) keeps the complete iterations before it, never an
// assistant tool-call message without its results, and rethrows.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "parley/cache_diagnostic.hpp"
#include "parley/context_snapshot.hpp"
#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/logger.hpp"
#include "parley/message.hpp"
#include "parley/message_store.hpp"
#include "parley/prompt_counter.hpp"
#include "parley/structured_output.hpp"
#include "parley/tokens.hpp"
#include "parley/tools.hpp"
#include "parley/turn_sink.hpp"
#include "parley/usage.hpp"

namespace parley {

class ToolTape;

class ConversationManager;

// What checkTokenUsage() found.
struct TokenCheck {
  int64_t contextTokens =
      0;  // the visible context's size, as docs/architecture.md, "Tokens", computes it
  int64_t tokenLimit = 0;  // 0: no limit
  bool overLimit = false;  // contextTokens > tokenLimit (strictly), with a limit set
  bool estimated = false;  // part of contextTokens is an estimate, not the API's report
};

// The three numbers kept apart (docs/architecture.md, "Tokens").
struct TokenUsageStats {
  std::optional<TokenUsage> lastRequest;  // the last call's usage as the API reported it (raw kept)
  TokenUsage cumulative;  // sum over every call (billing, the facade's counters); total = p + c
  int64_t requests = 0;   // calls that reported usage
  TokenCheck context;     // the visible context against the limit
};

// Called before a model call when the context is over the limit (the compression trigger).
// It may edit the conversation (context operations, a summary); the call then goes on with
// the edited view. An exception it throws is logged and the call goes on.
using TokenLimitHandler = std::function<void(ConversationManager&, const TokenCheck&)>;

struct ConversationOptions {
  std::shared_ptr<LlmClient> llm;       // null: no model (executeLlmCall throws ValidationError)
  std::shared_ptr<ToolRegistry> tools;  // null: no tools offered
  // Runs the tools; null: one is made from `tools` with maxToolConcurrency.
  std::shared_ptr<ToolExecutor> toolExecutor;
  int maxToolConcurrency = 4;  // tool calls of one reply running at once
  std::string systemPrompt;    // non-empty: the history's first message
  // The model and generation parameters of every call (model, temperature, maxTokens,
  // responseFormat, toolChoice, extra, ...). Its messages and tools are ignored: the
  // conversation's view and `tools` are sent.
  ChatRequest request;
  bool stream = false;     // stream calls (the chunk callback sees deltas)
  int maxIterations = 10;  // model calls in one run()
  // Tool calls run for one reply; the calls past it are not run and get an error result the
  // model can read (kind NotRun), so a reply asking for 10 000 calls cannot start 10 000.
  int maxToolCallsPerReply = 64;
  int64_t tokenLimit = 0;  // 0: no limit
  // Counts the view locally when the API's usage does not cover it. Default: o200k_base,
  // or the ceil(code points / 2.5) estimate when its vocabulary is not installed.
  std::shared_ptr<const TokenCounter> tokenCounter;
  TokenLimitHandler onTokenLimitExceeded;  // the compression trigger; see summarizeAndTruncate()
  // When set, each reply's reported prompt_tokens against the local count of the request sent
  // teaches it a ratio (tokens.hpp), and the token-limit check scales what it counts locally
  // by it (what the API's usage does not cover). Null: local counts as they are.
  std::shared_ptr<CalibratedCounter> calibration;
  // When set, the token-limit check (with a tokenLimit) and the cost budget count the whole
  // request about to be sent with it (countRequestPrompt), e.g. a RemotePromptCounter asking the
  // server (docs/cost.md, "Remote counting"): one count per distinct request, before the call. A
  // count that fails fails the call (nothing sent, nothing added) unless the counter falls back.
  // A remote count is exact, so the calibration does not scale it. Null: local counts.
  std::shared_ptr<const PromptCounter> promptCounter;
  // When set, each complete turn is saved through it as soon as it is committed: a reply without
  // tool calls, or the tool results that complete an iteration (never an assistant tool-call
  // message without its results). A failed model call saves nothing. For a StoredThread
  // (stored_thread.hpp), attach it to its thread first. A failed save throws (StoreError,
  // StoreConflict) from the call that committed the turn; the turn stays in memory and the next
  // save writes it.
  std::shared_ptr<TurnSink> persist;
  // Where diagnostics go (a failing trigger, ...). Null: stderr.
  Logger log;
  // Cost limits (cost.hpp), checked before every model call: the call's worst case (the exact
  // prompt count, the max_tokens bound; a request without max_tokens is sent with
  // budget.defaultMaxTokens) on top of what the run and the thread spent. Over a limit, or with
  // an unpriced model: BudgetExceeded, nothing sent, nothing added. Default: no limits.
  CostBudget budget;
};

// What a conversation's replies cost (ConversationManager::spentCost), in USD.
struct CostSpent {
  double thread = 0;  // every reply of the history, hidden ones included (they were paid for)
  double run = 0;     // the replies after the view's last user prompt: the run in progress
};

struct LlmCallOptions {
  std::optional<bool> stream;                        // nullopt: ConversationOptions::stream
  ChunkHandler onChunk;                              // sees each delta when streaming
  std::optional<std::chrono::milliseconds> timeout;  // the whole call, retries included
  std::stop_token stopToken;                         // cancels the call (CancelledError)
  // Replaces ConversationOptions::request (model, parameters) for this call.
  std::optional<ChatRequest> request;
  // gen_ai.conversation.id on the call's spans (docs/telemetry.md): the thread's id, if any.
  std::string conversationId;
};

// Runs the tool calls of one reply and returns one result per call, in the calls' order. A
// tool's failure is a result with an error, not an exception; an exception (CancelledError,
// ...) ends the run.
using ToolCallRunner = std::function<std::vector<ToolResult>(const std::vector<ToolCall>& calls,
                                                             std::stop_token cancel)>;

// What a runner of the tool loop changes about run(). The loop itself (call, run the tools,
// append, repeat; the caps; when a turn is whole and saved) is the same for every runner: the
// facade, the executor and a durable-run worker only configure it.
struct RunOptions : LlmCallOptions {
  std::optional<int> maxIterations;  // nullopt: ConversationOptions's
  // One deadline for the whole run: every model call with its retries, and every tool. When it
  // passes, what is under way is cancelled and run() throws TimeoutError. (LlmCallOptions::timeout
  // still bounds each model call.) nullopt: no deadline beyond the calls' own.
  std::optional<std::chrono::milliseconds> turnTimeout;
  std::function<void(const ToolCall&)> onToolCall;      // before a tool call runs
  std::function<void(const ToolResult&)> onToolResult;  // after, in the order of the calls
  // How the calls are executed. Null: the conversation's ToolExecutor, in this process. The
  // executor sends them out as events to a ToolWorker; a durable run journals them.
  ToolCallRunner runToolCalls;
  // Records each reply's tool calls and results on the tape, or, on a replaying tape, takes
  // them from it instead of running anything (tool_tape.hpp; onToolCall and onToolResult still
  // see them). toolTapeThread names the thread on the tape ("" for a lone conversation).
  std::shared_ptr<ToolTape> toolTape;
  std::string toolTapeThread;
  // Each message the run adds to the history (the prompt, each reply, each tool result), in
  // order, once it is appended.
  std::function<void(const Message&)> onMessage;
  // A reply already received for the run's first model call (a durable run resuming the turn
  // its journal kept, docs/scale-out.md): taken as that call's reply, the model is not called.
  // It must be an assistant message; it counts as an iteration.
  std::optional<Message> firstReply;
};

struct RunResult {
  std::string content;                  // the last reply's text
  std::string finishReason;             // the last reply's, or "max_iterations"
  int iterations = 0;                   // model calls made
  TokenUsage usage;                     // summed over the run's calls
  Message message;                      // the last assistant message
  std::vector<ToolCall> toolCalls;      // every tool call the model made, in order
  std::vector<ToolResult> toolResults;  // their results, in the same order
  // The first call's prompt against the previous request (diagnoseCache()), taken before it was
  // sent; nullopt when no previous request is known.
  std::optional<CacheDiagnostic> cache;
};

class ConversationManager {
 public:
  ConversationManager();
  // Attaches a model and tools; a non-empty systemPrompt becomes the first message.
  explicit ConversationManager(ConversationOptions options);
  ~ConversationManager();
  ConversationManager(ConversationManager&&) noexcept;
  ConversationManager& operator=(ConversationManager&&) noexcept;
  ConversationManager(const ConversationManager&) = delete;
  ConversationManager& operator=(const ConversationManager&) = delete;

  // --- adding -------------------------------------------------------------------------------
  // Validates and appends. Returns the number of visible messages. Throws ValidationError
  // naming the field; nothing is appended then.
  size_t addMessage(Message message);
  // All or nothing: every message is validated before any is appended.
  size_t addMessages(std::vector<Message> messages);

  // --- queries on the visible view (copies) -------------------------------------------------
  std::vector<Message> getMessages() const;
  size_t getMessageCount() const;
  std::vector<Message> getAllMessages() const;  // storage, including hidden messages
  size_t storageSize() const;
  // The last n visible messages (all of them when n exceeds the count).
  std::vector<Message> getRecentMessages(size_t n) const;
  // View positions [start, end); end is clamped to the count; start > end gives nothing.
  std::vector<Message> getMessagesByRange(size_t start, size_t end) const;
  // A scan of the view (kept for compatibility); same result as getMessagesByRole.
  std::vector<Message> filterMessagesByRole(Role role) const;
  // From the role index: O(k) for k results.
  std::vector<Message> getMessagesByRole(Role role) const;
  std::vector<Message> getRecentMessagesByRole(Role role, size_t n) const;
  // Positions [start, end) among the visible messages of `role`; end is clamped.
  std::vector<Message> getMessagesByRoleRange(Role role, size_t start, size_t end) const;
  size_t getMessageCountByRole(Role role) const;
  // The last n visible messages of `role` in one call (same as getRecentMessagesByRole).
  std::vector<Message> getRecentMessages(size_t n, Role role) const;
  // The type-index queries (MessageStore::indicesByRole and its siblings): STORAGE indices of
  // the visible messages of `role`, in view order, as in the mark map's typeIndices; read the
  // messages with getAllMessages() or check them with isModified().
  std::vector<size_t> getIndicesByRole(Role role) const;
  std::vector<size_t> getRecentIndicesByRole(Role role, size_t n) const;
  std::vector<size_t> getIndicesByRoleRange(Role role, size_t start, size_t end) const;

  // --- batches ---------------------------------------------------------------------------------
  // Clears the view to its system messages (keepSystem) or to nothing, as a new batch.
  void clearMessages(bool keepSystem = true);
  MessageMarkMap getMarkMap() const;
  void startNewBatch(size_t boundary);
  void rollbackToBatch(size_t batch);
  bool isModified(size_t storageIndex) const;
  // Empty when every invariant holds, else a description of the first violation.
  std::string checkConsistency() const;

  // --- model and tools ----------------------------------------------------------------------
  // One model call: checks the token usage (the trigger fires when over the limit), sends the
  // visible view and the tool definitions, streams or not, updates the usage, appends the ONE
  // assistant message (all text, all tool calls) and returns the result. Tool calls are not
  // run. Throws the client's errors (HttpError, TimeoutError, ...) having added nothing; an
  // empty reply (no text, no tool calls) is a ProtocolError.
  ChatResult executeLlmCall(const LlmCallOptions& options = {});
  // The same call with `pending` messages (a user prompt) sent after the view and appended
  // together with the reply, only if the call succeeds: a failed call adds neither. For loops
  // built outside run().
  ChatResult executeLlmCall(const std::vector<Message>& pending, const LlmCallOptions& options);
  // Runs one tool call and appends its tool message. Never throws for a tool's failure: it
  // becomes the result's error and the message's {"error": ...} content. The call must be one
  // of the last assistant message's calls still without a result (ValidationError otherwise:
  // an orphan result is a history every API refuses). A stored conversation saves the turn only
  // once every call of the message has its result.
  ToolResult executeToolCall(const ToolCall& call, std::stop_token cancel = {});
  // Runs the calls concurrently (bounded) and appends one tool message per call, in the order
  // of the calls.
  std::vector<ToolResult> executeToolCalls(const std::vector<ToolCall>& calls,
                                           std::stop_token cancel = {});
  // The tool loop, the only one in parley: appends the user prompt and loops: call the model;
  // if the reply has tool calls, run them (options.runToolCalls, else the ToolExecutor) and
  // call again; stop at a reply without tool calls or after maxIterations calls (finish reason
  // "max_iterations"). Each iteration is stored as one assistant message, then one tool
  // message per call; each whole turn is saved through options.persist.
  RunResult run(const std::string& prompt, const RunOptions& options = {});
  // The same loop with `input` (usually one user message) sent after the view and committed
  // with the first reply, as the prompt is. Empty input goes on from the history as it is (a
  // durable run continuing after its last committed turn).
  RunResult run(std::vector<Message> input, const RunOptions& options = {});

  // --- structured output (structured_output.hpp, docs/structured-output.md) -----------------
  // Sends `prompt` and returns the answer as a JSON value valid against `schema` (an object
  // schema, draft 4-7, checked by valijson as tool arguments are). The request asks for JSON on
  // the ladder's rung (strict response_format json_schema; json_object with the schema in a
  // system message; a forced call of a synthetic tool named options.name), stepping down when
  // the server refuses a rung with HTTP 400 (remembered per client for the process). A reply
  // that does not parse or validate is answered with its errors and asked again, at most
  // options.maxRepairs times. No conversation tool is offered. Each attempt starts a batch
  // (the prompt, or the repair request, and its reply); when a repair succeeded, a last batch
  // shows the prompt and the valid answer alone, so the failed attempts stay in storage,
  // hidden, and rollbackToBatch() brings them back. The answer is stored as an assistant
  // message whose content is the JSON text (a tool-rung answer too: no tool call is left
  // unanswered). Every call's usage is counted.
  // Throws ValidationError for a bad schema (past kMaxStructuredSchemaBytes or
  // kMaxStructuredSchemaDepth, not an object schema, not compilable) or options;
  // StructuredOutputError when no valid answer came within the repairs, the view then as
  // before the call (storage keeps the attempts, hidden); the client's errors otherwise, the
  // view as before.
  nlohmann::json runStructured(const std::string& prompt, const nlohmann::json& schema,
                               const StructuredOptions& options = {});
  // The same, with the rung, the attempts, the usage and the stored message.
  StructuredResult runStructuredResult(const std::string& prompt, const nlohmann::json& schema,
                                       const StructuredOptions& options = {});
  // The answer read as T (nlohmann from_json) against JsonSchemaOf<T>::schema() or `schema`.
  // An answer that cannot be read as T is a StructuredOutputError naming the field, and the
  // view is as before the call.
  template <class T>
  T runAs(const std::string& prompt, const StructuredOptions& options = {}) {
    return runAs<T>(prompt, JsonSchemaOf<T>::schema(), options);
  }
  template <class T>
  T runAs(const std::string& prompt, const nlohmann::json& schema,
          const StructuredOptions& options = {}) {
    std::optional<T> out;
    structured(prompt, schema, options, [&out](const nlohmann::json& value) {
      try {
        out.emplace(value.template get<T>());
      } catch (const nlohmann::json::exception& e) {
        throw typedAnswerError(value, e.what());
      }
    });
    return std::move(*out);
  }

  // --- tokens ----------------------------------------------------------------------------------
  // Records a call's usage; it covers the current view (call it after appending the reply).
  void updateTokenUsage(const TokenUsage& usage);
  TokenUsageStats getTokenUsage() const;
  // Computes the size of the request about to be sent (the context, tool definitions included,
  // plus `pending`, the messages to be sent after the view) against tokenLimit and, when over
  // it, calls the trigger. Every model call runs it with the prompt it sends.
  TokenCheck checkTokenUsage(const std::vector<Message>& pending = {});
  // The context size alone; fires nothing.
  TokenCheck estimateContextTokens() const;
  // How much of the previous request's prompt a call sending the view, then `pending`, would
  // reuse from a provider's prompt cache, and where the two first differ (cache_diagnostic.hpp).
  // O(messages compared), with each message's JSON and token count cached. nullopt when the
  // previous request is unknown: no call yet, or restored from a snapshot whose view was edited
  // after its last call. Within one process a change of the tool definitions is seen too.
  std::optional<CacheDiagnostic> diagnoseCache(const std::vector<Message>& pending = {}) const;
  // Adds a call's usage to the cumulative counters only: for calls that did not produce the
  // view, such as a summary made by the compression trigger.
  void addSideUsage(const TokenUsage& usage);
  const ConversationOptions& options() const;
  // The prompt tokens of a call sending the view, then `pending`, with the tools offered: as
  // countChatTokens() counts them, each message counted once and cached.
  TokenCount countPromptTokens(const std::vector<Message>& pending = {}) const;
  // The prompt tokens of the request a call sending the view, then `pending`, would send (the
  // options' request, the tools offered), counted by options.promptCounter; without one, as
  // countPromptTokens(). Throws what the counter throws.
  PromptCount countRequestPrompt(const std::vector<Message>& pending = {}) const;
  // What the replies cost at `price` (each reply's usage, cost.hpp's costOf).
  CostSpent spentCost(const ModelPrice& price) const;

  // --- snapshots ----------------------------------------------------------------------------
  // The whole state as a versioned JSON document:
  //   {"format": "parley.snapshot/1", "storageSize": N, "messages": [storage, OpenAI JSON],
  //    "markMap": {"view": [[start, count], ...], "batchBoundaries": [...], "currentBatch": b,
  //                "savedViews": [[[start, count], ...], ...]},
  //    "tokenUsage": {"lastRequest": usage or null, "cumulative": usage, "requests": n,
  //                   "coveredViewSize": n}}
  // Options (model, tools) are not part of it: restoring keeps the manager's own.
  nlohmann::json createSnapshot() const;
  // The same document without "messages": O(batches + runs in the view), so a store can
  // rewrite it every turn while appending only the new messages.
  nlohmann::json createStateSnapshot() const;
  // Replaces the whole state. Refuses (ValidationError naming the field, state unchanged) a
  // document of another or newer format, or one whose parts do not agree.
  void restoreFromSnapshot(const nlohmann::json& snapshot);
  // The state frozen, in O(batches): the same content as createSnapshot(), whose document is
  // built only if someone asks (context_snapshot.hpp).
  ContextSnapshot snapshot() const;
  // Replaces the whole state with `snapshot`'s: O(batches) for one taken by snapshot(), as
  // restoreFromSnapshot(json) for one made from a document. A null snapshot is a
  // ValidationError.
  void restoreFromSnapshot(const ContextSnapshot& snapshot);
  // An independent manager sharing this one's history prefix, options and token counters. It
  // is not persisted: saving its turns into this one's stored thread would overwrite that
  // thread's history, so the clone's options.persist is null. To keep a clone, fork the thread
  // and give it the fork: clone(thread.fork(*this)).
  ConversationManager clone() const;
  // The same, saving each whole turn through `persist` (a sink for a thread that holds what
  // this manager holds, e.g. StoredThread::fork()).
  ConversationManager clone(std::shared_ptr<TurnSink> persist) const;

  // Changes on every change; lets a caller (a store, a cache) see that something changed. It is
  // an identity, not a count: revisions are unique across the process (a change takes the next
  // value of one process-wide counter), so two managers show the same revision only when one is
  // an unchanged clone() of the other, i.e. they hold the same state.
  uint64_t revision() const;

  // A copy of the underlying store (cheap: persistent vectors).
  MessageStore store() const;
  // Runs `edit` on a copy of the store under the write lock and keeps the copy only if `edit`
  // returns normally, so a throwing edit leaves the conversation as it was. Context
  // operations (context_ops.hpp) are applied this way.
  void modifyStore(const std::function<void(MessageStore&)>& edit);

 private:
  struct State;
  struct CallShape;  // how a structured call changes the request and the reply
  // runStructuredResult, with `accept` run on the valid answer before it is kept (it throws to
  // refuse it, the view then as before the call).
  StructuredResult structured(const std::string& prompt, const nlohmann::json& schema,
                              const StructuredOptions& options,
                              const std::function<void(const nlohmann::json&)>& accept);
  // `given`: the reply to take instead of calling the model (RunOptions::firstReply).
  // `cache`: set to the diagnostic of the request as it is sent.
  ChatResult call(const std::vector<Message>& pending, const LlmCallOptions& options,
                  const std::function<void(const Message&)>& onMessage = nullptr,
                  const Message* given = nullptr, std::optional<CacheDiagnostic>* cache = nullptr,
                  const CallShape* shape = nullptr);
  std::vector<ToolResult> runTools(const std::vector<ToolCall>& calls, std::stop_token cancel,
                                   const RunOptions* hooks);
  nlohmann::json tokenUsageJson() const;  // REQUIRES the lock
  void persistIfWhole();                  // saves through options.persist at a turn's end
  // ValidationError unless each call is one of the last tool-call message's unanswered calls.
  void requireOpenCalls(const std::vector<ToolCall>& calls) const;
  TokenCheck contextTokens() const;  // REQUIRES the lock
  // The request a call sending the view, then `pending`, sends: `base` (model, parameters) with
  // the view's encoded messages, `pending` and the tools.
  // `definitions`, when given, is set to the tool definitions sent.
  ChatRequest requestFor(const std::vector<Message>& pending, const ChatRequest& base,
                         std::shared_ptr<const ToolDefinitions>* definitions = nullptr) const;
  // checkTokenUsage() for a call whose request starts from `base`.
  TokenCheck checkTokenUsage(const std::vector<Message>& pending, const ChatRequest& base);
  // options.promptCounter's count of `request`, calibrated when it is not the server's.
  PromptCount countWithCounter(const ChatRequest& request) const;
  int64_t toolTokens() const;                     // the tool definitions' tokens; REQUIRES the lock
  int64_t calibrated(int64_t localTokens) const;  // scaled by options.calibration, if any
  // Checks the budget (throws BudgetExceeded) and reserves the call's worst case in the shared
  // spending, if any; returns the USD reserved there (0: none) and the model priced.
  std::pair<double, std::string> enforceBudget(ChatRequest& request,
                                               const std::vector<Message>& pending) const;

  std::unique_ptr<State> state_;
};

inline constexpr const char* kSnapshotFormat = "parley.snapshot/1";

}  // namespace parley
