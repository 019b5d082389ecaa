// Every step of the store's schema, for both engines, from version 1 to kStoreSchemaVersion
// (store.hpp): the threads and messages (1), the run queue (2), message search (3), ..., the
// service's assistants (6), the queue-head trigger woken only when the head may move (7). The
// engine's migrate() (sql_store.cpp) runs the steps after a database's version, in one transaction.
// A new table or column is a new version here, for both engines at once; a step once released never
// changes (databases in the field ran it). docs/scale-out.md, "Tables", describes the tables.
#include <string>
#include <vector>

#include "parley/errors.hpp"
#include "store/message_words.hpp"
#include "store/sql_store.hpp"

namespace parley::detail {

namespace {

// The statements are long literals split over lines, which the missing-comma check takes for
// forgotten commas.
// NOLINTBEGIN(bugprone-suspicious-missing-comma)

// Version 1. BIGINT has INTEGER affinity in SQLite, so one text serves both where it can.
const std::vector<std::string> kSchemaV1Sqlite = {
    "CREATE TABLE parley_schema (version INTEGER NOT NULL)",
    "CREATE TABLE parley_threads ("
    " id TEXT PRIMARY KEY,"
    " parent_id TEXT,"                 // the thread forked from; NULL for none
    " fork_position BIGINT NOT NULL,"  // rows below it come from the parent
    " message_count BIGINT NOT NULL,"  // storage messages, shared prefix included
    " version BIGINT NOT NULL,"
    " created_at BIGINT NOT NULL,"  // milliseconds since the Unix epoch
    " updated_at BIGINT NOT NULL,"
    " title TEXT NOT NULL,"
    " metadata TEXT,"                        // JSON object or NULL
    " state TEXT,"                           // the manager's state snapshot, JSON, or NULL
    " deleted INTEGER NOT NULL DEFAULT 0)",  // 1: deleted, kept for the forks that need it
    "CREATE INDEX parley_threads_parent ON parley_threads (parent_id)",
    "CREATE INDEX parley_threads_created ON parley_threads (created_at, id)",
    // WITHOUT ROWID clusters a thread's rows in seq order: a load reads them sequentially.
    "CREATE TABLE parley_messages ("
    " thread_id TEXT NOT NULL,"
    " seq BIGINT NOT NULL,"
    " body TEXT NOT NULL,"  // one message, OpenAI JSON
    " PRIMARY KEY (thread_id, seq)) WITHOUT ROWID",
};

// Version 2: the run queue. A thread row doubles as its queue's lock: every change to a thread's
// runs, lease, journal or events happens while its row is locked (SQLite: the write
// transaction), which keeps claims, cancels and fenced writes of one thread in one order.
const std::vector<std::string> kSchemaV2Sqlite = {
    "ALTER TABLE parley_threads ADD COLUMN lease_owner TEXT",   // the worker; NULL: free
    "ALTER TABLE parley_threads ADD COLUMN lease_run_id TEXT",  // the run it works on
    // Grows on every claim and every revocation; each fenced write names it.
    "ALTER TABLE parley_threads ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE parley_threads ADD COLUMN lease_expires_at BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE parley_threads ADD COLUMN last_run_seq BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE parley_threads ADD COLUMN last_event_seq BIGINT NOT NULL DEFAULT 0",
    "CREATE TABLE parley_runs ("
    " id TEXT PRIMARY KEY,"
    " thread_id TEXT NOT NULL,"
    " position BIGINT NOT NULL,"  // submit order within the thread
    " status TEXT NOT NULL,"      // queued running waiting completed failed cancelled rejected
    " policy TEXT NOT NULL,"
    " input TEXT NOT NULL,"    // JSON array of messages
    " options TEXT NOT NULL,"  // JSON object
    " trace_id TEXT NOT NULL,"
    " attempts BIGINT NOT NULL DEFAULT 0,"  // claims so far
    " worker TEXT,"                         // the last worker that claimed it
    " cancel_request TEXT,"                 // cancel | interrupt | rollback, for its worker
    " wait TEXT,"                           // JSON: what a waiting run waits for
    " response TEXT,"                       // JSON: the answer to it
    " pending_reply TEXT,"   // JSON message: the model reply whose tool calls are running
    " pending_at BIGINT,"    // the storage index that reply will take
    " base_version BIGINT,"  // the thread's version when the run first started
    " base_message_count BIGINT,"
    " error TEXT,"
    " result TEXT,"  // JSON
    " created_at BIGINT NOT NULL,"
    " started_at BIGINT,"
    " finished_at BIGINT,"
    " updated_at BIGINT NOT NULL)",
    "CREATE UNIQUE INDEX parley_runs_thread ON parley_runs (thread_id, position)",
    "CREATE INDEX parley_runs_status ON parley_runs (status, created_at, id)",
    // The unfinished runs only: the claim query and the head-of-thread check read these. Runs
    // submitted in the same millisecond are claimed heads (lower positions) first.
    "CREATE INDEX parley_runs_active ON parley_runs (thread_id, position) "
    "WHERE status IN ('queued', 'running', 'waiting')",
    "CREATE INDEX parley_runs_queue ON parley_runs (created_at, position, id) "
    "WHERE status IN ('queued', 'running', 'waiting')",
    "CREATE TABLE parley_tool_calls ("
    " run_id TEXT NOT NULL,"
    " turn BIGINT NOT NULL,"  // the storage index of the reply that made the call
    " call_id TEXT NOT NULL,"
    " tool_name TEXT NOT NULL,"
    " phase TEXT NOT NULL,"  // intent started completed failed indeterminate
    " arguments TEXT NOT NULL,"
    // The result or the error; a started call's checkpoint (JSON, RunStore::recordToolCheckpoint)
    " result TEXT,"
    " attempts BIGINT NOT NULL,"  // times started
    " token BIGINT NOT NULL,"     // the lease that wrote the last phase
    " updated_at BIGINT NOT NULL,"
    " PRIMARY KEY (run_id, turn, call_id)) WITHOUT ROWID",
    "CREATE TABLE parley_events ("
    " thread_id TEXT NOT NULL,"
    " seq BIGINT NOT NULL,"  // per thread, from 1; never reused
    " run_id TEXT,"
    " trace_id TEXT,"
    " type TEXT NOT NULL,"
    " payload TEXT NOT NULL,"  // JSON
    " created_at BIGINT NOT NULL,"
    " PRIMARY KEY (thread_id, seq)) WITHOUT ROWID",
    "CREATE INDEX parley_events_chunks ON parley_events (created_at) "
    "WHERE type = 'llm_stream_chunk'",
};

// Version 3: the text of each message, indexed for searchMessages(). SQLite: an FTS5 table kept
// by triggers, keyed through parley_message_keys (the messages table has no rowid to key it by).
// Only messages whose content is text are indexed.
const std::vector<std::string> kSchemaV3Sqlite = {
    "CREATE TABLE parley_message_keys ("
    " id INTEGER PRIMARY KEY,"
    " thread_id TEXT NOT NULL,"
    " seq BIGINT NOT NULL,"
    " UNIQUE (thread_id, seq))",
    "CREATE VIRTUAL TABLE parley_message_text USING fts5(text, tokenize = 'unicode61 "
    "remove_diacritics 2')",
    "CREATE TRIGGER parley_message_text_add AFTER INSERT ON parley_messages "
    "WHEN json_type(new.body, '$.content') = 'text' BEGIN "
    "INSERT INTO parley_message_keys (thread_id, seq) VALUES (new.thread_id, new.seq); "
    "INSERT INTO parley_message_text (rowid, text) "
    "VALUES (last_insert_rowid(), json_extract(new.body, '$.content')); END",
    "CREATE TRIGGER parley_message_text_remove AFTER DELETE ON parley_messages BEGIN "
    "DELETE FROM parley_message_text WHERE rowid = (SELECT id FROM parley_message_keys "
    "WHERE thread_id = old.thread_id AND seq = old.seq); "
    "DELETE FROM parley_message_keys WHERE thread_id = old.thread_id AND seq = old.seq; END",
    "INSERT INTO parley_message_keys (thread_id, seq) SELECT thread_id, seq FROM parley_messages "
    "WHERE json_type(body, '$.content') = 'text'",
    "INSERT INTO parley_message_text (rowid, text) SELECT k.id, json_extract(m.body, '$.content') "
    "FROM parley_message_keys k JOIN parley_messages m ON m.thread_id = k.thread_id AND m.seq = "
    "k.seq",
};

// PostgreSQL: the index of message_words.hpp's expression (search reads it).
const std::vector<std::string> kSchemaV3Postgres = {
    "CREATE FUNCTION parley_message_text(body TEXT) RETURNS TEXT IMMUTABLE LANGUAGE plpgsql AS "
    "$fn$ BEGIN RETURN body::jsonb->>'content'; EXCEPTION WHEN others THEN RETURN NULL; END "
    "$fn$",
    "CREATE INDEX parley_messages_text ON parley_messages USING gin (" PARLEY_MESSAGE_WORDS ")",
};

// Version 4: the queue's heads on the thread rows, so that a claim reads one index entry
// instead of every unfinished run. parley_threads.queue_head_at is the creation time of the
// thread's head run (its oldest unfinished one) while that run can be claimed (queued, running,
// or waiting with an answer or a cancel request), else NULL. Triggers keep it on every change to
// a run's status, answer or cancel request, so no write path can forget it. The claim reads the
// threads whose lease is free through parley_threads_queue and the expired leases through
// parley_threads_leases.
#define PARLEY_QUEUE_HEAD(thread)                                                             \
  "(SELECT CASE WHEN h.status <> 'waiting' OR h.response IS NOT NULL OR h.cancel_request IS " \
  "NOT NULL THEN h.created_at END FROM parley_runs h WHERE h.thread_id = " thread             \
  " AND h.status IN ('queued', 'running', 'waiting') ORDER BY h.position LIMIT 1)"
#define PARLEY_QUEUE_INDEXES                                                               \
  "ALTER TABLE parley_threads ADD COLUMN queue_head_at BIGINT",                            \
      "UPDATE parley_threads SET queue_head_at = " PARLEY_QUEUE_HEAD("parley_threads.id"), \
      "CREATE INDEX parley_threads_queue ON parley_threads (queue_head_at, id) "           \
      "WHERE queue_head_at IS NOT NULL AND lease_owner IS NULL AND deleted = 0",           \
      "CREATE INDEX parley_threads_leases ON parley_threads (lease_expires_at) "           \
      "WHERE lease_owner IS NOT NULL",                                                     \
      "DROP INDEX parley_runs_queue"
const std::vector<std::string> kSchemaV4Sqlite = {
    PARLEY_QUEUE_INDEXES,
    "CREATE TRIGGER parley_runs_head_insert AFTER INSERT ON parley_runs BEGIN "
    "UPDATE parley_threads SET queue_head_at = " PARLEY_QUEUE_HEAD(
        "new.thread_id") " WHERE id = new.thread_id; END",
    "CREATE TRIGGER parley_runs_head_update AFTER UPDATE OF status, response, cancel_request "
    "ON parley_runs BEGIN "
    "UPDATE parley_threads SET queue_head_at = " PARLEY_QUEUE_HEAD(
        "new.thread_id") " WHERE id = new.thread_id; END",
    "CREATE TRIGGER parley_runs_head_delete AFTER DELETE ON parley_runs BEGIN "
    "UPDATE parley_threads SET queue_head_at = " PARLEY_QUEUE_HEAD(
        "old.thread_id") " WHERE id = old.thread_id; END",
};
const std::vector<std::string> kSchemaV4Postgres = {
    PARLEY_QUEUE_INDEXES,
    // Writes the thread row only when the head changed: most run updates leave it as it was.
    "CREATE FUNCTION parley_runs_head() RETURNS trigger LANGUAGE plpgsql AS $fn$ "
    "DECLARE thread TEXT; head BIGINT; BEGIN "
    "IF TG_OP = 'DELETE' THEN thread := OLD.thread_id; ELSE thread := NEW.thread_id; END IF; "
    "head := " PARLEY_QUEUE_HEAD("thread") "; "
    "UPDATE parley_threads SET queue_head_at = head WHERE id = thread "
    "AND queue_head_at IS DISTINCT FROM head; RETURN NULL; END $fn$",
    "CREATE TRIGGER parley_runs_head AFTER INSERT OR DELETE OR UPDATE OF status, response, "
    "cancel_request ON parley_runs FOR EACH ROW EXECUTE FUNCTION parley_runs_head()",
};
#undef PARLEY_QUEUE_INDEXES

// Version 5: the bytes of message parts (images, audio, files), keyed by the sha256 of the bytes,
// so that a fork, a copy or a resent picture stores them once. `data` is their base64, as the
// message body had it (portable text for both databases); the body keeps a reference
// (docs/parts.md, "Storage").
const std::vector<std::string> kSchemaV5Sqlite = {
    "CREATE TABLE parley_blobs ("
    " sha256 TEXT PRIMARY KEY,"
    " size BIGINT NOT NULL,"
    " data TEXT NOT NULL,"
    " created_at BIGINT NOT NULL) WITHOUT ROWID",
};

// Version 6: the assistants of `parley serve` (the LangGraph API's, docs/service.md): one row
// per assistant naming the version its runs use, and every version kept (a capped number; an
// update makes a new one). config, context and metadata are JSON objects as text.
const std::vector<std::string> kSchemaV6Sqlite = {
    "CREATE TABLE parley_assistants ("
    " assistant_id TEXT PRIMARY KEY,"
    " latest_version BIGINT NOT NULL,"  // the version runs use (setLatest moves it)
    " created_at BIGINT NOT NULL,"      // milliseconds since the Unix epoch
    " updated_at BIGINT NOT NULL)",
    "CREATE TABLE parley_assistant_versions ("
    " assistant_id TEXT NOT NULL,"
    " version BIGINT NOT NULL,"  // from 1, one more per update
    " graph_id TEXT NOT NULL,"   // the workers' profile ("agent": their default)
    " name TEXT NOT NULL,"
    " description TEXT,"  // NULL: none
    " config TEXT NOT NULL,"
    " context TEXT NOT NULL,"
    " metadata TEXT NOT NULL,"
    " created_at BIGINT NOT NULL,"
    " PRIMARY KEY (assistant_id, version))",
};

// Version 7: a run's update wakes the queue-head trigger only when it can move the head: when
// the run joins or leaves the unfinished runs, or becomes claimable or stops being so. A claim
// (queued to running), a cancel request on a running run and the like leave the head as it was,
// and no longer cost a head query and an update of the thread row each. (The DROPs make the step
// safe to run on a database whose version was set back by hand.)
#define PARLEY_HEAD_MAY_MOVE                                                                      \
  "(OLD.status IN ('queued', 'running', 'waiting')) <> (NEW.status IN ('queued', 'running', "     \
  "'waiting')) OR (OLD.status <> 'waiting' OR OLD.response IS NOT NULL OR OLD.cancel_request IS " \
  "NOT NULL) <> (NEW.status <> 'waiting' OR NEW.response IS NOT NULL OR NEW.cancel_request IS "   \
  "NOT NULL)"
const std::vector<std::string> kSchemaV7Sqlite = {
    "DROP TRIGGER IF EXISTS parley_runs_head_update",
    "CREATE TRIGGER parley_runs_head_update AFTER UPDATE OF status, response, cancel_request "
    "ON parley_runs WHEN " PARLEY_HEAD_MAY_MOVE
    " BEGIN "
    "UPDATE parley_threads SET queue_head_at = " PARLEY_QUEUE_HEAD(
        "new.thread_id") " WHERE id = new.thread_id; END",
};
const std::vector<std::string> kSchemaV7Postgres = {
    "DROP TRIGGER IF EXISTS parley_runs_head ON parley_runs",
    "DROP TRIGGER IF EXISTS parley_runs_head_update ON parley_runs",
    "CREATE TRIGGER parley_runs_head AFTER INSERT OR DELETE ON parley_runs FOR EACH ROW EXECUTE "
    "FUNCTION parley_runs_head()",
    "CREATE TRIGGER parley_runs_head_update AFTER UPDATE OF status, response, cancel_request ON "
    "parley_runs FOR EACH ROW WHEN (" PARLEY_HEAD_MAY_MOVE ") EXECUTE FUNCTION parley_runs_head()",
};
#undef PARLEY_HEAD_MAY_MOVE

// queueHeadAfter()'s expression, with a thread's id and a run's to fill in.
const std::string kQueueHeadAfter = PARLEY_QUEUE_HEAD("@thread AND h.id <> @run");
#undef PARLEY_QUEUE_HEAD
// NOLINTEND(bugprone-suspicious-missing-comma)

std::vector<std::string> postgresVariant(std::vector<std::string> steps) {
  for (auto& step : steps) {
    if (auto at = step.find(" WITHOUT ROWID"); at != std::string::npos) step.erase(at);
  }
  return steps;
}

}  // namespace

std::string queueHeadAfter(const std::string& thread, const std::string& run) {
  std::string sql = kQueueHeadAfter;
  sql.replace(sql.find("@thread"), 7, thread);
  sql.replace(sql.find("@run"), 4, run);
  return sql;
}

const std::vector<std::string>& migrationSteps(SqlDialect dialect, int toVersion) {
  static const std::vector<std::string> postgresV1 = postgresVariant(kSchemaV1Sqlite);
  static const std::vector<std::string> postgresV2 = postgresVariant(kSchemaV2Sqlite);
  static const std::vector<std::string> postgresV5 = postgresVariant(kSchemaV5Sqlite);
  static const std::vector<std::string> postgresV6 = postgresVariant(kSchemaV6Sqlite);
  const bool sqlite = dialect == SqlDialect::Sqlite;
  switch (toVersion) {
    case 1:
      return sqlite ? kSchemaV1Sqlite : postgresV1;
    case 2:
      return sqlite ? kSchemaV2Sqlite : postgresV2;
    case 3:
      return sqlite ? kSchemaV3Sqlite : kSchemaV3Postgres;
    case 4:
      return sqlite ? kSchemaV4Sqlite : kSchemaV4Postgres;
    case 5:
      return sqlite ? kSchemaV5Sqlite : postgresV5;
    case 6:
      return sqlite ? kSchemaV6Sqlite : postgresV6;
    case 7:
      return sqlite ? kSchemaV7Sqlite : kSchemaV7Postgres;
    default:
      throw StoreError("store: no migration to schema version " + std::to_string(toVersion));
  }
}

}  // namespace parley::detail
