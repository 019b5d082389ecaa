// The parley command line. Each subcommand lives in its own file and registers itself on the
// root app with an add...Command(app, exitCode) function declared here; its callback sets
// exitCode. An exception escaping a callback is reported by main() as a one-line error.
#pragma once

#include <exception>

#include <CLI/CLI.hpp>

#include "parley/errors.hpp"

namespace parley::cli {

// Exit codes, documented in `parley --help` and the README.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the operation failed (HTTP error, timeout, bad file...)
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitInvalidAnswer = 3;  // no answer matched the schema (ask --schema)
inline constexpr int kExitRefused = 4;  // the model refused to answer (its explanation printed)
inline constexpr int kExitInterrupted = 130;

// The exit code of a command that failed with `error`, from its ErrorCode: bad input is a
// usage error, a cancelled operation an interruption, anything else a failure.
inline int exitCodeOf(const std::exception& error) {
  const auto* e = dynamic_cast<const Error*>(&error);
  if (!e) return kExitFailure;
  switch (e->kind()) {
    case ErrorKind::Validation:
      return kExitUsage;
    case ErrorKind::Cancelled:
      return kExitInterrupted;
    case ErrorKind::StructuredOutput:
      return kExitInvalidAnswer;
    case ErrorKind::Refusal:
      return kExitRefused;
    default:
      return kExitFailure;
  }
}

// Subcommands register here (one line each, in alphabetical order).
void addTokensCommand(CLI::App& app, int& exitCode);
void addAskCommand(CLI::App& app, int& exitCode);
void addMockCommand(CLI::App& app, int& exitCode);
void addHistoryCommand(CLI::App& app, int& exitCode);
void addChatCommand(CLI::App& app, int& exitCode);
void addMcpCommand(CLI::App& app, int& exitCode);
// Walks `app` when it runs, so register it last.
void addCompletionCommand(CLI::App& app, int& exitCode);
void addTemplatesCommand(CLI::App& app, int& exitCode);
void addModelsCommand(CLI::App& app, int& exitCode);
void addWorkerCommand(CLI::App& app, int& exitCode);
void addSubmitCommand(CLI::App& app, int& exitCode);
void addRunsCommand(CLI::App& app, int& exitCode);
void addServeCommand(CLI::App& app, int& exitCode);
void addEvalCommand(CLI::App& app, int& exitCode);

}  // namespace parley::cli
