// The run queue's rules over the SQL engine the stores share (docs/scale-out.md): which queries
// (run_queries.hpp) each operation runs, in which transaction, and whom it wakes
// (run_wakeups.hpp). Every change to a thread's runs, lease, journal or events happens while the
// thread's row is locked (PostgreSQL: FOR UPDATE; SQLite: the write transaction), so that one
// order holds for them all. Near 900 lines because each operation, with its checks of the lease
// and the fencing token, belongs to that one locking discipline, read in one place.
#include "parley/run_store.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "parley/errors.hpp"
#include "store/run_queries.hpp"
#include "store/run_wakeups.hpp"
#include "store/sql_store.hpp"

namespace parley {

using detail::asInt;
using detail::asText;
using detail::EventRow;
using detail::isNull;
using detail::LockedThread;

using detail::named;
using detail::SqlConnection;
using detail::SqlRow;
using detail::SqlValue;
using json = nlohmann::json;

// The named queries (run_queries.hpp).
using detail::appendEventRows;
using detail::cancelNow;
using detail::checkLease;
using detail::checkLeaseFields;
using detail::checkOptions;
using detail::checkSize;
using detail::endEvents;
using detail::eventFromRow;
using detail::eventRows;
using detail::freeLease;
using detail::joinArray;
using detail::kActive;
using detail::kCancelNames;
using detail::kEventsChannel;
using detail::kPhaseNames;
using detail::kPolicyNames;
using detail::kRunColumns;
using detail::kRunsChannel;
using detail::kStatusNames;
using detail::leaseLiveFor;
using detail::lifecycle;
using detail::lockRun;
using detail::lockThread;
using detail::noRun;
using detail::notify;
using detail::optionsJson;
using detail::parseName;
using detail::readRun;
using detail::requestCancel;
using detail::runFromRow;
using detail::tooBig;

// --- names ------------------------------------------------------------------------------------

std::string_view toString(RunStatus status) {
  return kStatusNames.at(static_cast<size_t>(status));
}
std::optional<RunStatus> parseRunStatus(std::string_view text) {
  return parseName<RunStatus>(text, kStatusNames);
}
bool isFinished(RunStatus status) {
  return status != RunStatus::Queued && status != RunStatus::Running &&
         status != RunStatus::Waiting;
}
std::string_view toString(DoubleTextPolicy policy) {
  return kPolicyNames.at(static_cast<size_t>(policy));
}
std::optional<DoubleTextPolicy> parseDoubleTextPolicy(std::string_view text) {
  return parseName<DoubleTextPolicy>(text, kPolicyNames);
}
std::string_view toString(CancelRequest request) {
  return request == CancelRequest::None ? "none" : kCancelNames.at(static_cast<size_t>(request));
}
std::string_view toString(ToolCallPhase phase) {
  return kPhaseNames.at(static_cast<size_t>(phase));
}

// --- JSON -------------------------------------------------------------------------------------

namespace {

json nullIfEmpty(const std::string& text) {
  return text.empty() ? json(nullptr) : json(text);
}

}  // namespace

json toJson(const RunInfo& run) {
  return {{"run", run.id},
          {"thread", run.threadId},
          {"status", toString(run.status)},
          {"error", nullIfEmpty(run.error)},
          {"position", run.position},
          {"policy", toString(run.options.policy)},
          {"attempts", run.attempts},
          {"worker", nullIfEmpty(run.worker)},
          {"trace", run.options.traceId},
          {"cancel_request", run.cancelRequest == CancelRequest::None
                                 ? json(nullptr)
                                 : json(toString(run.cancelRequest))},
          {"wait", run.wait},
          {"response", run.response},
          {"result", run.result},
          {"created_at", isoTime(run.createdAt)},
          {"updated_at", isoTime(run.updatedAt)}};
}

json toJson(const StoredEvent& event) {
  return {{"seq", event.seq},
          {"run", nullIfEmpty(event.runId)},
          {"trace", nullIfEmpty(event.traceId)},
          {"type", event.type},
          {"payload", event.payload},
          {"time", isoTime(event.createdAt)}};
}

// --- the store --------------------------------------------------------------------------------

RunStore::RunStore(std::shared_ptr<ConversationStore> store, RunStoreOptions options)
    : store_(std::move(store)), options_(std::move(options)) {
  engine_ = store_ ? store_->sqlEngine() : nullptr;
  if (!engine_) {
    throw ValidationError("store", "must be one of parley's SQL stores (SQLite or PostgreSQL)");
  }
  if (options_.pollMin.count() <= 0 || options_.pollMax < options_.pollMin ||
      options_.listenPoll.count() <= 0) {
    throw ValidationError("options", "needs 0 < pollMin <= pollMax and listenPoll > 0");
  }
  wakeups_ = std::make_unique<Wakeups>(*engine_, options_.listen);
  batches_ = std::make_unique<FinishBatches>();
}

RunStore::~RunStore() = default;

int64_t RunStore::now(SqlConnection& c) const {
  return options_.clock ? options_.clock() : c.nowMs();
}

void RunStore::afterWrite(const std::string& threadId, bool runsChanged) {
  wakeups_->bump(Wakeups::bucketOf(threadId));
  if (runsChanged) wakeups_->bump(Wakeups::kRuns);
}

void RunStore::fenced(const Lease& lease,
                      const std::function<void(SqlConnection&, int64_t, LockedThread&)>& write,
                      bool durable) {
  engine_->transaction(
      true,
      [&](SqlConnection& c) {
        int64_t now = 0;
        LockedThread thread = checkLease(c, lease, options_.clock ? nullptr : &now);
        if (options_.clock) now = options_.clock();
        write(c, now, thread);
        thread.changes.write(c, lease.threadId);
      },
      durable);
}

RunInfo RunStore::submit(const std::string& threadId, const std::string& prompt,
                         const SubmitOptions& options) {
  const Message message = Message::user(prompt);
  return submit(threadId, std::span<const Message>(&message, 1), options);
}

RunInfo RunStore::submit(const std::string& threadId, std::span<const Message> input,
                         const SubmitOptions& options) {
  const auto& limits = options_.limits;
  detail::checkId(threadId, "threadId");
  if (input.empty()) throw ValidationError("input", "must hold at least one message");
  if (input.size() > limits.maxInputMessages) {
    throw ValidationError("input", "holds " + std::to_string(input.size()) +
                                       " messages, more than the limit of " +
                                       std::to_string(limits.maxInputMessages) +
                                       " (RunStoreLimits::maxInputMessages)");
  }
  checkOptions(options, limits);
  const std::string inputText = joinArray(detail::messageBodies(input));
  const std::string optionsText = detail::dumpJson(optionsJson(options), "options");
  if (inputText.size() + optionsText.size() > limits.maxInputBytes) {
    throw ValidationError("input", tooBig(inputText.size() + optionsText.size(),
                                          limits.maxInputBytes, "maxInputBytes"));
  }
  const std::string runId = options.id.empty() ? detail::generateId("r-") : options.id;
  const std::string traceId =
      options.traceId.empty() ? detail::generateId("trace-") : options.traceId;
  const std::string policy(toString(options.policy));

  RunInfo result;
  engine_->transaction(true, [&](SqlConnection& c) {
    const int64_t wallNow = detail::nowMs();
    // Sent with the lock below (one round trip); the thread row is then written once, at the end.
    c.executeLater(
        "INSERT INTO parley_threads (id, parent_id, fork_position, message_count, version, "
        "created_at, updated_at, title, metadata, state) "
        "VALUES ($1, NULL, 0, 0, 1, $2, $2, '', NULL, NULL) ON CONFLICT (id) DO NOTHING",
        {threadId, wallNow});
    int64_t now = 0;
    auto thread = lockThread(c, threadId, options_.clock ? nullptr : &now);
    if (options_.clock) now = options_.clock();
    if (!thread || thread->deleted) {
      throw StoreError("store: thread " + named(threadId) +
                       " was deleted (its id stays taken while its forks need its messages)");
    }
    const int64_t position = thread->lastRunSeq + 1;
    const int64_t threadVersion = thread->version;

    // The thread's unfinished runs, and a run that already has the new id (one query). The
    // enqueue policy leaves the unfinished runs as they are, and an id of generateId() is new
    // (128 random bits): such a submit needs neither.
    std::vector<RunInfo> active;
    const bool leavesRuns = options.policy == DoubleTextPolicy::Enqueue && options.id.empty();
    for (const auto& row : leavesRuns ? std::vector<SqlRow>()
                                      : c.query(std::string("SELECT ") + kRunColumns +
                                                    " FROM parley_runs WHERE (thread_id = $1 "
                                                    "AND status IN " +
                                                    kActive + ") OR id = $2 ORDER BY position",
                                                {threadId, runId})) {
      if (asText(row.at(0)) == runId) {
        throw StoreError("store: a run " + named(runId) + " already exists");
      }
      active.push_back(runFromRow(row));
    }

    std::string status = "queued";
    std::string error;
    std::vector<EventRow> events;
    if (!active.empty() && options.policy == DoubleTextPolicy::Reject) {
      status = "rejected";
      error = "thread " + named(threadId) + " has an unfinished run " + named(active[0].id) + " (" +
              std::string(toString(active[0].status)) + "); the reject policy refuses another";
    } else if (!active.empty() && options.policy != DoubleTextPolicy::Enqueue) {
      const bool rollback = options.policy == DoubleTextPolicy::Rollback;
      const std::string reason =
          std::string(rollback ? "rolled back" : "interrupted") + " by run " + named(runId);
      for (const auto& run : active) {
        // Only a thread's head run can have started; the others are cancelled as they are.
        const bool started = run.attempts > 0;
        const bool live = leaseLiveFor(*thread, run.id, now);
        // A rolled-back run that is not running and committed nothing has nothing to undo.
        const bool committedNothing =
            rollback && !live && run.baseVersion && *run.baseVersion == threadVersion;
        if (!started || committedNothing) {
          cancelNow(c, *thread, run, reason, now, events);
        } else if (!rollback) {
          live ? requestCancel(c, run, CancelRequest::Interrupt, reason, now, events)
               : cancelNow(c, *thread, run, reason, now, events);
        } else {
          requestCancel(c, run, CancelRequest::Rollback, reason, now, events);
        }
      }
    }
    thread->changes.set("last_run_seq", position);
    const SqlValue errorValue = error.empty() ? SqlValue() : SqlValue(error);
    const SqlValue finishedAt = status == "rejected" ? SqlValue(now) : SqlValue();
    c.executeLater(
        "INSERT INTO parley_runs (id, thread_id, position, status, policy, input, options, "
        "trace_id, error, created_at, updated_at, finished_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)",
        {runId, threadId, position, status, policy, inputText, optionsText, traceId, errorValue,
         now, finishedAt});
    // The run as readRun() would read it back (kRunColumns), without the round trip.
    result = runFromRow({runId,       threadId,   position,   status,     policy,     inputText,
                         optionsText, traceId,    int64_t{0}, SqlValue(), SqlValue(), SqlValue(),
                         SqlValue(),  errorValue, SqlValue(), SqlValue(), SqlValue(), now,
                         now,         SqlValue(), finishedAt});
    events.push_back(status == "rejected"
                         ? lifecycle(result, EventType::RunRejected, {{"error", error}})
                         : lifecycle(result, EventType::RunQueued,
                                     {{"position", position}, {"policy", policy}}));
    appendEventRows(c, threadId, *thread, events, now);
    thread->changes.write(c, threadId);
    notify(c, kRunsChannel, runId);
  });
  afterWrite(threadId, true);
  return result;
}

std::optional<RunInfo> RunStore::run(const std::string& runId) {
  std::optional<RunInfo> result;
  engine_->transaction(false, [&](SqlConnection& c) { result = readRun(c, runId); });
  return result;
}

std::vector<RunInfo> RunStore::listRuns(const RunListOptions& options) {
  if (options.limit == 0 || options.limit > options_.limits.maxPage) {
    throw ValidationError("limit", "is " + std::to_string(options.limit) + "; it must be 1 to " +
                                       std::to_string(options_.limits.maxPage) +
                                       " (RunStoreLimits::maxPage)");
  }
  std::string sql = std::string("SELECT ") + kRunColumns + " FROM parley_runs";
  detail::SqlParams params;
  std::vector<std::string> where;
  if (!options.threadId.empty()) {
    params.emplace_back(options.threadId);
    where.push_back("thread_id = $" + std::to_string(params.size()));
  }
  if (options.status) {
    params.emplace_back(std::string(toString(*options.status)));
    where.push_back("status = $" + std::to_string(params.size()));
  }
  for (size_t i = 0; i < where.size(); ++i)
    sql += (i ? " AND " : " WHERE ") + where[i];
  sql += options.threadId.empty() ? " ORDER BY created_at, id" : " ORDER BY position";
  params.emplace_back(static_cast<int64_t>(options.limit));
  sql += " LIMIT $" + std::to_string(params.size());
  params.emplace_back(static_cast<int64_t>(options.offset));
  sql += " OFFSET $" + std::to_string(params.size());
  std::vector<RunInfo> runs;
  engine_->transaction(false, [&](SqlConnection& c) {
    runs.clear();
    for (const auto& row : c.query(sql, params))
      runs.push_back(runFromRow(row));
  });
  return runs;
}

std::map<RunStatus, int64_t> RunStore::countRuns() {
  std::map<RunStatus, int64_t> counts;
  engine_->transaction(false, [&](SqlConnection& c) {
    counts.clear();
    for (const auto& row :
         c.query("SELECT status, COUNT(*) AS n FROM parley_runs GROUP BY status", {})) {
      if (auto status = parseRunStatus(asText(row.at(0)))) {
        counts[*status] = asInt(row.at(1));
      }
    }
  });
  return counts;
}

RunInfo RunStore::cancel(const std::string& runId) {
  RunInfo result;
  bool changed = false;
  engine_->transaction(true, [&](SqlConnection& c) {
    const int64_t now = this->now(c);
    std::optional<LockedThread> thread;
    RunInfo run = lockRun(c, runId, thread);
    changed = false;
    std::vector<EventRow> events;
    if (!isFinished(run.status)) {
      const std::string reason = "cancelled";
      if (run.status == RunStatus::Running && leaseLiveFor(*thread, run.id, now)) {
        requestCancel(c, run, CancelRequest::Cancel, reason, now, events);
      } else {
        cancelNow(c, *thread, run, reason, now, events);
      }
      changed = !events.empty();
      appendEventRows(c, run.threadId, *thread, events, now);
      thread->changes.write(c, run.threadId);
      if (changed) notify(c, kRunsChannel, runId);
    }
    result = *readRun(c, runId);
  });
  if (changed) afterWrite(result.threadId, true);
  return result;
}

RunInfo RunStore::respond(const std::string& runId, const json& response) {
  const std::string text = detail::dumpJson(response, "response");
  checkSize(text, options_.limits.maxResponseBytes, "response", "maxResponseBytes");
  RunInfo result;
  engine_->transaction(true, [&](SqlConnection& c) {
    const int64_t now = this->now(c);
    std::optional<LockedThread> thread;
    RunInfo run = lockRun(c, runId, thread);
    if (run.status != RunStatus::Waiting) {
      throw StoreError("store: run " + named(runId) + " is " + std::string(toString(run.status)) +
                       ", not waiting for an answer");
    }
    if (!run.response.is_null()) {
      throw StoreError("store: run " + named(runId) + " was already answered");
    }
    c.executeLater("UPDATE parley_runs SET response = $1, updated_at = $2 WHERE id = $3",
                   {text, now, runId});
    appendEventRows(c, run.threadId, *thread,
                    {lifecycle(run, EventType::RunResponded, {{"response", response}})}, now);
    thread->changes.write(c, run.threadId);
    notify(c, kRunsChannel, runId);
    result = *readRun(c, runId);
  });
  afterWrite(result.threadId, true);
  return result;
}

std::optional<Claim> RunStore::claim(const std::string& workerId,
                                     std::chrono::milliseconds leaseDuration) {
  auto claims = claim(workerId, leaseDuration, 1);
  if (claims.empty()) return std::nullopt;
  return std::move(claims.front());
}

std::vector<Claim> RunStore::claim(const std::string& workerId,
                                   std::chrono::milliseconds leaseDuration, size_t maxRuns,
                                   const ClaimEvents& startEvents) {
  detail::checkId(workerId, "workerId");
  if (leaseDuration.count() <= 0) throw ValidationError("leaseDuration", "must be positive");
  if (maxRuns < 1 || maxRuns > options_.limits.maxClaimBatch) {
    throw ValidationError("maxRuns", "must be 1 to " +
                                         std::to_string(options_.limits.maxClaimBatch) +
                                         " (RunStoreLimits::maxClaimBatch)");
  }
  // What waitForRuns() of this thread waits to change: a run announced from now on may be one
  // this claim does not see.
  wakeups_->noteClaim();
  std::vector<Claim> claimed;
  // Not durable: a claim lost in a crash leaves the run claimable, nothing is lost.
  engine_->transaction(
      true,
      [&](SqlConnection& c) {
        claimed.clear();
        claimIn(c, workerId, leaseDuration, maxRuns,
                options_.clock ? std::optional<int64_t>(options_.clock()) : std::nullopt, claimed,
                startEvents);
      },
      /*durable=*/false);
  for (const auto& claim : claimed)
    afterWrite(claim.lease.threadId, false);
  return claimed;
}

// What a claim reads of a candidate thread row, in this order.
constexpr const char* kThreadColumns =
    "id, lease_owner, lease_expires_at, lease_token, version, message_count, last_event_seq, "
    "CASE WHEN state IS NULL THEN 1 ELSE 0 END AS stateless";

void RunStore::claimIn(SqlConnection& c, const std::string& workerId,
                       std::chrono::milliseconds leaseDuration, size_t maxRuns,
                       std::optional<int64_t> knownNow, std::vector<Claim>& claimed,
                       const ClaimEvents& startEvents) {
  // Threads whose head run (their oldest unfinished one) can be claimed: threads whose lease
  // expired (a worker that died or stalled) first, then the oldest heads among the threads no
  // lease holds, up to `limit` in one query. Each reads one entry of an index over the thread
  // rows per thread (parley_threads_leases, parley_threads_queue: schema version 4), however many
  // runs are queued; the second part runs only when the first found too few. PostgreSQL locks
  // the rows and skips threads other claimers hold; a thread claimed earlier in the same
  // transaction no longer matches (its lease is taken). The database's clock is read in the same
  // query where the caller gave none (SQLite's costs nothing: the connection's), as the time the
  // query began: compared with the running clock, or with a parameter, the planner of a table
  // without statistics yet reads every thread row instead of the index of leases.
  const std::string clock = knownNow ? std::string() : c.nowMsExpression(/*indexable=*/true);
  const int64_t localNow = knownNow ? *knownNow : clock.empty() ? c.nowMs() : 0;
  auto candidates = [&](size_t limit) {
    detail::SqlParams params;
    std::string now = clock;
    if (clock.empty()) {
      params.emplace_back(localNow);
      now = "$1";
    }
    params.emplace_back(static_cast<int64_t>(limit));
    const std::string limitParam = "$" + std::to_string(params.size());
    const std::string columns = std::string(kThreadColumns) + (clock.empty() ? "" : ", " + clock);
    const std::string skip = c.forUpdateSkipLocked("parley_threads");
    return c.query("WITH expired AS (SELECT " + columns + " FROM parley_threads" +
                       c.indexedBy("parley_threads_leases") +
                       " WHERE lease_owner IS NOT NULL AND lease_expires_at <= " + now +
                       " AND queue_head_at IS NOT NULL AND deleted = 0 ORDER BY lease_expires_at "
                       "LIMIT " +
                       limitParam + skip + "), free AS (SELECT " + columns +
                       " FROM parley_threads" + c.indexedBy("parley_threads_queue") +
                       " WHERE queue_head_at IS NOT NULL AND lease_owner IS NULL AND deleted = 0"
                       " ORDER BY queue_head_at, id LIMIT " +
                       limitParam + skip +
                       ") SELECT * FROM expired UNION ALL SELECT * FROM free LIMIT " + limitParam,
                   params);
  };
  // The head runs of the locked threads, read and claimed in one statement after the lock:
  // PostgreSQL returns a row locked FOR UPDATE as it is once locked (a commit that came after the
  // query's snapshot included), and every change to a thread's runs and lease happens under that
  // lock, so a statement after the lock sees the heads as they are. A head that cannot be claimed
  // (a waiting run without an answer) is left alone: its thread is passed over, a few times at
  // most. The thread's version and message count at the first claim are the run's base.
  auto claimHeads = [&](const std::vector<std::string>& threadIds, int64_t now) {
    detail::SqlParams params = {workerId, now};
    std::string in;
    for (const std::string& id : threadIds) {
      params.emplace_back(id);
      in += (in.empty() ? "$" : ", $") + std::to_string(params.size());
    }
    return c.query(
        std::string("UPDATE parley_runs SET status = 'running', attempts = attempts + 1, "
                    "worker = $1, started_at = COALESCE(started_at, $2), "
                    "base_version = COALESCE(base_version, (SELECT t.version FROM parley_threads "
                    "t WHERE t.id = parley_runs.thread_id)), "
                    "base_message_count = COALESCE(base_message_count, (SELECT t.message_count "
                    "FROM parley_threads t WHERE t.id = parley_runs.thread_id)), updated_at = $2 "
                    "WHERE id IN (SELECT (SELECT h.id FROM parley_runs h WHERE h.thread_id = "
                    "c.id AND h.status IN ") +
            kActive + " ORDER BY h.position LIMIT 1) FROM parley_threads c WHERE c.id IN (" + in +
            ")) AND (status <> 'waiting' OR response IS NOT NULL OR cancel_request IS NOT NULL) "
            "RETURNING " +
            kRunColumns,
        params);
  };
  for (int round = 0; round < 3 && claimed.size() < maxRuns; ++round) {
    const size_t before = claimed.size();
    const auto rows = candidates(maxRuns - claimed.size());
    if (rows.empty()) break;
    // Every row of one statement: one time (SQLite's and a caller's clock are read once too).
    const int64_t now = knownNow || clock.empty() ? localNow : asInt(rows[0].at(8));
    std::vector<std::string> free;
    for (const SqlRow& row : rows) {
      if (isNull(row.at(1)) || asInt(row.at(2)) <= now) free.push_back(asText(row.at(0)));
    }
    std::map<std::string, RunInfo> heads;
    if (!free.empty()) {
      for (const SqlRow& head : claimHeads(free, now)) {
        RunInfo run = runFromRow(head);
        heads.emplace(run.threadId, std::move(run));
      }
    }
    std::map<std::string, LockedThread> taken;  // written together, after their events
    for (const SqlRow& row : rows) {            // in the candidates' order
      const std::string threadId = asText(row.at(0));
      auto head = heads.find(threadId);
      if (head == heads.end()) continue;
      LockedThread& thread = taken[threadId];
      thread.leaseToken = asInt(row.at(3));
      thread.version = asInt(row.at(4));
      thread.messageCount = asInt(row.at(5));
      thread.lastEventSeq = asInt(row.at(6));
      Claim claim;
      claim.run = std::move(head->second);
      const int64_t expires = now + leaseDuration.count();
      claim.lease = Lease{threadId, claim.run.id,          claim.run.options.traceId,
                          workerId, thread.leaseToken + 1, detail::fromMs(expires)};
      claim.threadEmpty = thread.messageCount == 0 && asInt(row.at(7)) != 0;
      thread.changes.set("lease_owner", workerId);
      thread.changes.set("lease_run_id", claim.run.id);
      thread.changes.set("lease_token", claim.lease.token);
      thread.changes.set("lease_expires_at", expires);
      std::vector<EventRow> events = {
          lifecycle(claim.run, EventType::RunStarted,
                    {{"attempt", claim.run.attempts}, {"worker", workerId}})};
      if (startEvents) {
        // Past the limits, the worker's own write of them meets the same check (and fails the
        // run, not the claim of every run claimed with it).
        try {
          auto more = eventRows(claim.lease, startEvents(claim), options_.limits);
          events.insert(events.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
          claim.startEventsWritten = true;
        } catch (const ValidationError&) {
        }
      }
      appendEventRows(c, threadId, thread, events, now);
      claimed.push_back(std::move(claim));
    }
    detail::writeThreadRows(c, taken);
    // Fewer candidates than asked for: there are no more. Else, if some were passed over, look
    // again (those claimed no longer match).
    if (rows.size() < maxRuns - before || claimed.size() == before) break;
  }
}

LeaseRenewal RunStore::renew(const Lease& lease, std::chrono::milliseconds leaseDuration) {
  checkLeaseFields(lease);
  if (leaseDuration.count() <= 0) throw ValidationError("leaseDuration", "must be positive");
  LeaseRenewal renewal;
  // A renewal lost in a crash only shortens the lease.
  fenced(
      lease,
      [&](SqlConnection& c, int64_t now, LockedThread& thread) {
        const int64_t expires = now + leaseDuration.count();
        thread.changes.set("lease_expires_at", expires);
        auto rows = c.query("SELECT cancel_request FROM parley_runs WHERE id = $1", {lease.runId});
        renewal.expiresAt = detail::fromMs(expires);
        renewal.cancelRequest = rows.empty()
                                    ? CancelRequest::None
                                    : parseName<CancelRequest>(asText(rows[0].at(0)), kCancelNames)
                                          .value_or(CancelRequest::None);
      },
      /*durable=*/false);
  return renewal;
}

bool RunStore::release(const Lease& lease) {
  checkLeaseFields(lease);
  bool released = false;
  engine_->transaction(true, [&](SqlConnection& c) {
    int64_t now = 0;
    LockedThread thread;
    try {
      thread = checkLease(c, lease, options_.clock ? nullptr : &now);
    } catch (const LeaseLost&) {
      released = false;
      return;
    }
    if (options_.clock) now = options_.clock();
    freeLease(thread);
    appendEventRows(c, lease.threadId, thread,
                    {{lease.runId, lease.traceId, std::string(eventName(EventType::RunReleased)),
                      json({{"worker", lease.owner}}).dump()}},
                    now);
    thread.changes.write(c, lease.threadId);
    notify(c, kRunsChannel, lease.runId);
    released = true;
  });
  if (released) afterWrite(lease.threadId, true);
  return released;
}

RunStore::Version RunStore::appendTurn(const Lease& lease, std::span<const Message> messages,
                                       const json& state, Version expectedVersion,
                                       std::span<const EventInput> events) {
  checkLeaseFields(lease);
  auto bodies = detail::messageBodies(messages);
  SqlValue stateText = detail::stateValue(state);
  auto rows = eventRows(lease, events, options_.limits);
  Version version = 0;
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread& thread) {
    version = engine_->appendTurnIn(c, lease.threadId, bodies, stateText, state, expectedVersion,
                                    &thread);
    c.executeLater(
        "UPDATE parley_runs SET pending_reply = NULL, pending_at = NULL, wait = NULL, "
        "response = NULL, updated_at = $1 WHERE id = $2",
        {now, lease.runId});
    appendEventRows(c, lease.threadId, thread, rows, now);
  });
  afterWrite(lease.threadId, false);
  return version;
}

