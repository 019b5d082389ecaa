// User tools from a TOML file (`--tools-file`), each one an external command:
//
//   [[tool]]
//   name = "shout"
//   description = "Upper-cases the text"
//   command = ["tr", "a-z", "A-Z"]      # argv, run WITHOUT a shell (PATH is searched)
//   timeout_ms = 5000                    # optional, default 30000
//   [tool.parameters]                    # the arguments' JSON Schema, as a TOML table
//   type = "object"                      # (or parameters = '{"type": "object", ...}', JSON text)
//
// The command receives the call's arguments as one JSON object on stdin and prints the result
// on stdout: JSON output is passed on as JSON, anything else as text. A non-zero exit status is a
// tool failure carrying the command's stderr; at the timeout the command is killed (SIGKILL).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "parley/tools.hpp"

namespace parley::cli {

// Registers every [[tool]] of the file. Throws ValidationError naming the file, the tool and the
// field for a malformed file; nothing is registered then.
void loadToolFile(const std::string& path, ToolRegistry& registry);

// A registry holding the named built-in sets (only "demo": demo_tools.hpp) and the tools of each
// file. Throws ValidationError for an unknown set or a bad file.
std::shared_ptr<ToolRegistry> makeToolRegistry(const std::vector<std::string>& sets,
                                               const std::vector<std::string>& files);

// Runs argv with `input` on stdin and returns its stdout. Kills the process when `context`'s
// stop token is requested (the deadline, a cancel). Throws std::runtime_error when it cannot be
// started, is killed, or exits non-zero (the message carries its exit status and stderr).
std::string runToolCommand(const std::vector<std::string>& argv, const std::string& input,
                           const ToolContext& context);

}  // namespace parley::cli
