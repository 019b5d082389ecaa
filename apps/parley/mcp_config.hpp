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
//   oauth = true                        # sign in with a browser when the server asks (OAuth 2.1)
//   oauth_client_id = "parley"          # a client registered beforehand (default: registers)
//   oauth_client_secret_env = "SECRET"  # its secret, from this variable
//   oauth_scopes = ["files:read"]       # instead of what the server names
//   oauth_redirect_port = 33418         # the loopback port the browser comes back to
// clang-format on
#pragma once

#include <istream>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "parley/a2a.hpp"
#include "parley/llm.hpp"
#include "parley/mcp.hpp"
#include "parley/tools.hpp"

namespace parley::cli {

// The [mcp.NAME] table of `file`. Throws ValidationError naming the file and the key
// ("config.toml: mcp.files.command: ...") for a missing file, table or a bad value.
McpServerOptions readMcpServer(const std::string& file, const std::string& name);

// `--mcp NAME` (repeatable) on a command.
void addMcpOption(CLI::App& cmd, std::vector<std::string>& servers);

// How the command that starts the servers can ask a person. Prompt: ask and chat have no way to
// ask for an approval yet: tools the server's `approve` names are not offered (a note on `notes`
// says so), and approve = "always" is refused. DurableRun: a worker's run waits for the approval
// (`parley runs respond`), so every tool is offered with its approval kept; a server's form
// becomes the run's question the same way.
enum class McpAsking { Prompt, DurableRun };

// Starts each named server and registers its tools, asking as `asking` says. Prints the tools each
// server skipped on `notes`, and progress notifications of tool calls on `progress` (unless null)
// as "[progress] tool 2/5 message". A server's elicitation (a form, or a page to open) goes to
// `ask`; without one it is declined with a note on `notes` saying what was asked. Its sampling
// requests go to `sample` (none: the capability is not offered).
void addMcpServers(ToolRegistry& registry, const std::vector<std::string>& servers,
                   const std::string& file, std::ostream& notes, std::ostream* progress,
                   const McpElicitationHandler& ask = {}, const McpSamplingHandler& sample = {},
                   McpAsking asking = McpAsking::Prompt);

// A server's sampling request answered by `llm` (the conversation's own model), once `approve`
// said yes; declined (the specification's -1) otherwise. Text content only.
McpSamplingHandler modelSampling(std::shared_ptr<LlmClient> llm,
                                 std::function<bool(const McpSamplingRequest&)> approve);

// Asks a person on a terminal for a server's form, one field per line (`terminal` keeps two
// servers' forms from mixing).
McpElicitationHandler terminalForm(std::istream& in, std::ostream& out, std::mutex& terminal);

// Remote A2A agents from the same config file (`--a2a NAME`), one [a2a.NAME] table each, offered
// as a tool NAME (docs/a2a.md, "The client side"):
//   [a2a.helper]
//   url = "https://agents.example.com"  # its card at URL/.well-known/agent-card.json
//   bearer_token_env = "HELPER_TOKEN"   # the variable holding its bearer token
//   headers = { "X-Team" = "docs" }
//   timeout_ms = 600000                 # one call: the remote task followed to its end
//   card_public_key = "helper.pem"      # its card must be signed by this key (relative: to FILE)
A2aAgentOptions readA2aAgent(const std::string& file, const std::string& name);
// A PEM key file (at most 64 KiB); ValidationError naming `field` and the path.
std::string readA2aKeyFile(const std::string& path, const std::string& field);
void addA2aOption(CLI::App& cmd, std::vector<std::string>& agents);
// Reads each agent's card and registers its tool.
void addA2aAgents(ToolRegistry& registry, const std::vector<std::string>& agents,
                  const std::string& file);

// `parley mcp conformance-client URL` on the `mcp` command (mcp_conformance.cpp).
void addMcpConformanceClient(CLI::App& mcp, int& exitCode);

}  // namespace parley::cli
