// `parley templates list`: the [templates.NAME] tables of the config file, one line each.
// `parley templates show NAME`: one of them as TOML (what `--save-template` writes).
#include <iostream>

#include "commands.hpp"
#include "endpoint.hpp"
#include "template_config.hpp"

namespace parley::cli {
namespace {

struct TemplatesArgs {
  std::string configFile;
  std::string name;
  bool json = false;
};

std::string file(const TemplatesArgs& args) {
  return args.configFile.empty() ? defaultConfigFile() : args.configFile;
}

int list(const TemplatesArgs& args) {
  const std::vector<PromptTemplate> templates = readTemplates(file(args));
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const PromptTemplate& t : templates) {
      out.push_back({{"name", t.name},
                     {"description", t.description},
                     {"model", t.model},
                     {"profile", t.profile},
                     {"system", t.system},
                     {"prompt", t.prompt}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (templates.empty()) std::cerr << "parley: no [templates.NAME] tables in " << file(args) << "\n";
  size_t width = 0;
  for (const PromptTemplate& t : templates)
    width = std::max(width, t.name.size());
  for (const PromptTemplate& t : templates) {
    std::string what = t.description;
    if (what.empty()) what = t.system.substr(0, 60) + (t.system.size() > 60 ? "..." : "");
    std::cout << t.name << std::string(width - t.name.size() + 2, ' ') << what;
    if (!t.profile.empty() || !t.model.empty()) {
      std::cout << " [" << (t.profile.empty() ? t.model : "profile " + t.profile) << "]";
    }
    std::cout << "\n";
  }
  return kExitOk;
}

int show(const TemplatesArgs& args) {
  std::cout << templateToToml(readTemplate(file(args), args.name));
  return kExitOk;
}

}  // namespace

void addTemplatesCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<TemplatesArgs>();
  CLI::App* cmd =
      app.add_subcommand("templates", "The prompt templates of the config file (ask/chat -t NAME)");
  cmd->require_subcommand(1);
  const std::string configHelp =
      "Config file (TOML; default: $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml or "
      "~/.config/parley/config.toml)";
  CLI::App* listCmd = cmd->add_subcommand("list", "One line per template");
  listCmd->add_option("--config", args->configFile, configHelp);
  listCmd->add_flag("--json", args->json, "Print the templates as JSON");
  listCmd->callback([args, &exitCode] { exitCode = list(*args); });
  CLI::App* showCmd = cmd->add_subcommand("show", "Print one template as TOML");
  showCmd->add_option("--config", args->configFile, configHelp);
  showCmd->add_option("name", args->name, "The template: a [templates.NAME] table")->required();
  showCmd->callback([args, &exitCode] { exitCode = show(*args); });
}

}  // namespace parley::cli
