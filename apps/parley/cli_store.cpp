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

std::shared_ptr<ConversationStore> openCliStoreForReading(const std::string& url) {
  const std::string target = url.empty() ? defaultDbPath() : url;
  std::string path = target;
  for (const char* prefix : {"sqlite://", "sqlite:"}) {
    if (path.rfind(prefix, 0) == 0) {
      path = path.substr(std::string(prefix).size());
      break;
    }
  }
  std::error_code ignored;
  if (path.find("://") == std::string::npos && !path.empty() &&
      !std::filesystem::exists(path, ignored)) {
    return nullptr;
  }
  return openStore(target, {.readOnly = true});
}

}  // namespace parley::cli