int64_t RunStore::appendEvents(const Lease& lease, std::span<const EventInput> events) {
  checkLeaseFields(lease);
  auto rows = eventRows(lease, events, options_.limits);
  int64_t last = 0;
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread& thread) {
    last = appendEventRows(c, lease.threadId, thread, rows, now);
  });
  afterWrite(lease.threadId, false);
  return last;
}

void RunStore::recordReply(const Lease& lease, const Message& reply, int64_t at) {
  checkLeaseFields(lease);
  const auto& limits = options_.limits;
  const std::string body = detail::messageBodies(std::span<const Message>(&reply, 1)).front();
  if (reply.role != Role::Assistant || reply.toolCalls.empty()) {
    throw ValidationError("reply", "must be an assistant message with tool calls");
  }
  if (reply.toolCalls.size() > limits.maxToolCallsPerReply) {
    throw ValidationError("reply.tool_calls", "holds " + std::to_string(reply.toolCalls.size()) +
                                                  " calls, more than the limit of " +
                                                  std::to_string(limits.maxToolCallsPerReply) +
                                                  " (RunStoreLimits::maxToolCallsPerReply)");
  }
  checkSize(body, limits.maxJournalBytes, "reply", "maxJournalBytes");
  std::vector<std::string> ids;
  for (size_t i = 0; i < reply.toolCalls.size(); ++i) {
    const auto& call = reply.toolCalls[i];
    detail::checkId(call.id, "reply.tool_calls[" + std::to_string(i) + "].id");
    if (std::find(ids.begin(), ids.end(), call.id) != ids.end()) {
      throw ValidationError("reply.tool_calls[" + std::to_string(i) + "].id",
                            "repeats the id " + named(call.id));
    }
    ids.push_back(call.id);
  }
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread& thread) {
    if (at < thread.messageCount) {
      throw ValidationError("at", "is " + std::to_string(at) + ", before the end of thread " +
                                      named(lease.threadId) + " (" +
                                      std::to_string(thread.messageCount) + " messages)");
    }
    c.executeLater(
        "UPDATE parley_runs SET pending_reply = $1, pending_at = $2, updated_at = $3 WHERE id = $4",
        {body, at, now, lease.runId});
    for (const auto& call : reply.toolCalls) {
      c.executeLater(
          "INSERT INTO parley_tool_calls (run_id, turn, call_id, tool_name, phase, arguments, "
          "result, attempts, token, updated_at) VALUES ($1, $2, $3, $4, 'intent', $5, NULL, 0, "
          "$6, $7) ON CONFLICT (run_id, turn, call_id) DO NOTHING",
          {lease.runId, at, call.id, call.name, call.arguments, lease.token, now});
    }
  });
}

