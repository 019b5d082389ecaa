// `parley completion bash|zsh|fish`: prints a shell completion script for the command line as
// it is built, walking the CLI11 tree, so the completions can never list a command or an option
// that does not exist (or miss a new one).
//
// bash: `source <(parley completion bash)`; zsh: the same script through bashcompinit;
// fish: `parley completion fish | source`.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "commands.hpp"
#include "parley/errors.hpp"

namespace parley::cli {
namespace {

struct CommandWords {
  std::vector<std::string> subcommands;
  std::vector<std::string> options;  // "--long" and "-s" forms
};

// Key: the command path ("" for the root, "history", "history list").
void collect(const CLI::App& app, const std::string& path,
             std::map<std::string, CommandWords>& out) {
  CommandWords& words = out[path];
  for (const CLI::Option* option : app.get_options()) {
    if (!option->nonpositional()) continue;
    for (const std::string& name : option->get_lnames())
      words.options.push_back("--" + name);
    for (const std::string& name : option->get_snames())
      words.options.push_back("-" + name);
  }
  for (const CLI::App* sub : app.get_subcommands({})) {
    words.subcommands.push_back(sub->get_name());
    collect(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
  }
}

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words)
    text += (text.empty() ? "" : " ") + word;
  return text;
}

std::string bashScript(const std::map<std::string, CommandWords>& tree) {
  std::string script =
      "# parley completion for bash (and zsh through bashcompinit)\n"
      "_parley() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} path=\"\" i word words\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    word=${COMP_WORDS[i]}\n"
      "    [[ $word == -* ]] && continue\n"
      "    case \"${path:+$path }$word\" in\n";
  for (const auto& [path, words] : tree) {
    if (!path.empty()) script += "      \"" + path + "\") path=\"" + path + "\" ;;\n";
  }
  script +=
      "    esac\n"
      "  done\n"
      "  case \"$path\" in\n";
  for (const auto& [path, words] : tree) {
    script += "    \"" + path + "\") words=\"" + join(words.subcommands) +
              (words.subcommands.empty() || words.options.empty() ? "" : " ") +
              join(words.options) + "\" ;;\n";
  }
  script +=
      "  esac\n"
      "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
      "  if ((${#COMPREPLY[@]} == 0)); then COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
      "}\n"
      "complete -F _parley parley\n";
  return script;
}

std::string fishScript(const std::map<std::string, CommandWords>& tree) {
  std::string script = "# parley completion for fish\ncomplete -c parley -f\n";
  for (const auto& [path, words] : tree) {
    // fish tells nested commands apart by the words seen so far.
    std::string condition;
    if (path.empty()) {
      condition = "__fish_use_subcommand";
    } else {
      std::string last =
          path.substr(path.rfind(' ') == std::string::npos ? 0 : path.rfind(' ') + 1);
      condition = "__fish_seen_subcommand_from " + last;
    }
    for (const std::string& sub : words.subcommands) {
      script += "complete -c parley -n '" + condition + "' -a " + sub + "\n";
    }
    for (const std::string& option : words.options) {
      if (option.rfind("--", 0) == 0) {
        script += "complete -c parley -n '" + condition + "' -l " + option.substr(2) + "\n";
      } else {
        script += "complete -c parley -n '" + condition + "' -s " + option.substr(1) + "\n";
      }
    }
  }
  return script;
}

}  // namespace

void addCompletionCommand(CLI::App& app, int& exitCode) {
  auto shell = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("completion", "Print a shell completion script");
  cmd->add_option("shell", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  cmd->footer(
      "\nbash: source <(parley completion bash)\n"
      "zsh:  source <(parley completion zsh)\n"
      "fish: parley completion fish | source");
  cmd->callback([&app, shell, &exitCode] {
    std::map<std::string, CommandWords> tree;
    collect(app, "", tree);
    if (*shell == "fish") {
      std::cout << fishScript(tree);
    } else if (*shell == "zsh") {
      std::cout << "autoload -U +X bashcompinit && bashcompinit\n" << bashScript(tree);
    } else {
      std::cout << bashScript(tree);
    }
    exitCode = kExitOk;
  });
}

}  // namespace parley::cli
