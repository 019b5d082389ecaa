// What the protocol clients share on top of the HttpTransport seam (parley/transport.hpp): the
// transport a ClientOptions asks for, the base URL joined with a path, the header lines every
// request of a client carries. Internal; the libcurl transport itself is http_transport.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
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

// A reply replayed from a cassette (cassette.hpp) keeps the time it was received when it was
// recorded, so a replayed thread is byte for byte the recorded one. The cassette transport sets
// this on the calling thread (send() runs the whole call there); withReplayedTime() takes it
// into the result as message.receivedAt and clears it.
std::optional<std::chrono::system_clock::time_point>& replayedReceivedAt() noexcept;
ChatResult withReplayedTime(ChatResult result) noexcept;

// `base` without trailing slashes, then `path` ("/chat/completions").
std::string joinUrl(std::string_view base, std::string_view path);

// Checks the options every protocol client needs (the base URL's scheme) and resolves
// apiKeyEnv into apiKey. Throws ValidationError naming the option.
ClientOptions checkedClientOptions(ClientOptions options);

// ClientOptions::apiKeyInQuery: sends each request through `next` with the key of its
// x-goog-api-key header moved onto the URL as `key=`.
std::shared_ptr<HttpTransport> keyInQueryTransport(std::shared_ptr<HttpTransport> next);

// options.headers as "Name: value" lines, after `first` (the protocol's own headers).
std::vector<std::string> headerLines(std::vector<std::string> first, const ClientOptions& options);

// HttpError details from an API error object {"message", "type", "code", ...}, or a body that
// holds one under "error" (OpenAI's {"error": {...}}, Anthropic's {"type": "error", "error":
// {...}}). Fills apiMessage/apiType/apiCode; leaves status/requestId.
void readApiError(std::string_view body, HttpError::Details& details);

}  // namespace parley::detail