namespace {

// A journaled call's phase and how errors name it; StoreError when the call is not journaled.
std::pair<std::string, std::string> journaledCall(SqlConnection& c, const std::string& runId,
                                                  int64_t turn, const std::string& callId) {
  auto rows = c.query(
      "SELECT phase FROM parley_tool_calls WHERE run_id = $1 AND turn = $2 AND call_id = $3",
      {runId, turn, callId});
  std::string call =
      "call " + named(callId) + " at turn " + std::to_string(turn) + " of run " + named(runId);
  if (rows.empty()) {
    throw StoreError("store: no journaled " + call + " (recordReply journals a reply's calls)");
  }
  return {asText(rows[0].at(0)), std::move(call)};
}

}  // namespace

void RunStore::recordToolCall(const Lease& lease, int64_t turn, const std::string& callId,
                              ToolCallPhase phase, const std::string& text) {
  checkLeaseFields(lease);
  detail::checkId(callId, "callId");
  if (phase == ToolCallPhase::Intent) {
    throw ValidationError("phase", "intent is recorded by recordReply");
  }
  checkSize(text, options_.limits.maxJournalBytes, "text", "maxJournalBytes");
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread&) {
    const auto [phaseText, call] = journaledCall(c, lease.runId, turn, callId);
    const auto current =
        parseName<ToolCallPhase>(phaseText, kPhaseNames).value_or(ToolCallPhase::Intent);
    if (current != ToolCallPhase::Intent && current != ToolCallPhase::Started) {
      throw StoreError("store: " + call + " is already " + std::string(toString(current)));
    }
    if (phase == ToolCallPhase::Started) {
      // A started call's result column holds its checkpoint (recordToolCheckpoint): a re-run
      // keeps it, so that a second takeover still resumes the same remote work.
      c.executeLater(
          "UPDATE parley_tool_calls SET phase = 'started', attempts = attempts + 1, token = $1, "
          "updated_at = $2 WHERE run_id = $3 AND turn = $4 AND call_id = $5",
          {lease.token, now, lease.runId, turn, callId});
      return;
    }
    c.executeLater(
        "UPDATE parley_tool_calls SET phase = $1, result = $2, token = $3, updated_at = $4 "
        "WHERE run_id = $5 AND turn = $6 AND call_id = $7",
        {std::string(toString(phase)), text, lease.token, now, lease.runId, turn, callId});
  });
}

