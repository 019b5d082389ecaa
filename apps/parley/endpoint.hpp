// The endpoint options `parley ask`, `chat` and `models` share: --profile from the config file
// (--config, $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml), else --base-url /
// $OPENAI_BASE_URL; --base-url, --model, --api-key and --protocol override a profile's values; the
// key defaults to $OPENAI_API_KEY; --model may name an alias of the config file's [aliases].
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>

#include "parley/openai_client.hpp"
#include "parley/tool_tape.hpp"

namespace parley::cli {

struct EndpointArgs {
  std::string baseUrl;
  std::string model;
  std::string apiKey;
  std::string apiKeyEnv;
  std::string profile;
  std::string configFile;
  std::string protocol;  // "" = the profile's, else openai-chat
  // Cassettes (docs/cassettes.md): --record DIR, --replay DIR, --cassette-mode, --replay-realtime.
  std::string recordDir;
  std::string replayDir;
  std::string cassetteMode;  // "" = record with --record, replay-only with --replay
  bool replayRealtime = false;
};

void addEndpointOptions(CLI::App& cmd, EndpointArgs& args);

// The config file: --config, else $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml, else
// ~/.config/parley/config.toml.
std::string defaultConfigFile();
std::string configFile(const EndpointArgs& args);
// A --config that names no file is a mistake (a typo would otherwise be silently ignored):
// ValidationError. The default file may be missing.
void checkConfigFile(const EndpointArgs& args);

// The [aliases] table of the config file (alias -> model name); none when the file is missing.
// ValidationError naming the key for a value that is not a model name.
std::map<std::string, std::string> modelAliases(const std::string& file);
// `model` itself, or the model its alias names.
std::string resolveModelAlias(const std::string& file, const std::string& model);

// --model may be an alias of the config file. Throws ValidationError for a missing config file or
// an unknown profile.
ClientOptions resolveEndpoint(const EndpointArgs& args);

// The tool tape of --record / --replay (docs/cassettes.md, "Whole runs"): DIR/tools.jsonl,
// recorded with --record (cassette mode record), replayed with --replay (replay-only) when the
// file is there, so the turn's tools do not run; null otherwise (replay-or-record runs them).
std::shared_ptr<ToolTape> toolTapeFor(const EndpointArgs& args);

// True when anything names an endpoint: an option above, $OPENAI_BASE_URL or $OPENAI_API_KEY.
bool endpointConfigured(const EndpointArgs& args);

}  // namespace parley::cli
