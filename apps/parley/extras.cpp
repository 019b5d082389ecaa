#include "extras.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <system_error>

#include "parley/errors.hpp"

namespace parley::cli {
namespace {

constexpr const char* kModuleName = "parley-extras.so";

// Where the module may be: beside the executable, then where an installed tree keeps it.
std::vector<std::filesystem::path> candidates() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {kModuleName};  // the loader's own search path
  const std::filesystem::path dir = self.parent_path();
  return {dir / kModuleName, (dir / PARLEY_EXTRAS_DIR / kModuleName).lexically_normal()};
}

const Extras& load() {
  std::string reasons;
  for (const std::filesystem::path& path : candidates()) {
    std::error_code error;
    if (path.has_parent_path() && !std::filesystem::exists(path, error)) {
      reasons += "\n  " + path.string() + ": not found";
      continue;
    }
    // RTLD_NOW: a symbol the executable does not export is reported here, not mid-command.
    void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) {
      reasons += "\n  " + std::string(::dlerror());
      continue;
    }
    using Entry = const Extras* (*)();
    const auto entry = reinterpret_cast<Entry>(::dlsym(module, kExtrasEntry));
    if (!entry) {
      reasons += "\n  " + path.string() + ": no " + kExtrasEntry;
      continue;
    }
    return *entry();  // never unloaded: its code runs until the process ends
  }
  throw Error(std::string("the mock, serve and chat commands and PostgreSQL stores need ") +
              kModuleName + ", which could not be loaded:" + reasons);
}

}  // namespace

const Extras& extras() {
  static std::once_flag once;
  static const Extras* table = nullptr;
  std::call_once(once, [] { table = &load(); });
  return *table;
}

}  // namespace parley::cli
