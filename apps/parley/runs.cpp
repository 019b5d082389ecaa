// `parley runs`: the runs of a database's queue (run_store.hpp).
//
//   parley runs list    --db URL [--thread ID] [--status S] [--limit N]   one JSON line per run
//   parley runs show    --db URL RUN                                      the run as JSON
//   parley runs wait    --db URL [--timeout MS] RUN...
//       one line per run, {"run": ID, "thread": ID, "status": "...", "error": "..." or null},
//       once every run finished (or the timeout passed); exits 0 only when every run completed
//   parley runs cancel  --db URL RUN...                                   one JSON line per run
//   parley runs events  --db URL THREAD [--after SEQ] [--follow] [--timeout MS]
//       one JSON line per event; --follow waits for more until the timeout, SIGINT or SIGTERM
//   parley runs respond --db URL (RUN | --thread ID) ANSWER
//       answers what the run (or the thread's waiting run) waits for; ANSWER is JSON if it
//       parses as JSON, else text
//   parley runs replay  --db URL RUN --into URL --replay DIR [parley worker's options]
//       works the run again into another database (run_replay.hpp): model calls from the
//       cassettes, tool results from the journal, no tool run; prints {"run", "thread", "runs",
//       "messages", "identical": true}; a miss exits 1 naming what differs

#include <iostream>
#include <memory>
#include <optional>

#include "cli_store.hpp"
#include "commands.hpp"
#include "parley/cassette.hpp"
#include "parley/json.hpp"
#include "parley/run_replay.hpp"
#include "parley/run_store.hpp"
#include "stop_signals.hpp"
#include "worker_options.hpp"

namespace parley::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct RunsArgs {
  std::string db;
  std::string thread;
  std::string status;
  size_t limit = 100;
  std::vector<std::string> ids;
  int64_t timeoutMs = 0;
  int64_t after = 0;
  bool follow = false;
  std::string answer;
  std::string into;   // replay: the database replayed into
  WorkerArgs worker;  // replay: the recording worker's options
  int64_t replayTimeoutMs = 60'000;
};

json nullIfEmpty(const std::string& text) {
  return text.empty() ? json(nullptr) : json(text);
}

json statusLine(const RunInfo& run) {
  return {{"run", run.id},
          {"thread", run.threadId},
          {"status", toString(run.status)},
          {"error", nullIfEmpty(run.error)}};
}

RunInfo mustFind(RunStore& runs, const std::string& id) {
  auto run = runs.run(id);
  if (!run) throw StoreError("store: no run '" + id + "'");
  return *run;
}

int list(const RunsArgs& args) {
  RunStore runs(openCliStore(args.db));
  RunListOptions options;
  options.threadId = args.thread;
  options.limit = args.limit;
  if (!args.status.empty()) {
    options.status = parseRunStatus(args.status);
    if (!options.status) {
      throw ValidationError("--status", "'" + args.status +
                                            "' is not a status: queued, running, waiting, "
                                            "completed, failed, cancelled, rejected");
    }
  }
  for (const RunInfo& run : runs.listRuns(options))
    std::cout << toJson(run).dump() << "\n";
  return kExitOk;
}

int show(const RunsArgs& args) {
  RunStore runs(openCliStore(args.db));
  RunInfo run = mustFind(runs, args.ids.at(0));
  json out = toJson(run);
  json input = json::array();
  for (const Message& m : run.input)
    input.push_back(toJson(m));
  out["input"] = input;
  std::cout << out.dump(2) << "\n";
  return kExitOk;
}

