#include "store/run_queries.hpp"

#include <algorithm>
#include <cctype>

namespace parley::detail {

using json = nlohmann::json;

namespace {

// --- the old spelling ---
// Runs and events written before the one event vocabulary (parley 0.1 up to schema version 5)
// spelled some keys in camelCase; they are read in today's snake_case spelling
// (docs/architecture.md, "Events"). Nothing writes the old spelling.

void renameKey(json& object, const char* from, const char* to) {
  if (!object.is_object()) return;
  auto it = object.find(from);
  if (it == object.end()) return;
  if (!object.contains(to)) object[to] = std::move(*it);
  object.erase(from);
}

json currentSpelling(json value) {
  renameKey(value, "toolCallId", "tool_call_id");
  renameKey(value, "toolName", "tool_name");
  renameKey(value, "interactionId", "interaction_id");
  renameKey(value, "runId", "run_id");
  renameKey(value, "finishReason", "finish_reason");
  return value;
}

json currentEventPayload(const std::string& type, json payload) {
  if (!payload.is_object()) return payload;
  payload = currentSpelling(std::move(payload));
  // A run's outcome (not a tool's result, whose keys are the tool's own).
  if (type == "run_completed" || type == "llm_execution_completed") {
    if (auto result = payload.find("result"); result != payload.end()) {
      *result = currentSpelling(std::move(*result));
    }
  }
  if (auto wait = payload.find("wait"); wait != payload.end()) {
    *wait = currentSpelling(std::move(*wait));
  }
  // A tool's end carried the tool message as "content".
  if ((type == "tool_execution_completed" || type == "tool_execution_failed") &&
      payload.contains("content") && !payload.contains("result") && !payload.contains("error")) {
    const bool success = payload.value("success", false);
    payload[success ? "result" : "error"] = std::move(payload["content"]);
    payload.erase("content");
  }
  return payload;
}

SubmitOptions optionsFromJson(const json& value) {
  SubmitOptions options;
  if (!value.is_object()) return options;
  options.profile = value.value("profile", "");
  if (auto tools = value.find("tools"); tools != value.end()) {
    options.tools = tools->get<std::vector<std::string>>();
  }
  auto system = value.find("system_prompt");
  if (system == value.end()) system = value.find("systemPrompt");  // the old spelling
  if (system != value.end()) options.systemPrompt = system->get<std::string>();
  options.maxIterations = value.value("max_iterations", value.value("maxIterations", 0));
  options.stream = value.value("stream", false);
  options.metadata = value.value("metadata", json());
  options.clientTools = value.value("client_tools", json());
  options.traceparent = value.value("traceparent", "");
  options.tracestate = value.value("tracestate", "");
  return options;
}

std::optional<std::chrono::system_clock::time_point> optionalTime(const SqlValue& value) {
  if (isNull(value)) return std::nullopt;
  return fromMs(asInt(value));
}

std::optional<int64_t> optionalInt(const SqlValue& value) {
  if (isNull(value)) return std::nullopt;
  return asInt(value);
}

}  // namespace

std::string tooBig(size_t size, size_t limit, const char* cap) {
  return "is " + std::to_string(size) + " bytes, more than the limit of " + std::to_string(limit) +
         " (RunStoreLimits::" + cap + ")";
}

void checkSize(const std::string& text, size_t limit, const std::string& field, const char* cap) {
  if (text.size() > limit) throw ValidationError(field, tooBig(text.size(), limit, cap));
}

json optionsJson(const SubmitOptions& options) {
  json out = json::object();
  if (!options.profile.empty()) out["profile"] = options.profile;
  if (options.tools) out["tools"] = *options.tools;
  if (options.systemPrompt) out["system_prompt"] = *options.systemPrompt;
  if (options.maxIterations) out["max_iterations"] = options.maxIterations;
  if (options.stream) out["stream"] = true;
  if (!options.metadata.is_null()) out["metadata"] = options.metadata;
  if (!options.clientTools.is_null()) out["client_tools"] = options.clientTools;
  if (!options.traceparent.empty()) out["traceparent"] = options.traceparent;
  if (!options.tracestate.empty()) out["tracestate"] = options.tracestate;
  return out;
}

RunInfo runFromRow(const SqlRow& row) {
  RunInfo run;
  run.id = asText(row.at(0));
  const std::string what = "run " + named(run.id);
  run.threadId = asText(row.at(1));
  run.position = asInt(row.at(2));
  auto status = parseRunStatus(asText(row.at(3)));
  if (!status) throw StoreError(what + " has an unknown status '" + asText(row.at(3)) + "'");
  run.status = *status;
  try {
    for (const auto& message : parseColumn(row.at(5), what + " input")) {
      run.input.push_back(messageFromJson(message));
    }
    run.options = optionsFromJson(parseColumn(row.at(6), what + " options"));
  } catch (const StoreError&) {
    throw;
  } catch (const std::exception& e) {
    throw StoreError(what + " is corrupt: " + e.what());
  }
  run.options.id = run.id;
  run.options.policy = parseDoubleTextPolicy(asText(row.at(4))).value_or(DoubleTextPolicy::Enqueue);
  run.options.traceId = asText(row.at(7));
  run.attempts = asInt(row.at(8));
  run.worker = asText(row.at(9));
  run.cancelRequest =
      parseName<CancelRequest>(asText(row.at(10)), kCancelNames).value_or(CancelRequest::None);
  run.wait = currentSpelling(parseColumn(row.at(11), what + " wait"));
  run.response = parseColumn(row.at(12), what + " response");
  run.error = asText(row.at(13));
  run.result = currentSpelling(parseColumn(row.at(14), what + " result"));
  run.baseVersion = optionalInt(row.at(15));
  run.baseMessageCount = optionalInt(row.at(16));
  run.createdAt = fromMs(asInt(row.at(17)));
  run.updatedAt = fromMs(asInt(row.at(18)));
  run.startedAt = optionalTime(row.at(19));
  run.finishedAt = optionalTime(row.at(20));
  return run;
}

std::optional<RunInfo> readRun(SqlConnection& c, const std::string& runId) {
  auto rows =
      c.query(std::string("SELECT ") + kRunColumns + " FROM parley_runs WHERE id = $1", {runId});
  if (rows.empty()) return std::nullopt;
  return runFromRow(rows.front());
}

StoreError noRun(const std::string& runId) {
  return StoreError("store: no run " + named(runId));
}

std::map<std::string, LockedThread> lockThreads(SqlConnection& c, std::vector<std::string> ids,
                                                int64_t* now) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const std::string clock = now ? c.nowMsExpression(false) : std::string();
  std::string sql =
      "SELECT id, deleted, version, message_count, last_event_seq, last_run_seq, lease_owner, "
      "lease_run_id, lease_token, lease_expires_at" +
      (clock.empty() ? "" : ", " + clock) + " FROM parley_threads WHERE id IN (";
  SqlParams params;
  for (const std::string& id : ids) {
    params.emplace_back(id);
    sql += (params.size() > 1 ? ", $" : "$") + std::to_string(params.size());
  }
  // In id order, as every caller locks them: two transactions locking several rows cannot each
  // wait for the other.
  sql += ") ORDER BY id";
  sql += c.forUpdate();
  auto rows = c.query(sql, params);
  if (now) *now = clock.empty() || rows.empty() ? c.nowMs() : asInt(rows[0].at(10));
  std::map<std::string, LockedThread> threads;
  for (const SqlRow& row : rows) {
    LockedThread thread;
    thread.deleted = asInt(row.at(1)) != 0;
    thread.version = asInt(row.at(2));
    thread.messageCount = asInt(row.at(3));
    thread.lastEventSeq = asInt(row.at(4));
    thread.lastRunSeq = asInt(row.at(5));
    thread.leaseOwner = asText(row.at(6));
    thread.leaseRunId = asText(row.at(7));
    thread.leaseToken = asInt(row.at(8));
    thread.leaseExpiresAt = asInt(row.at(9));
    threads.emplace(asText(row.at(0)), std::move(thread));
  }
  return threads;
}

