// What the protocol clients share on top of the HttpTransport seam (parley/transport.hpp): the
// transport a ClientOptions asks for, the base URL joined with a path, the header lines every
// request of a client carries. Internal; the libcurl transport itself is http_transport.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

// ClientOptions::transport when set, else a libcurl transport with the options' timeouts, retries
// and caps. Throws ValidationError for unusable options.
std::shared_ptr<HttpTransport> transportFor(const ClientOptions& options);

// `base` without trailing slashes, then `path` ("/chat/completions").
std::string joinUrl(std::string_view base, std::string_view path);

// Checks the options every protocol client needs (the base URL's scheme) and resolves
// apiKeyEnv into apiKey. Throws ValidationError naming the option.
ClientOptions checkedClientOptions(ClientOptions options);

// options.headers as "Name: value" lines, after `first` (the protocol's own headers).
std::vector<std::string> headerLines(std::vector<std::string> first, const ClientOptions& options);

// HttpError details from an API error object {"message", "type", "code", ...}, or a body that
// holds one under "error" (OpenAI's {"error": {...}}, Anthropic's {"type": "error", "error":
// {...}}). Fills apiMessage/apiType/apiCode; leaves status/requestId.
void readApiError(std::string_view body, HttpError::Details& details);

}  // namespace parley::detail
