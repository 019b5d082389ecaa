// The run queue's named queries and the rows they read and write (docs/scale-out.md, "Tables"):
// runs as rows, the event log's rows, the lease checks and the ways a run ends without its
// worker. run_store.cpp holds the rules (which of these run, in which transaction, under which
// lock); run_wakeups.hpp the wake-ups. Every function that takes a connection runs inside the
// caller's transaction; those that say "locked" need the thread's row locked by the caller.
// Internal to src/store/.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "parley/errors.hpp"
#include "parley/run_store.hpp"
#include "store/sql_store.hpp"

namespace parley::detail {

inline constexpr const char* kRunsChannel = "parley_runs";
inline constexpr const char* kEventsChannel = "parley_events";
inline constexpr const char* kActive = "('queued', 'running', 'waiting')";

template <class Enum, size_t N>
std::optional<Enum> parseName(std::string_view text, const std::array<const char*, N>& names) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

inline constexpr std::array<const char*, 7> kStatusNames = {
    "queued", "running", "waiting", "completed", "failed", "cancelled", "rejected"};
inline constexpr std::array<const char*, 4> kPolicyNames = {"enqueue", "reject", "interrupt",
                                                            "rollback"};
inline constexpr std::array<const char*, 4> kCancelNames = {"", "cancel", "interrupt", "rollback"};
inline constexpr std::array<const char*, 5> kPhaseNames = {"intent", "started", "completed",
                                                           "failed", "indeterminate"};

inline constexpr const char* kRunColumns =
    "id, thread_id, position, status, policy, input, options, trace_id, attempts, worker, "
    "cancel_request, wait, response, error, result, base_version, base_message_count, "
    "created_at, updated_at, started_at, finished_at";

// "is N bytes, more than the limit of L (RunStoreLimits::cap)"
std::string tooBig(size_t size, size_t limit, const char* cap);
// ValidationError(field, tooBig(...)) past `limit`.
void checkSize(const std::string& text, size_t limit, const std::string& field, const char* cap);
// The checks submit() makes of a run's options.
void checkOptions(const SubmitOptions& options, const RunStoreLimits& limits);

// --- runs as rows ---
// The options column (snake_case; what a run asks, not its id, trace or policy, which have
// columns of their own).
nlohmann::json optionsJson(const SubmitOptions& options);
// A row of kRunColumns; runs written in the old camelCase spelling are read in today's.
RunInfo runFromRow(const SqlRow& row);
std::optional<RunInfo> readRun(SqlConnection& c, const std::string& runId);
StoreError noRun(const std::string& runId);
// Locks a thread row (the queue's lock) and reads it; nullopt when there is none. Also reads the
// database's clock into `now` when it is given, in the same statement where the clock is the
// database's (one round trip less). What the transaction changes in the row goes in its
// `changes`, which the caller writes at the end (ThreadRowWrite::write).
std::optional<LockedThread> lockThread(SqlConnection& c, const std::string& threadId,
                                       int64_t* now = nullptr);
// lockThread of several threads in one statement, by id (those that exist).
std::map<std::string, LockedThread> lockThreads(SqlConnection& c, std::vector<std::string> ids,
                                                int64_t* now = nullptr);
// Locks the thread of a run (into `thread`) and returns the run as it is then.
RunInfo lockRun(SqlConnection& c, const std::string& runId, std::optional<LockedThread>& thread);

// --- events ---
// NOTIFY `channel` once the transaction commits (ids only: a payload is limited to 8000 bytes).
void notify(SqlConnection& c, const char* channel, const std::string& payload);
// Appends to the log of a locked thread, numbered from the row as locked; returns the last
// seq. The thread's new count goes in its changes.
int64_t appendEventRows(SqlConnection& c, const std::string& threadId, LockedThread& thread,
                        const std::vector<EventRow>& events, int64_t now);
// The events that end a run, whoever ends it: the store's run_<status> (no outcome), then the
// run's one terminal event in the executor's words (kRunCompletedEventType, kRunFailedEventType),
// which carries the outcome.
void endEvents(std::vector<EventRow>& events, const std::string& runId, const std::string& traceId,
               RunStatus status, const std::string& reason, const nlohmann::json& result);
// A lifecycle event of the store's (run_queued, run_started, ...).
EventRow lifecycle(const RunInfo& run, EventType type,
                   const nlohmann::json& payload = nlohmann::json::object());
StoredEvent eventFromRow(const SqlRow& row);
// A worker's events as rows, checked against the limits.
std::vector<EventRow> eventRows(const Lease& lease, std::span<const EventInput> events,
                                const RunStoreLimits& limits);
// `[a,b,...]` of JSON texts.
std::string joinArray(const std::vector<std::string>& bodies);

// --- leases ---
void checkLeaseFields(const Lease& lease);
// Locks the lease's thread and checks that the lease is still its lease: same token, owner and
// run (LeaseLost otherwise). Returns the thread row as locked (lockThread, `now` likewise).
LockedThread checkLease(SqlConnection& c, const Lease& lease, int64_t* now = nullptr);
// The check alone, of a row the caller locked (nullptr: none).
void checkLeaseOf(const LockedThread* thread, const Lease& lease);
// Frees the locked thread's lease if it is `runId`'s, growing the token so that its holder, if
// it still runs, is fenced out.
void revokeLease(LockedThread& thread, const std::string& runId);
// Frees the locked thread's lease.
void freeLease(LockedThread& thread);
// Whether a live lease (not expired at `now`) holds the thread for `runId`.
bool leaseLiveFor(const LockedThread& thread, const std::string& runId, int64_t now);

// --- ending runs without their worker ---
// Cancels `run` at once (no worker holds it, or its lease is revoked), with its end events.
void cancelNow(SqlConnection& c, LockedThread& thread, const RunInfo& run,
               const std::string& reason, int64_t now, std::vector<EventRow>& events);
// Asks the run's worker to stop at its next safe point (Cancel < Interrupt < Rollback: a
// stronger request replaces a weaker one).
void requestCancel(SqlConnection& c, const RunInfo& run, CancelRequest request,
                   const std::string& reason, int64_t now, std::vector<EventRow>& events);

}  // namespace parley::detail
