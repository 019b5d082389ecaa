#include "runs/durable_turn.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/run_replay.hpp"
#include "parley/stored_thread.hpp"
#include "parley/telemetry.hpp"

namespace parley::detail {

namespace {

using json = nlohmann::json;

std::string answerText(const json& answer) {
  return answer.is_string() ? answer.get<std::string>() : answer.dump();
}

ToolResult errorResult(const ToolCall& call, ToolErrorKind kind, std::string error) {
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.errorKind = kind;
  r.error = std::move(error);
  return r;
}

ToolResult textResult(const ToolCall& call, const std::string& text) {
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.success = true;
  r.result = text;
  return r;
}

// The fenced whole-turn append, with the turn's events; after it, an interrupt stops the run.
// The run's answer (a turn that ends the loop) is held: finishWithTurn commits it with the end.
class LeaseSink : public TurnSink {
  // Whether the loop goes on after this turn: it ended with tool results.
  static bool continues(const ConversationManager& conversation) {
    auto last = conversation.getRecentMessages(1);
    return !last.empty() && last.back().role == Role::Tool;
  }

 public:
  LeaseSink(RunStore& runs, ActiveRun& active, RunEvents& events, std::string threadId,
            int64_t storedCount, RunStore::Version version)
      : runs_(runs),
        active_(active),
        events_(events),
        threadId_(std::move(threadId)),
        storedCount_(storedCount),
        version_(version) {}

  void saveTurn(const ConversationManager& conversation) override {
    UnsavedTurn turn = unsavedTurn(conversation, storedCount_, threadId_);
    std::vector<EventInput> held;
    if (answer_) {
      // The loop went on after all: the held turn is part of this one.
      held = std::move(answer_->events);
      answer_.reset();
    }
    if (!turn.messages.empty() && !continues(conversation)) {
      // The run's answer: held for finishWithTurn, which commits it with the run's end.
      auto turnEvents = events_.takeForTurn();
      held.insert(held.end(), std::make_move_iterator(turnEvents.begin()),
                  std::make_move_iterator(turnEvents.end()));
      answer_ = HeldAnswer{std::move(turn), std::move(held)};
      return;
    }
    if (!turn.messages.empty()) {
      const auto added = static_cast<int64_t>(turn.messages.size());
      auto turnEvents = events_.takeForTurn();
      held.insert(held.end(), std::make_move_iterator(turnEvents.begin()),
                  std::make_move_iterator(turnEvents.end()));
      Span span("parley.store.append_turn", "", SpanKind::Client);  // docs/telemetry.md
      span.set("parley.run.id", active_.lease.runId);
      span.set("parley.messages", added);
      try {
        version_ = runs_.appendTurn(active_.lease, turn.messages, turn.state, version_, held);
      } catch (const std::exception& e) {
        span.setError(e);
        throw;
      }
      storedCount_ += added;
    }
    // A safe point: a request the heartbeat has not brought yet is read here, so an interrupt
    // never lets the run start another model call.
    // (A turn that ends the loop, a reply without tool calls, needs no check.)
    if (active_.request == CancelRequest::None && continues(conversation)) {
      if (auto run = runs_.run(active_.lease.runId)) active_.request = run->cancelRequest;
    }
    if (active_.request == CancelRequest::Interrupt) throw StopAtSafePoint();
  }

  // The run's answer, not yet written: commit it with finish (finishWithTurn). Empty when the
  // run's last turn was written already (or it has none).
  struct HeldAnswer {
    UnsavedTurn turn;
    std::vector<EventInput> events;  // the turn's, in order
  };
  std::optional<HeldAnswer>& answer() { return answer_; }
  RunStore::Version version() const { return version_; }