void RunStore::recordToolCheckpoint(const Lease& lease, int64_t turn, const std::string& callId,
                                    const json& handle) {
  checkLeaseFields(lease);
  detail::checkId(callId, "callId");
  if (handle.is_null()) throw ValidationError("handle", "must not be null");
  const std::string text = detail::dumpJson(handle, "handle");
  checkSize(text, options_.limits.maxJournalBytes, "handle", "maxJournalBytes");
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread&) {
    const auto [phaseText, call] = journaledCall(c, lease.runId, turn, callId);
    if (phaseText != toString(ToolCallPhase::Started)) {
      throw StoreError("store: " + call + " is " + phaseText +
                       ": only a started call keeps a checkpoint");
    }
    c.executeLater(
        "UPDATE parley_tool_calls SET result = $1, token = $2, updated_at = $3 WHERE run_id = $4 "
        "AND turn = $5 AND call_id = $6",
        {text, lease.token, now, lease.runId, turn, callId});
  });
}

RunJournal RunStore::journal(const std::string& runId) {
  RunJournal journal;
  engine_->transaction(false, [&](SqlConnection& c) {
    journal = {};
    auto run = c.query("SELECT pending_reply, pending_at FROM parley_runs WHERE id = $1", {runId});
    if (run.empty()) throw noRun(runId);
    if (!isNull(run[0].at(0))) {
      try {
        journal.pendingReply = messageFromJson(
            detail::parseColumn(run[0].at(0), "run " + named(runId) + " pending reply"));
      } catch (const StoreError&) {
        throw;
      } catch (const std::exception& e) {
        throw StoreError("store: run " + named(runId) + " pending reply is corrupt: " + e.what());
      }
      journal.pendingAt = asInt(run[0].at(1));
    }
    for (const auto& row :
         c.query("SELECT turn, call_id, tool_name, phase, arguments, result, attempts, token, "
                 "updated_at FROM parley_tool_calls WHERE run_id = $1 ORDER BY turn, call_id",
                 {runId})) {
      ToolCallEntry entry;
      entry.turn = asInt(row.at(0));
      entry.callId = asText(row.at(1));
      entry.toolName = asText(row.at(2));
      entry.phase =
          parseName<ToolCallPhase>(asText(row.at(3)), kPhaseNames).value_or(ToolCallPhase::Intent);
      entry.arguments = asText(row.at(4));
      if (entry.phase != ToolCallPhase::Started) {
        entry.text = asText(row.at(5));
      } else if (!isNull(row.at(5))) {
        entry.checkpoint = detail::parseColumn(
            row.at(5), "run " + named(runId) + " call " + named(entry.callId) + " checkpoint");
      }
      entry.attempts = asInt(row.at(6));
      entry.token = asInt(row.at(7));
      entry.updatedAt = detail::fromMs(asInt(row.at(8)));
      journal.calls.push_back(std::move(entry));
    }
  });
  return journal;
}

