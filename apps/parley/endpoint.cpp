#include "endpoint.hpp"

#include <cstdlib>
#include <filesystem>

#include "parley/errors.hpp"
#include "parley/gemini_client.hpp"
#include "parley/profiles.hpp"
#include "parley/protocol.hpp"
#include "parley/toml.hpp"

namespace parley::cli {
namespace {

std::string envOr(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : std::move(fallback);
}

}  // namespace

// $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml, else ~/.config/parley/config.toml.
std::string defaultConfigFile() {
  if (const char* path = std::getenv("PARLEY_CONFIG"); path && *path) return path;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/parley/config.toml";
  }
  return envOr("HOME", ".") + "/.config/parley/config.toml";
}

std::string configFile(const EndpointArgs& args) {
  return args.configFile.empty() ? defaultConfigFile() : args.configFile;
}

void checkConfigFile(const EndpointArgs& args) {
  std::error_code ignored;
  if (!args.configFile.empty() && !std::filesystem::exists(args.configFile, ignored)) {
    throw ValidationError("--config", "no such file: " + args.configFile);
  }
}

void addEndpointOptions(CLI::App& cmd, EndpointArgs& args) {
  cmd.add_option("--base-url", args.baseUrl,
                 "Endpoint base URL, e.g. http://127.0.0.1:8080/v1 (default: $OPENAI_BASE_URL, "
                 "else https://api.openai.com/v1)");
  cmd.add_option("--model", args.model, "Model name (default: $OPENAI_MODEL, else gpt-4o-mini)");
  cmd.add_option("--api-key", args.apiKey, "API key (default: $OPENAI_API_KEY)");
  cmd.add_option("--api-key-env", args.apiKeyEnv,
                 "Read the API key from this environment variable instead of OPENAI_API_KEY");
  cmd.add_option("--protocol", args.protocol,
                 "Wire protocol: openai-chat (default), openai-responses, anthropic or gemini")
      ->check(CLI::IsMember({"openai-chat", "openai-responses", "anthropic", "gemini"}));
  cmd.add_option("--profile", args.profile,
                 "Use a named profile, a [profiles.NAME] table of the config file");
  cmd.add_option("--config", args.configFile,
                 "Config file (TOML; default: $PARLEY_CONFIG, else "
                 "$XDG_CONFIG_HOME/parley/config.toml or ~/.config/parley/config.toml)");
  auto* record =
      cmd.add_option("--record", args.recordDir,
                     "Record the model traffic into cassettes in DIR (docs/cassettes.md)");
  cmd.add_option("--replay", args.replayDir,
                 "Answer model calls from the cassettes in DIR; a request not recorded is an error")
      ->excludes(record);
  cmd.add_option("--cassette-mode", args.cassetteMode,
                 "With --record or --replay: record, replay-only or replay-or-record")
      ->check(CLI::IsMember({"record", "replay-only", "replay-or-record"}));
  cmd.add_flag("--replay-realtime", args.replayRealtime,
               "Replay stream events at the pace they were recorded (default: at once)");
}

std::map<std::string, std::string> modelAliases(const std::string& file) {
  std::map<std::string, std::string> aliases;
  std::error_code ignored;
  if (!std::filesystem::exists(file, ignored)) return aliases;
  const nlohmann::json root = readTomlFile(file);
  if (!root.contains("aliases")) return aliases;
  if (!root["aliases"].is_object()) throw ValidationError(file + ": aliases", "must be a table");
  for (const auto& [alias, model] : root["aliases"].items()) {
    if (!model.is_string() || model.get<std::string>().empty()) {
      throw ValidationError(file + ": aliases." + alias, "must be a model name (a string)");
    }
    aliases[alias] = model.get<std::string>();
  }
  return aliases;
}

std::string resolveModelAlias(const std::string& file, const std::string& model) {
  const auto aliases = modelAliases(file);
  auto it = aliases.find(model);
  return it == aliases.end() ? model : it->second;
}

