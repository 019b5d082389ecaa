#include "parley/logger.hpp"

#include <cstdio>

namespace parley {

void writeLog(const Logger& log, const std::string& line) noexcept {
  if (log) {
    try {
      log(line);
      return;
    } catch (...) {
      // The diagnostic must not be lost with the logger: stderr below.
    }
  }
  std::string out = line;
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace parley
