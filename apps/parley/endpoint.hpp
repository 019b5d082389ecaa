// The endpoint options `parley ask` and `parley chat` share: --profile from the config file
// (--config, $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml), else --base-url /
// $OPENAI_BASE_URL; --base-url, --model, --api-key and --protocol override a profile's values; the
// key defaults to $OPENAI_API_KEY.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "parley/openai_client.hpp"

namespace parley::cli {

struct EndpointArgs {
  std::string baseUrl;
  std::string model;
  std::string apiKey;
  std::string apiKeyEnv;
  std::string profile;
  std::string configFile;
  std::string protocol;  // "" = the profile's, else openai-chat
};

void addEndpointOptions(CLI::App& cmd, EndpointArgs& args);

// The config file: --config, else $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml, else
// ~/.config/parley/config.toml.
std::string defaultConfigFile();
std::string configFile(const EndpointArgs& args);

// Throws ValidationError for a missing config file or an unknown profile.
ClientOptions resolveEndpoint(const EndpointArgs& args);

// True when anything names an endpoint: an option above, $OPENAI_BASE_URL or $OPENAI_API_KEY.
bool endpointConfigured(const EndpointArgs& args);

}  // namespace parley::cli
