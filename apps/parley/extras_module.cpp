// parley-extras.so's entry (extras.hpp): the table the executable asks for when it loads the
// module. The module's commands are compiled into it; the library they use is the executable's.
#include "commands.hpp"
#include "extras.hpp"
#include "mock/mock_server.hpp"
#include "parley/postgres_store.hpp"

namespace parley::cli {
namespace {

std::shared_ptr<void> startDemoAgent(std::string& baseUrl) {
  auto server = std::make_shared<mock::MockServer>(mock::MockOptions{});
  server->start();
  baseUrl = server->baseUrl();
  return server;
}

constexpr Extras kExtras{
    .addMockCommand = addMockCommand,
    .addServeCommand = addServeCommand,
    .addChatCommand = addChatCommand,
    .startDemoAgent = startDemoAgent,
    .registerPostgresStore = registerPostgresStore,
};

}  // namespace
}  // namespace parley::cli

extern "C" __attribute__((visibility("default"))) const parley::cli::Extras* parley_cli_extras() {
  return &parley::cli::kExtras;
}
