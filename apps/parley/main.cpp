#include <csignal>
#include <exception>
#include <iostream>

#include "commands.hpp"
#include "parley/errors.hpp"
#include "parley/version.hpp"

int main(int argc, char** argv) {
  using namespace parley::cli;
  CLI::App app{"parley: multi-turn LLM conversations from the command line"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("parley ") + parley::kVersion);
  app.footer(
      "Exit codes: 0 success, 1 the operation failed, 2 bad command line, 3 the answer did not "
      "match --schema, 130 interrupted.");
  // A reader that went away (`parley tokens --ids big.txt | head -1`) makes writes fail with
  // EPIPE, reported below, instead of a SIGPIPE ending the process mid-turn. The tools parley
  // runs still start with SIGPIPE at its default action (parley/command_tools.hpp).
  std::signal(SIGPIPE, SIG_IGN);
  int exitCode = kExitOk;
  // Subcommands (one line each, in alphabetical order).
  addTokensCommand(app, exitCode);
  addAskCommand(app, exitCode);
  addMockCommand(app, exitCode);
  addHistoryCommand(app, exitCode);
  addChatCommand(app, exitCode);
  addMcpCommand(app, exitCode);
  addTemplatesCommand(app, exitCode);
  addModelsCommand(app, exitCode);
  addWorkerCommand(app, exitCode);
  addSubmitCommand(app, exitCode);
  addRunsCommand(app, exitCode);
  addServeCommand(app, exitCode);
  addCompletionCommand(app, exitCode);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  } catch (const parley::ValidationError& e) {
    std::cerr << "parley: " << e.what() << "\n";
    return exitCodeOf(e);
  } catch (const std::exception& e) {
    std::cerr << "parley: error: " << e.what() << "\n";
    return exitCodeOf(e);
  }
  if (!std::cout.flush()) {
    std::cerr << "parley: error: could not write to standard output (the reader went away?)\n";
    return exitCode == kExitOk ? kExitFailure : exitCode;
  }
  return exitCode;
}