void RunStore::wait(const Lease& lease, const json& what, std::span<const EventInput> events) {
  checkLeaseFields(lease);
  if (!what.is_object()) throw ValidationError("what", "must be a JSON object");
  const std::string text = detail::dumpJson(what, "what");
  checkSize(text, options_.limits.maxResponseBytes, "what", "maxResponseBytes");
  auto rows = eventRows(lease, events, options_.limits);
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread& thread) {
    c.executeLater(
        "UPDATE parley_runs SET status = 'waiting', wait = $1, response = NULL, updated_at = $2 "
        "WHERE id = $3",
        {text, now, lease.runId});
    freeLease(thread);
    auto all = rows;
    all.push_back({lease.runId, lease.traceId, std::string(eventName(EventType::RunWaiting)),
                   json({{"wait", what}}).dump()});
    appendEventRows(c, lease.threadId, thread, all, now);
  });
  afterWrite(lease.threadId, false);
}

namespace {

void checkFinish(RunStatus status, const std::string& error, const std::string& resultText,
                 const RunStoreLimits& limits) {
  if (status != RunStatus::Completed && status != RunStatus::Failed &&
      status != RunStatus::Cancelled) {
    throw ValidationError("status", "a run finishes completed, failed or cancelled, not " +
                                        std::string(toString(status)));
  }
  checkSize(error, limits.maxResultBytes, "error", "maxResultBytes");
  checkSize(resultText, limits.maxResultBytes, "result", "maxResultBytes");
}

// How a run ended, for its row (writeRunEnds).
struct RunEnd {
  std::string runId;
  std::string status;
  SqlValue error;
  SqlValue result;
  int64_t at = 0;
};

// finish()'s writes but for the run's row (returned, for writeRunEnds) and the thread row (left
// in thread.changes), inside the caller's fenced transaction. The thread row is to be written
// before the run's: it sets the thread's next queue head itself, and the head trigger then finds
// the head as the run's update leaves it and does not write the row a second time.
RunEnd endRun(SqlConnection& c, LockedThread& thread, const Lease& lease, RunStatus status,
              const std::string& error, const json& result, const std::string& resultText,
              std::vector<EventRow> rows, int64_t now) {
  std::string reason = error;
  if (reason.empty() && status == RunStatus::Cancelled) {
    auto current = c.query("SELECT error FROM parley_runs WHERE id = $1", {lease.runId});
    if (!current.empty()) reason = asText(current[0].at(0));
    if (reason.empty()) reason = "cancelled";
  }
  if (status == RunStatus::Completed) reason.clear();
  freeLease(thread);
  endEvents(rows, lease.runId, lease.traceId, status, reason, result);
  appendEventRows(c, lease.threadId, thread, rows, now);
  thread.changes.setQueueHeadAfter(lease.runId);
  notify(c, kRunsChannel, lease.runId);
  return {lease.runId, std::string(toString(status)),
          reason.empty() ? SqlValue() : SqlValue(reason),
          result.is_null() ? SqlValue() : SqlValue(resultText), now};
}

// The ended runs' rows, in one statement.
void writeRunEnds(SqlConnection& c, const std::vector<RunEnd>& ends) {
  if (ends.empty()) return;
  const char* set = "cancel_request = NULL, pending_reply = NULL, pending_at = NULL, wait = NULL, ";
  if (ends.size() == 1) {
    const RunEnd& end = ends.front();
    c.executeLater(std::string("UPDATE parley_runs SET status = $1, error = $2, result = $3, ") +
                       set + "finished_at = $4, updated_at = $4 WHERE id = $5",
                   {end.status, end.error, end.result, end.at, end.runId});
    return;
  }
  detail::SqlParams params;
  std::string values;
  for (const RunEnd& end : ends) {
    const size_t at = params.size();
    params.insert(params.end(), {end.runId, end.status, end.error, end.result, end.at});
    values += std::string(values.empty() ? "" : ", ") + "($" + std::to_string(at + 1) + ", $" +
              std::to_string(at + 2) + ", $" + std::to_string(at + 3) + ", $" +
              std::to_string(at + 4) + ", CAST($" + std::to_string(at + 5) + " AS BIGINT))";
  }
  c.executeLater(std::string("UPDATE parley_runs SET status = v.column2, error = v.column3, "
                             "result = v.column4, ") +
                     set + "finished_at = v.column5, updated_at = v.column5 FROM (VALUES " +
                     values + ") AS v WHERE parley_runs.id = v.column1",
                 params);
}

// finish()'s writes, inside the caller's fenced transaction.
void writeFinish(SqlConnection& c, LockedThread& thread, const Lease& lease, RunStatus status,
                 const std::string& error, const json& result, const std::string& resultText,
                 std::vector<EventRow> rows, int64_t now) {
  RunEnd end = endRun(c, thread, lease, status, error, result, resultText, std::move(rows), now);
  thread.changes.write(c, lease.threadId);  // first: see endRun
  writeRunEnds(c, {end});
}

}  // namespace