std::optional<LockedThread> lockThread(SqlConnection& c, const std::string& threadId,
                                       int64_t* now) {
  auto threads = lockThreads(c, {threadId}, now);
  if (threads.empty()) return std::nullopt;
  return std::move(threads.begin()->second);
}

// Locks the thread of a run (the queue's lock) and returns the run as it is then.
RunInfo lockRun(SqlConnection& c, const std::string& runId, std::optional<LockedThread>& thread) {
  auto owner = c.query("SELECT thread_id FROM parley_runs WHERE id = $1", {runId});
  if (owner.empty()) throw noRun(runId);
  thread = lockThread(c, asText(owner[0].at(0)));
  auto run = readRun(c, runId);
  if (!run || !thread) throw noRun(runId);
  return *run;
}

// --- events -----------------------------------------------------------------------------------

void notify(SqlConnection& c, const char* channel, const std::string& payload) {
  // Ids only (a NOTIFY payload is limited to 8000 bytes).
  c.notifyAfterCommit(channel, payload);
}

// Appends to the log of a locked thread, numbered from the row as locked; returns the last seq.
// The row's new count is written with its other changes (LockedThread::changes).
int64_t appendEventRows(SqlConnection& c, const std::string& threadId, LockedThread& thread,
                        const std::vector<EventRow>& events, int64_t now) {
  if (events.empty()) return thread.lastEventSeq;
  c.insertEvents(threadId, thread.lastEventSeq + 1, events, now);
  thread.lastEventSeq += static_cast<int64_t>(events.size());
  thread.changes.set("last_event_seq", thread.lastEventSeq);
  notify(c, kEventsChannel, threadId);
  return thread.lastEventSeq;
}

