// What telemetry says of a client's endpoint (LlmClient::endpoint(), docs/telemetry.md): the
// provider's name in the GenAI conventions' vocabulary, the base URL's host and port, the model.
#pragma once

#include <string_view>

#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

LlmEndpoint endpointOf(const ClientOptions& options);

// The host and port of a URL ("https://[::1]:8080/v1" gives "::1" and 8080; no port: the
// scheme's, 443 or 80). Credentials in the URL are skipped.
void hostAndPort(std::string_view url, std::string& host, int& port);

}  // namespace parley::detail