void RunStore::finish(const Lease& lease, RunStatus status, const std::string& error,
                      const json& result, std::span<const EventInput> events) {
  checkLeaseFields(lease);
  const std::string resultText = detail::dumpJson(result, "result");
  checkFinish(status, error, resultText, options_.limits);
  auto rows = eventRows(lease, events, options_.limits);
  fenced(lease, [&](SqlConnection& c, int64_t now, LockedThread& thread) {
    writeFinish(c, thread, lease, status, error, result, resultText, rows, now);
  });
  afterWrite(lease.threadId, true);
  maybeExpireChunks();
}

RunStore::Version RunStore::finishWithTurn(const Lease& lease, std::span<const Message> messages,
                                           const json& state, Version expectedVersion,
                                           const json& result, std::span<const EventInput> events) {
  return finishTurn(lease, messages, state, expectedVersion, result, events, std::nullopt, {})
      .version;
}

RunStore::FinishedTurn RunStore::finishWithTurnAndClaim(
    const Lease& lease, std::span<const Message> messages, const json& state,
    Version expectedVersion, const json& result, std::span<const EventInput> events,
    std::chrono::milliseconds leaseDuration, const ClaimEvents& startEvents) {
  if (leaseDuration.count() <= 0) throw ValidationError("leaseDuration", "must be positive");
  return finishTurn(lease, messages, state, expectedVersion, result, events, leaseDuration,
                    startEvents);
}