// The events that end a run, whoever ends it: the store's run_<status> (the state change only),
// then the run's one terminal event in the executor's words (kRunCompletedEventType,
// kRunFailedEventType), which alone carries the outcome: a UI renders the result once.
void endEvents(std::vector<EventRow>& events, const std::string& runId, const std::string& traceId,
               RunStatus status, const std::string& reason, const json& result) {
  const json payload = json::object();
  const EventType ended = status == RunStatus::Completed ? EventType::RunCompleted
                          : status == RunStatus::Failed  ? EventType::RunFailed
                                                         : EventType::RunCancelled;
  events.push_back({runId, traceId, std::string(eventName(ended)), payload.dump()});
  json last = {{"run_id", runId}};
  if (status == RunStatus::Completed) {
    last["result"] = result;
    events.push_back({runId, traceId, kRunCompletedEventType, last.dump()});
  } else {
    last["error"] = reason;
    last["cancelled"] = status == RunStatus::Cancelled;
    if (!result.is_null()) last["result"] = result;  // the error's details ({"error": {...}})
    events.push_back({runId, traceId, kRunFailedEventType, last.dump()});
  }
}

EventRow lifecycle(const RunInfo& run, EventType type, const json& payload) {
  return {run.id, run.options.traceId, std::string(eventName(type)), payload.dump()};
}

StoredEvent eventFromRow(const SqlRow& row) {
  StoredEvent event;
  event.threadId = asText(row.at(0));
  event.seq = asInt(row.at(1));
  event.runId = asText(row.at(2));
  event.traceId = asText(row.at(3));
  event.type = asText(row.at(4));
  event.payload = currentEventPayload(
      event.type, parseColumn(row.at(5), "event " + std::to_string(event.seq) + " of thread " +
                                             named(event.threadId)));
  event.createdAt = fromMs(asInt(row.at(6)));
  return event;
}

// --- leases -----------------------------------------------------------------------------------

void checkLeaseFields(const Lease& lease) {
  if (lease.threadId.empty()) throw ValidationError("lease.threadId", "must not be empty");
  if (lease.runId.empty()) throw ValidationError("lease.runId", "must not be empty");
  if (lease.owner.empty()) throw ValidationError("lease.owner", "must not be empty");
}

LockedThread checkLease(SqlConnection& c, const Lease& lease, int64_t* now) {
  auto thread = lockThread(c, lease.threadId, now);
  checkLeaseOf(thread ? &*thread : nullptr, lease);
  return std::move(*thread);
}

void checkLeaseOf(const LockedThread* thread, const Lease& lease) {
  const std::string holder = "the lease of worker " + named(lease.owner) + " on thread " +
                             named(lease.threadId) + " (run " + named(lease.runId) + ", token " +
                             std::to_string(lease.token) + ") is lost: ";
  if (!thread || thread->deleted) {
    throw LeaseLost("store: " + holder + "the thread was deleted");
  }
  if (thread->leaseToken == lease.token && thread->leaseOwner == lease.owner &&
      thread->leaseRunId == lease.runId) {
    return;
  }
  if (thread->leaseOwner.empty()) {
    throw LeaseLost("store: " + holder +
                    "the thread is free now (the run was finished, cancelled or handed back)");
  }
  throw LeaseLost("store: " + holder + "worker " + named(thread->leaseOwner) +
                  " holds the thread with token " + std::to_string(thread->leaseToken) + " (run " +
                  named(thread->leaseRunId) + ")");
}

void revokeLease(LockedThread& thread, const std::string& runId) {
  if (thread.leaseRunId != runId) return;
  freeLease(thread);
  thread.leaseToken += 1;
  thread.changes.set("lease_token", thread.leaseToken);
}

void freeLease(LockedThread& thread) {
  thread.leaseOwner.clear();
  thread.leaseRunId.clear();
  thread.leaseExpiresAt = 0;
  thread.changes.set("lease_owner", SqlValue());
  thread.changes.set("lease_run_id", SqlValue());
  thread.changes.set("lease_expires_at", int64_t{0});
}

// --- ending runs without their worker ---------------------------------------------------------

void cancelNow(SqlConnection& c, LockedThread& thread, const RunInfo& run,
               const std::string& reason, int64_t now, std::vector<EventRow>& events) {
  c.executeLater(
      "UPDATE parley_runs SET status = 'cancelled', error = $1, cancel_request = NULL, "
      "pending_reply = NULL, pending_at = NULL, finished_at = $2, updated_at = $2 WHERE id = $3",
      {reason, now, run.id});
  revokeLease(thread, run.id);
  endEvents(events, run.id, run.options.traceId, RunStatus::Cancelled, reason, nullptr);
}

