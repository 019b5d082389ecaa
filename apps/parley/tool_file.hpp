// The tools `parley ask` and `parley chat` offer: built-in sets (--tools demo) and tools files
// (--tools-file FILE, command tools: see parley/command_tools.hpp for the format).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parley/tools.hpp"

namespace parley::cli {

// A registry holding the named built-in sets (only "demo": demo_tools.hpp) and the tools of each
// file. Throws ValidationError for an unknown set or a bad file.
std::shared_ptr<ToolRegistry> makeToolRegistry(const std::vector<std::string>& sets,
                                               const std::vector<std::string>& files);

}  // namespace parley::cli
