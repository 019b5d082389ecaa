#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"parley: multi-turn LLM conversations from the command line"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "parley 0.1.0");
  app.footer("Exit codes: 0 success, 1 the operation failed, 2 bad command line, 130 interrupted.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? parley::cli::kExitOk : parley::cli::kExitUsage;
  }
  return parley::cli::kExitOk;
}