void requestCancel(SqlConnection& c, const RunInfo& run, CancelRequest request,
                   const std::string& reason, int64_t now, std::vector<EventRow>& events) {
  if (run.cancelRequest >= request) return;  // Cancel < Interrupt < Rollback
  c.executeLater(
      "UPDATE parley_runs SET cancel_request = $1, error = $2, updated_at = $3 WHERE id = $4",
      {std::string(toString(request)), reason, now, run.id});
  events.push_back(lifecycle(run, EventType::RunCancelRequested,
                             {{"request", std::string(toString(request))}, {"reason", reason}}));
}

bool leaseLiveFor(const LockedThread& thread, const std::string& runId, int64_t now) {
  return !thread.leaseOwner.empty() && thread.leaseRunId == runId && thread.leaseExpiresAt > now;
}

std::string joinArray(const std::vector<std::string>& bodies) {
  size_t size = 2;
  for (const auto& body : bodies)
    size += body.size() + 1;
  std::string out;
  out.reserve(size);
  out += '[';
  for (size_t i = 0; i < bodies.size(); ++i) {
    if (i) out += ',';
    out += bodies[i];
  }
  out += ']';
  return out;
}

std::vector<EventRow> eventRows(const Lease& lease, std::span<const EventInput> events,
                                const RunStoreLimits& limits) {
  if (events.size() > limits.maxEventsPerCall) {
    throw ValidationError("events", "holds " + std::to_string(events.size()) +
                                        " events, more than the limit of " +
                                        std::to_string(limits.maxEventsPerCall) +
                                        " (RunStoreLimits::maxEventsPerCall)");
  }
  std::vector<EventRow> rows;
  rows.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const std::string field = "events[" + std::to_string(i) + "]";
    const auto& type = events[i].type;
    if (type.empty() || type.size() > 100) {
      throw ValidationError(field + ".type", "must be 1 to 100 bytes");
    }
    for (unsigned char ch : type) {
      if (ch < 0x20 || ch == 0x7f) {
        throw ValidationError(field + ".type", "contains a control character");
      }
    }
    std::string payload = dumpJson(events[i].payload, field + ".payload");
    checkSize(payload, limits.maxEventBytes, field + ".payload", "maxEventBytes");
    rows.push_back({lease.runId, lease.traceId, type, std::move(payload)});
  }
  return rows;
}

// SubmitOptions::clientTools: null, or up to 128 {"name", "description", "parameters"}.
void checkClientTools(const json& tools) {
  if (tools.is_null()) return;
  constexpr size_t kMaxClientTools = 128;
  if (!tools.is_array() || tools.size() > kMaxClientTools) {
    throw ValidationError("options.clientTools", "must be an array of at most 128 tools");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = "options.clientTools[" + std::to_string(i) + "]";
    const json& tool = tools[i];
    if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string()) {
      throw ValidationError(field + ".name", "must be a string");
    }
    const auto name = tool["name"].get<std::string>();
    const bool ok =
        !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        });
    if (!ok) throw ValidationError(field + ".name", "must be 1 to 64 of A-Z a-z 0-9 _ -");
    if (tool.contains("parameters") && !tool["parameters"].is_object()) {
      throw ValidationError(field + ".parameters", "must be a JSON Schema object");
    }
  }
}

void checkOptions(const SubmitOptions& options, const RunStoreLimits& limits) {
  if (!options.id.empty()) checkId(options.id, "options.id");
  if (!options.traceId.empty()) checkId(options.traceId, "options.traceId");
  for (const auto& [text, field] : {std::pair{&options.traceparent, "options.traceparent"},
                                    std::pair{&options.tracestate, "options.tracestate"}}) {
    if (text->size() > 512) throw ValidationError(field, "is longer than 512 bytes");
  }
  if (!options.profile.empty()) checkId(options.profile, "options.profile");
  if (options.maxIterations < 0 || options.maxIterations > limits.maxIterations) {
    throw ValidationError("options.maxIterations", "is " + std::to_string(options.maxIterations) +
                                                       "; it must be 0 (the "
                                                       "worker's default) to " +
                                                       std::to_string(limits.maxIterations));
  }
  if (options.tools) {
    for (size_t i = 0; i < options.tools->size(); ++i) {
      checkId((*options.tools)[i], "options.tools[" + std::to_string(i) + "]");
    }
  }
  if (!options.metadata.is_null() && !options.metadata.is_object()) {
    throw ValidationError("options.metadata", "must be a JSON object or null");
  }
  checkClientTools(options.clientTools);
}

}  // namespace parley::detail
