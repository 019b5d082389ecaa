// Command tools: tools that are external programs, described in a TOML tools file or in code.
//
//   [[tool]]
//   name = "shout"
//   description = "Upper-cases the text"
//   command = ["tr", "a-z", "A-Z"]      # argv, run WITHOUT a shell (PATH is searched)
//   env = ["GITHUB_TOKEN"]               # optional: variables passed on beyond the default ones
//   timeout_ms = 5000                    # optional, default 30000: the process is killed at it
//   max_result_bytes = 65536             # optional, default 65536 (ToolOptions::maxResultBytes)
//   idempotent = false                   # optional (ToolOptions::idempotent)
//   requires_approval = false            # optional (ToolOptions::requiresApproval)
//   [tool.parameters]                    # the arguments' JSON Schema, as a TOML table
//   type = "object"                      # (or parameters = '{"type": "object", ...}', JSON text)
//
// Each call starts the command with the call's arguments as one JSON object and a newline on
// its stdin, and takes what it prints on stdout as the result: JSON output is passed on as
// JSON, anything else as text. A non-zero exit status is a tool failure carrying the end of the
// command's stderr. The command's output is read in bounded memory: past maxResultBytes only
// its head and its tail are kept, with a marker saying how much was cut between them; bytes
// that are not UTF-8 become U+FFFD, and the result says so.
//
// The command runs in a process group of its own: at a timeout or a cancel the whole group is
// killed (SIGKILL), and so is whatever it left running once it exits, so nothing it started
// outlives the call. Its environment is an allow-list of parley's: PATH, HOME, USER, LOGNAME,
// SHELL, LANG, LANGUAGE, LC_*, TZ, TMPDIR, TERM and PWD, plus the variables its tool names in
// `env`; nothing else (no API key) unless named.
//
// A command that exits without reading its stdin is not an error of parley's: writing to it
// fails with EPIPE, never with a SIGPIPE that would end the process, whatever the application's
// SIGPIPE setting. The command itself starts with SIGPIPE at its default action and no signal
// blocked, as from a shell.
//
// Thread-safety: free functions; a registered command tool may run on several threads at once
// (each call is its own process).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/tools.hpp"

namespace parley {

// One tool that runs a program.
struct CommandTool {
  std::string name;
  std::string description;
  std::vector<std::string> command;  // argv; command[0] is looked up in PATH; no shell
  nlohmann::json parameters;         // the arguments' JSON Schema; null: no arguments
  ToolOptions options;               // timeout: per run, the process is killed (SIGKILL) at it
  std::vector<std::string> env;      // variables passed on beyond the default allow-list
};

// Registers `tool` on `registry` (see the top of this file for what a call does). Throws
// ValidationError as ToolRegistry::add() does, and "tool.command" for an empty command.
void addCommandTool(ToolRegistry& registry, const CommandTool& tool);

// Reads a tools file. Throws ValidationError naming the file, the line for TOML syntax errors,
// the tool and the field ("tools.toml: tool[1].command: required, a non-empty array of strings
// (argv)"), and for unknown keys (they are usually typos).
std::vector<CommandTool> readToolsFile(const std::string& path);

// Registers every tool of a tools file. A bad file, or a tool that cannot be added (a taken
// name, a bad schema), registers nothing.
void loadToolsFile(const std::string& path, ToolRegistry& registry);

// Runs argv with `input` on its stdin and returns its stdout, at most `maxOutputBytes` of it
// (head, marker, tail; not yet repaired to UTF-8), in its own process group with the default
// environment allow-list (above). Kills the process group when `context`'s stop token
// is requested (the deadline, a cancel). Throws std::runtime_error when it cannot be started,
// is killed, or exits non-zero (the message carries its exit status and the end of its stderr).
std::string runToolCommand(const std::vector<std::string>& argv, std::string_view input,
                           const ToolContext& context,
                           std::size_t maxOutputBytes = kDefaultMaxToolResultBytes);

}  // namespace parley
