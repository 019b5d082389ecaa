// The parts of the command line that need libraries one `parley ask` does not: the mock server
// and the service (cpp-httplib, and through it OpenSSL's TLS set-up), the line editor of
// `parley chat` (libedit) and the PostgreSQL store (libpq). They live in a module of their own,
// parley-extras.so, loaded (dlopen) the first time one is used, so that a command without them
// neither maps these libraries nor runs their initialisers (issue 42: a seventh of one
// `parley ask`'s instructions, callgrind). The module binds to the executable's own copy of the
// library (the executable exports its symbols), so there is one of everything: one telemetry, one
// registry of store schemes.
//
// The module is looked for beside the executable (the build tree), then in PARLEY_EXTRAS_DIR
// relative to it (an installed tree: <libdir>/parley).
//
// Thread-safety: extras() may be called from any thread; it loads the module once and the table
// never changes after.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace parley::cli {

// What parley-extras.so offers; every member is set.
struct Extras {
  void (*addMockCommand)(CLI::App& app, int& exitCode);
  void (*addServeCommand)(CLI::App& app, int& exitCode);
  void (*addChatCommand)(CLI::App& app, int& exitCode);
  // The mock's demo agent on a loopback port, for `ask` with no endpoint configured: its base URL
  // in `baseUrl`; it stops when the last copy of the handle goes.
  std::shared_ptr<void> (*startDemoAgent)(std::string& baseUrl);
  // Makes openStore() open postgres:// and postgresql:// URLs (postgres_store.hpp).
  void (*registerPostgresStore)();
};

// The module's table, loaded on the first call. Throws parley::Error (a failure, exit code 1)
// naming the file and the loader's reason when the module cannot be loaded.
const Extras& extras();

// The name of the function the module exports; it returns the table.
inline constexpr const char* kExtrasEntry = "parley_cli_extras";

}  // namespace parley::cli
