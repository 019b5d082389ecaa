// `parley mock`: runs the scripted OpenAI-compatible server until SIGINT or SIGTERM.
// The first line on stdout is the base URL (e.g. http://127.0.0.1:41234/v1), so a script can
// start it with --port 0 and read where it listens.
#include <iostream>
#include <memory>
#include <mutex>
#include <string>

#include "commands.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "stop_signals.hpp"

namespace parley::cli {
namespace {

struct MockArgs {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string script;
  bool printDemo = false;
  bool log = false;
  bool noPromptCache = false;
  double promptTokensScale = 1.0;
};

int runMock(const MockArgs& args) {
  if (args.printDemo) {
    std::cout << mock::demoScriptText();
    return kExitOk;
  }
  mock::MockOptions options;
  options.host = args.host;
  options.port = args.port;
  options.promptCache.enabled = !args.noPromptCache;
  options.promptTokensScale = args.promptTokensScale;
  if (!args.script.empty()) options.script = mock::readScriptFile(args.script);
  if (args.log) {
    // One line per request on stderr; the mutex keeps concurrent lines whole.
    auto logMutex = std::make_shared<std::mutex>();
    options.onRequest = [logMutex](const nlohmann::json& r) {
      std::string line =
          "parley mock: " + r["method"].get<std::string>() + " " + r["path"].get<std::string>();
      if (r["rule_name"].is_string()) line += " -> " + r["rule_name"].get<std::string>();
      if (r["body"].is_object() && r["body"].value("stream", false)) line += " (stream)";
      std::lock_guard lock(*logMutex);
      std::cerr << line << std::endl;
    };
  }

  StopSignals stopSignals;  // before any server thread exists

  mock::MockServer server(std::move(options));
  server.start();
  std::cout << server.baseUrl() << std::endl;
  std::cerr << "parley mock: listening on " << server.baseUrl()
            << (args.script.empty() ? " (demo agent)" : " (script " + args.script + ")")
            << "; Ctrl-C stops\n";
  stopSignals.wait();
  server.stop();
  return kExitOk;
}

}  // namespace

void addMockCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<MockArgs>();
  CLI::App* cmd = app.add_subcommand(
      "mock", "Run the scripted OpenAI-compatible mock server (a demo agent unless --script)");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--script", args->script, "JSON Lines script of rules (see docs/mock.md)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--log", args->log, "Print one line per request received on stderr");
  cmd->add_flag("--no-prompt-cache", args->noPromptCache,
                "Report no cached_tokens (default: the mock's prefix rule, docs/mock.md)");
  cmd->add_option("--prompt-tokens-scale", args->promptTokensScale,
                  "Multiply the prompt_tokens the mock estimates (a server counting differently)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--print-demo-script", args->printDemo,
                "Print the built-in demo agent's script and exit");
  cmd->footer("Prints the base URL on the first line of stdout, then serves until SIGINT/SIGTERM.");
  cmd->callback([args, &exitCode] { exitCode = runMock(*args); });
}

}  // namespace parley::cli
