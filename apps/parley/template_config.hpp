// Templates: named sets of options for `ask` and `chat`, one [templates.NAME] table of the config
// file each (`-t NAME`, `/template NAME` in chat, `parley templates list|show`):
//
//   [templates.review]
//   description = "Code review, terse"
//   system = "You review code. Point at bugs first; be terse."
//   profile = "local"                     # or model = "gpt-4o-mini"
//   model = "qwen2.5-coder"
//   tools = ["demo"]                      # tool sets; tools_files = [...], mcp = [...] likewise
//   prompt = "Review this change:\n\n$input"
//   [templates.review.parameters]         # sent with every request (temperature, max_tokens...)
//   temperature = 0.2
//
// What the command line gives wins over the template: --system over `system`, --model over
// `model`, --profile over `profile`; tool sets, tools files and MCP servers are added to the
// template's. `prompt` is a pattern: `$input` is replaced by what the user typed (the prompt
// with piped text and -f files); without `$input` the input follows the pattern after a blank
// line. `$$` is a literal `$`.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "endpoint.hpp"

namespace parley::cli {

struct PromptTemplate {
  std::string name;
  std::string description;
  std::string system;
  std::string model;
  std::string profile;
  nlohmann::json parameters = nlohmann::json::object();
  std::vector<std::string> tools;
  std::vector<std::string> toolsFiles;
  std::vector<std::string> mcp;
  std::string prompt;  // a pattern with $input; "" = the input as typed
};

// Every [templates.NAME] table of `file`, sorted by name; none when the file has none.
// ValidationError naming the file and the key ("config.toml: templates.review.tools: must be an
// array of strings") for a missing file or a bad value; unknown keys are errors.
std::vector<PromptTemplate> readTemplates(const std::string& file);
// The one named `name`; ValidationError naming the file when there is none.
PromptTemplate readTemplate(const std::string& file, const std::string& name);

// The pattern filled in: see the header comment.
std::string fillPrompt(const std::string& pattern, const std::string& input);

// The options a command line gave, with the template's filling what they leave open.
struct TemplatedOptions {
  EndpointArgs* endpoint;
  std::string* system;
  std::vector<std::string>* toolSets;
  std::vector<std::string>* toolFiles;
  std::vector<std::string>* mcpServers;
};
void applyTemplate(const PromptTemplate& t, const TemplatedOptions& options);
// What --save-template NAME writes: `used` (the -t template, or none) with the options the
// command line ended up with.
PromptTemplate templateOf(const std::string& name, const PromptTemplate& used,
                          const TemplatedOptions& options);
// The template's parameters over the endpoint's default parameters.
void addParameters(const PromptTemplate& t, ClientOptions& client);

// The template as a [templates.NAME] table (TOML text), and appended to `file` (created if
// missing). ValidationError if the file already has a template of that name.
std::string templateToToml(const PromptTemplate& t);
void saveTemplate(const std::string& file, const PromptTemplate& t);

// `-t,--template NAME` and `--save-template NAME` on a command.
void addTemplateOptions(CLI::App& cmd, std::string& useName, std::string& saveName);

}  // namespace parley::cli
