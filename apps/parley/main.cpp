#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "extras.hpp"
#include "parley/errors.hpp"
#include "parley/otlp.hpp"
#include "parley/telemetry.hpp"
#include "parley/version.hpp"

namespace {

// Levenshtein distance, for a suggestion when a command is mistyped.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Whether stdout is a pipe nobody reads any more (poll reports an error on its write end).
bool readerGone() {
  pollfd out{STDOUT_FILENO, 0, 0};
  return ::poll(&out, 1, 0) > 0 && (out.revents & POLLERR) != 0;
}

// OpenTelemetry export (docs/telemetry.md) for the commands that run turns, when the OTEL_*
// variables ask for it; the spans still queued are sent as the command ends.
class TelemetrySession {
 public:
  explicit TelemetrySession(std::string_view command) {
    static constexpr std::string_view kCommands[] = {"ask", "chat", "worker", "serve"};
    if (std::find(std::begin(kCommands), std::end(kCommands), command) != std::end(kCommands)) {
      exporter_ = parley::installTelemetryFromEnvironment();
    }
  }
  ~TelemetrySession() {
    if (!exporter_) return;
    parley::setTelemetry(nullptr);
    exporter_->shutdown();
  }
  TelemetrySession(const TelemetrySession&) = delete;
  TelemetrySession& operator=(const TelemetrySession&) = delete;

 private:
  std::shared_ptr<parley::OtlpExporter> exporter_;
};

// The commands of parley-extras.so (extras.hpp), loaded only when one of them is built.
void addMockFromExtras(CLI::App& app, int& exitCode) {
  parley::cli::extras().addMockCommand(app, exitCode);
}
void addChatFromExtras(CLI::App& app, int& exitCode) {
  parley::cli::extras().addChatCommand(app, exitCode);
}
void addServeFromExtras(CLI::App& app, int& exitCode) {
  parley::cli::extras().addServeCommand(app, exitCode);
}

}  // namespace

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
  // Subcommands. A command line that names one (most do) gets only that one's options: building
  // every command's options is a tenth of a short command's start-up (issue 42's one-turn `ask`),
  // and the commands of parley-extras.so load it. `--version` gets none; anything else (`--help`,
  // a mistyped name, `completion`, which lists them all) gets every command.
  struct Command {
    const char* name;
    void (*add)(CLI::App&, int&);
  };
  static constexpr Command kCommands[] = {
      {"tokens", addTokensCommand},       {"ask", addAskCommand},
      {"mock", addMockFromExtras},        {"history", addHistoryCommand},
      {"chat", addChatFromExtras},        {"mcp", addMcpCommand},
      {"templates", addTemplatesCommand}, {"models", addModelsCommand},
      {"worker", addWorkerCommand},       {"submit", addSubmitCommand},
      {"runs", addRunsCommand},           {"serve", addServeFromExtras},
      {"eval", addEvalCommand},           {"completion", addCompletionCommand},
  };
  const std::string_view named = argc > 1 ? argv[1] : "";
  const auto only = std::find_if(std::begin(kCommands), std::end(kCommands),
                                 [&](const Command& c) { return named == c.name; });
  try {
    if (named == "--version") {
      // Printed by the root app while parsing: no command is needed.
    } else if (only != std::end(kCommands) && named != "completion") {
      only->add(app, exitCode);
    } else {
      for (const Command& command : kCommands)
        command.add(app, exitCode);
    }
  } catch (const parley::Error& e) {  // parley-extras.so could not be loaded
    std::cerr << "parley: error: " << e.what() << "\n";
    return exitCodeOf(e);
  }

  // Argument errors say who is speaking, as the other errors do.
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return "parley: " + CLI::FailureMessage::simple(failed, e);
  });
  // A mistyped command is named (CLI11 would only say that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    const std::string typed = argv[1];
    std::string closest;
    size_t best = 3;  // suggest within two edits
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->check_name(typed)) known = true;
      const size_t distance = editDistance(typed, sub->get_name());
      if (distance < best) {
        best = distance;
        closest = sub->get_name();
      }
    }
    if (!known) {
      std::cerr << "parley: unknown command \"" << typed << "\""
                << (closest.empty() ? "" : " (did you mean " + closest + "?)")
                << "; parley --help lists the commands\n";
      return kExitUsage;
    }
  }

  std::optional<TelemetrySession> telemetry;
  try {
    telemetry.emplace(argc > 1 ? argv[1] : "");
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
    // A reader that stopped reading (`parley history list | head`) wanted no more: not an error.
    if (errno == EPIPE || readerGone()) return exitCode;
    std::cerr << "parley: error: could not write to standard output (the reader went away?)\n";
    return exitCode == kExitOk ? kExitFailure : exitCode;
  }
  return exitCode;
}
