// `parley ask`: one prompt, one model call, the reply on stdout.
//
// The endpoint comes from --profile (a [profiles.NAME] table of the profiles file), else from
// --base-url / OPENAI_BASE_URL; --base-url, --model and --api-key override a profile's values.
// The key defaults to OPENAI_API_KEY. --max-iterations is accepted for the tool loop to come:
// until it lands, only 1 is allowed and tool calls are printed, not executed.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "commands.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/profiles.hpp"

namespace parley::cli {
namespace {

struct AskArgs {
  std::string baseUrl;
  std::string model;
  std::string apiKey;
  std::string profile;
  std::string profilesFile;
  bool stream = true;
  int maxIterations = 1;
  int64_t timeoutMs = -1;
  bool json = false;
  std::string prompt;
};

std::atomic<bool> interrupted{false};

void onSigint(int) {
  interrupted.store(true);
}

std::string envOr(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

// $PARLEY_PROFILES, else $XDG_CONFIG_HOME/parley/profiles.toml, else
// ~/.config/parley/profiles.toml.
std::string defaultProfilesFile() {
  if (const char* path = std::getenv("PARLEY_PROFILES"); path && *path) return path;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/parley/profiles.toml";
  }
  return envOr("HOME", ".") + "/.config/parley/profiles.toml";
}

ClientOptions resolveOptions(const AskArgs& args) {
  ClientOptions options;
  if (!args.profile.empty()) {
    ProfileRegistry registry;
    const std::string file = args.profilesFile.empty() ? defaultProfilesFile() : args.profilesFile;
    if (!std::filesystem::exists(file)) {
      throw ValidationError("--profile", "no profiles file at " + file +
                                             " (give one with --profiles or PARLEY_PROFILES)");
    }
    registry.loadToml(file);
    options = registry.get(args.profile);
  } else {
    options.baseUrl = envOr("OPENAI_BASE_URL", options.baseUrl);
    options.apiKeyEnv = "OPENAI_API_KEY";
    options.model = envOr("OPENAI_MODEL", "gpt-4o-mini");
  }
  if (!args.baseUrl.empty()) options.baseUrl = args.baseUrl;
  if (!args.model.empty()) options.model = args.model;
  if (!args.apiKey.empty()) options.apiKey = args.apiKey;
  if (options.apiKey.empty() && options.apiKeyEnv.empty()) options.apiKeyEnv = "OPENAI_API_KEY";
  return options;
}

std::string oneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

int runAsk(const AskArgs& args) {
  if (args.maxIterations != 1) {
    throw ValidationError("--max-iterations",
                          "only 1 is supported until the tool loop lands (tool calls are returned "
                          "unexecuted)");
  }
  OpenAiClient client(resolveOptions(args));
  ChatRequest request;
  request.messages = {Message::user(args.prompt)};
  if (args.timeoutMs > 0) request.timeout = std::chrono::milliseconds(args.timeoutMs);

  // Ctrl-C cancels the call: the handler only sets a flag, a watcher turns it into a stop.
  std::stop_source stop;
  request.stopToken = stop.get_token();
  interrupted.store(false);
  auto previous = std::signal(SIGINT, onSigint);
  std::jthread watcher([&stop](std::stop_token done) {
    while (!done.stop_requested()) {
      if (interrupted.load()) {
        stop.request_stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  ChatResult result;
  bool printedText = false;
  try {
    if (args.stream) {
      result = client.generateStream(request, [&](const StreamDelta& delta) {
        if (!args.json && !delta.content.empty()) {
          std::cout << delta.content << std::flush;
          printedText = true;
        }
        return true;
      });
    } else {
      result = client.generate(request);
    }
  } catch (const CancelledError&) {
    std::signal(SIGINT, previous);
    if (printedText) std::cout << "\n";
    std::cerr << "parley: interrupted\n";
    return kExitInterrupted;
  } catch (const Error& e) {
    std::signal(SIGINT, previous);
    if (printedText) std::cout << "\n";
    std::cerr << "parley: error: " << oneLine(e.what()) << "\n";
    return dynamic_cast<const ValidationError*>(&e) ? kExitUsage : kExitFailure;
  }
  std::signal(SIGINT, previous);

  if (args.json) {
    nlohmann::json out = {{"message", toJson(result.message)},
                          {"finish_reason", result.finishReason},
                          {"usage", result.usage ? toJson(*result.usage) : nlohmann::json()}};
    std::cout << out.dump() << "\n";
    return kExitOk;
  }
  if (!args.stream) std::cout << result.message.content;
  if (!result.message.content.empty()) std::cout << "\n";
  for (const ToolCall& call : result.message.toolCalls) {
    std::cout << "tool call (not executed): " << call.name << " " << call.arguments << " ["
              << call.id << "]\n";
  }
  return kExitOk;
}

}  // namespace

void addAskCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<AskArgs>();
  CLI::App* cmd = app.add_subcommand("ask", "Send one prompt to a model and print the reply");
  cmd->add_option("--base-url", args->baseUrl,
                  "Endpoint base URL, e.g. http://127.0.0.1:8080/v1 (default: $OPENAI_BASE_URL, "
                  "else https://api.openai.com/v1)");
  cmd->add_option("--model", args->model, "Model name (default: $OPENAI_MODEL, else gpt-4o-mini)");
  cmd->add_option("--api-key", args->apiKey, "API key (default: $OPENAI_API_KEY)");
  cmd->add_option("--profile", args->profile, "Use a named profile from the profiles file");
  cmd->add_option("--profiles", args->profilesFile,
                  "Profiles file (TOML; default: $PARLEY_PROFILES, else "
                  "$XDG_CONFIG_HOME/parley/profiles.toml or ~/.config/parley/profiles.toml)");
  cmd->add_flag("--stream,!--no-stream", args->stream,
                "Stream the reply as it is generated (default) or wait for all of it");
  cmd->add_option("--max-iterations", args->maxIterations,
                  "Model calls allowed for tool use; only 1 until the tool loop lands (tool calls "
                  "are printed, not executed)")
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeoutMs, "Bound the whole call, retries included, in ms");
  cmd->add_flag("--json", args->json,
                "Print one JSON object: {\"message\", \"finish_reason\", \"usage\"}");
  cmd->add_option("prompt", args->prompt, "The prompt")->required();
  cmd->callback([args, &exitCode] { exitCode = runAsk(*args); });
}

}  // namespace parley::cli