int wait(const RunsArgs& args) {
  if (args.timeoutMs < 0) throw ValidationError("--timeout", "must not be negative");
  RunStore runs(openCliStore(args.db));
  std::vector<RunInfo> found;
  for (const std::string& id : args.ids)
    found.push_back(mustFind(runs, id));  // every id is checked before any wait
  const auto deadline = Clock::now() + std::chrono::milliseconds(args.timeoutMs);
  bool allCompleted = true;
  for (RunInfo& run : found) {
    int64_t seen = 0;
    while (!isFinished(run.status)) {
      auto step = std::chrono::milliseconds(1'000);
      if (args.timeoutMs > 0) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) break;
        step = std::min(step, left);
      }
      for (const auto& e : runs.waitForEvents(run.threadId, seen, step))
        seen = e.seq;
      run = mustFind(runs, run.id);
    }
    if (run.status != RunStatus::Completed) allCompleted = false;
    std::cout << statusLine(run).dump() << std::endl;
  }
  return allCompleted ? kExitOk : kExitFailure;
}

int cancel(const RunsArgs& args) {
  RunStore runs(openCliStore(args.db));
  for (const std::string& id : args.ids)
    mustFind(runs, id);
  for (const std::string& id : args.ids)
    std::cout << toJson(runs.cancel(id)).dump() << "\n";
  return kExitOk;
}

int events(const RunsArgs& args) {
  if (args.timeoutMs < 0) throw ValidationError("--timeout", "must not be negative");
  std::optional<StopSignals> stopSignals;  // --follow ends on SIGINT or SIGTERM, exit 0
  if (args.follow) stopSignals.emplace();
  RunStore runs(openCliStore(args.db));
  const auto deadline = Clock::now() + std::chrono::milliseconds(args.timeoutMs);
  int64_t seen = args.after;
  for (;;) {
    auto batch = args.follow ? runs.waitForEvents(args.thread, seen, std::chrono::milliseconds(200))
                             : runs.readEvents(args.thread, seen);
    for (const auto& e : batch) {
      seen = e.seq;
      std::cout << toJson(e).dump() << "\n";
    }
    std::cout.flush();
    if (!args.follow) {
      if (batch.empty()) return kExitOk;
      continue;
    }
    if (args.timeoutMs > 0 && Clock::now() >= deadline) return kExitOk;
    if (stopSignals->pending()) return kExitOk;
  }
}

int respond(const RunsArgs& args) {
  RunStore runs(openCliStore(args.db));
  std::string id = args.ids.empty() ? "" : args.ids.front();
  if (!args.thread.empty()) {
    if (!id.empty()) throw ValidationError("--thread", "give a run or --thread, not both");
    if (!runs.threads().threadInfo(args.thread)) {
      throw StoreError("store: no thread '" + args.thread + "'");
    }
    RunListOptions waiting;
    waiting.threadId = args.thread;
    waiting.status = RunStatus::Waiting;
    auto found = runs.listRuns(waiting);
    if (found.empty()) {
      throw StoreError("store: thread '" + args.thread + "' has no run waiting for an answer");
    }
    id = found.front().id;
  }
  if (id.empty()) throw ValidationError("run", "give the run to answer, or --thread");
  json answer;
  try {
    answer = json::parse(args.answer);
  } catch (const json::exception&) {
    answer = args.answer;
  }
  std::cout << toJson(runs.respond(id, answer)).dump() << "\n";
  return kExitOk;
}

int replay(const RunsArgs& args) {
  if (args.replayTimeoutMs <= 0) throw ValidationError("--timeout", "must be positive");
  // A replay asks no model: its answers come from the recording's cassettes.
  std::optional<CassetteOptions> cassettes = resolveEndpoint(args.worker.endpoint).cassettes;
  if (!cassettes) cassettes = cassetteOptionsFromEnv();
  if (!cassettes || cassettes->mode != CassetteMode::ReplayOnly) {
    throw ValidationError("--replay",
                          "give the recording's cassettes (--replay DIR): a replay "
                          "answers every model call from them");
  }
  RunStore recorded(openCliStore(args.db));
  auto into = std::make_shared<RunStore>(openCliStore(args.into));
  RunReplayOptions options;
  options.worker = workerOptions(args.worker);
  options.timeout = std::chrono::milliseconds(args.replayTimeoutMs);
  try {
    const RunReplay done = replayRun(recorded, args.ids.at(0), into, std::move(options));
    std::cout << json{{"run", args.ids.at(0)},
                      {"thread", done.threadId},
                      {"runs", done.runs.size()},
                      {"messages", done.messages},
                      {"identical", true}}
                     .dump()
              << "\n";
    return kExitOk;
  } catch (const ReplayMiss& e) {
    std::cerr << "parley: error: " << e.what() << "\n";
    return kExitFailure;
  }
}

