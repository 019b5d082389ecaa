// For tests that talk to the project's mock server in-process: start it on a script, and the
// client options that reach it (no retries, so a scripted error is seen at once).
#pragma once

#include <memory>
#include <string>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/openai_client.hpp"

namespace parley::testing {

inline std::unique_ptr<mock::MockServer> startMockServer(const std::string& script) {
  mock::MockOptions options;
  options.script = mock::readScript(script);
  auto server = std::make_unique<mock::MockServer>(options);
  server->start();
  return server;
}

inline ClientOptions mockClientOptions(const mock::MockServer& server,
                                       const std::string& model = "m", int maxRetries = 0) {
  ClientOptions options;
  options.baseUrl = server.baseUrl();
  options.apiKey = "sk-test";
  options.model = model;
  options.maxRetries = maxRetries;
  return options;
}

}  // namespace parley::testing
