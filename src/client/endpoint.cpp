#include "client/endpoint.hpp"

#include <algorithm>
#include <charconv>

namespace parley::detail {

void hostAndPort(std::string_view url, std::string& host, int& port) {
  host.clear();
  port = 0;
  const size_t scheme = url.find("://");
  const std::string_view schemeName = scheme == std::string_view::npos ? "" : url.substr(0, scheme);
  std::string_view rest = scheme == std::string_view::npos ? url : url.substr(scheme + 3);
  rest = rest.substr(0, std::min(rest.find_first_of("/?#"), rest.size()));
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) rest.remove_prefix(at + 1);
  std::string_view portText;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return;
    host = std::string(rest.substr(1, close - 1));
    if (close + 1 < rest.size() && rest[close + 1] == ':') portText = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) portText = rest.substr(colon + 1);
  }
  if (!portText.empty()) {
    int value = 0;
    auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), value);
    if (ec == std::errc() && end == portText.data() + portText.size()) port = value;
  } else if (schemeName == "https") {
    port = 443;
  } else if (schemeName == "http") {
    port = 80;
  }
}

LlmEndpoint endpointOf(const ClientOptions& options) {
  LlmEndpoint endpoint;
  // The conventions name the provider, not the wire protocol; the protocols' owners are what a
  // base URL elsewhere (a proxy, a local server) most likely imitates.
  switch (options.protocol) {
    case Protocol::Anthropic:
      endpoint.provider = "anthropic";
      break;
    case Protocol::Gemini:
      endpoint.provider = "gcp.gemini";
      break;
    default:
      endpoint.provider = "openai";
      break;
  }
  hostAndPort(options.baseUrl, endpoint.address, endpoint.port);
  endpoint.defaultModel = options.model;
  return endpoint;
}

}  // namespace parley::detail
