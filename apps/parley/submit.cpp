// `parley submit`: queues a run on a thread (run_store.hpp) and prints its id.
//
//   parley submit --db URL --thread ID [--policy enqueue|reject|interrupt|rollback]
//                 [--system TEXT] [--max-iterations N] [--profile NAME] [--stream] PROMPT
//
// Prints the run id alone on stdout and exits 0; a submit the reject policy refuses exits 1
// with the reason on stderr (the run is stored as rejected).
#include <iostream>
#include <map>
#include <memory>

#include "cli_store.hpp"
#include "commands.hpp"
#include "parley/run_request.hpp"
#include "parley/run_store.hpp"

namespace parley::cli {
namespace {

struct SubmitArgs {
  std::string db;
  std::string thread;
  std::string policy = "enqueue";
  std::string system;
  bool systemGiven = false;
  int maxIterations = 0;
  std::string profile;
  bool stream = false;
  std::string prompt;
};

// The flags as the body of `POST /v1/threads/{id}/runs`, read by the same reader
// (run_request.hpp): both accept and refuse the same things.
RunRequest readArgs(const SubmitArgs& args) {
  nlohmann::json body = {{"input", args.prompt}, {"policy", args.policy}, {"stream", args.stream}};
  if (args.systemGiven) body["system"] = args.system;
  if (args.maxIterations != 0) body["max_iterations"] = args.maxIterations;
  if (!args.profile.empty()) body["profile"] = args.profile;
  try {
    return readRunRequest(body);
  } catch (const ValidationError& e) {
    // The flag's name rather than the body's key.
    static const std::map<std::string, std::string> kFlags = {
        {"input", "prompt"},
        {"policy", "--policy"},
        {"max_iterations", "--max-iterations"},
        {"profile", "--profile"},
        {"system", "--system"}};
    auto flag = kFlags.find(e.field());
    if (flag == kFlags.end()) throw;
    throw ValidationError(flag->second, e.reason());
  }
}

int runSubmit(const SubmitArgs& args) {
  const RunRequest request = readArgs(args);
  RunStore runs(openCliStore(args.db));
  const RunInfo run = runs.submit(args.thread, request.input, request.options);
  if (run.status == RunStatus::Rejected) {
    std::cerr << "parley: run " << run.id << " rejected: " << run.error << "\n";
    return kExitFailure;
  }
  std::cout << run.id << std::endl;
  return kExitOk;
}

}  // namespace

void addSubmitCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* cmd = app.add_subcommand("submit", "Queue a run on a thread; prints the run id");
  cmd->add_option("--db", args->db, "Database: a SQLite file or postgresql://...")->required();
  cmd->add_option("--thread", args->thread, "The thread (created if new)")->required();
  cmd->add_option("--policy", args->policy,
                  "When the thread has unfinished runs: enqueue (default), reject, interrupt, "
                  "rollback");
  cmd->add_option("--system", args->system, "System prompt for the run");
  cmd->add_option("--max-iterations", args->maxIterations,
                  "Model calls at most (default: the worker's)");
  cmd->add_option("--profile", args->profile, "A profile the workers know (default: theirs)");
  cmd->add_flag("--stream", args->stream, "Stream the replies (chunks in the event log)");
  cmd->add_option("prompt", args->prompt, "The prompt")->required();
  cmd->callback([args, cmd, &exitCode] {
    args->systemGiven = cmd->count("--system") > 0;
    exitCode = runSubmit(*args);
  });
}

}  // namespace parley::cli
