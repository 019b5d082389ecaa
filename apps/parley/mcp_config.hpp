// MCP servers from the config file (`--mcp NAME`, `parley mcp list NAME`), one [mcp.NAME] table
// each:
//
// clang-format off
//   [mcp.files]
//   command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]  # argv, no shell
//   env = { LOG_LEVEL = "warn" }       # set in the server's environment (PATH, HOME, ... pass)
//   cwd = "/srv"                       # its working directory
//   allow = ["read_text_file"]         # take only these tools (default: all)
//   deny = ["write_file"]              # never these
//   approve = "never"                  # "always" | "never" | ["tool", ...]: needs a human
//   timeout_ms = 30000                 # each tool call
//   prefix = true                      # register "files__read_text_file"
//
//   [mcp.remote]
//   url = "https://example.com/mcp"     # Streamable HTTP instead of a command
//   bearer_token_env = "REMOTE_TOKEN"   # the variable holding the bearer token
//   headers = { "X-Team" = "docs" }
// clang-format on
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "parley/mcp.hpp"
#include "parley/tools.hpp"

namespace parley::cli {

// The [mcp.NAME] table of `file`. Throws ValidationError naming the file and the key
// ("config.toml: mcp.files.command: ...") for a missing file, table or a bad value.
McpServerOptions readMcpServer(const std::string& file, const std::string& name);

// `--mcp NAME` (repeatable) on a command.
void addMcpOption(CLI::App& cmd, std::vector<std::string>& servers);

// Starts each named server and registers its tools. ask and chat have no way to ask a human yet:
// tools the server's `approve` names are not offered (a note on `notes` says so), and
// approve = "always" is refused. Prints the tools each server skipped on `notes`, and progress
// notifications of tool calls on `progress` (unless null) as "[progress] tool 2/5 message".
void addMcpServers(ToolRegistry& registry, const std::vector<std::string>& servers,
                   const std::string& file, std::ostream& notes, std::ostream* progress);

}  // namespace parley::cli