// One finishTurn() call: what it writes (checked and serialised before any transaction), and
// what came of it.
struct RunStore::TurnFinish {
  const Lease* lease = nullptr;
  std::vector<std::string> bodies;
  SqlValue stateText;
  const json* state = nullptr;
  Version expectedVersion = 0;
  const json* result = nullptr;
  std::string resultText;
  std::vector<EventRow> rows;
  std::optional<std::chrono::milliseconds> claimFor;
  const ClaimEvents* startEvents = nullptr;
  // The outcome: `finished`, or `error` (its own: a lost lease, a stale version; or the
  // transaction's, shared by every call in it).
  FinishedTurn finished;
  std::exception_ptr error;
  // FinishBatches: set by the batch's leader under the batches' mutex, which `wake` waits with.
  bool done = false;
  std::condition_variable wake;
};

// Group commit for finishWithTurnAndClaim (the chained finish of a busy worker's slots): the
// calls that arrive while a batch commits wait, then go together in the next batch, one
// transaction: one disk flush and a few round trips for the lot, where each call alone pays
// its own. No call waits for company: under light load a batch is one call, sent at once. The
// caller whose call is first in the queue when a batch slot is free leads the next batch on its
// own thread; each caller is woken alone, when its call is done or it is to lead (a wake-up of
// every waiter per batch cost the slots more than the batches saved).
class RunStore::FinishBatches {
 public:
  void run(RunStore& store, TurnFinish& item) {
    std::unique_lock lock(mutex_);
    queue_.push_back(&item);
    for (;;) {
      if (!item.done && !(inFlight_ < kMaxInFlight && queue_.front() == &item)) {
        item.wake.wait(lock, [&] {
          return item.done || (inFlight_ < kMaxInFlight && queue_.front() == &item);
        });
      }
      if (item.done) return;
      std::vector<TurnFinish*> batch;
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      ++inFlight_;
      wakeLeader();  // a second batch may start while this one commits
      lock.unlock();
      store.finishBatch(batch);  // records each call's outcome; never throws
      lock.lock();
      --inFlight_;
      for (TurnFinish* done : batch) {
        done->done = true;
        if (done != &item) done->wake.notify_one();
      }
      wakeLeader();
    }
  }

 private:
  // REQUIRES mutex_: the first waiting call leads the next batch when one may start.
  void wakeLeader() {
    if (!queue_.empty() && inFlight_ < kMaxInFlight) queue_.front()->wake.notify_one();
  }

  // One batch at a time: the calls that arrive meanwhile make the next one larger. Measured with
  // a worker of 8 slots (bench/queue/run.sh): two at once cost PostgreSQL and the worker about a
  // fifth more CPU per run, and ran fewer runs per second, than one; measured again at rest, they
  // ran 5-16 % more, within the script's noise (docs/scale-out.md).
  static constexpr int kMaxInFlight = 1;
  static constexpr size_t kMaxBatch = 64;
  std::mutex mutex_;
  std::deque<TurnFinish*> queue_;
  int inFlight_ = 0;
};

RunStore::FinishedTurn RunStore::finishTurn(const Lease& lease, std::span<const Message> messages,
                                            const json& state, Version expectedVersion,
                                            const json& result, std::span<const EventInput> events,
                                            std::optional<std::chrono::milliseconds> claimFor,
                                            const ClaimEvents& startEvents) {
  checkLeaseFields(lease);
  TurnFinish item;
  item.lease = &lease;
  item.bodies = detail::messageBodies(messages);
  item.stateText = detail::stateValue(state);
  item.state = &state;
  item.expectedVersion = expectedVersion;
  item.result = &result;
  item.resultText = detail::dumpJson(result, "result");
  checkFinish(RunStatus::Completed, "", item.resultText, options_.limits);
  item.rows = eventRows(lease, events, options_.limits);
  item.claimFor = claimFor;
  item.startEvents = &startEvents;
  if (claimFor) {
    batches_->run(*this, item);
  } else {
    TurnFinish* alone = &item;
    finishBatch(std::span<TurnFinish* const>(&alone, 1));
  }
  if (item.error) std::rethrow_exception(item.error);
  return std::move(item.finished);
}

void RunStore::finishBatch(std::span<TurnFinish* const> items) {
  try {
    engine_->transaction(true, [&](SqlConnection& c) {
      for (TurnFinish* item : items) {
        item->finished = {};
        item->error = nullptr;
      }
      // Every thread of the batch locked in one statement (in id order, as every batch locks
      // them: two batches cannot deadlock), checked call by call: a call whose lease is lost or
      // whose version is stale fails alone, before it writes anything, and the others go on.
      std::vector<std::string> ids;
      for (TurnFinish* item : items)
        ids.push_back(item->lease->threadId);
      int64_t now = 0;
      auto threads = detail::lockThreads(c, ids, options_.clock ? nullptr : &now);
      if (options_.clock) now = options_.clock();
      // The turns' messages, then their events: consecutive inserts into one table are one
      // statement (SqlConnection::insertMessages, insertEvents).
      for (TurnFinish* item : items) {
        const Lease& lease = *item->lease;
        auto found = threads.find(lease.threadId);
        try {
          detail::checkLeaseOf(found == threads.end() ? nullptr : &found->second, lease);
          item->finished.version =
              engine_->appendTurnIn(c, lease.threadId, item->bodies, item->stateText, *item->state,
                                    item->expectedVersion, &found->second);
        } catch (const LeaseLost&) {
          item->error = std::current_exception();
        } catch (const StoreConflict&) {
          item->error = std::current_exception();
        } catch (const ValidationError&) {
          item->error = std::current_exception();
        }
      }
      std::vector<RunEnd> ends;
      for (TurnFinish* item : items) {
        if (item->error) continue;
        const Lease& lease = *item->lease;
        ends.push_back(endRun(c, threads.at(lease.threadId), lease, RunStatus::Completed, "",
                              *item->result, item->resultText, item->rows, now));
      }
      // The thread rows, then the runs' (see endRun); before the claims, which may take one of
      // these threads again (its next run).
      detail::writeThreadRows(c, threads);
      writeRunEnds(c, ends);
      // The next runs, for the calls that asked, by worker: one claim of as many runs per worker,
      // handed out in the calls' order.
      std::vector<TurnFinish*> asking;
      for (TurnFinish* item : items)
        if (!item->error && item->claimFor) asking.push_back(item);
      while (!asking.empty()) {
        const std::string owner = asking.front()->lease->owner;
        const auto duration = *asking.front()->claimFor;
        std::vector<TurnFinish*> group, rest;
        for (TurnFinish* item : asking)
          (item->lease->owner == owner && *item->claimFor == duration ? group : rest)
              .push_back(item);
        asking = std::move(rest);
        size_t next = 0;
        const ClaimEvents startEvents = [&](const Claim& claim) {
          const ClaimEvents* own = group[next++]->startEvents;
          return own && *own ? (*own)(claim) : std::vector<EventInput>{};
        };
        std::vector<Claim> claimed;
        claimIn(c, owner, duration, group.size(),
                options_.clock ? std::optional<int64_t>(now) : std::nullopt, claimed, startEvents);
        for (size_t i = 0; i < claimed.size(); ++i)
          group[i]->finished.next = std::move(claimed[i]);
      }
    });
  } catch (...) {
    // The transaction failed as a whole: every call in it fails with its error.
    const auto error = std::current_exception();
    for (TurnFinish* item : items) {
      item->finished = {};
      item->error = error;
    }
  }
  for (TurnFinish* item : items) {
    if (item->error) continue;
    afterWrite(item->lease->threadId, true);
    if (item->finished.next) afterWrite(item->finished.next->lease.threadId, false);
  }
  maybeExpireChunks();
}