ClientOptions resolveEndpoint(const EndpointArgs& args) {
  checkConfigFile(args);
  ClientOptions options;
  if (!args.profile.empty()) {
    ProfileRegistry registry;
    const std::string file = configFile(args);
    if (!std::filesystem::exists(file)) {
      throw ValidationError(
          "--profile", "no config file at " + file + " (give one with --config or PARLEY_CONFIG)");
    }
    registry.loadToml(file);
    try {
      options = registry.get(args.profile);
    } catch (const ValidationError& e) {
      throw ValidationError("--profile", e.reason() + " in " + file);  // the option the user typed
    }
  } else {
    options.baseUrl = envOr("OPENAI_BASE_URL", options.baseUrl);
    options.apiKeyEnv = "OPENAI_API_KEY";
    options.model = envOr("OPENAI_MODEL", "gpt-4o-mini");
  }
  if (!args.baseUrl.empty()) options.baseUrl = args.baseUrl;
  if (!args.model.empty()) options.model = resolveModelAlias(configFile(args), args.model);
  if (!args.apiKeyEnv.empty()) {
    options.apiKey.clear();
    options.apiKeyEnv = args.apiKeyEnv;
  }
  if (!args.apiKey.empty()) options.apiKey = args.apiKey;
  if (!args.protocol.empty()) options.protocol = protocolFromString(args.protocol, "--protocol");
  if (!args.recordDir.empty() || !args.replayDir.empty()) {
    CassetteOptions cassettes;
    cassettes.directory = args.recordDir.empty() ? args.replayDir : args.recordDir;
    cassettes.mode = args.recordDir.empty() ? CassetteMode::ReplayOnly : CassetteMode::Record;
    if (!args.cassetteMode.empty()) {
      cassettes.mode = cassetteModeFromString(args.cassetteMode, "--cassette-mode");
    }
    cassettes.realtime = args.replayRealtime;
    options.cassettes = std::move(cassettes);
  } else if (!args.cassetteMode.empty()) {
    throw ValidationError("--cassette-mode", "needs --record DIR or --replay DIR");
  }
  if (args.profile.empty() && options.protocol == Protocol::Gemini) {
    // Without a profile, --protocol gemini talks to Google with Google's key and a Gemini model.
    if (args.baseUrl.empty() && envOr("OPENAI_BASE_URL", "").empty()) {
      options.baseUrl = kGeminiBaseUrl;
    }
    if (args.apiKey.empty() && args.apiKeyEnv.empty()) options.apiKeyEnv = "GEMINI_API_KEY";
    if (args.model.empty() && envOr("OPENAI_MODEL", "").empty()) options.model = "gemini-2.5-flash";
  }
  if (options.apiKey.empty() && options.apiKeyEnv.empty()) options.apiKeyEnv = "OPENAI_API_KEY";
  return options;
}

std::shared_ptr<ToolTape> toolTapeFor(const EndpointArgs& args) {
  if (args.recordDir.empty() && args.replayDir.empty()) return nullptr;
  const std::string dir = args.recordDir.empty() ? args.replayDir : args.recordDir;
  CassetteMode mode = args.recordDir.empty() ? CassetteMode::ReplayOnly : CassetteMode::Record;
  if (!args.cassetteMode.empty())
    mode = cassetteModeFromString(args.cassetteMode, "--cassette-mode");
  const std::filesystem::path file = std::filesystem::path(dir) / "tools.jsonl";
  if (mode == CassetteMode::Record) return ToolTape::record(file);
  if (mode == CassetteMode::ReplayOnly && std::filesystem::exists(file)) {
    return ToolTape::replay(file);
  }
  return nullptr;
}

bool endpointConfigured(const EndpointArgs& args) {
  checkConfigFile(args);
  return !args.baseUrl.empty() || !args.apiKey.empty() || !args.apiKeyEnv.empty() ||
         !args.profile.empty() || !envOr("OPENAI_BASE_URL", "").empty() ||
         !envOr("OPENAI_API_KEY", "").empty();
}

}  // namespace parley::cli
