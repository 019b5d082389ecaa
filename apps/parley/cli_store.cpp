#include "cli_store.hpp"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "parley/postgres_store.hpp"

namespace parley::cli {

std::string defaultDbPath() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/parley/parley.db";
  }
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/parley/parley.db";
}

std::shared_ptr<ConversationStore> openCliStore(const std::string& url) {
  static std::once_flag postgres;
  std::call_once(postgres, registerPostgresStore);
  if (url.empty()) {
    const std::string path = defaultDbPath();
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    return openStore(path);
  }
  return openStore(url);
}

}  // namespace parley::cli