void RunStore::maybeExpireChunks() {
  const int64_t interval = std::max<int64_t>(1'000, options_.chunkRetention.count() / 4);
  const int64_t wall = detail::nowMs();
  int64_t last = lastChunkSweep_.load();
  if (wall - last < interval || !lastChunkSweep_.compare_exchange_strong(last, wall)) return;
  try {
    expireStreamChunks(options_.chunkRetention);
  } catch (const StoreError&) {
    // Housekeeping: the next finish tries again.
    lastChunkSweep_ = last;
  }
}

size_t RunStore::expireStreamChunks(std::chrono::milliseconds olderThan) {
  if (olderThan.count() < 0) throw ValidationError("olderThan", "must not be negative");
  int64_t removed = 0;
  engine_->transaction(true, [&](SqlConnection& c) {
    const int64_t now = this->now(c);
    removed = c.execute("DELETE FROM parley_events WHERE type = $1 AND created_at < $2",
                        {std::string(kStreamChunkEventType), now - olderThan.count()});
  });
  return static_cast<size_t>(removed);
}

std::vector<StoredEvent> RunStore::readEvents(const std::string& threadId, int64_t afterSeq,
                                              size_t limit) {
  detail::checkId(threadId, "threadId");
  if (limit == 0) throw ValidationError("limit", "must be at least 1");
  limit = std::min(limit, options_.limits.maxEventsPerCall);
  std::vector<StoredEvent> events;
  engine_->transaction(false, [&](SqlConnection& c) {
    events.clear();
    for (const auto& row :
         c.query("SELECT thread_id, seq, run_id, trace_id, type, payload, created_at "
                 "FROM parley_events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                 {threadId, afterSeq, static_cast<int64_t>(limit)})) {
      events.push_back(eventFromRow(row));
    }
    if (events.empty() &&
        c.query("SELECT 1 FROM parley_threads WHERE id = $1 AND deleted = 0", {threadId}).empty()) {
      throw StoreError("store: no thread " + named(threadId));
    }
  });
  return events;
}

std::vector<StoredEvent> RunStore::waitForEvents(const std::string& threadId, int64_t afterSeq,
                                                 std::chrono::milliseconds timeout, size_t limit) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const size_t bucket = Wakeups::bucketOf(threadId);
  auto interval = options_.pollMin;
  for (;;) {
    const bool listening = wakeups_->listening();
    const uint64_t seen = wakeups_->generation(bucket);
    auto events = readEvents(threadId, afterSeq, limit);
    const auto now = std::chrono::steady_clock::now();
    if (!events.empty() || now >= deadline) return events;
    const auto pause = listening ? options_.listenPoll : interval;
    if (!listening) interval = std::min(interval * 2, options_.pollMax);
    wakeups_->waitChange(bucket, seen, std::min(deadline, now + pause));
  }
}

std::vector<std::optional<int64_t>> RunStore::lastEventSeqs(
    std::span<const std::string> threadIds) {
  constexpr size_t kPerQuery = 256;
  std::vector<std::optional<int64_t>> out(threadIds.size());
  for (size_t from = 0; from < threadIds.size(); from += kPerQuery) {
    const size_t to = std::min(threadIds.size(), from + kPerQuery);
    std::string sql = "SELECT id, last_event_seq FROM parley_threads WHERE deleted = 0 AND id IN (";
    detail::SqlParams params;
    for (size_t i = from; i < to; ++i) {
      sql += (i == from ? "$" : ", $") + std::to_string(i - from + 1);
      params.emplace_back(threadIds[i]);
    }
    sql += ")";
    std::unordered_map<std::string, int64_t> found;
    engine_->transaction(false, [&](SqlConnection& c) {
      found.clear();
      for (const auto& row : c.query(sql, params))
        found[asText(row.at(0))] = asInt(row.at(1));
    });
    for (size_t i = from; i < to; ++i) {
      auto it = found.find(threadIds[i]);
      if (it != found.end()) out[i] = it->second;
    }
  }
  return out;
}

uint64_t RunStore::eventsGeneration() {
  wakeups_->listening();  // PostgreSQL: start listening on first use
  return wakeups_->anyEvents();
}

bool RunStore::waitForEventsChange(uint64_t seen, std::chrono::milliseconds timeout) {
  return wakeups_->waitAnyEvents(seen, std::chrono::steady_clock::now() + timeout);
}

bool RunStore::eventsPushed() {
  return wakeups_->listening();
}

void RunStore::checkIntegrity() {
  engine_->transaction(false, [&](SqlConnection& c) {
    if (c.dialect() == detail::SqlDialect::Sqlite) {
      const auto rows = c.query("PRAGMA quick_check", {});
      if (rows.empty() || asText(rows[0].at(0)) != "ok") {
        throw StoreError("store: the database is damaged (quick_check: " +
                         (rows.empty() ? std::string("no answer") : asText(rows[0].at(0))) + ")");
      }
      return;
    }
    for (const char* table : {"parley_threads", "parley_runs", "parley_events"})
      c.query(std::string("SELECT 1 FROM ") + table + " LIMIT 1", {});
  });
}

bool RunStore::waitForRuns(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool listening = wakeups_->listening();
  const uint64_t seen = wakeups_->seenAtClaim();
  // Without notifications, a poll interval stands in for them: the caller claims after it.
  const auto until = listening
                         ? deadline
                         : std::min(deadline, std::chrono::steady_clock::now() + options_.pollMax);
  return wakeups_->waitChange(Wakeups::kRuns, seen, until);
}

}  // namespace parley
