// Base64url without padding (RFC 4648 section 5), as JOSE (JWS, JWK thumbprints) and PKCE write
// it; beside base64Encode in part.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace parley::detail {

std::string base64UrlEncode(std::string_view bytes);
// nullopt when `text` is not unpadded base64url.
std::optional<std::string> base64UrlDecode(std::string_view text);

}  // namespace parley::detail
