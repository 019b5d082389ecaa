#include "tool_file.hpp"

#include "demo_tools.hpp"
#include "parley/command_tools.hpp"
#include "parley/errors.hpp"

namespace parley::cli {

std::shared_ptr<ToolRegistry> makeToolRegistry(const std::vector<std::string>& sets,
                                               const std::vector<std::string>& files) {
  auto tools = std::make_shared<ToolRegistry>();
  for (const std::string& set : sets) {
    if (set != "demo") throw ValidationError("--tools", "unknown tool set \"" + set + "\" (demo)");
    addDemoTools(*tools);
  }
  for (const std::string& file : files)
    loadToolsFile(file, *tools);
  return tools;
}

}  // namespace parley::cli