 private:
  std::optional<HeldAnswer> answer_;
  RunStore& runs_;
  ActiveRun& active_;
  RunEvents& events_;
  std::string threadId_;
  int64_t storedCount_;
  RunStore::Version version_;
};

// At most this many questions a tool (an MCP server's forms) may ask in one call of a durable
// run; each one is a wait of the run and a run of the call again with the answers so far.
constexpr std::size_t kMaxQuestionsPerCall = 16;

// The questions tools ask through ToolContext::ask during a durable run (an MCP server's
// elicitation): shared with the handlers, which may outlive the runner when abandoned.
struct RunQuestions {
  std::mutex mutex;
  std::string callId;                           // the call the run waited for, if it asked
  std::vector<std::pair<json, json>> answered;  // that call's questions and their answers
  std::map<std::string, json> pending;          // call id -> its first unanswered question

  // The run waited for call `id`'s question and has the answer (RunInfo::wait, ::response).
  void resume(const RunInfo& run) {
    if (!run.wait.is_object() || run.wait.value("kind", "") != "elicitation") return;
    callId = run.wait.value("tool_call_id", "");
    if (auto before = run.wait.find("answered"); before != run.wait.end() && before->is_array())
      for (const json& pair : *before)
        if (pair.is_object())
          answered.emplace_back(pair.value("question", json()), pair.value("answer", json()));
    if (!run.response.is_null())
      answered.emplace_back(run.wait.value("question", json()), run.response);
  }

  json ask(const std::string& id, const json& question) {
    std::lock_guard lock(mutex);
    if (id == callId)
      for (const auto& [asked, answer] : answered)
        if (asked == question) return answer;
    pending.emplace(id, question);  // the first question of the call is the one asked
    throw CancelledError("the run asks a person and runs the call again with the answer");
  }
};

// What the calls of a durable run note while they run: their checkpoints
// (ToolContext::checkpoint), kept in their journal entries, and their progress
// (ToolContext::progress), written as tool_execution_progress events. Shared with the handlers,
// which may outlive the runner when abandoned: only a call the runner is running may note anything;
// a late note (its handler abandoned, the run gone on) is refused.
struct RunningCalls {
  std::mutex mutex;
  RunStore* runs = nullptr;  // null once the runner is gone
  RunEvents* events = nullptr;
  Lease lease;
  std::map<std::string, int64_t> turns;  // call id -> its turn, while the runner runs it
  std::map<std::string, json> resume;    // call id -> the handle it resumes from

  void note(const std::string& callId, const json& handle) {
    std::lock_guard lock(mutex);
    auto call = turns.find(callId);
    if (!runs || call == turns.end()) {
      throw CancelledError("the checkpoint of tool call \"" + callId +
                           "\" came after the run stopped waiting for it");
    }
    runs->recordToolCheckpoint(lease, call->second, callId, handle);
  }
  // Written at once (the run's readers follow a long call as it goes); a late report is dropped.
  void report(const ToolContext& call, const std::string& message, const json& data) {
    std::lock_guard lock(mutex);
    if (!runs || !events || !turns.count(call.toolCallId)) return;
    ToolExecutionProgress progress;
    progress.toolCallId = call.toolCallId;
    progress.toolName = call.name;
    progress.message = message;
    progress.data = data.is_object() ? data : json::object();
    events->add(eventInput(progress));
    events->flush();
  }
  json resumeFrom(const std::string& callId) {
    std::lock_guard lock(mutex);
    auto found = resume.find(callId);
    return found == resume.end() ? json() : found->second;
  }
};

// The tool calls of a durable run, consulting its journal.
class JournalRunner {
 public:
  JournalRunner(RunStore& runs, ActiveRun& active, RunEvents& events, const RunInfo& run,
                RunJournal journal, std::optional<RunJournal> recorded,
                std::shared_ptr<ToolRegistry> allowed, std::shared_ptr<ToolRegistry> all,
                int maxConcurrent, std::string humanTool)
      : runs_(runs),
        active_(active),
        events_(events),
        run_(run),
        journal_(std::move(journal)),
        recorded_(std::move(recorded)),
        allowed_(std::move(allowed)),
        all_(std::move(all)),
        humanTool_(std::move(humanTool)) {
    questions_->resume(run_);
    running_->runs = &runs_;
    running_->events = &events_;
    running_->lease = active_.lease;
    if (all_) {
      ToolExecutorOptions o;
      o.maxConcurrent = maxConcurrent;
      o.ask = [questions = questions_](const ToolContext& call, const json& question) {
        return questions->ask(call.toolCallId, question);
      };
      o.checkpoint = [running = running_](const ToolContext& call, const json& handle) {
        running->note(call.toolCallId, handle);
      };
      o.resumeFrom = [running = running_](const std::string& callId) {
        return running->resumeFrom(callId);
      };
      o.progress = [running = running_](const ToolContext& call, const std::string& message,
                                        const json& data) { running->report(call, message, data); };
      executor_ = std::make_unique<ToolExecutor>(all_, o);
    }
  }
  ~JournalRunner() {
    std::lock_guard lock(running_->mutex);
    running_->runs = nullptr;
  }
  JournalRunner(const JournalRunner&) = delete;
  JournalRunner& operator=(const JournalRunner&) = delete;

