#include "cli_store.hpp"

#include <cstdlib>
#include <filesystem>

namespace parley::cli {

std::string defaultDbPath() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/parley/parley.db";
  }
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/parley/parley.db";
}

std::shared_ptr<ConversationStore> openCliStore(const std::string& url) {
  if (url.empty()) {
    const std::string path = defaultDbPath();
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    return openStore(path);
  }
  return openStore(url);
}

}  // namespace parley::cli
