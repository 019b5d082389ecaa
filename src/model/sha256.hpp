// SHA-256 (FIPS 180-4): the key of the stores' content-addressed blob table, and the PKCE code
// challenge of MCP's OAuth sign-in. Written here rather than taken from OpenSSL so that a
// program linking parley does not link libcrypto for it.
#pragma once

#include <string>
#include <string_view>

namespace parley::detail {

// The digest of `bytes` as 64 lowercase hex digits.
std::string sha256Hex(std::string_view bytes);
// The digest of `bytes`: 32 bytes.
std::string sha256(std::string_view bytes);

}  // namespace parley::detail