  int64_t turn = 0;  // the storage index of the reply whose calls run next

  std::vector<ToolResult> operator()(const std::vector<ToolCall>& calls, std::stop_token stop) {
    std::vector<std::optional<ToolResult>> results(calls.size());
    std::vector<size_t> toRun;
    std::optional<json> waitFor;
    json clientCalls = json::array();  // calls of the client's tools, which the client runs
    for (size_t i = 0; i < calls.size(); ++i) {
      const ToolCall& call = calls[i];
      const ToolCallEntry* entry = find(call.id);
      // A replay takes what the recorded run's journal says, by the path a taken-over run's own
      // journal goes (below), and journals it again; nothing runs.
      const bool replayed = recorded_ && !(entry && isFinal(entry->phase));
      if (replayed) entry = &recordedEntry(call);
      if (!replayed && isClientTool(call.name)) {
        if (const json* output = clientOutputFor(call.id)) {
          results[i] = textResult(call, answerText(*output));
        } else {
          clientCalls.push_back(
              {{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
        }
        continue;
      }
      if (entry && entry->phase == ToolCallPhase::Completed) {
        results[i] = textResult(call, entry->text);
        if (replayed) record(call, entry->phase, entry->text);
        continue;
      }
      if (entry &&
          (entry->phase == ToolCallPhase::Failed || entry->phase == ToolCallPhase::Indeterminate)) {
        results[i] = errorResult(call, ToolErrorKind::HandlerFailed, entry->text);
        if (replayed) record(call, entry->phase, entry->text);
        continue;
      }
      if (!allowed_ || !allowed_->has(call.name) || !all_) {
        results[i] = errorResult(call, ToolErrorKind::UnknownTool,
                                 "unknown tool \"" + call.name + "\": this run may not call it");
        record(call, ToolCallPhase::Failed, results[i]->error);
        continue;
      }
      const auto info = all_->find(call.name);
      // The call stopped at a question of its own: it runs again with the answer (approved
      // before it ran, if it needed approval).
      const bool asked = call.id == questions_->callId;
      // A started call that noted the handle of its remote work picks that work up again
      // (ToolContext::resumeFrom): safe whether or not the tool is idempotent, and approved
      // already if it needed approval (it started).
      const bool resumes =
          entry && entry->phase == ToolCallPhase::Started && !entry->checkpoint.is_null();
      if (entry && entry->phase == ToolCallPhase::Started && info && !info->options.idempotent &&
          !asked && !resumes) {
        results[i] = errorResult(
            call, ToolErrorKind::HandlerFailed,
            "the call may have run: it was started before its worker stopped and its result was "
            "lost; the tool is not idempotent, so it was not run again. Check its effect before "
            "calling it again.");
        record(call, ToolCallPhase::Indeterminate, results[i]->error);
        continue;
      }
      const bool human = call.name == humanTool_;
      if (!asked && !resumes && (human || (info && info->options.requiresApproval))) {
        const json* answer = answerFor(call.id);
        if (!answer) {
          if (!waitFor) waitFor = waitDescription(call, human);
          continue;
        }
        if (human) {
          results[i] = textResult(call, answerText(*answer));
          record(call, ToolCallPhase::Completed, answerText(*answer));
          continue;
        }
        if (!isApproval(*answer)) {
          results[i] =
              errorResult(call, ToolErrorKind::HandlerFailed,
                          "the call was not approved (answer: " + answerText(*answer) + ")");
          record(call, ToolCallPhase::Failed, results[i]->error);
          continue;
        }
      }
      toRun.push_back(i);
    }
    if (!toRun.empty()) runCalls(calls, toRun, results, stop);
    if (!waitFor) waitFor = questionWait(calls, results);
    if (!clientCalls.empty() && !waitFor) {
      // The client runs these: the run waits for their outputs (the server's calls of the same
      // reply ran and are journaled).
      waitFor = json{{"kind", "client_tools"},
                     {"tool_call_id", clientCalls[0]["id"]},
                     {"tool_calls", clientCalls},
                     {"prompt", "Run the client's tools and send their outputs"}};
    }
    if (waitFor) {
      UserInteractionRequested asked;
      asked.interactionId = (*waitFor)["tool_call_id"];
      asked.prompt = (*waitFor)["prompt"];
      asked.kind = (*waitFor)["kind"];
      auto live = events_.takeLive();
      live.push_back(eventInput(asked));
      active_.closing = true;
      runs_.wait(active_.lease, *waitFor, live);
      throw RunWaits{};
    }
    std::vector<ToolResult> out;
    out.reserve(calls.size());
    for (auto& r : results)
      out.push_back(std::move(*r));
    return out;
  }

 private:
  const ToolCallEntry* find(const std::string& callId) const {
    for (const auto& e : journal_.calls)
      if (e.turn == turn && e.callId == callId) return &e;
    return nullptr;
  }

  static bool isFinal(ToolCallPhase phase) {
    return phase == ToolCallPhase::Completed || phase == ToolCallPhase::Failed ||
           phase == ToolCallPhase::Indeterminate;
  }

  // The recorded run's final entry for this call of this reply, or ReplayMiss saying why there
  // is none to take.
  const ToolCallEntry& recordedEntry(const ToolCall& call) const {
    const std::string where = "call " + call.id + " (" + call.name + ") of the reply at message " +
                              std::to_string(turn) + " of run " + run_.id;
    for (const auto& e : recorded_->calls) {
      if (e.turn != turn || e.callId != call.id) continue;
      if (e.toolName != call.name) {
        throw ReplayMiss(where + " was a call of " + e.toolName + " when recorded");
      }
      if (e.arguments != call.arguments) {
        throw ReplayMiss(where + " has other arguments than when recorded: " + call.arguments +
                         " instead of " + e.arguments);
      }
      if (!isFinal(e.phase)) {
        throw ReplayMiss(where + " has no result in the recorded journal (it stopped at " +
                         std::string(toString(e.phase)) + ")");
      }
      return e;
    }
    throw ReplayMiss(where + " is not in the recorded journal");
  }

  bool isClientTool(const std::string& name) const {
    const json& tools = run_.options.clientTools;
    if (!tools.is_array()) return false;
    return std::any_of(tools.begin(), tools.end(),
                       [&](const json& t) { return t.value("name", "") == name; });
  }

  // The output the client sent for a call of its tool (respond() with {"tool_outputs": {id:
  // text}}), if the run waited for it.
  const json* clientOutputFor(const std::string& callId) const {
    if (!run_.response.is_object() || !run_.wait.is_object()) return nullptr;
    if (run_.wait.value("kind", "") != "client_tools") return nullptr;
    auto outputs = run_.response.find("tool_outputs");
    if (outputs == run_.response.end() || !outputs->is_object()) return nullptr;
    auto found = outputs->find(callId);
    return found == outputs->end() ? nullptr : &*found;
  }

  // A call that asked a question (ToolContext::ask): the run waits for it, with the call's
  // questions answered so far, and runs the call again once answered. Past kMaxQuestionsPerCall
  // the call fails instead.
  std::optional<json> questionWait(const std::vector<ToolCall>& calls,
                                   std::vector<std::optional<ToolResult>>& results) {
    std::lock_guard lock(questions_->mutex);
    for (size_t i = 0; i < calls.size(); ++i) {
      auto found = questions_->pending.find(calls[i].id);
      if (found == questions_->pending.end()) continue;
      json answered = json::array();
      if (calls[i].id == questions_->callId)
        for (const auto& [question, answer] : questions_->answered)
          answered.push_back({{"question", question}, {"answer", answer}});
      if (answered.size() >= kMaxQuestionsPerCall) {
        results[i] =
            errorResult(calls[i], ToolErrorKind::HandlerFailed,
                        "the tool asked more than " + std::to_string(kMaxQuestionsPerCall) +
                            " questions in one call; it was stopped");
        record(calls[i], ToolCallPhase::Failed, results[i]->error);
        continue;
      }
      const json& question = found->second;
      return json{{"kind", "elicitation"},
                  {"tool_call_id", calls[i].id},
                  {"tool", calls[i].name},
                  {"arguments", calls[i].arguments},
                  {"prompt", question.value("message", "")},
                  {"question", question},
                  {"answered", std::move(answered)}};
    }
    return std::nullopt;
  }

  // The answer respond() stored for this call, if the run waited for it (an approval or the
  // human tool; a tool's own question is RunQuestions').
  const json* answerFor(const std::string& callId) const {
    if (run_.response.is_null() || !run_.wait.is_object()) return nullptr;
    if (run_.wait.value("kind", "") == "elicitation") return nullptr;
    // "toolCallId": the spelling of runs that waited before the store's schema version 6.
    if (run_.wait.value("tool_call_id", run_.wait.value("toolCallId", "")) != callId)
      return nullptr;
    return &run_.response;
  }

  json waitDescription(const ToolCall& call, bool human) const {
    std::string prompt;
    if (human) {
      try {
        const json args = json::parse(call.arguments);
        prompt = args.is_object() && args.contains("question") && args["question"].is_string()
                     ? args["question"].get<std::string>()
                     : call.arguments;
      } catch (const std::exception&) {
        prompt = call.arguments;
      }
    } else {
      prompt = "Run the tool " + call.name + " with " + call.arguments + "?";
    }
    return {{"kind", human ? "interaction" : "approval"},
            {"tool_call_id", call.id},
            {"tool", call.name},
            {"arguments", call.arguments},
            {"prompt", prompt}};
  }

  void record(const ToolCall& call, ToolCallPhase phase, const std::string& text) {
    runs_.recordToolCall(active_.lease, turn, call.id, phase, text);
  }

  void runCalls(const std::vector<ToolCall>& calls, const std::vector<size_t>& toRun,
                std::vector<std::optional<ToolResult>>& results, std::stop_token stop) {
    std::vector<ToolCall> batch;
    {
      std::lock_guard lock(running_->mutex);
      running_->turns.clear();
      running_->resume.clear();
      for (size_t i : toRun) {
        running_->turns[calls[i].id] = turn;
        const ToolCallEntry* entry = find(calls[i].id);
        if (entry && entry->phase == ToolCallPhase::Started && !entry->checkpoint.is_null())
          running_->resume[calls[i].id] = entry->checkpoint;
      }
    }
    for (size_t i : toRun) {
      batch.push_back(calls[i]);
      record(calls[i], ToolCallPhase::Started, "");
      ToolExecutionRequest requested;
      requested.toolCall = calls[i];
      if (auto info = all_ ? all_->find(calls[i].name) : std::nullopt) {
        requested.executionOptions.timeout = info->options.timeout;
        requested.executionOptions.retries = info->options.retries;
        requested.executionOptions.retryDelay = info->options.retryDelay;
      }
      events_.add(eventInput(requested));
    }
    events_.flush();
    std::vector<ToolResult> done = executor_->executeAll(batch, stop);
    {
      std::lock_guard lock(running_->mutex);
      running_->turns.clear();
    }
    for (size_t k = 0; k < toRun.size(); ++k) {
      ToolResult& r = done[k];
      // A call that asked a question stays "started": it runs again once the run has the answer.
      if (asked(r.toolCallId)) continue;
      // A call cut short by a stop stays "started": whoever goes on decides from the tool.
      if (r.errorKind == ToolErrorKind::Cancelled) continue;
      if (r.success) {
        record(batch[k], ToolCallPhase::Completed, r.content());
      } else {
        record(batch[k], ToolCallPhase::Failed, r.error);
      }
      // Ran, successfully or not (the executor's meaning): tool_execution_completed.
      ToolExecutionCompleted ended;
      ended.toolCallId = r.toolCallId;
      ended.toolName = r.name;
      ended.result.success = r.success;
      // What the model reads (capped at the tool's maxResultBytes), not the raw value.
      if (r.success) ended.result.result = r.content();
      ended.result.error = r.error;
      ended.result.executionTime = r.executionTime;
      ended.result.retryCount = r.retryCount;
      ended.result.timedOut = r.errorKind == ToolErrorKind::Timeout;
      events_.add(eventInput(ended));
    }
    if (stop.stop_requested()) throw CancelledError("the run was stopped while its tools ran");
    for (size_t k = 0; k < toRun.size(); ++k)
      results[toRun[k]] = std::move(done[k]);
  }

  bool asked(const std::string& callId) {
    std::lock_guard lock(questions_->mutex);
    return questions_->pending.count(callId) > 0;
  }

  RunStore& runs_;
  ActiveRun& active_;
  RunEvents& events_;
  const RunInfo& run_;
  RunJournal journal_;
  std::optional<RunJournal> recorded_;  // a replay's source of results (WorkerOptions)
  std::shared_ptr<ToolRegistry> allowed_;
  std::shared_ptr<ToolRegistry> all_;
  std::unique_ptr<ToolExecutor> executor_;
  std::string humanTool_;
  std::shared_ptr<RunQuestions> questions_ = std::make_shared<RunQuestions>();
  std::shared_ptr<RunningCalls> running_ = std::make_shared<RunningCalls>();
};

// message_added of the messages a run starts with, from storage index `stored`.
std::vector<EventInput> inputEvents(const std::vector<Message>& input, int64_t stored) {
  std::vector<EventInput> events;
  events.reserve(input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    MessageAdded added;
    added.message = input[i];
    added.index = stored + static_cast<int64_t>(i);
    events.push_back(eventInput(added));
  }
  return events;
}

}  // namespace

std::vector<Message> startingInput(const RunInfo& run, int64_t stored,
                                   const std::string& defaultSystemPrompt) {
  std::vector<Message> input;
  const std::string& system =
      run.options.systemPrompt ? *run.options.systemPrompt : defaultSystemPrompt;
  if (!system.empty() && (stored == 0 || run.options.systemPrompt)) {
    // A new thread starts with it; a run's own prompt on a thread with history takes effect
    // from here on (docs/scale-out.md, "The worker").
    input.push_back(Message::system(system));
  }
  input.insert(input.end(), run.input.begin(), run.input.end());
  return input;
}

ClaimEvents announceInput(std::string defaultSystemPrompt) {
  return [system = std::move(defaultSystemPrompt)](const Claim& claim) {
    const RunInfo& run = claim.run;
    // A run taken over or resumed announced its input in its first attempt.
    if (run.attempts != 1 || !run.baseMessageCount) return std::vector<EventInput>{};
    return inputEvents(startingInput(run, *run.baseMessageCount, system), *run.baseMessageCount);
  };
}

DurableTurn::DurableTurn(const DurableTurnHost& host, const Claim& claim, ActiveRun& active,
                         RunEvents& events, std::shared_ptr<ToolRegistry> allowed)
    : host_(host),
      claim_(claim),
      run_(claim.run),
      active_(active),
      events_(events),
      allowed_(std::move(allowed)) {}

void DurableTurn::run() {
  const std::string profile =
      run_.options.profile.empty() ? host_.options.defaultProfile : run_.options.profile;
  if (profile.empty()) {
    throw ValidationError("profile", "the run names no profile and the worker has no default");
  }
  ConversationOptions config =
      configureConversation(host_.options.profiles->get(profile),
                            host_.options.profiles->client(profile), allowed_, host_.options.turn);
  // The system prompt is the run's business (below): a thread with history keeps its own.
  config.systemPrompt.clear();
  config.log = host_.options.log;
  config.onTokenLimitExceeded = [&events = events_](ConversationManager&, const TokenCheck& check) {
    TokenLimitExceeded over;
    over.contextTokens = check.contextTokens;
    over.tokenLimit = check.tokenLimit;
    events.add(eventInput(over));
  };
  if (host_.options.maxCostPerWorker) {
    config.budget.maxCostShared = host_.options.maxCostPerWorker;
    config.budget.shared = host_.spending;
    config.budget.sharedName = "maxCostPerWorker";
  }
  ConversationManager manager(config);
  RunStore::Version version = 0;
  std::optional<ContextSnapshot> kept;
  if (run_.attempts == 1 && run_.baseVersion)
    kept = host_.cache.take(run_.threadId, *run_.baseVersion);
  if (kept) {
    // The state this worker committed last, and nothing changed the thread since.
    manager.restoreFromSnapshot(*kept);
    version = *run_.baseVersion;
    host_.cacheHit();
  } else if (claim_.threadEmpty && run_.attempts == 1 && run_.baseVersion) {
    version = *run_.baseVersion;  // nothing to load: the manager as made is the thread
  } else {
    version = loadConversation(host_.runs.threads(), run_.threadId, manager);
  }
  const auto stored = static_cast<int64_t>(manager.storageSize());
  const int64_t base = run_.baseMessageCount.value_or(stored);

  // Where the run stands: its input committed with its first whole turn or not yet; a reply
  // journaled but not committed (resumed, not asked again).
  RunJournal journal;
  if (run_.attempts > 1 || run_.status == RunStatus::Waiting || !run_.wait.is_null()) {
    journal = host_.runs.journal(run_.id);
  }
  std::vector<Message> input;
  int done = 0;
  if (stored <= base) {
    input = startingInput(run_, stored, host_.options.turn.systemPrompt);
  } else {
    auto all = manager.getAllMessages();
    for (size_t i = static_cast<size_t>(base); i < all.size(); ++i)
      if (all[i].role == Role::Assistant) ++done;
    const Message& last = all.back();
    if (!journal.pendingReply && last.role == Role::Assistant && last.toolCalls.empty()) {
      // Its last whole turn was its answer: only the finish was missing.
      active_.closing = true;
      host_.runs.finish(
          active_.lease, RunStatus::Completed, "",
          {{"content", last.content}, {"finish_reason", "stop"}, {"iterations", done}},
          events_.takeLive());
      return;
    }
  }
  const int maxIterations = run_.options.maxIterations > 0 ? run_.options.maxIterations
                                                           : host_.options.turn.maxIterations;
  if (done >= maxIterations) {
    active_.closing = true;
    host_.runs.finish(active_.lease, RunStatus::Completed, "",
                      {{"content", ""}, {"finish_reason", "max_iterations"}, {"iterations", done}},
                      events_.takeLive());
    return;
  }

  auto sink =
      std::make_shared<LeaseSink>(host_.runs, active_, events_, run_.threadId, stored, version);
  // The sink belongs to this run only: set it after the restore (which keeps options).
  ConversationManager worked = manager.clone(sink);
  std::optional<RunJournal> recorded;
  if (host_.options.replayJournal) recorded = host_.options.replayJournal(run_);
  JournalRunner runner(host_.runs, active_, events_, run_, journal, std::move(recorded), allowed_,
                       host_.options.tools, host_.options.turn.maxToolConcurrency,
                       host_.options.humanTool);

  RunOptions ro = turnRunOptions(host_.options.turn);
  ro.conversationId = run_.threadId;  // gen_ai.conversation.id
  ro.maxIterations = maxIterations - done;
  ro.stopToken = active_.stop.get_token();
  ro.stream = run_.options.stream;
  int64_t next = stored;  // the storage index of the next message the run adds
  bool resumed = false;
  if (journal.pendingReply) {
    const int64_t expected = stored + static_cast<int64_t>(input.size());
    if (journal.pendingAt == expected) {
      ro.firstReply = *journal.pendingReply;
      resumed = true;
    }
  }
  // A UI renders the log in order (docs/scale-out.md, "Events"): the run's input is announced
  // before the model is called (by the claim, announceInput(), unless its events were past the
  // limits: then here, where the same check fails the run), and a reply with tool calls
  // (journaled as it is made) before its tools run; the rest of a turn's messages are announced
  // when the turn commits. A run taken over or resumed announced its input in its first attempt.
  const int64_t inputEnd = stored + static_cast<int64_t>(input.size());
  if (run_.attempts == 1 && !resumed && !claim_.startEventsWritten) {
    for (auto& event : inputEvents(input, stored))
      events_.add(std::move(event));
    events_.flush();
  }
  ro.onMessage = [&](const Message& m) {
    const int64_t at = next++;
    if (at < inputEnd) return;  // announced above (or by the run's first attempt)
    MessageAdded added;
    added.message = m;
    added.index = at;
    if (m.role == Role::Assistant && !m.toolCalls.empty()) {
      runner.turn = at;
      if (resumed && at == journal.pendingAt) {
        resumed = false;  // journaled (and announced) already
        return;
      }
      host_.runs.recordReply(active_.lease, m, at);
      events_.add(eventInput(added));
      return;
    }
    events_.addToTurn(eventInput(added));
  };
  ro.onChunk = [&](const StreamDelta& delta) {
    try {
      events_.chunk(delta.content);
    } catch (const LeaseLost&) {
      active_.lost = true;
      return false;
    }
    return !active_.stop.stop_requested();
  };
  ro.runToolCalls = [&](const std::vector<ToolCall>& calls, std::stop_token stop) {
    return runner(calls, std::move(stop));
  };

  RunResult result;
  try {
    result = worked.run(std::move(input), ro);
  } catch (const StopAtSafePoint&) {
    // Interrupted after a whole turn; if that turn was the answer, the run is complete.
    auto all = worked.getAllMessages();
    if (all.empty() || all.back().role != Role::Assistant || !all.back().toolCalls.empty()) {
      throw;
    }
    result.content = all.back().content;
    result.finishReason = "stop";
  }
  if (active_.lost) throw LeaseLost("store: the lease of run " + run_.id + " was lost");
  active_.closing = true;
  const json ending = {{"content", result.content},
                       {"finish_reason", result.finishReason},
                       {"iterations", done + result.iterations}};
  if (auto& answer = sink->answer()) {
    auto live = events_.takeLive();
    answer->events.insert(answer->events.end(), std::make_move_iterator(live.begin()),
                          std::make_move_iterator(live.end()));
    RunStore::Version committed = 0;
    if (host_.stillClaiming()) {
      auto finished = host_.runs.finishWithTurnAndClaim(
          active_.lease, answer->turn.messages, answer->turn.state, sink->version(), ending,
          answer->events, host_.options.leaseDuration, host_.startEvents);
      committed = finished.version;
      active_.next = std::move(finished.next);
    } else {
      committed =
          host_.runs.finishWithTurn(active_.lease, answer->turn.messages, answer->turn.state,
                                    sink->version(), ending, answer->events);
    }
    host_.cache.remember(run_.threadId, committed, worked.snapshot());
  } else {
    host_.runs.finish(active_.lease, RunStatus::Completed, "", ending, events_.takeLive());
  }
}

}  // namespace parley::detail