CLI::App* withDb(CLI::App* cmd, RunsArgs& args) {
  cmd->add_option("--db", args.db, "Database: a SQLite file or postgresql://...")->required();
  return cmd;
}

}  // namespace

void addRunsCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<RunsArgs>();
  CLI::App* runs = app.add_subcommand("runs",
                                      "The run queue: list, show, wait, cancel, events, "
                                      "respond, replay");
  runs->require_subcommand(1);

  CLI::App* l = withDb(runs->add_subcommand("list", "One JSON line per run, oldest first"), *args);
  l->add_option("--thread", args->thread, "Only this thread's runs");
  l->add_option("--status", args->status, "Only runs in this state");
  l->add_option("--limit", args->limit, "At most this many (default 100)");
  l->callback([args, &exitCode] { exitCode = list(*args); });

  CLI::App* s = withDb(runs->add_subcommand("show", "A run as JSON"), *args);
  s->add_option("run", args->ids, "The run id")->required()->expected(1);
  s->callback([args, &exitCode] { exitCode = show(*args); });

  CLI::App* w = withDb(runs->add_subcommand("wait", "Wait until runs finish"), *args);
  w->add_option("--timeout", args->timeoutMs, "Give up after MS milliseconds (default: never)");
  w->add_option("run", args->ids, "Run ids")->required();
  w->callback([args, &exitCode] { exitCode = wait(*args); });

  CLI::App* c = withDb(runs->add_subcommand("cancel", "Cancel runs"), *args);
  c->add_option("run", args->ids, "Run ids")->required();
  c->callback([args, &exitCode] { exitCode = cancel(*args); });

  CLI::App* e =
      withDb(runs->add_subcommand("events", "A thread's event log, one JSON line each"), *args);
  e->add_option("thread", args->thread, "The thread")->required();
  e->add_option("--after", args->after, "Only events after this sequence number");
  e->add_flag("--follow", args->follow, "Keep waiting for new events");
  e->add_option("--timeout", args->timeoutMs, "With --follow: stop after MS milliseconds");
  e->callback([args, &exitCode] { exitCode = events(*args); });

  CLI::App* r =
      withDb(runs->add_subcommand("respond", "Answer what a waiting run waits for"), *args);
  r->add_option("--thread", args->thread, "Answer this thread's waiting run");
  r->add_option("args", args->ids, "[RUN] ANSWER")->required();
  r->callback([args, &exitCode] {
    if (args->ids.size() > 2) throw ValidationError("respond", "takes [RUN] ANSWER");
    args->answer = args->ids.back();
    args->ids.pop_back();
    exitCode = respond(*args);
  });

  CLI::App* p = withDb(runs->add_subcommand("replay",
                                            "Work a recorded run again into another database: "
                                            "model calls from cassettes, tool results from the "
                                            "journal (docs/scale-out.md)"),
                       *args);
  p->add_option("run", args->ids, "The recorded run")->required()->expected(1);
  p->add_option("--into", args->into, "The database to replay into (without the run's thread)")
      ->required();
  p->add_option("--timeout", args->replayTimeoutMs, "Each run's replay, in ms (default 60000)");
  addWorkerOptions(*p, args->worker);
  p->callback([args, &exitCode] { exitCode = replay(*args); });
}

}  // namespace parley::cli
