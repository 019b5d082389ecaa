#include "cli_store.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "extras.hpp"

namespace parley::cli {

std::string defaultDbPath() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/parley/parley.db";
  }
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/parley/parley.db";
}

namespace {

// postgresql:// URLs open the PostgreSQL store (parley::postgres), which lives in
// parley-extras.so with libpq (extras.hpp): loaded only for such a URL.
void registerStores(const std::string& url) {
  if (url.rfind("postgresql://", 0) != 0 && url.rfind("postgres://", 0) != 0) return;
  static std::once_flag postgres;
  std::call_once(postgres, [] { extras().registerPostgresStore(); });
}

}  // namespace

std::shared_ptr<ConversationStore> openCliStore(const std::string& url) {
  registerStores(url);
  if (url.empty()) {
    const std::string path = defaultDbPath();
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    return openStore(path);
  }
  return openStore(url);
}

std::string mostRecentThread(ConversationStore& store) {
  std::string id;
  std::chrono::system_clock::time_point latest{};
  for (const ThreadInfo& info : store.listThreads()) {
    if (id.empty() || info.updatedAt >= latest) {
      id = info.id;
      latest = info.updatedAt;
    }
  }
  return id;
}

std::string titleFromPrompt(const std::string& prompt) {
  constexpr size_t kMax = 60;
  const size_t start = prompt.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return "";
  std::string line = prompt.substr(start, prompt.find_first_of("\r\n", start) - start);
  if (line.size() <= kMax) return line;
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80)
    --cut;  // back to the start of a UTF-8 character
  const size_t space = line.rfind(' ', cut);
  if (space != std::string::npos && space > kMax / 2) cut = space;
  return line.substr(0, cut) + "...";
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
  registerStores(target);
  return openStore(target, {.readOnly = true});
}

}  // namespace parley::cli
