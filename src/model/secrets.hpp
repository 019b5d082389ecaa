// Secrets kept out of what an upstream sends back. Internal to parley: the one test of "this
// name holds a credential" (the event log's key redaction, the transport's header values) and
// the one redaction of upstream texts (HTTP error bodies, stream error events) before they
// reach an exception, a store, an event, a log or a client. Stateless; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley::detail {

// Secrets shorter than this are not looked for: they would hide ordinary words.
inline constexpr std::size_t kMinSecretLength = 8;

// Whether a header or JSON key names a credential: key, authorization, secret, password,
// credential, cookie, or token (not "tokens": max_tokens is no secret).
bool looksSecret(std::string_view name);

// The secrets among "Name: value" header lines: the value of each header whose name looks
// secret, and also the credential alone after an auth scheme ("Bearer sk-..." gives both).
std::vector<std::string> secretHeaderValues(std::span<const std::string> lines);

// `text` with every occurrence of each secret replaced by "[redacted]"; `changed` (if given)
// says whether any was found.
std::string redactSecrets(std::string text, const std::vector<std::string>& secrets,
                          bool* changed = nullptr);

// `value` with the value of every key that looksSecret() (at any depth, when it is not an object
// or array) replaced by "[redacted]": what telemetry records of tool arguments and results.
nlohmann::json redactSecretKeys(nlohmann::json value);

// Inside a catch block: rethrows the exception being handled, as the same kind of parley::Error
// with every secret redacted from every text it carries (what(), an HTTP body, the API's
// message) when it carries any; unchanged otherwise.
[[noreturn]] void rethrowRedacted(const std::vector<std::string>& secrets);

}  // namespace parley::detail
