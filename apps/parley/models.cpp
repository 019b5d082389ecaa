// `parley models`: the models the endpoint offers (GET {base}/models), one per line, with the
// aliases of the config file's [aliases] table that name them; --json prints the list as JSON.
#include <iostream>

#include "commands.hpp"
#include "endpoint.hpp"
#include "parley/errors.hpp"
#include "parley/protocol.hpp"

namespace parley::cli {
namespace {

struct ModelsArgs {
  EndpointArgs endpoint;
  bool json = false;
  int64_t timeoutMs = 30'000;
};

int listModels(const ModelsArgs& args) {
  if (args.timeoutMs <= 0) throw ValidationError("--timeout", "must be > 0");
  const ClientOptions options = resolveEndpoint(args.endpoint);
  const std::vector<ModelInfo> models =
      makeClient(options)->listModels(std::chrono::milliseconds(args.timeoutMs));
  const auto aliases = modelAliases(configFile(args.endpoint));
  auto aliasesOf = [&](const std::string& id) {
    std::vector<std::string> names;
    for (const auto& [alias, model] : aliases) {
      if (model == id) names.push_back(alias);
    }
    return names;
  };
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const ModelInfo& model : models) {
      nlohmann::json item = {{"id", model.id}, {"aliases", aliasesOf(model.id)}};
      if (!model.ownedBy.empty()) item["owned_by"] = model.ownedBy;
      if (!model.displayName.empty()) item["display_name"] = model.displayName;
      out.push_back(std::move(item));
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  size_t width = 0;
  for (const ModelInfo& model : models)
    width = std::max(width, model.id.size());
  for (const ModelInfo& model : models) {
    std::string line = model.id;
    std::string about = model.displayName.empty() ? model.ownedBy : model.displayName;
    for (const std::string& alias : aliasesOf(model.id))
      about += (about.empty() ? "alias " : ", alias ") + alias;
    if (!about.empty()) line += std::string(width - model.id.size() + 2, ' ') + about;
    std::cout << line << "\n";
  }
  if (models.empty()) std::cerr << "parley: the endpoint lists no models\n";
  return kExitOk;
}

}  // namespace

void addModelsCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ModelsArgs>();
  CLI::App* cmd = app.add_subcommand("models", "List the models the endpoint offers");
  addEndpointOptions(*cmd, args->endpoint);
  cmd->add_flag("--json", args->json, "Print the list as JSON (id, aliases, owned_by, ...)");
  cmd->add_option("--timeout", args->timeoutMs, "Bound the call, in ms")->capture_default_str();
  cmd->callback([args, &exitCode] { exitCode = listModels(*args); });
}

}  // namespace parley::cli
