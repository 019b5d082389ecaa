// `parley mcp list NAME`: starts the MCP server of an [mcp.NAME] table of the config file and
// prints its tools, marking those `allow`/`deny` leave out and those that need approval.
// `parley mcp call NAME TOOL [ARGS]`: calls one tool and prints what the model would see.
#include <iomanip>
#include <iostream>

#include "commands.hpp"
#include "endpoint.hpp"
#include "mcp_config.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/mcp.hpp"
#include "terminal.hpp"

namespace parley::cli {
namespace {

struct McpArgs {
  std::string configFile;
  std::string server;
  std::string tool;
  std::string arguments;
  bool json = false;
};

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

int listTools(const McpArgs& args) {
  McpServerOptions options =
      readMcpServer(args.configFile.empty() ? defaultConfigFile() : args.configFile, args.server);
  McpClient client(options);
  McpServerInfo info = client.serverInfo();
  std::vector<McpTool> tools = client.listTools();
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const McpTool& tool : tools) {
      out.push_back({{"name", tool.name},
                     {"description", tool.description},
                     {"inputSchema", tool.inputSchema}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << args.server << ": " << (info.name.empty() ? "(unnamed)" : info.name) << " "
            << info.version << ", protocol " << info.protocolVersion << ", " << tools.size()
            << " tools\n";
  std::size_t width = 0;
  for (const McpTool& tool : tools)
    width = std::max(width, tool.name.size());
  for (const McpTool& tool : tools) {
    std::string note;
    if (!options.allow.empty() && !listed(options.allow, tool.name))
      note = " (not in allow)";
    else if (listed(options.deny, tool.name))
      note = " (denied)";
    else if (mcpToolNeedsApproval(options, tool))
      note = " (needs approval)";
    const std::string description =
        preview(tool.description.empty() ? tool.title : tool.description, 100);
    std::cout << "  " << std::left << std::setw(static_cast<int>(width)) << tool.name << "  "
              << description << note << "\n";
  }
  return kExitOk;
}

int callTool(const McpArgs& args) {
  nlohmann::json arguments = nlohmann::json::object();
  if (!args.arguments.empty()) {
    arguments = parseJson(args.arguments, {}, false);
    if (!arguments.is_object())
      throw ValidationError("ARGS", "must be one JSON object, e.g. '{\"message\": \"hi\"}'");
  }
  McpServerOptions options =
      readMcpServer(args.configFile.empty() ? defaultConfigFile() : args.configFile, args.server);
  McpClient client(options);
  McpToolResult result = client.callTool(args.tool, arguments);
  nlohmann::json forModel = result.forModel(options.useStructuredContent);
  std::cout << (forModel.is_string() ? forModel.get<std::string>() : forModel.dump()) << "\n";
  return result.isError ? kExitFailure : kExitOk;
}

}  // namespace

void addMcpCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<McpArgs>();
  CLI::App* cmd = app.add_subcommand("mcp", "Inspect the MCP servers of the config file");
  cmd->require_subcommand(1);
  const std::string configHelp =
      "Config file (TOML; default: $PARLEY_CONFIG, else $XDG_CONFIG_HOME/parley/config.toml or "
      "~/.config/parley/config.toml)";

  CLI::App* list = cmd->add_subcommand("list", "Start an [mcp.NAME] server and print its tools");
  list->add_option("--config", args->configFile, configHelp);
  list->add_flag("--json", args->json, "Print the tools as JSON (name, description, inputSchema)");
  list->add_option("name", args->server, "The server: an [mcp.NAME] table")->required();
  list->callback([args, &exitCode] { exitCode = listTools(*args); });

  CLI::App* call = cmd->add_subcommand(
      "call", "Call one tool of an [mcp.NAME] server and print what the model would see");
  call->add_option("--config", args->configFile, configHelp);
  call->add_option("name", args->server, "The server: an [mcp.NAME] table")->required();
  call->add_option("tool", args->tool, "The tool, as the server names it")->required();
  call->add_option("arguments", args->arguments, "The arguments, one JSON object (default {})");
  call->callback([args, &exitCode] { exitCode = callTool(*args); });

  addMcpConformanceClient(*cmd, exitCode);
}

}  // namespace parley::cli
