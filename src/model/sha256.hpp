// SHA-256 (FIPS 180-4): the key of the stores' content-addressed blob table, the PKCE code
// challenge of MCP's OAuth sign-in, and (as HMAC-SHA256, RFC 2104) the signature of the
// service's webhooks. Written here rather than taken from OpenSSL so that a
// program linking parley does not link libcrypto for it.
#pragma once

#include <string>
#include <string_view>

namespace parley::detail {

// The digest of `bytes` as 64 lowercase hex digits.
std::string sha256Hex(std::string_view bytes);
// The digest of `bytes`: 32 bytes.
std::string sha256(std::string_view bytes);
// HMAC-SHA256 (RFC 2104) of `message` under `key`: 32 bytes.
std::string hmacSha256(std::string_view key, std::string_view message);

}  // namespace parley::detail
