// Each subcommand registers itself on the root CLI11 app; one file per subcommand.
#pragma once

#include <CLI/CLI.hpp>

namespace parley::cli {

// Exit codes, documented in `parley --help` and the README.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the operation failed (HTTP error, timeout, ...)
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitInterrupted = 130;

}  // namespace parley::cli
